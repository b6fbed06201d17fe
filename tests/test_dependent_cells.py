"""Cells never mislead: with one exercise wrong, every later cell of the lesson either runs or says in one
line that it uses that exercise (in a real kernel, as a learner runs the lesson top to bottom)."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

pytestmark = pytest.mark.slow  # runs three lessons in kernels

ROOT = Path(__file__).resolve().parents[1]
# lesson -> (the answer cell made wrong, the wrong code in place of its solution region, its exercise)
WRONG = {
    "01_tokenization": ("count_pairs_impl", ["counts = Counter()", "for word in word_freqs:",
                                             "    counts.update(zip(word, word[1:]))  # once per word, whatever its freq",
                                             "return counts"], (2, "count_pairs")),
    "03_attention": ("causal_mask_impl", ["return torch.ones(t_q, t_q if t_k is None else t_k, dtype=torch.bool)"],
                     (3, "causal_mask")),
    "04_ffn": ("load_weights_impl", ["return None  # copies nothing"], (2, "load_paper_weights")),
}


def _break(cell: nbformat.NotebookNode, wrong: list[str]) -> None:
    """The answer's (first) solution region replaced by `wrong`, at its indentation."""
    start, end = cell.source.index("### BEGIN SOLUTION"), cell.source.index("### END SOLUTION")
    indent = cell.source[:start].rsplit("\n", 1)[-1]
    cell.source = cell.source[:start] + f"\n{indent}".join(wrong) + "\n" + indent + cell.source[end:]


def _names(text: str, number: int, name: str) -> bool:
    """Whether `text` names the exercise: "Exercise 3 — causal_mask", "Exercise 3 (causal_mask)", ..."""
    return re.search(rf"Exercise {number}\b[^\n]{{0,8}}{re.escape(name)}", text) is not None


@pytest.mark.parametrize("lesson", WRONG)
def test_with_one_exercise_wrong_every_later_cell_runs_or_names_it(lesson, tmp_path):
    answer_id, wrong, title = WRONG[lesson]
    folder = tmp_path / lesson  # the kernel runs in a folder named as the lesson, as in JupyterLab
    shutil.copytree(ROOT / "solutions" / lesson, folder)
    notebook = nbformat.read(folder / f"{lesson}.ipynb", as_version=4)
    broken = next(i for i, c in enumerate(notebook.cells) if c.metadata.get("nbgrader", {}).get("grade_id") == answer_id)
    _break(notebook.cells[broken], wrong)
    NotebookClient(notebook, timeout=300, allow_errors=True, resources={"metadata": {"path": str(folder)}}).execute()

    number, name = title
    misleading, named = [], 0
    for index, cell in enumerate(notebook.cells[broken + 1:], broken + 1):
        if cell.cell_type != "code" or cell.metadata.get("nbgrader", {}).get("grade"):
            continue  # a test cell says what is wrong in its own words
        for output in cell.outputs:
            if output.output_type == "stream" and _names(output.text, number, name):
                named += 1  # a demo that checks its result and says which exercise it needs
            if output.output_type != "error":
                continue
            shown = "\n".join(output.traceback)
            if _names(shown, number, name):
                named += 1
                assert len([line for line in shown.splitlines() if line.strip()]) == 1, shown  # one line
            else:
                misleading.append(f"cell {index}: {output.ename}: {output.evalue}"[:300])
    assert not misleading, f"{lesson}, with Exercise {number} ({name}) wrong: " + "; ".join(misleading)
    assert named >= 1, f"{lesson}: no later cell noticed that Exercise {number} ({name}) is wrong"
