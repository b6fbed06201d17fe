"""`tfcourse grade` with no argument grades the lessons the learner has started, says so for the others in one
line each, and tells how to grade everything."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import nbformat
import pytest

from tfcourse.course.grade import _planted_sources, graded_lessons, is_started, main

ROOT = Path(__file__).resolve().parents[1]


def test_a_lesson_is_started_once_one_exercise_cell_changes(tmp_path):
    planted, solutions = _planted_sources(), ROOT / "solutions"
    lesson = "04_ffn"
    given = ROOT / "notebooks" / lesson / f"{lesson}.ipynb"
    assert not is_started(given, lesson, solutions, planted)
    notebook = nbformat.read(given, as_version=4)
    answer = next(c for c in notebook.cells if c.metadata.get("nbgrader", {}).get("solution"))
    answer.source = answer.source.replace("raise NotImplementedError()", "return None  # my first try")
    nbformat.write(notebook, tmp_path / "mine.ipynb")
    assert is_started(tmp_path / "mine.ipynb", lesson, solutions, planted)
    assert not is_started(None, lesson, solutions, planted)  # no notebook at all


@pytest.mark.slow
def test_grade_without_arguments_grades_only_the_started_lesson(tmp_path, capsys):
    course = tmp_path / "course"
    shutil.copytree(ROOT / "solutions", course / "solutions")
    shutil.copytree(ROOT / "notebooks", course / "notebooks")
    shutil.copy(ROOT / "nbgrader_config.py", course / "nbgrader_config.py")
    done = "02_embeddings"
    shutil.copy(ROOT / "solutions" / done / f"{done}.ipynb", course / "notebooks" / done / f"{done}.ipynb")
    started = time.perf_counter()
    assert main(["--course", str(course), "--report-dir", str(tmp_path / "grades")]) == 0
    seconds = time.perf_counter() - started
    out = capsys.readouterr().out
    print(f"tfcourse grade, one lesson started of {len(graded_lessons(course / 'solutions'))}: {seconds:.0f} s")
    assert "grading the 1 lesson(s) you have started; `tfcourse grade --all` grades every lesson" in out
    for lesson in graded_lessons(course / "solutions"):
        if lesson != done:
            assert f"  {lesson}: not started (no exercise changed yet), not graded" in out
    assert done in out and "not implemented yet" not in out


@pytest.mark.parametrize("lesson", graded_lessons(ROOT / "solutions"))
def test_what_grade_takes_for_an_untouched_answer_is_what_generate_assignment_gives(lesson):
    """`is_started` rebuilds each answer cell as the student version has it (ClearSolutions' stubs, PlantBugs'
    planted code); notebooks/ is nbgrader's own result (tests/test_notebooks.py): the two must not drift."""
    from tfcourse.course.grade import _answers, _as_given

    planted = _planted_sources()
    given = _answers(ROOT / "notebooks" / lesson / f"{lesson}.ipynb")
    rebuilt = {grade_id: _as_given(source, grade_id, planted)
               for grade_id, source in _answers(ROOT / "solutions" / lesson / f"{lesson}.ipynb").items()}
    assert rebuilt == given
