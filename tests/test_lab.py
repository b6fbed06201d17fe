"""The JupyterLab side of the course: the server extension that lets lessons open unmodified, and
the configuration that installing the course puts in the environment."""

from __future__ import annotations

import asyncio
import json
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
from tornado.httputil import HTTPHeaders

from tfcourse.course import cjk_font, lab

ROOT = Path(__file__).resolve().parents[1]
if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _notebook(language_info=None, language="python") -> dict:
    metadata = {"kernelspec": {"name": "python3", "display_name": "Python 3 (ipykernel)", "language": language}}
    if language_info is not None:
        metadata["language_info"] = language_info
    return {"cells": [], "metadata": metadata, "nbformat": 4, "nbformat_minor": 5}


def test_a_lesson_gets_what_the_kernel_will_report():
    notebook = _notebook({"name": "python"})
    assert lab.fill_language_info(notebook)
    info = notebook["metadata"]["language_info"]
    assert info["version"] == sys.version.split()[0] and info["mimetype"] == "text/x-python"


def test_what_the_learner_saved_and_other_languages_are_left_alone():
    saved = {"name": "python", "version": "3.9.0", "mimetype": "text/x-python"}
    for notebook in (_notebook(dict(saved)), _notebook({"name": "R"}, language="R")):
        before = json.dumps(notebook)
        assert not lab.fill_language_info(notebook)
        assert json.dumps(notebook) == before


def test_the_wrapper_keeps_get_sync_or_async_and_fills_only_notebooks():
    def get(path, content=True):
        if path.endswith(".ipynb"):
            return {"type": "notebook", "content": _notebook({"name": "python"}) if content else None}
        return {"type": "file", "content": "text"}

    async def get_async(path, content=True):
        return get(path, content)

    sync_get, async_get = lab._filling(get), lab._filling(get_async)
    assert sync_get("a.ipynb")["content"]["metadata"]["language_info"]["version"] == sys.version.split()[0]
    assert sync_get("a.ipynb", content=False)["content"] is None
    assert sync_get("a.txt") == {"type": "file", "content": "text"}
    model = asyncio.run(async_get("a.ipynb"))
    assert model["content"]["metadata"]["language_info"]["version"] == sys.version.split()[0]


def test_installing_the_course_switches_the_extension_on_and_sets_lab_defaults():
    switch = ROOT / "jupyter-config" / "jupyter_server_config.d" / "tfcourse.json"
    assert json.loads(switch.read_text())["ServerApp"]["jpserver_extensions"] == {"tfcourse.course.lab": True}
    settings = json.loads((ROOT / "jupyter-config" / "lab-settings" / "overrides.json").read_text())
    assert settings["@jupyterlab/apputils-extension:notification"]["fetchNews"] == "false"
    # a regular install (data files) and make's editable one put them in the same places
    data_files = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["data-files"]
    makefile = (ROOT / "Makefile").read_text()
    for folder, files in data_files.items():
        for file in files:
            assert (ROOT / file).exists()
            assert f"$(VENV)/{folder}/{Path(file).name}" in makefile, f"make does not install {file}"
    assert lab._jupyter_server_extension_points() == [{"module": "tfcourse.course.lab"}]


def test_terminals_get_the_course_environment_on_path_and_no_login_shell(monkeypatch):
    """A login shell reads /etc/profile, which resets PATH: `tfcourse: command not found` in a terminal."""
    import os
    import sys
    from types import SimpleNamespace

    from tfcourse.course import lab

    monkeypatch.setenv("PATH", "/usr/bin:/bin")
    programs = os.path.dirname(sys.executable)
    started = SimpleNamespace(shell_command=["/bin/bash", "-l"])
    serverapp = _serverapp(web_app=_web_app(settings={"terminal_manager": started}))
    lab._load_jupyter_server_extension(serverapp)
    assert os.environ["PATH"].split(os.pathsep)[0] == programs
    assert os.path.exists(os.path.join(programs, "tfcourse"))  # what the terminal now finds first
    assert serverapp.terminado_settings["shell_command"] == lab.terminal_shell()
    assert "-l" not in serverapp.terminado_settings["shell_command"] and started.shell_command == ["/bin/bash"]
    lab.environment_first_on_path()
    assert os.environ["PATH"].split(os.pathsep).count(programs) == 1  # once


# ---------------------------------------------------------------------------------------------
# Chinese without a system font: the bundled Noto Sans CJK SC, served to JupyterLab
# ---------------------------------------------------------------------------------------------


def _web_app(settings=None):
    """What the extension uses of the server's tornado application: its handlers and transforms."""
    web_app = SimpleNamespace(settings=settings or {}, handlers=[], transforms=[object])
    web_app.add_handlers = lambda host, handlers: web_app.handlers.extend(handlers)
    return web_app


def _serverapp(base_url="/", web_app=None):
    log = SimpleNamespace(warning=lambda *a: None)
    return SimpleNamespace(contents_manager=SimpleNamespace(get=lambda *a, **k: {}), terminado_settings={},
                           web_app=web_app or _web_app(), base_url=base_url, log=log)


def _unicode_ranges(css: str) -> list[tuple[int, int]]:
    (value,) = re.findall(r"unicode-range:([^;]+);", css)
    return [(int(low, 16), int(high, 16)) for low, high in re.findall(r"U\+([0-9A-F]+)-([0-9A-F]+)", value)]


def test_the_font_is_only_for_cjk_characters():
    ranges = _unicode_ranges(cjk_font.lab_stylesheet("font.otf"))

    def covered(character):
        return any(low <= ord(character) <= high for low, high in ranges)

    assert all(covered(c) for c in "今天天气真好。，：！「」、𠀀")  # ideographs, CJK and full-width marks
    assert not any(covered(c) for c in "Az09 é—“”…ß→√"), "Latin text would take the CJK font"
    assert cjk_font.cjk_characters("Score 得分: 3/5，好！") == "分好得！，"


