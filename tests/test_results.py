"""One result model and one reporter for `tfcourse grade` and `tfcourse autograde`: the results are
built from scores and an autograded notebook's cells, and printed as each command always printed
them. Fast: nothing is graded here (the gradebook test uses nbgrader's database API only)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from tfcourse import manifest
from tfcourse.course import grade, parallel_autograde
from tfcourse.course.results import (ExerciseGrade, LessonGrade, cell_message, cell_messages, detail_lines,
                                     exercise_titles, lesson_titles, print_class_summary, print_submission,
                                     print_table, record_failure, record_scores, submission_line)

LESSON = "04_ffn"


def _error(ename: str, evalue: str) -> dict:
    return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": []}


def _stdout(text: str) -> dict:
    return {"output_type": "stream", "name": "stdout", "text": text}


def _graded(grade_id: str, *outputs: dict) -> dict:
    return {"cell_type": "code", "source": "", "outputs": list(outputs),
            "metadata": {"nbgrader": {"grade": True, "grade_id": grade_id, "points": 1}}}


def _notebook(path: Path, cells: list[dict], integrity: list[str] = ()) -> Path:
    path.write_text(json.dumps({"cells": cells, "metadata": {"tfcourse": {"integrity": list(integrity)}}}),
                    encoding="utf-8")
    return path


def test_both_commands_use_the_one_model():
    assert grade.ExerciseGrade is ExerciseGrade and grade.LessonGrade is LessonGrade  # (the old imports)
    assert grade.print_table is print_table
    assert parallel_autograde.Outcome is LessonGrade


@pytest.mark.parametrize(("outputs", "message"), [
    ([_stdout("checking...\n✔ FeedForward: all 4 checks passed\n\n")], "✔ FeedForward: all 4 checks passed"),
    ([_stdout("partly\n"), _error("CheckFailed", "✘ wrong shape\n  expected (2, 3)\n")],
     "CheckFailed: ✘ wrong shape expected (2, 3)"),
    ([_error("NotImplementedError", "")], "not implemented yet"),
    ([], ""),
])
def test_a_graded_cell_gives_one_line(outputs, message):
    assert cell_message(_graded("x_tests", *outputs)) == message


def test_a_long_error_is_cut():
    assert len(cell_message(_graded("x_tests", _error("CheckFailed", "x" * 1000)))) == 300


def test_a_graded_submission_has_points_titles_messages_and_findings(tmp_path):
    autograded = _notebook(tmp_path / f"{LESSON}.ipynb", [
        {"cell_type": "code", "source": "", "metadata": {}, "outputs": [_error("DatasetUnavailableError", "offline")]},
        _graded("a_tests", _stdout("✔ a works\n")),
        _graded("b_tests", _error("CheckFailed", "✘ b is wrong")),
    ], integrity=["cell 3, line 1: assigns to `sys.stdout`"])
    assert cell_messages(autograded) == {"a_tests": "✔ a works", "b_tests": "CheckFailed: ✘ b is wrong"}
    result = record_scores(LessonGrade(LESSON, None), {"a_tests": (2.0, 2.0), "b_tests": (0.0, 3.0)},
                           {"a_tests": "Exercise 1 — a"}, [autograded])
    assert result.exercises == [ExerciseGrade("a_tests", 2.0, 2.0, "✔ a works", "Exercise 1 — a"),
                                ExerciseGrade("b_tests", 0.0, 3.0, "CheckFailed: ✘ b is wrong", "b_tests")]
    assert (result.score, result.max_score, result.ok) == (2.0, 5.0, True)
    assert result.integrity == ["cell 3, line 1: assigns to `sys.stdout`"]
    assert result.elsewhere == ["code cell 0: DatasetUnavailableError: offline"]


def test_a_submission_that_could_not_be_graded_scores_zero_out_of_every_point():
    result = record_failure(LessonGrade(LESSON, None, student="adam", seconds=30.0),
                            {"a_tests": 2.0, "b_tests": 3.0}, "timed out after 30 s", {"a_tests": "Exercise 1 — a"})
    assert (result.score, result.max_score, result.ok) == (0.0, 5.0, False)
    assert [(e.title, e.message) for e in result.exercises] == [
        ("Exercise 1 — a", "timed out after 30 s"), ("b_tests", "timed out after 30 s")]


def test_titles_come_from_the_manifest_else_from_the_notebooks_headings(tmp_path):
    assert lesson_titles(LESSON) == {e.grade_id: e.title for e in manifest.lesson(LESSON).exercises}
    assert lesson_titles(LESSON)["ffn_tests"] == "Exercise 1 — FeedForward"
    assert lesson_titles("99_not_a_lesson") == {}
    folder = tmp_path / "99_own"
    folder.mkdir()
    heading = {"cell_type": "markdown", "metadata": {}, "source": "### Exercise 1 — `count(x)` (5 min)"}
    notebook = _notebook(folder / "99_own.ipynb", [heading, _graded("count_tests")])
    assert exercise_titles(notebook) == {"count_tests": "Exercise 1 — count"}


def _ffn_result() -> LessonGrade:
    return LessonGrade(LESSON, None, [
        ExerciseGrade("ffn_tests", 3, 3, "✔ FeedForward works", "Exercise 1 — FeedForward"),
        ExerciseGrade("trace_tests", 0, 2, "not implemented yet", "Exercise 3 — trace_ffn"),
    ], integrity=["cell 4, line 2: assigns to `sys.stdout`"], elsewhere=["code cell 7: KeyError: 'x'"],
        feedback=Path("grades/04_ffn.html"))


def test_the_table_grade_prints(capsys):
    missing = record_failure(LessonGrade("05_blocks", None), {"ln_tests": 2.0}, "missing: no notebook", {})
    print_table([_ffn_result(), missing])
    assert capsys.readouterr().out.splitlines() == [
        "",
        "04_ffn: 3 / 5 points",
        "  Exercise 1 — FeedForward    3 / 3    pass  ✔ FeedForward works",
        "  Exercise 3 — trace_ffn      0 / 2    FAIL  not implemented yet",
        "  outside the exercises, 1 cell(s) failed in the graded copy (see the feedback report): "
        "code cell 7: KeyError: 'x'",
        "  integrity: cell 4, line 2: assigns to `sys.stdout`",
        "  feedback report: grades/04_ffn.html",
        "",
        "05_blocks: 0 / 2 points   (missing: no notebook)",
        "  ln_tests    0 / 2    FAIL  missing: no notebook",
        "",
        "total: 3 / 7 points",
    ]


def test_autograde_prints_a_line_per_submission_and_with_exercises_its_rows(capsys):
    graded = _ffn_result()
    graded.student, graded.seconds, graded.feedback = "alice", 5.25, None
    failed = record_failure(LessonGrade(LESSON, None, student="adam", seconds=30.04), {"ffn_tests": 3.0},
                            "timed out after 30 s", {})
    assert submission_line(graded) == "alice: 3 / 5 points  [5.2 s]"
    assert submission_line(failed) == "adam: FAILED (timed out after 30 s)  [30.0 s]"
    print_submission(graded)
    assert capsys.readouterr().out == "alice: 3 / 5 points  [5.2 s]\n"
    print_submission(graded, exercises=True)
    assert capsys.readouterr().out.splitlines() == ["alice: 3 / 5 points  [5.2 s]", *detail_lines(graded)]


def test_autograde_summary_names_each_submission_not_graded(capsys):
    graded = LessonGrade(LESSON, None, [ExerciseGrade("ffn_tests", 3, 3, "")], student="alice", seconds=1)
    failed = record_failure(LessonGrade(LESSON, None, student="adam", seconds=30), {"ffn_tests": 3.0},
                            "timed out after 30 s", {})
    print_class_summary([failed, graded], LESSON, jobs=2, seconds=41.26)
    assert capsys.readouterr().out.splitlines() == [
        "1/2 submissions of 04_ffn graded with 2 job(s) in 41.3 s",
        "  not graded: adam: timed out after 30 s (`nbgrader autograde 04_ffn --student adam --force` to retry)",
    ]


@pytest.mark.filterwarnings("ignore:Object of type")  # (SQLAlchemy's notes on nbgrader's own session use)
def test_autograde_builds_the_per_exercise_results_grade_builds_from_a_gradebook(tmp_path, monkeypatch):
    """A gradebook's rows (as a worker reads them back) + the graded notebook -> the same rows
    `tfcourse grade` shows: grade id, score (a grader's manual score wins), max score, message, title."""
    import os
    import sys

    from nbgrader.api import Gradebook

    monkeypatch.setenv("PATH", str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"])  # (alembic)

    exercises = manifest.lesson(LESSON).exercises
    with Gradebook(f"sqlite:///{tmp_path / 'gradebook.db'}") as gradebook:
        gradebook.add_assignment(LESSON)
        gradebook.add_notebook(LESSON, LESSON)
        for exercise in exercises:
            gradebook.add_grade_cell(exercise.grade_id, LESSON, LESSON, max_score=exercise.points, cell_type="code")
        gradebook.add_student("alice")
        gradebook.add_submission(LESSON, "alice")
        first, second = (gradebook.find_grade(e.grade_id, LESSON, LESSON, "alice") for e in exercises[:2])
        first.auto_score, second.auto_score, second.manual_score = exercises[0].points, 0.0, 1.0
        gradebook.db.commit()
        maxima = parallel_autograde.gradebook_max_points(gradebook, LESSON)
        rows = parallel_autograde.submission_rows(gradebook, LESSON, "alice")
    assert maxima == {LESSON: {e.grade_id: float(e.points) for e in exercises}}
    scores = parallel_autograde.exercise_scores(rows, maxima)
    assert scores[exercises[0].grade_id] == (exercises[0].points, exercises[0].points)
    assert scores[exercises[1].grade_id] == (1.0, exercises[1].points)  # the manual score
    assert scores[exercises[2].grade_id] == (0.0, exercises[2].points)  # not scored (yet)
    autograded = _notebook(tmp_path / f"{LESSON}.ipynb", [_graded(exercises[0].grade_id, _stdout("✔ passed\n"))])
    result = record_scores(LessonGrade(LESSON, None, student="alice"), scores, lesson_titles(LESSON), [autograded])
    assert result.exercises[0] == ExerciseGrade(exercises[0].grade_id, exercises[0].points, exercises[0].points,
                                                "✔ passed", exercises[0].title)
    assert [e.title for e in result.exercises] == [e.title for e in exercises]
    assert result.max_score == manifest.lesson(LESSON).points


def test_autograde_main_reports_through_the_reporter(monkeypatch, capsys):
    failed = record_failure(LessonGrade(LESSON, None, student="adam", seconds=30), {"ffn_tests": 3.0},
                            "timed out after 30 s", {})
    handed = {}

    def fake_autograde(course, lesson, report, **options):
        handed["report"] = report
        report(failed)
        return [failed]

    monkeypatch.setattr(parallel_autograde, "autograde", fake_autograde)
    assert parallel_autograde.main([LESSON, "--jobs", "2", "--exercises"]) == 1
    out = capsys.readouterr().out
    assert "adam: FAILED (timed out after 30 s)  [30.0 s]" in out
    assert "  ffn_tests    0 / 3    FAIL  timed out after 30 s" in out  # (--exercises)
    assert "0/1 submissions of 04_ffn graded with 2 job(s)" in out and "not graded: adam" in out


def test_a_failed_submission_is_named_by_its_cause_not_by_nbgraders_pointer_to_it():
    from tfcourse.course.parallel_autograde import _last_error

    log = ("[AutogradeApp | ERROR] There was an error processing assignment: ...\n"
           "Traceback (most recent call last):\n  File \"nbclient/client.py\", line 1, in start\n"
           "RuntimeError: Kernel died before replying to kernel_info\n"
           "nbgrader.converters.base.NbGraderException: Please see the the above traceback for details on "
           "the specific errors on the above failures.\n")
    assert _last_error(log) == "RuntimeError: Kernel died before replying to kernel_info"
    pointer_only = "nbgrader.converters.base.NbGraderException: Please see the the above traceback for details"
    assert _last_error(pointer_only) == pointer_only  # nothing better to say: the pointer itself
    assert _last_error("") == "nbgrader reported a failure"
