"""The course in a real browser: JupyterLab in headless Chromium, driven by Playwright.

Needs a system Chromium (Debian: `apt-get install chromium`; or set TFCOURSE_CHROMIUM to the
browser's path) and the `playwright` package (the `test` extra); Playwright's own browser download
is not used. Without them these tests skip and say so. A screenshot of each page is saved in
$TFCOURSE_SCREENSHOTS (default: the test's temporary folder), failing or not: the README's pictures
of a failed and a passed check come from here.

The Chinese tests run a second Chromium that cannot see the system's CJK fonts (a fontconfig
configuration that rejects every font with Chinese in it: `fc-list`, from fontconfig, finds them),
as on a machine that has none; a control measurement shows that this browser draws Chinese as boxes.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from xml.sax.saxutils import escape

import pytest

from test_feedback_font import chinese_lesson, feedback_report
from test_instructor import free_port, get_when_up
from tfcourse.course import cjk_font

pytestmark = pytest.mark.slow  # starts JupyterLab and a browser

ROOT = Path(__file__).resolve().parents[1]
TOKEN = "tfcourse-browser-test"


def _chromium() -> str | None:
    candidates = [os.environ.get("TFCOURSE_CHROMIUM"), shutil.which("chromium"), shutil.which("chromium-browser"),
                  shutil.which("google-chrome")]
    return next((c for c in candidates if c and Path(c).exists()), None)


def _notebook(sources: list[str]) -> str:
    cells = [{"cell_type": "code", "metadata": {}, "outputs": [], "execution_count": None, "source": s}
             for s in sources]
    kernel = {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": "python"}
    return json.dumps({"cells": cells, "metadata": {"kernelspec": kernel}, "nbformat": 4, "nbformat_minor": 5})


SETUP = "from tfcourse.course import setup\ndevice = setup()"
ATTENTION = '''import math, torch
def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1){scale}
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
    weights = torch.nan_to_num(torch.softmax(scores, dim=-1))
    if dropout_p > 0.0:
        weights = torch.nn.functional.dropout(weights, p=dropout_p)
    return weights @ v, weights'''
CHECK = ("from tfcourse.checks.attention import check_scaled_dot_product_attention\n"
         "check_scaled_dot_product_attention(scaled_dot_product_attention)")
# Lesson 02's plot of 狗追猫 with random weights; the labels matplotlib drew are printed under it.
CHINESE_PLOT = """import torch
from tfcourse.course.plots import plot_attention
tokens = list("狗追猫")
fig = plot_attention(torch.softmax(torch.randn(3, 3), -1), tokens, tokens, title="狗追猫, head 0")
fig.canvas.draw()
print("labels:", *[label.get_text() for label in fig.axes[0].get_xticklabels()])"""
WEATHER = "今天天气真好"  # six ideographs, each one em wide in Noto Sans CJK SC


@pytest.fixture(scope="module")
def course(tmp_path_factory) -> Path:
    """A copy of the course (what a learner has), plus two small notebooks of one exercise each."""
    course = tmp_path_factory.mktemp("browser") / "course"
    for folder in ("notebooks", "solutions", "assignments"):
        shutil.copytree(ROOT / folder, course / folder)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    demo = course / "notebooks" / "demo"
    demo.mkdir()
    (demo / "wrong.ipynb").write_text(_notebook([SETUP, ATTENTION.format(scale=""), CHECK]))
    (demo / "right.ipynb").write_text(_notebook([SETUP, ATTENTION.format(scale=" / math.sqrt(q.shape[-1])"),
                                                 CHECK]))
    (demo / "chinese.ipynb").write_text(_notebook([SETUP, CHINESE_PLOT]))
    weather = json.loads(_notebook([f'print("{WEATHER}")']))
    weather["cells"].insert(0, {"cell_type": "markdown", "metadata": {}, "source": f"# {WEATHER}\n\n{WEATHER}"})
    (demo / "weather.ipynb").write_text(json.dumps(weather, ensure_ascii=False), encoding="utf-8")
    return course


# The kernels of the test's server draw figures inline, whatever MPLBACKEND the environment exports
# (.ci/run and conftest.py export Agg): %matplotlib inline at kernel start overrides the variable.
KERNEL_CONFIG = 'c.IPKernelApp.matplotlib = "inline"\n'


@pytest.fixture(scope="module")
def lab(course, tmp_path_factory) -> Iterator[str]:
    """JupyterLab serving the course, as `make lab` starts it; yields its base URL.

    Its Jupyter and IPython folders are fresh (no saved workspace, user setting or startup file of
    this machine's user can change what the tests see, and the tests leave nothing in that home);
    the environment's own configuration (the course's switches in jupyter-config/) still applies.
    `expose_app_in_browser` gives the tests `window.jupyterapp`, to wait for JupyterLab's own states
    (restored, kernel ready, cells run) instead of for time.
    """
    home = tmp_path_factory.mktemp("jupyter-home")
    ipython = home / "ipython"
    (ipython / "profile_default").mkdir(parents=True)
    (ipython / "profile_default" / "ipython_kernel_config.py").write_text(KERNEL_CONFIG)
    port = free_port()
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"],
           "JUPYTER_CONFIG_DIR": str(home / "config"), "JUPYTER_DATA_DIR": str(home / "data"),
           "JUPYTER_RUNTIME_DIR": str(home / "runtime"), "JUPYTERLAB_WORKSPACES_DIR": str(home / "workspaces"),
           "JUPYTERLAB_SETTINGS_DIR": str(home / "settings"), "IPYTHONDIR": str(ipython)}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={TOKEN}", "--allow-root", f"--ServerApp.root_dir={course}",
         "--LabApp.news_url=None", "--LabApp.expose_app_in_browser=True",
         # What installing the course switches on (jupyter-config/): lessons open unmodified.
         '--ServerApp.jpserver_extensions={"tfcourse.course.lab": True}'],
        cwd=course, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        get_when_up(f"{base}/api?token={TOKEN}")
        yield base
    finally:
        server.terminate()
        server.wait(timeout=30)


# Every JupyterLab dialog a page opens, with its text: a test that fails on one says which it was.
RECORD_DIALOGS = """
window.tfcourseDialogs = [];
new MutationObserver(() => {
  for (const dialog of document.querySelectorAll('.jp-Dialog')) {
    if (!dialog.tfcourseSeen) {
      dialog.tfcourseSeen = true;
      window.tfcourseDialogs.push(dialog.innerText.replace(/\\s+/g, ' ').slice(0, 300));
    }
  }
}).observe(document, {childList: true, subtree: true});
"""


@pytest.fixture(scope="module")
def launch_chromium() -> Iterator:
    """Starts headless Chromiums for the module, all from one Playwright (it allows one per thread)."""
    executable = _chromium()
    if executable is None:
        pytest.skip("no Chromium: install it (Debian/Ubuntu: apt-get install chromium) or set TFCOURSE_CHROMIUM")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the `test` extra)")
    with sync_api.sync_playwright() as playwright:
        yield lambda **options: playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"],
                                                           **options)


def _browser_context(browser) -> Iterator:
    context = browser.new_context(viewport={"width": 1200, "height": 700})
    context.add_init_script(RECORD_DIALOGS)
    yield context
    context.close()
    browser.close()


@pytest.fixture(scope="module")
def browser_context(launch_chromium) -> Iterator:
    """One headless Chromium and one context for the module: the pages share its HTTP cache, so
    JupyterLab's scripts are fetched once (each test still opens its own workspace)."""
    yield from _browser_context(launch_chromium())


