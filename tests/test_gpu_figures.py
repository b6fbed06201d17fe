"""tools/gpu_figures.py runs lessons as plain scripts on a GPU machine without Jupyter: the runner itself."""

from __future__ import annotations

import json
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools import gpu_figures  # noqa: E402


def _notebook(path: Path, sources: list[str]) -> Path:
    cells = [{"cell_type": "code", "source": s, "metadata": {}, "outputs": [], "execution_count": None}
             for s in sources]
    cells.insert(1, {"cell_type": "markdown", "source": "# not run", "metadata": {}})
    path.write_text(json.dumps({"cells": cells, "metadata": {}, "nbformat": 4, "nbformat_minor": 5}))
    return path


def test_a_lesson_runs_cell_by_cell_in_one_namespace_from_its_own_folder(tmp_path):
    lesson = _notebook(tmp_path / "07_demo.ipynb", [
        "from pathlib import Path\nfolder = Path.cwd().name",
        "x = 20",
        "print('x is', x + 1, 'in', folder)",
    ])
    out = tmp_path / "out"
    out.mkdir()
    gpu_figures.run_lesson_as_script(lesson, out)
    log = (out / "07_demo.log").read_text()
    assert "x is 21 in " + tmp_path.name in log, log
    assert log.count("--- code cell") == 3


def test_without_ipython_markdown_becomes_print():
    source = "from IPython.display import Markdown, HTML\nMarkdown('**x**')"
    assert gpu_figures._without_ipython(source).splitlines()[0] == "Markdown = HTML = print"
