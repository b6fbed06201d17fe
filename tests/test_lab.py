"""The JupyterLab side of the course: the server extension that lets lessons open unmodified, and
the configuration that installing the course puts in the environment."""

from __future__ import annotations

import asyncio
import json
import sys
from pathlib import Path

from tfcourse.course import lab

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
    serverapp = SimpleNamespace(contents_manager=SimpleNamespace(get=lambda *a, **k: {}), terminado_settings={},
                                web_app=SimpleNamespace(settings={"terminal_manager": started}))
    lab._load_jupyter_server_extension(serverapp)
    assert os.environ["PATH"].split(os.pathsep)[0] == programs
    assert os.path.exists(os.path.join(programs, "tfcourse"))  # what the terminal now finds first
    assert serverapp.terminado_settings["shell_command"] == lab.terminal_shell()
    assert "-l" not in serverapp.terminado_settings["shell_command"] and started.shell_command == ["/bin/bash"]
    lab.environment_first_on_path()
    assert os.environ["PATH"].split(os.pathsep).count(programs) == 1  # once
