"""A Jupyter server extension: the course's notebooks open unmodified in JupyterLab.

When a kernel connects, JupyterLab writes the kernel's ``language_info`` (Python's exact version,
its MIME type, ...) into the notebook's metadata; if that changes the metadata, the notebook is
marked modified before the learner has typed anything. The lessons ship a bare
``{"name": "python"}`` (the exact version is the learner's, not ours), so this extension fills in
what the kernel will report as each lesson is opened. The file on disk is not touched.

It also opens JupyterLab's terminals with the course's environment on ``PATH`` (``tfcourse``,
``nbgrader`` and ``python`` are the course's): the environment's programs come first, and the terminal's
shell is not a login shell, which would reset ``PATH`` from ``/etc/profile``.

It is switched on by ``jupyter-config/jupyter_server_config.d/tfcourse.json``, which installing the
package puts in the environment's Jupyter configuration, so it works whether the server was started
by ``make lab`` or by ``jupyter lab``.
"""

from __future__ import annotations

import functools
import inspect
import os
import shutil
import sys
from typing import Any

# Notebooks this extension fills in: those that name no more than the language, as the lessons do.
BARE_LANGUAGE_INFO = {"name": "python"}


@functools.cache
def kernel_language_info() -> dict[str, Any]:
    """What this environment's Python kernel (ipykernel) reports as its ``language_info``."""
    from ipykernel.ipkernel import IPythonKernel

    return dict(IPythonKernel.language_info)


def fill_language_info(notebook: Any) -> bool:
    """Give a notebook that uses the Python kernel the kernel's full ``language_info``; True if changed."""
    metadata = notebook.get("metadata", {})
    kernel = metadata.get("kernelspec", {})
    if kernel.get("language") != "python" or metadata.get("language_info", BARE_LANGUAGE_INFO) != BARE_LANGUAGE_INFO:
        return False
    metadata["language_info"] = kernel_language_info()
    return True


def _filling(get: Any) -> Any:
    """The contents manager's ``get``, filling in each notebook it returns (sync or async, as ``get`` is)."""
    def fill(model: dict) -> dict:
        if model.get("type") == "notebook" and model.get("content"):
            fill_language_info(model["content"])
        return model

    if inspect.iscoroutinefunction(get):
        @functools.wraps(get)
        async def get_async(*args: Any, **kwargs: Any) -> dict:
            return fill(await get(*args, **kwargs))
        return get_async

    @functools.wraps(get)
    def get_sync(*args: Any, **kwargs: Any) -> dict:
        return fill(get(*args, **kwargs))
    return get_sync


def _jupyter_server_extension_points() -> list[dict[str, str]]:
    return [{"module": "tfcourse.course.lab"}]


def environment_first_on_path() -> str:
    """Put the folder of this environment's programs first on PATH (once); returns that folder."""
    programs = os.path.dirname(sys.executable)
    entries = os.environ.get("PATH", "").split(os.pathsep)
    if entries[:1] != [programs]:
        os.environ["PATH"] = os.pathsep.join([programs, *(e for e in entries if e != programs)])
    return programs


def terminal_shell() -> list[str]:
    """The shell of a terminal, as an interactive (not a login) shell: it keeps the server's PATH."""
    return [os.environ.get("SHELL") or shutil.which("bash") or shutil.which("sh") or "sh"]


def _terminals_keep_the_environment(serverapp: Any) -> None:
    environment_first_on_path()
    settings = getattr(serverapp, "terminado_settings", None)
    if isinstance(settings, dict):
        settings.setdefault("shell_command", terminal_shell())  # read when the terminals start...
    web_app = getattr(serverapp, "web_app", None)
    manager = getattr(web_app, "settings", {}).get("terminal_manager") if web_app is not None else None
    if manager is not None and getattr(manager, "shell_command", None) and manager.shell_command[-1:] == ["-l"]:
        manager.shell_command = manager.shell_command[:-1]  # ...or already started: drop the login flag


def _load_jupyter_server_extension(serverapp: Any) -> None:
    # Wrapping the manager's method (not replacing its class) keeps any other contents manager working.
    manager = serverapp.contents_manager
    manager.get = _filling(manager.get)
    _terminals_keep_the_environment(serverapp)
