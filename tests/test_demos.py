"""Grading runs what grades: which demonstrations a graded copy leaves out (tfcourse.course.demos)."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from tfcourse import manifest
from tfcourse.course.autograde import autograde_preprocessors, generate_preprocessors
from tfcourse.course.demos import (MarkDemonstrations, RestoreDemonstrations, SkipDemonstrations, cell_names,
                                   cells_to_skip)
from tfcourse.course.results import NOT_RUN

ROOT = Path(__file__).resolve().parents[1]


def test_a_cell_reads_first_what_it_has_not_bound_yet():
    names = cell_names("model = model.to(device)\nfor x in xs:\n    print(x, total)\ntotal = 1\nimport numpy as np")
    assert names.binds == {"model", "x", "total", "np"}
    assert names.reads_first == {"model", "device", "xs", "print", "total"}  # total: read before it is bound
    assert names.reads_later == set()


def test_functions_read_their_globals_when_called_and_comprehensions_keep_their_own_names():
    names = cell_names("def f(a, b=default):\n    c = helper(a)\n    return [c * k for k in ks]\n"
                       "squares = [i * i for i in range(n)]\nclass Net(Base):\n    size = WIDTH")
    assert names.binds == {"f", "squares", "Net"}
    assert names.reads_first == {"default", "range", "n", "Base"}  # at definition time; i is the comprehension's
    assert {"helper", "ks", "WIDTH"} <= names.reads_later and not {"a", "c", "k", "i"} & names.reads_later


@pytest.mark.parametrize("source", ["%timeit f()", "def broken(:", "from torch import *"])
def test_a_cell_that_is_not_plain_python_is_not_understood(source):
    assert cell_names(source) is None


def _solution(source, grade_id):
    return new_code_cell(source, metadata={"nbgrader": {"solution": True, "grade": False, "grade_id": grade_id}})


def _tests(source, grade_id):
    return new_code_cell(source, metadata={"nbgrader": {"grade": True, "grade_id": grade_id, "points": 1}})


def _stamped(cells):
    """The cells as the student version has them: every plain code cell stamped."""
    notebook = new_notebook(cells=cells)
    notebook, _ = MarkDemonstrations().preprocess(notebook, {})
    return notebook.cells


def _lesson():
    return _stamped([
        new_code_cell("import torch\ndevice = setup(seed=0)"),  # the preamble
        _solution("def f(x):\n    return helper(x) + OFFSET", "f_impl"),
        new_code_cell("def helper(x):\n    return 2 * x"),  # the answer calls it: runs
        new_code_cell("base = 3"),  # the cell below reads it: runs
        new_code_cell("OFFSET = base + 1"),  # the answer reads it when called: runs
        new_code_cell("history = train(model_for_ages())\nplot(history)"),  # nothing reads history: left out
        new_code_cell("PREDICTED_LOSS = None  # your guess\nprint(PREDICTED_LOSS, history)"),  # left out too
        _tests("check_f(f)", "f_tests"),
        new_markdown_cell("text"),
    ])


def test_only_the_unchanged_demonstrations_that_nothing_graded_needs_are_left_out():
    cells = _lesson()
    assert cells_to_skip(cells) == {5, 6}


def test_a_guess_in_place_of_none_keeps_a_demonstration_out_but_any_other_change_runs_it():
    cells = _lesson()
    cells[6].source = cells[6].source.replace("PREDICTED_LOSS = None  # your guess", "PREDICTED_LOSS = 2.5")
    assert cells_to_skip(cells) == {5, 6}
    cells[5].source += "\nprint('mine')"  # the learner changed the demonstration: it runs
    assert cells_to_skip(cells) == {6}


def test_a_learner_cell_that_reads_a_demonstration_keeps_it_and_a_cell_we_cannot_read_keeps_all():
    cells = _lesson()
    cells.insert(7, new_code_cell("print(history[-1])"))  # the learner's own cell (no stamp) reads history
    assert cells_to_skip(cells) == {6}
    cells[7] = new_code_cell("%timeit f(1)")
    assert cells_to_skip(cells) == set()


def test_the_skipped_cells_are_passed_over_then_shown_with_a_note(tmp_path):
    notebook = new_notebook(cells=_lesson())
    notebook, _ = SkipDemonstrations().preprocess(notebook, {})
    assert [i for i, c in enumerate(notebook.cells) if c.cell_type == "raw"] == [5, 6]  # Execute runs code cells only
    notebook, _ = RestoreDemonstrations().preprocess(notebook, {})
    assert [c.cell_type for c in notebook.cells[5:7]] == ["code", "code"]
    assert notebook.cells[5].outputs[0]["text"] == NOT_RUN and notebook.cells[5].source.startswith("history = train")
    nbformat.validate(notebook)


def test_the_plug_ins_sit_around_execute_and_in_the_student_version():
    from nbgrader.preprocessors import Execute

    steps = autograde_preprocessors()
    run = next(i for i, step in enumerate(steps) if issubclass(step, Execute))
    assert steps[run - 1] is SkipDemonstrations and steps[run + 1] is RestoreDemonstrations
    assert MarkDemonstrations in generate_preprocessors()


@pytest.mark.parametrize("lesson", [lesson.folder for lesson in manifest.lessons()])
def test_every_student_version_is_stamped_and_its_untouched_copy_leaves_out_demonstrations(lesson):
    """The committed student versions carry the stamps (tools/release.py makes them); an untouched copy,
    with every answer still a stub, leaves out some demonstrations and never a cell an answer or test reads."""
    notebook = nbformat.read(ROOT / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    plain = [c for c in notebook.cells if c.cell_type == "code" and "nbgrader" not in c.metadata]
    assert plain and all("demo" in c.metadata.get("tfcourse", {}) for c in plain)
    skipped = cells_to_skip(notebook.cells)
    graded_reads = set().union(*(cell_names(c.source).reads_first | cell_names(c.source).reads_later
                                 for c in notebook.cells if c.cell_type == "code" and "nbgrader" in c.metadata
                                 and cell_names(c.source)))
    for index in skipped:
        assert not cell_names(notebook.cells[index].source).binds & graded_reads, (lesson, index)
    if lesson != "00_big_picture":
        assert skipped, f"{lesson}: no demonstration is left out of the graded copy"
