"""Build lesson notebooks with correct nbgrader metadata (for authors; not part of the package).

    from tools.lesson_cells import md, code, solution, tests, notebook
    nb = notebook([md("# Title"), solution("def f(x):\n    ### BEGIN SOLUTION\n    return x\n    ### END SOLUTION",
                   "f_impl", mirrors=["tfcourse.module.f"]), tests("check_f(f)", "f_tests", points=2)])
    nbformat.write(nb, "solutions/NN_topic/NN_topic.ipynb")

The same metadata is what JupyterLab's "Create Assignment" toolbar writes.
"""

from __future__ import annotations

import nbformat
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

SCHEMA = 3


def _meta(grade_id: str, *, grade: bool, solution: bool, locked: bool, points: int | None = None) -> dict:
    meta = {"grade": grade, "grade_id": grade_id, "locked": locked, "schema_version": SCHEMA,
            "solution": solution, "task": False}
    if points is not None:
        meta["points"] = points
    return {"nbgrader": meta}


def md(text: str) -> nbformat.NotebookNode:
    """A plain markdown cell."""
    return new_markdown_cell(text.strip("\n"))


def code(source: str) -> nbformat.NotebookNode:
    """A plain code cell (demonstrations, plots)."""
    return new_code_cell(source.strip("\n"))


def solution(source: str, grade_id: str, mirrors: list[str] | None = None) -> nbformat.NotebookNode:
    """An autograded-answer cell: ### BEGIN SOLUTION / ### END SOLUTION become the stub.

    mirrors: the tfcourse functions/classes this solution reproduces exactly; a test compares their
    ASTs so the lesson and the package cannot drift apart.
    """
    cell = new_code_cell(source.strip("\n"), metadata=_meta(grade_id, grade=False, solution=True, locked=False))
    if mirrors:
        cell.metadata["tfcourse"] = {"mirrors": mirrors}
    return cell


def tests(source: str, grade_id: str, points: int) -> nbformat.NotebookNode:
    """An autograder-tests cell (read-only for the learner). ### BEGIN/END HIDDEN TESTS are removed
    from the student version and restored when grading."""
    return new_code_cell(source.strip("\n"), metadata=_meta(grade_id, grade=True, solution=False, locked=True,
                                                              points=points))


def readonly(source: str, grade_id: str) -> nbformat.NotebookNode:
    """A locked code cell the learner should not edit (e.g. the setup cell)."""
    return new_code_cell(source.strip("\n"), metadata=_meta(grade_id, grade=False, solution=False, locked=True))


def notebook(cells: list) -> nbformat.NotebookNode:
    nb = new_notebook(cells=cells)
    nb.metadata["kernelspec"] = {"display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb.metadata["language_info"] = {"name": "python"}
    return nb
