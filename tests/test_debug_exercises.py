"""Debug exercises: lessons 02-09 each plant one mistake their checks know; the student version starts
from it; the check hides the diagnosis while the code is unchanged, hints at the first failing run after an
edit, and diagnoses fully from then on — and always in grading."""

from __future__ import annotations

import importlib.util
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from tfcourse import manifest
from tfcourse.checks import debugging
from tfcourse.checks.core import CheckFailed
from tfcourse.checks.debugging import PlantedBug, planted_bugs

ROOT = Path(__file__).resolve().parents[1]
BUGS = planted_bugs()
LESSONS_WITH_A_DEBUG_EXERCISE = [f"{n:02d}" for n in range(2, 10)]
# What a lesson's cells have imported when the planted code runs (every lesson's setup cell imports these).
PRELUDE = "import math\nimport torch\nimport torch.nn.functional as F\nfrom torch import Tensor, nn\n"


def _module(tmp_path: Path, name: str, source: str):
    """`source` as a module in a file, so that its functions' source can be read back (as in a notebook)."""
    path = tmp_path / f"{name}.py"
    path.write_text(PRELUDE + textwrap.dedent(source), encoding="utf-8")
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module


def _exercise(bug: PlantedBug) -> manifest.Exercise:
    return next(e for e in manifest.exercises() if e.answer_id == bug.answer_id)


def _check(bug: PlantedBug):
    module, _, function = _exercise(bug).check.rpartition(".")
    return getattr(importlib.import_module(f"tfcourse.checks.{module}"), function)


def _cells(folder: str, lesson: str) -> dict[str, str]:
    notebook = nbformat.read(ROOT / folder / lesson / f"{lesson}.ipynb", as_version=4)
    return {c.metadata["nbgrader"]["grade_id"]: c.source for c in notebook.cells if "grade_id" in c.metadata.get("nbgrader", {})}


@pytest.mark.parametrize("number", LESSONS_WITH_A_DEBUG_EXERCISE)
def test_lessons_02_to_09_each_have_a_debug_exercise(number):
    assert any(bug.lesson.startswith(number) for bug in BUGS.values()), f"lesson {number} has no debug exercise"


@pytest.mark.parametrize("bug", BUGS.values(), ids=lambda bug: bug.answer_id)
def test_the_planted_code_fails_its_check_with_the_intended_mistake(bug, tmp_path, monkeypatch):
    monkeypatch.setenv("NBGRADER_EXECUTION", "autograde")  # graded feedback: the full diagnosis
    planted = getattr(_module(tmp_path, f"planted_{bug.answer_id}", bug.source), bug.name)
    with pytest.raises(CheckFailed) as failure:
        _check(bug)(planted)
    assert bug.mistake in str(failure.value), str(failure.value)


@pytest.mark.parametrize("bug", BUGS.values(), ids=lambda bug: bug.answer_id)
def test_the_student_version_starts_from_the_planted_code_and_the_solution_fixes_it(bug):
    assert _cells("notebooks", bug.lesson)[bug.answer_id] == bug.source
    solution = _cells("solutions", bug.lesson)[bug.answer_id]
    assert "### BEGIN SOLUTION" in solution and debugging._normalised(solution, bug.name) is not None
    assert debugging._normalised(solution, bug.name) != debugging._normalised(bug.source, bug.name)


@pytest.mark.parametrize("bug", BUGS.values(), ids=lambda bug: bug.answer_id)
def test_the_check_hides_the_diagnosis_then_hints_then_diagnoses(bug, tmp_path, monkeypatch):
    monkeypatch.delenv("NBGRADER_EXECUTION", raising=False)
    monkeypatch.setattr(debugging, "_failed_after_edit", {})
    check = _check(bug)
    given = getattr(_module(tmp_path, f"given_{bug.answer_id}", bug.source), bug.name)
    for _ in range(2):  # unchanged, however often it runs
        with pytest.raises(CheckFailed, match="the planted bug is still there"):
            check(given)
    # An edit that keeps the mistake (a line that changes nothing): first the hint, then the diagnosis.
    edited_source = bug.source.replace('"""\n', '"""\n    _edited = True\n', 1)
    edited = getattr(_module(tmp_path, f"edited_{bug.answer_id}", edited_source), bug.name)
    with pytest.raises(CheckFailed) as first:
        check(edited)
    assert bug.coarse_hint in str(first.value) and bug.mistake not in str(first.value)
    with pytest.raises(CheckFailed) as second:
        check(edited)
    assert bug.mistake in str(second.value)
    with pytest.raises(CheckFailed) as hidden:
        check(given, hidden=True)  # the hidden run (grading): the diagnosis, planted code or not
    assert bug.mistake in str(hidden.value)