def _screenshot(page, request, tmp_path) -> Path:
    folder = Path(os.environ.get("TFCOURSE_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / f"{request.node.name}.png"
    page.screenshot(path=str(path))  # failing or not: look at it
    return path


def _page_of(context, lab, request, tmp_path) -> Iterator:
    page = context.new_page()
    yield page
    _screenshot(page, request, tmp_path)
    print("dialogs this page opened:", _dialogs_seen(page))  # shown when the test fails
    page.close()
    _shut_down_kernels(lab)


@pytest.fixture
def page(browser_context, lab, request, tmp_path) -> Iterator:
    yield from _page_of(browser_context, lab, request, tmp_path)


def _fontconfig_without_cjk(folder: Path) -> Path:
    """A fontconfig configuration: the system's own, less every font that has Chinese in it."""
    fc_list = shutil.which("fc-list")
    if fc_list is None:
        pytest.skip("no fc-list (Debian/Ubuntu: apt-get install fontconfig) to find the fonts to hide")
    listed = subprocess.run([fc_list, f":charset={ord(WEATHER[0]):x}", "file"], capture_output=True, text=True,
                            check=True).stdout
    files = sorted({line.rsplit(":", 1)[0].strip() for line in listed.splitlines() if line.strip()})
    rejected = "".join(f"<glob>{escape(file)}</glob>" for file in files)
    system = os.environ.get("FONTCONFIG_FILE", "fonts.conf")  # (a relative name: fontconfig's own folder)
    config = folder / "fonts.conf"
    config.write_text(f'<?xml version="1.0"?>\n<!DOCTYPE fontconfig SYSTEM "urn:fontconfig:fonts.dtd">\n'
                      f"<fontconfig><include>{escape(system)}</include><cachedir>{escape(str(folder / 'cache'))}"
                      f"</cachedir><selectfont><rejectfont>{rejected}</rejectfont></selectfont></fontconfig>\n")
    return config


@pytest.fixture(scope="module")
def browser_without_cjk_fonts(launch_chromium, tmp_path_factory) -> Iterator:
    """A Chromium (and its context) that sees none of the system's CJK fonts."""
    config = _fontconfig_without_cjk(tmp_path_factory.mktemp("fontconfig"))
    yield from _browser_context(launch_chromium(env={**os.environ, "FONTCONFIG_FILE": str(config)}))


@pytest.fixture
def page_without_cjk_fonts(browser_without_cjk_fonts, lab, request, tmp_path) -> Iterator:
    yield from _page_of(browser_without_cjk_fonts, lab, request, tmp_path)


def _api(base: str, method: str, path: str):
    request = urllib.request.Request(f"{base}/api/{path}", method=method,
                                     headers={"Authorization": f"token {TOKEN}"})
    with urllib.request.urlopen(request, timeout=30) as response:
        body = response.read()
    return json.loads(body) if body else None


def _shut_down_kernels(base: str) -> None:
    """What a test started ends with it: the next test's kernel does not share the CPU with idle ones."""
    for session in _api(base, "GET", "sessions"):
        _api(base, "DELETE", f"sessions/{session['id']}")


def _dialogs_seen(page) -> list[str]:
    try:
        return page.evaluate("window.tfcourseDialogs || []")
    except Exception:  # noqa: BLE001 - the page is gone: nothing to report
        return []


def _expect_no_dialog(page) -> None:
    """Fail, naming it, if a dialog covers the page (it would take the next click)."""
    open_dialogs = page.locator(".jp-Dialog")
    if open_dialogs.count():
        raise AssertionError(f"a JupyterLab dialog is open: {' | '.join(open_dialogs.all_inner_texts())!r}")


def _open_lab(page, url: str) -> None:
    """Go to a JupyterLab page and wait until JupyterLab has restored its workspace: until then its
    splash screen covers the page, and after 12 s it asks, in a dialog, whether to clear the workspace."""
    page.goto(url)
    page.wait_for_function("window.jupyterapp !== undefined", timeout=60_000)
    page.evaluate("async () => { await window.jupyterapp.restored; }")
    page.wait_for_selector("#jupyterlab-splash", state="detached", timeout=60_000)


# The notebook panel showing `path`, once JupyterLab has opened it.
FIND_PANEL = "(path) => [...window.jupyterapp.shell.widgets('main')].find(w => w.context && w.context.path === path)"
KERNEL_READY = f"""async (path) => {{
  const panel = ({FIND_PANEL})(path);
  await panel.context.ready;
  await panel.sessionContext.ready;
  const kernel = panel.sessionContext.session.kernel;
  await kernel.info;  // the kernel answered; JupyterLab's own handlers of it ran before ours
  await kernel.spec;
  await new Promise(resolve => requestAnimationFrame(resolve));
}}"""
# Every code cell has run (a cell queued by Run All is 'running' until its reply; the cells after a
# failing one are cancelled, back to 'idle' with no count) and the kernel is idle.
ALL_RAN = f"""(path) => {{
  const panel = ({FIND_PANEL})(path);
  const cells = panel.content.widgets.filter(cell => cell.model.type === 'code');
  return cells.every(cell => cell.model.executionState === 'idle')
      && cells.some(cell => cell.model.executionCount !== null)
      && panel.sessionContext.session.kernel.status === 'idle';
}}"""


def _open_notebook(page, base: str, path: str) -> None:
    """Open the notebook in a fresh workspace (only it open) and wait until its kernel is ready: a run
    asked for before is dropped, or makes JupyterLab ask which kernel to start."""
    workspace = Path(path).stem
    _open_lab(page, f"{base}/lab/workspaces/{workspace}/tree/{path}?reset&token={TOKEN}")
    page.wait_for_function(f"({FIND_PANEL})({json.dumps(path)}) !== undefined", timeout=60_000)
    page.evaluate(KERNEL_READY, path)
    _expect_no_dialog(page)


def _run_all_cells(page, base: str, path: str) -> None:
    """Open the notebook, Run → Run All Cells, and wait until every cell has run."""
    _open_notebook(page, base, path)
    page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
    page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
    page.wait_for_function(ALL_RAN, arg=path, timeout=120_000)
    _expect_no_dialog(page)


def _outputs(page) -> list[str]:
    return page.locator(".jp-OutputArea-output").all_inner_texts()


def test_the_lessons_are_listed(page, lab):
    _open_lab(page, f"{lab}/lab/workspaces/listing/tree/notebooks?reset&token={TOKEN}")
    page.wait_for_selector(".jp-DirListing-item", timeout=60_000)
    names = page.locator(".jp-DirListing-itemName").all_inner_texts()
    assert {"01_tokenization", "03_attention", "08_training"} <= {n.strip() for n in names}, names


def test_a_failed_check_shows_one_line(page, lab):
    _run_all_cells(page, lab, "notebooks/demo/wrong.ipynb")
    (failure,) = [text for text in _outputs(page) if "✘" in text]
    assert "without the 1/√d_k scaling" in failure
    assert len(failure.strip().splitlines()) == 1 and "Traceback" not in failure and "checks/" not in failure
    assert "*" not in failure


def test_a_passed_check_shows_its_tick_line(page, lab):
    _run_all_cells(page, lab, "notebooks/demo/right.ipynb")
    (success,) = [text for text in _outputs(page) if "✔" in text]
    assert "scaled_dot_product_attention" in success or "attention" in success


def test_formgrader_lists_the_lessons(page, lab):
    page.goto(f"{lab}/formgrader/manage_assignments?token={TOKEN}")
    page.wait_for_function("document.body.innerText.includes('03_attention')", timeout=90_000)
    text = page.inner_text("body")
    assert "04_ffn" in text and "09_translation" in text


# nbgrader's Assignment List: each of its three lists shows "Loading, please wait..." until the
# server answers, then its items, its placeholder or its error.
LISTS_LOADED = """() => {
  const loading = [...document.querySelectorAll('.list_loading')];
  return loading.length === 3 && loading.every(element => element.hidden);
}"""


def test_the_assignment_list_loads_without_an_error(page, lab):
    _open_lab(page, f"{lab}/lab/workspaces/assignment-list?reset&token={TOKEN}")
    _expect_no_dialog(page)
    page.locator(".lm-MenuBar-itemLabel", has_text="Nbgrader").click()
    page.locator(".lm-Menu-itemLabel", has_text="Assignment List").click()
    page.wait_for_function(LISTS_LOADED, timeout=60_000)
    text = page.inner_text("body")
    assert "Released assignments" in text
    assert "Error fetching courses" not in text and "does not exist" not in text, text[-1500:]


def test_a_plot_of_chinese_tokens_draws_the_characters(page, lab):
    _run_all_cells(page, lab, "notebooks/demo/chinese.ipynb")
    (labels,) = [text for text in _outputs(page) if "labels:" in text]
    assert labels.split() == ["labels:", "狗", "追", "猫"], labels  # not U+72D7 ...: a font has the glyphs
    # The figure is a display message of its own, sent after the cell's code (and its print) ended.
    assert page.locator(".jp-OutputArea-output img").count() == 1
    assert "Glyph" not in " ".join(_outputs(page))


@pytest.mark.parametrize("lesson", ["01_tokenization", "02_embeddings"])
def test_a_lesson_opens_unmodified(page, lab, lesson):
    path = f"notebooks/{lesson}/{lesson}.ipynb"
    _open_notebook(page, lab, path)  # the kernel has answered: JupyterLab wrote what it writes then
    assert page.evaluate(f"(path) => ({FIND_PANEL})(path).context.model.dirty", path) is False, \
        "the notebook is marked modified"
    tab = page.locator(".lm-TabBar-tab.lm-mod-current", has_text=lesson)
    assert "jp-mod-dirty" not in (tab.get_attribute("class") or "")
    # The course's JupyterLab settings (make installs them): no "Jupyter news?" question either.
    assert page.get_by_text("official Jupyter news").count() == 0
    # Its opening map, a drawn figure beside the notebook, is shown (loaded, not a broken image).
    image = page.locator('.jp-RenderedMarkdown img[src*="map.svg"]').first
    image.wait_for(timeout=60_000)
    page.wait_for_function("(img) => img.complete && img.naturalWidth > 0", arg=image.element_handle(),
                           timeout=60_000)
    image.scroll_into_view_if_needed()  # the page's screenshot shows it


def test_validate_reports_the_unfinished_exercises(page, lab):
    lesson = "04_ffn"
    _open_notebook(page, lab, f"notebooks/{lesson}/{lesson}.ipynb")
    page.locator(".jp-Toolbar").get_by_text("Validate", exact=True).click()
    dialog = page.locator(".jp-Dialog")
    dialog.wait_for(timeout=120_000)
    page.wait_for_function("!document.querySelector('.jp-Dialog').innerText.includes('Validating')",
                           timeout=120_000)
    text = dialog.inner_text()
    cells = json.loads((ROOT / "notebooks" / lesson / f"{lesson}.ipynb").read_text())["cells"]
    tests = [c for c in cells if c["metadata"].get("nbgrader", {}).get("grade") and c["cell_type"] == "code"
             and not c["metadata"]["nbgrader"].get("solution")]
    # Every exercise's test cell fails, each with its one ✘ line.
    assert text.count("The following cell failed") >= len(tests) >= 5, text[:1500]
    assert text.count("✘") >= len(tests) and "not implemented yet" in text and "Traceback" not in text


# ---------------------------------------------------------------------------------------------
# Chinese where no Chinese font is installed: the course's Noto Sans CJK SC
# ---------------------------------------------------------------------------------------------

# Widths, in CSS pixels, of one string in a font: CJK ideographs, and as many code points that no
# font has (U+0378 is unassigned): drawn as boxes, both have the width of the missing-glyph box.
CONTROL = """() => {
  const paragraph = document.createElement('p');
  paragraph.style.font = '16px sans-serif';
  paragraph.innerHTML = '<span id="cjk">%s</span> <span id="none">%s</span>';
  document.body.append(paragraph);
  return ['cjk', 'none'].map(id => document.getElementById(id).getBoundingClientRect().width);
}""" % (WEATHER, "\u0378" * len(WEATHER))
# The course's font loaded on this page, as the page's stylesheets declare it.
LOAD_THE_FONT = """async (family) => {
  const faces = await document.fonts.load(`16px "${family}"`, '今');
  return {faces: faces.length, check: document.fonts.check(`16px "${family}"`, '今'),
          loaded: [...document.fonts].some(f => f.family.replace(/"/g, '') === family && f.status === 'loaded')};
}"""
# Where `text` is drawn inside the elements `selector` matches: its width, the element's font size
# and font stack. (Measured on the text itself: a code cell's line has other text around it.)
MEASURE = """async ([selector, text]) => {
  await document.fonts.ready;
  await new Promise(resolve => requestAnimationFrame(() => requestAnimationFrame(resolve)));
  for (const element of document.querySelectorAll(selector)) {
    const walker = document.createTreeWalker(element, NodeFilter.SHOW_TEXT);
    for (let node = walker.nextNode(); node; node = walker.nextNode()) {
      const at = node.data.indexOf(text);
      if (at < 0) continue;
      const range = document.createRange();
      range.setStart(node, at);
      range.setEnd(node, at + text.length);
      const style = getComputedStyle(node.parentElement);
      return {width: range.getBoundingClientRect().width, size: parseFloat(style.fontSize),
              family: style.fontFamily};
    }
  }
  return null;
}"""


def _drawn_in_the_course_font(page, selector: str, text: str = WEATHER) -> None:
    """`text`, where `selector` shows it, is drawn by the course's font: each ideograph one em wide
    (a box is narrower) and the family in the element's font stack."""
    drawn = page.evaluate(MEASURE, [selector, text])
    assert drawn is not None, f"no {text} in {selector}"
    assert cjk_font.FAMILY in drawn["family"], drawn
    assert abs(drawn["width"] - len(text) * drawn["size"]) < 1, f"{selector}: {drawn} (boxes?)"


def _expect_no_cjk_font(page) -> None:
    """The control: without the course's font, this browser draws the Chinese as boxes."""
    page.set_content("<!doctype html><html><head></head><body></body></html>")
    chinese, unassigned = page.evaluate(CONTROL)
    assert chinese == unassigned, f"a system CJK font is still visible ({chinese} px against {unassigned} px)"
    assert abs(chinese - 16 * len(WEATHER)) >= 1


def test_chinese_shows_in_jupyterlab_without_a_system_font(page_without_cjk_fonts, lab):
    page = page_without_cjk_fonts
    _expect_no_cjk_font(page)
    path = "notebooks/demo/weather.ipynb"
    _run_all_cells(page, lab, path)
    font = page.evaluate(LOAD_THE_FONT, cjk_font.FAMILY)
    assert font == {"faces": 1, "check": True, "loaded": True}, font
    _drawn_in_the_course_font(page, ".jp-RenderedMarkdown h1")
    _drawn_in_the_course_font(page, ".jp-RenderedMarkdown p")
    _drawn_in_the_course_font(page, ".jp-CodeCell .cm-content")  # the code, in the editor
    _drawn_in_the_course_font(page, ".jp-OutputArea-output pre")  # what it printed
    (output,) = [text for text in _outputs(page) if WEATHER in text]
    assert output.strip() == WEATHER


class NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect (to the login page) is the answer, not a step to follow."""

    def redirect_request(self, *args, **kwargs):
        return None


def test_the_server_serves_the_font_with_a_long_cache_to_logged_in_browsers(lab):
    def get(path: str, token: bool = True):
        url = f"{lab}/{path}"
        request = urllib.request.Request(url, headers={"Authorization": f"token {TOKEN}"} if token else {})
        opener = urllib.request.build_opener(NoRedirect)
        with opener.open(request, timeout=30) as response:
            return response.status, response.headers, response.read()

    status, headers, page = get("lab/tree/notebooks")
    assert b'<link rel="stylesheet" href="/tfcourse/fonts/cjk.css"></head>' in page
    status, headers, css = get("tfcourse/fonts/cjk.css")
    assert headers["Content-Type"].startswith("text/css") and f'"{cjk_font.FAMILY}"'.encode() in css
    font_url = css.decode().split('url("', 1)[1].split('"', 1)[0]
    status, headers, font = get(f"tfcourse/fonts/{font_url}")
    assert headers["Content-Type"] == "font/otf" and headers["Cache-Control"] == "public, max-age=31536000, immutable"
    assert font == cjk_font.bundled_font().read_bytes()
    with pytest.raises(urllib.error.HTTPError) as refused:  # no login: the login page, not the font
        get(f"tfcourse/fonts/{font_url}", token=False)
    assert refused.value.code == 302


def test_a_chinese_feedback_report_reads_without_a_system_font(browser_without_cjk_fonts, request, tmp_path):
    report = tmp_path / "report.html"
    report.write_text(feedback_report(chinese_lesson()), encoding="utf-8")
    page = browser_without_cjk_fonts.new_page()
    try:
        _expect_no_cjk_font(page)
        page.goto(report.as_uri())
        font = page.evaluate(LOAD_THE_FONT, cjk_font.FAMILY)
        assert font == {"faces": 1, "check": True, "loaded": True}, font
        title = chinese_lesson().cells[0].source.splitlines()[0]  # 第 07 课——解码：…
        _drawn_in_the_course_font(page, "h1", re.findall(r"[\u4e00-\u9fff]{2,}", title)[0])
        _drawn_in_the_course_font(page, "h4", "得分")  # nbgrader's own words, translated
    finally:
        _screenshot(page, request, tmp_path)
        page.close()
