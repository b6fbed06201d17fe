"""The lesson manifest: built from the solution notebooks, never edited by hand, and what the README,
the student notebooks and the checks agree with."""

from __future__ import annotations

import importlib
import json
import re
import sys
from pathlib import Path

import pytest

from tfcourse import manifest

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "tools"))

import release  # noqa: E402  (tools/release.py: writes the manifest and the README's table)


def test_the_manifest_is_what_the_solutions_say():
    built = manifest.dumps(manifest.build(ROOT / "solutions"))
    assert manifest.MANIFEST.read_text(encoding="utf-8") == built, (
        "tfcourse/manifest.json differs from the solution notebooks: run `python tools/release.py`")


def test_the_readme_lesson_table_counts_the_manifests_exercises():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    rows = {m.group(1): m.group(3) for line in readme.splitlines() if (m := release.TABLE_ROW.match(line))}
    expected = {lesson.folder[:2]: str(len(lesson.exercises)) if lesson.exercises else "—"
                for lesson in manifest.lessons()}
    assert rows == expected, "README's lesson table differs from the manifest: run `python tools/release.py`"


def test_the_readme_table_is_rewritten_from_the_manifest_and_nothing_else():
    readme = "intro\n| lesson | you build | graded exercises |\n| --- | --- | --- |\n| 04 FFN | the FFN | 5 |\nend"
    data = {"lessons": [{"folder": "04_ffn", "exercises": [{}] * 6}]}
    assert release.lesson_table(readme, data) == readme.replace("| 5 |", "| 6 |")


def test_every_lesson_folder_is_in_the_manifest_in_order():
    folders = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit())
    assert [lesson.folder for lesson in manifest.lessons()] == folders
    for lesson in manifest.lessons():
        assert [e.number for e in lesson.exercises] == list(range(1, len(lesson.exercises) + 1)), lesson.folder


@pytest.mark.parametrize("exercise", manifest.exercises(), ids=lambda e: e.grade_id)
def test_each_exercise_names_a_check_and_what_it_is_handed(exercise):
    module, _, name = exercise.check.rpartition(".")
    assert callable(getattr(importlib.import_module(f"tfcourse.checks.{module}"), name, None)), exercise.check
    assert exercise.argument in exercise.defines, (exercise.grade_id, exercise.arguments, exercise.defines)
    assert exercise.answer_id == exercise.grade_id.replace("_tests", "_impl")
    assert exercise.points > 0 and exercise.name


def test_the_student_notebooks_grade_what_the_manifest_says():
    for lesson in manifest.lessons():
        cells = json.loads((ROOT / "notebooks" / lesson.folder / f"{lesson.folder}.ipynb").read_text("utf-8"))["cells"]
        graded = {c["metadata"]["nbgrader"]["grade_id"]: c["metadata"]["nbgrader"]["points"]
                  for c in cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")}
        assert graded == {e.grade_id: e.points for e in lesson.exercises}, lesson.folder


def test_a_component_names_its_reference():
    supplied = [e for e in manifest.exercises() if e.supplies]
    assert [e.supplies for e in supplied][:3] == ["input layer", "multi-head attention", "feed-forward network"]
    for e in supplied:
        if e.reference is not None:
            module, _, name = e.reference.rpartition(".")
            assert hasattr(importlib.import_module(module), name), e.reference


def test_a_lesson_is_read_from_its_notebook(tmp_path):
    """What one new exercise adds to the manifest: its heading, answer cell and test cell are enough."""
    cells = [
        {"cell_type": "markdown", "metadata": {}, "source": "# Lesson 99 — Demo"},
        {"cell_type": "markdown", "metadata": {}, "source": "### Exercise 1 ★ — `double(x)` (5 min)"},
        {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "double_impl", "solution": True}},
         "source": "def double(x):\n    ### BEGIN SOLUTION\n    return 2 * x\n    ### END SOLUTION"},
        {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "double_tests", "grade": True, "points": 2}},
         "source": "from tfcourse.checks.demo import check_double\n\ncheck_double(double)\n"
                   "### BEGIN HIDDEN TESTS\ncheck_double(double, hidden=True)\n### END HIDDEN TESTS"},
    ]
    entry = manifest.build_lesson("99_demo", {"cells": cells})
    assert entry["title"] == "Lesson 99 — Demo"
    (exercise,) = entry["exercises"]
    assert exercise | {} == {**exercise, "number": 1, "name": "double", "grade_id": "double_tests", "points": 2,
                             "check": "demo.check_double", "arguments": ["double"], "defines": ["double"]}


def test_a_graded_cell_without_a_check_is_refused():
    cells = [{"cell_type": "markdown", "metadata": {}, "source": "### Exercise 1 — x"},
             {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "x_impl", "solution": True}}, "source": "x = 1"},
             {"cell_type": "code", "metadata": {"nbgrader": {"grade_id": "x_tests", "grade": True, "points": 1}},
              "source": "assert x == 1"}]
    with pytest.raises(ValueError, match=re.escape("test cell x_tests does not call a check")):
        manifest.build_lesson("99_demo", {"cells": cells})