def test_the_font_comes_first_in_jupyterlabs_own_font_stacks():
    """The stacks the stylesheet sets are JupyterLab's own (the installed version's theme) with the
    course's family in front (for CJK characters only): nothing else about JupyterLab's fonts changes."""
    from jupyterlab.commands import get_app_dir

    theme = Path(get_app_dir()) / "themes" / "@jupyterlab" / "theme-light-extension" / "index.css"
    if not theme.exists():
        pytest.skip(f"JupyterLab's light theme is not built here ({theme.name} missing)")
    theme_css, css = theme.read_text(), cjk_font.lab_stylesheet("font.otf")
    for variable, stack in cjk_font.JUPYTERLAB_FONT_STACKS.items():
        (installed,) = re.findall(rf"{variable}:([^;}}]+)", theme_css)
        assert re.sub(r"\s", "", installed) == re.sub(r"\s", "", stack), f"JupyterLab changed {variable}: {installed}"
        assert f'{variable}: "{cjk_font.FAMILY}", {stack};' in css
    assert f'font-family: "{cjk_font.FAMILY}";' in css and 'url("font.otf") format("opentype")' in css
    assert css.index(":root:root {") > css.index("@font-face")  # outranks the theme's :root


def _transformed(path: str, body: bytes, content_type="text/html; charset=UTF-8", base_url="/", finishing=True):
    transform = lab.LinkTheStylesheet(SimpleNamespace(path=path), base_url=base_url)
    headers = HTTPHeaders({"Content-Type": content_type, "Content-Length": str(len(body))})
    status, headers, chunk = transform.transform_first_chunk(200, headers, body, finishing)
    return headers, chunk


PAGE = b'<html><head><script id="jupyter-config-data" type="application/json">{}</script></head><body></body></html>'


def test_jupyterlabs_pages_link_the_stylesheet_and_nothing_else_changes():
    link = b'<link rel="stylesheet" href="/user/wang/tfcourse/fonts/cjk.css">'
    headers, chunk = _transformed("/user/wang/lab/tree/notebooks", PAGE, base_url="/user/wang/")
    assert chunk == PAGE.replace(b"</head>", link + b"</head>")
    assert headers["Content-Length"] == str(len(chunk))  # the length tornado had set was the old body's
    assert b"/tfcourse/fonts/cjk.css" in _transformed("/tree", PAGE)[1]  # Notebook 7's pages too
    headers, chunk = _transformed("/lab", PAGE, finishing=False)  # a page sent in parts: no length
    assert link.replace(b"/user/wang", b"") in chunk and "Content-Length" not in headers
    # A learner's HTML file, even one that looks like a JupyterLab page, an API answer, other pages:
    untouched = [_transformed("/files/feedback/report.html", PAGE), _transformed("/view/page.html", PAGE),
                 _transformed("/lab", PAGE, content_type="application/json"),
                 _transformed("/login", b"<html><head></head><body>Password</body></html>"),
                 _transformed("/other/lab", PAGE, base_url="/user/wang/")]
    for headers, chunk in untouched:
        assert b"cjk.css" not in chunk


def test_the_extension_serves_the_font_and_its_stylesheet():
    font = cjk_font.bundled_font()
    if font is None:
        pytest.skip("mplfonts is not installed")
    serverapp = _serverapp(base_url="/user/wang/")
    lab._load_jupyter_server_extension(serverapp)
    routes = {handler: pattern for pattern, handler, _ in serverapp.web_app.handlers}
    assert routes[lab.CJKStylesheetHandler] == "/user/wang/tfcourse/fonts/cjk.css"
    font_route = re.compile(routes[lab.CJKFontHandler] + "$")
    assert font_route.match(f"/user/wang/tfcourse/fonts/{font.name}")
    assert not font_route.match("/user/wang/tfcourse/fonts/SimHei.ttf")  # mplfonts' other fonts stay unserved
    assert not font_route.match("/user/wang/tfcourse/fonts/../NotoSansCJKsc-Regular.otf")
    transform = serverapp.web_app.transforms[0]  # before any other (gzip) sees the page
    assert transform.func is lab.LinkTheStylesheet and transform.keywords == {"base_url": "/user/wang/"}


def test_without_mplfonts_the_server_still_starts_and_says_why(monkeypatch):
    warnings = []
    monkeypatch.setattr(cjk_font, "bundled_font", lambda: None)
    serverapp = _serverapp()
    serverapp.log.warning = warnings.append
    lab._load_jupyter_server_extension(serverapp)
    assert serverapp.web_app.handlers == [] and serverapp.web_app.transforms == [object]
    assert "mplfonts" in warnings[0]


def test_the_fonts_licence_notice_ships_with_the_course():
    """The SIL Open Font License asks that its text and the font's copyright notice go with the font."""
    from fontTools.ttLib import TTFont

    notice = cjk_font.LICENCE_NOTICE.read_text(encoding="utf-8")
    assert "Noto Sans CJK SC" in notice and "mplfonts" in notice
    assert "SIL OPEN FONT LICENSE Version 1.1" in notice and "PERMISSION & CONDITIONS" in notice
    assert "TERMINATION" in notice and "DISCLAIMER" in notice
    font = cjk_font.bundled_font()
    if font is not None:  # the copyright line is the one in the font itself
        assert TTFont(font, lazy=True)["name"].getDebugName(0) in notice
    package_data = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    assert cjk_font.LICENCE_NOTICE.relative_to(ROOT / "tfcourse").as_posix() in package_data["tfcourse"]
