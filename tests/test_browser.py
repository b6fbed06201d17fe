"""The course in a real browser: JupyterLab in headless Chromium, driven by Playwright.

Needs a system Chromium (Debian: `apt-get install chromium`; or set TFCOURSE_CHROMIUM to the
browser's path) and the `playwright` package (the `test` extra); Playwright's own browser download
is not used. Without them these tests skip and say so. A screenshot of each page is saved in
$TFCOURSE_SCREENSHOTS (default: the test's temporary folder), failing or not: the README's pictures
of a failed and a passed check come from here.
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from test_instructor import free_port, get_when_up

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
    return course


@pytest.fixture(scope="module")
def lab(course) -> Iterator[str]:
    """JupyterLab serving the course, as `make lab` starts it; yields its base URL."""
    port = free_port()
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    env.pop("MPLBACKEND", None)  # the tests' off-screen backend: the kernel must show figures inline
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={TOKEN}", "--allow-root", f"--ServerApp.root_dir={course}",
         "--LabApp.news_url=None",
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


@pytest.fixture(scope="module")
def browser() -> Iterator:
    executable = _chromium()
    if executable is None:
        pytest.skip("no Chromium: install it (Debian/Ubuntu: apt-get install chromium) or set TFCOURSE_CHROMIUM")
    sync_api = pytest.importorskip("playwright.sync_api", reason="pip install playwright (the `test` extra)")
    with sync_api.sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=executable, args=["--no-sandbox"])
        yield browser
        browser.close()


@pytest.fixture
def page(browser, request, tmp_path) -> Iterator:
    page = browser.new_page(viewport={"width": 1200, "height": 700})
    yield page
    folder = Path(os.environ.get("TFCOURSE_SCREENSHOTS", tmp_path))
    folder.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(folder / f"{request.node.name}.png"))  # failing or not: look at it
    page.close()


def _run_all_cells(page, base: str, path: str) -> None:
    """Open the notebook and Run → Run All Cells, again until the kernel takes it (a run asked for
    before the kernel is connected is dropped)."""
    workspace = Path(path).stem  # a fresh workspace: only this notebook open
    page.goto(f"{base}/lab/workspaces/{workspace}/tree/{path}?reset&token={TOKEN}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    for _ in range(12):
        page.locator(".lm-MenuBar-itemLabel", has_text="Run").first.click()
        page.locator(".lm-Menu-itemLabel", has_text="Run All Cells").first.click()
        try:
            page.wait_for_function("[...document.querySelectorAll('.jp-InputPrompt')]"
                                   ".some(p => /\\[(\\*|\\d+)\\]/.test(p.innerText))", timeout=10_000)
            return
        except Exception:  # noqa: BLE001 - not started yet: ask again
            page.keyboard.press("Escape")
    raise AssertionError(f"the cells of {path} never ran")


def _outputs(page) -> list[str]:
    return page.locator(".jp-OutputArea-output").all_inner_texts()


def test_the_lessons_are_listed(page, lab):
    page.goto(f"{lab}/lab/tree/notebooks?token={TOKEN}")
    page.wait_for_selector(".jp-DirListing-item", timeout=60_000)
    names = page.locator(".jp-DirListing-itemName").all_inner_texts()
    assert {"01_tokenization", "03_attention", "08_training"} <= {n.strip() for n in names}, names


def test_a_failed_check_shows_one_line(page, lab):
    _run_all_cells(page, lab, "notebooks/demo/wrong.ipynb")
    page.wait_for_function("document.body.innerText.includes('✘')", timeout=90_000)
    (failure,) = [text for text in _outputs(page) if "✘" in text]
    assert "without the 1/√d_k scaling" in failure
    assert len(failure.strip().splitlines()) == 1 and "Traceback" not in failure and "checks/" not in failure
    assert "*" not in failure


def test_a_passed_check_shows_its_tick_line(page, lab):
    _run_all_cells(page, lab, "notebooks/demo/right.ipynb")
    page.wait_for_function("document.body.innerText.includes('✔')", timeout=90_000)
    (success,) = [text for text in _outputs(page) if "✔" in text]
    assert "scaled_dot_product_attention" in success or "attention" in success


def test_formgrader_lists_the_lessons(page, lab):
    page.goto(f"{lab}/formgrader/manage_assignments?token={TOKEN}")
    page.wait_for_function("document.body.innerText.includes('03_attention')", timeout=90_000)
    text = page.inner_text("body")
    assert "04_ffn" in text and "09_translation" in text


def test_the_assignment_list_loads_without_an_error(page, lab):
    page.goto(f"{lab}/lab?token={TOKEN}")
    page.wait_for_selector("text=Nbgrader", timeout=60_000)
    page.click("text=Nbgrader")
    page.click("text=Assignment List")
    page.wait_for_selector("text=Released assignments", timeout=60_000)
    time.sleep(2)  # the lists load after the panel appears
    text = page.inner_text("body")
    assert "Error fetching courses" not in text and "does not exist" not in text, text[-1500:]


def test_a_plot_of_chinese_tokens_draws_the_characters(page, lab):
    _run_all_cells(page, lab, "notebooks/demo/chinese.ipynb")
    page.wait_for_function("[...document.querySelectorAll('.jp-OutputArea-output')]"
                           ".some(o => o.innerText.includes('labels:'))", timeout=90_000)
    (labels,) = [text for text in _outputs(page) if "labels:" in text]
    assert labels.split() == ["labels:", "狗", "追", "猫"], labels  # not U+72D7 ...: a font has the glyphs
    assert page.locator(".jp-OutputArea-output img").count() == 1
    assert "Glyph" not in " ".join(_outputs(page))


@pytest.mark.parametrize("lesson", ["01_tokenization", "02_embeddings"])
def test_a_lesson_opens_unmodified(page, lab, lesson):
    page.goto(f"{lab}/lab/workspaces/{lesson}/tree/notebooks/{lesson}/{lesson}.ipynb?reset&token={TOKEN}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
    # The kernel connects (and JupyterLab writes its language_info) within a few seconds.
    page.wait_for_selector(".jp-Notebook-ExecutionIndicator[data-status='idle']", timeout=60_000)
    time.sleep(3)
    tab = page.locator(".lm-TabBar-tab.lm-mod-current", has_text=lesson)
    assert "jp-mod-dirty" not in (tab.get_attribute("class") or ""), "the notebook is marked modified"
    # The course's JupyterLab settings (make installs them): no "Jupyter news?" question either.
    assert page.get_by_text("official Jupyter news").count() == 0


def test_validate_reports_the_unfinished_exercises(page, lab):
    lesson = "04_ffn"
    page.goto(f"{lab}/lab/workspaces/{lesson}/tree/notebooks/{lesson}/{lesson}.ipynb?reset&token={TOKEN}")
    page.wait_for_selector(".jp-Notebook .jp-Cell", timeout=60_000)
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
