"""Where the course keeps what it downloads or makes once (Tiny Shakespeare, lessons generated for
grading, cut fonts). No torch here: the grader asks for this folder and needs nothing else of the model.
"""

from __future__ import annotations

import os
from pathlib import Path

CACHE_DIR_ENV = "TFCOURSE_CACHE_DIR"


def env_path(name: str) -> Path | None:
    """The path held by environment variable ``name``; ``None`` when unset or empty."""
    value = os.environ.get(name, "").strip()
    return Path(value).expanduser() if value else None


def cache_dir() -> Path:
    """Folder where downloaded datasets and other made-once files are kept.

    ``$TFCOURSE_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/tfcourse``, else ``~/.cache/tfcourse``.
    The folder is not created here: whoever first writes into it creates it.
    """
    explicit = env_path(CACHE_DIR_ENV)
    if explicit is not None:
        return explicit
    xdg_cache = env_path("XDG_CACHE_HOME")
    if xdg_cache is not None:
        return xdg_cache / "tfcourse"
    return Path.home() / ".cache" / "tfcourse"
