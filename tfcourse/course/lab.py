"""A Jupyter server extension: the course's notebooks open unmodified in JupyterLab.

When a kernel connects, JupyterLab writes the kernel's ``language_info`` (Python's exact version,
its MIME type, ...) into the notebook's metadata; if that changes the metadata, the notebook is
marked modified before the learner has typed anything. The lessons ship a bare
``{"name": "python"}`` (the exact version is the learner's, not ours), so this extension fills in
what the kernel will report as each lesson is opened. The file on disk is not touched.

It also opens JupyterLab's terminals with the course's environment on ``PATH`` (``tfcourse``,
``nbgrader`` and ``python`` are the course's): the environment's programs come first, and the terminal's
shell is not a login shell, which would reset ``PATH`` from ``/etc/profile``.

And it lets JupyterLab show Chinese where no Chinese font is installed: it serves the Noto Sans CJK
SC that the ``mplfonts`` package ships, with a stylesheet that puts it in JupyterLab's font stacks for
CJK characters only (``tfcourse.course.cjk_font``), and links that stylesheet into JupyterLab's pages
as the server sends them (no JupyterLab extension to build, nothing written into the learner's
settings or Jupyter folders).

It is switched on by ``jupyter-config/jupyter_server_config.d/tfcourse.json``, which installing the
package puts in the environment's Jupyter configuration, so it works whether the server was started
by ``make lab`` or by ``jupyter lab``.
"""

from __future__ import annotations

import functools
import inspect
import os
import re
import shutil
import sys
from pathlib import Path
from typing import Any

from jupyter_server.base.handlers import JupyterHandler
from jupyter_server.utils import url_path_join
from tornado import httputil, web

from . import cjk_font

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


# Where the extension serves the font and its stylesheet, under the server's base URL.
FONT_ROUTE = "tfcourse/fonts"
STYLESHEET = "cjk.css"
# A year: the font's URL names its version, so a changed file is a new URL.
FONT_CACHE_CONTROL = "public, max-age=31536000, immutable"
# The pages of JupyterLab (and of Notebook 7, built on it) carry their configuration in this element.
JUPYTER_PAGE_MARKER = b'id="jupyter-config-data"'
# Under these, the server sends the learner's own files (and conversions of them): never changed.
NOT_PAGES = ("files/", "view/", "nbconvert/", "api/")


def font_version(font: Path) -> str:
    """A version for the font's URL: it changes when the installed file does."""
    status = font.stat()
    return f"{status.st_size:x}-{status.st_mtime_ns:x}"


class CJKStylesheetHandler(JupyterHandler):
    """The stylesheet: the font's @font-face and the font stacks with it (small; revalidated each time)."""

    def initialize(self, font: Path) -> None:
        self.font = font

    @web.authenticated
    def get(self) -> None:
        self.set_header("Content-Type", "text/css; charset=UTF-8")
        self.set_header("Cache-Control", "no-cache")
        self.finish(cjk_font.lab_stylesheet(f"{self.font.name}?v={font_version(self.font)}"))


class CJKFontHandler(JupyterHandler, web.StaticFileHandler):
    """The font file (16 MB), cached for a year when asked for by the version the stylesheet names.

    tornado's file handler answers ranges and If-None-Match. Both handlers ask for a login, as the
    server's pages do (a browser showing JupyterLab has it).
    """

    @web.authenticated
    def get(self, path: str, include_body: bool = True) -> Any:
        return super().get(path, include_body)

    @web.authenticated
    def head(self, path: str) -> Any:
        return super().head(path)

    def get_content_type(self) -> str:
        return "font/otf"  # (Python's mimetypes has no .otf before 3.11 on some systems)

    def get_cache_time(self, path: str, modified: Any, mime_type: str) -> int:
        return 0  # tornado's max-age for any ?v=: set_extra_headers decides instead

    def set_extra_headers(self, path: str) -> None:
        current = self.get_argument("v", None) == font_version(Path(self.absolute_path))
        self.set_header("Cache-Control", FONT_CACHE_CONTROL if current else "no-cache")


class LinkTheStylesheet(web.OutputTransform):
    """A tornado output transform: JupyterLab's pages get a <link> to the course's font stylesheet.

    It changes only an HTML page of the server's own (one with JupyterLab's configuration element),
    never a learner's file, and inserts the link before ``</head>``: the themes' stylesheets, which
    JupyterLab adds later, come after it.
    """

    def __init__(self, request: httputil.HTTPServerRequest, *, base_url: str) -> None:
        self.link = f'<link rel="stylesheet" href="{url_path_join(base_url, FONT_ROUTE, STYLESHEET)}">'.encode()
        self.may_change = request.path.startswith(base_url) and not any(
            request.path.startswith(url_path_join(base_url, prefix)) for prefix in NOT_PAGES)

    def transform_first_chunk(self, status_code: int, headers: httputil.HTTPHeaders, chunk: bytes,
                              finishing: bool) -> tuple[int, httputil.HTTPHeaders, bytes]:
        is_page = (self.may_change and status_code == 200 and JUPYTER_PAGE_MARKER in chunk
                   and headers.get("Content-Type", "").startswith("text/html") and b"</head>" in chunk
                   and "Content-Encoding" not in headers)
        if is_page:
            chunk = chunk.replace(b"</head>", self.link + b"</head>", 1)
            if finishing:
                headers["Content-Length"] = str(len(chunk))
            else:  # more to come: the length tornado may have been told is no longer the body's
                headers.pop("Content-Length", None)
        return status_code, headers, chunk

    def transform_chunk(self, chunk: bytes, finishing: bool) -> bytes:
        return chunk


def _serve_the_cjk_font(serverapp: Any) -> None:
    font = cjk_font.bundled_font()
    if font is None:
        serverapp.log.warning("tfcourse: the mplfonts package is not installed; Chinese in JupyterLab "
                              "needs a system font (pip install mplfonts)")
        return
    route = url_path_join(serverapp.base_url, FONT_ROUTE)
    serverapp.web_app.add_handlers(".*$", [
        (url_path_join(route, STYLESHEET), CJKStylesheetHandler, {"font": font}),
        (url_path_join(route, f"({re.escape(font.name)})"), CJKFontHandler, {"path": str(font.parent)}),
    ])
    # First, so that it sees the page before any other transform (gzip) changes it.
    serverapp.web_app.transforms.insert(0, functools.partial(LinkTheStylesheet, base_url=serverapp.base_url))


def _load_jupyter_server_extension(serverapp: Any) -> None:
    # Wrapping the manager's method (not replacing its class) keeps any other contents manager working.
    manager = serverapp.contents_manager
    manager.get = _filling(manager.get)
    _terminals_keep_the_environment(serverapp)
    _serve_the_cjk_font(serverapp)
