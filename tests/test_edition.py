"""The Chinese edition, from one source (tools/edition.py): every translated lesson has a current
translation of each markdown cell, its code is the English lesson's but for the setup cell, the committed
zh/ folders are what the generator makes, and a Chinese notebook is graded against zh/solutions."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from tools import edition

ROOT = Path(__file__).resolve().parents[1]
LESSONS = edition.translated_lessons("zh")


def test_some_lessons_are_translated_and_each_names_a_real_lesson():
    assert LESSONS, "no lesson has a Chinese translation"
    assert all((ROOT / "solutions" / lesson / f"{lesson}.ipynb").exists() for lesson in LESSONS)


@pytest.mark.parametrize("lesson", LESSONS)
def test_every_markdown_cell_has_a_current_translation(lesson):
    assert edition.problems(lesson, "zh") == [], "update translations/zh (python tools/edition.py --check)"


def test_a_missing_a_stale_and_an_orphan_translation_are_each_named(tmp_path, monkeypatch):
    lesson = LESSONS[0]
    cells = edition.load_translation(lesson, "zh")
    first, second = list(cells)[:2]
    cells[first] = {**cells[first], "english": "0" * 16}  # translated from an older English text
    del cells[second]
    cells["gone1234"] = {"english": "x", "text": "一个已删除的单元"}
    (tmp_path / "zh").mkdir()
    (tmp_path / "zh" / f"{lesson}.json").write_text(json.dumps({"cells": cells}, ensure_ascii=False))
    monkeypatch.setattr(edition, "TRANSLATIONS", tmp_path)
    found = edition.problems(lesson, "zh")
    assert len(found) == 3
    assert any(f"cell {first} is stale" in f for f in found)
    assert any(f"markdown cell {second} has no zh translation" in f for f in found)
    assert any("gone1234, which the lesson no longer has" in f for f in found)


@pytest.mark.parametrize("lesson", LESSONS)
def test_the_chinese_lesson_is_the_english_code_with_its_markdown_translated(lesson):
    english = edition.english_lesson(lesson)
    chinese = nbformat.read(ROOT / "zh" / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    assert chinese == edition.translated_notebook(lesson, "zh"), "run python tools/edition.py"
    assert chinese.metadata["tfcourse"]["language"] == "zh"
    different = [(e.source, c.source) for e, c in zip(english.cells, chinese.cells)
                 if e.cell_type == "code" and e.source != c.source]
    assert len(different) == 1 and 'language="zh"' in different[0][1]  # the setup cell, and only it
    assert [c.metadata for c in english.cells] == [c.metadata for c in chinese.cells]  # grade ids and all
    translated = [c.source for c in chinese.cells if c.cell_type == "markdown"]
    assert sum(any("\u4e00" <= ch <= "\u9fff" for ch in text) for text in translated) >= 0.9 * len(translated)
    for name in (p.name for p in (ROOT / "solutions" / lesson).iterdir() if p.suffix != ".ipynb"):
        assert (ROOT / "zh" / "solutions" / lesson / name).exists(), f"{name} is not in the Chinese lesson"


@pytest.mark.slow
def test_the_committed_chinese_edition_is_what_the_generator_makes(tmp_path):
    course = tmp_path / "zh"  # the edition's config loads the course's, one folder up
    course.mkdir()
    (course / "nbgrader_config.py").write_text((ROOT / "zh" / "nbgrader_config.py").read_text())
    (tmp_path / "nbgrader_config.py").write_text((ROOT / "nbgrader_config.py").read_text())
    edition.write_edition("zh", course)
    for lesson in LESSONS:
        for folder in ("solutions", "notebooks"):
            fresh = nbformat.read(course / folder / lesson / f"{lesson}.ipynb", as_version=4)
            committed = nbformat.read(ROOT / "zh" / folder / lesson / f"{lesson}.ipynb", as_version=4)
            assert [(c.cell_type, c.source, c.metadata) for c in committed.cells] == \
                   [(c.cell_type, c.source, c.metadata) for c in fresh.cells], f"zh/{folder}/{lesson}: run tools/edition.py"


@pytest.mark.slow
def test_a_chinese_notebook_is_graded_against_the_chinese_source_and_greets_in_chinese(tmp_path, capsys):
    from tfcourse.course.grade import main

    lesson = "01_tokenization" if "01_tokenization" in LESSONS else LESSONS[-1]
    english_solution = nbformat.read(ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in english_solution.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    learner = nbformat.read(ROOT / "zh" / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    for cell in learner.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = answers[cell.metadata["nbgrader"]["grade_id"]]  # (its markers are comments)
    folder = tmp_path / "notebooks" / lesson
    folder.mkdir(parents=True)
    nbformat.write(learner, folder / f"{lesson}.ipynb")
    assert main([str(folder / f"{lesson}.ipynb"), "--course", str(ROOT), "--report-dir", str(tmp_path / "grades")]) == 0
    out = capsys.readouterr().out
    points = [line for line in out.splitlines() if line.startswith(f"{lesson}:")]
    assert points and points[0].split(":")[1].split("/")[0].strip() == points[0].split("/")[1].split()[0], out
    report = next((tmp_path / "grades").glob("*.html")).read_text(encoding="utf-8")
    assert "随机种子" in report  # the setup cell's status line, in the learner's language


@pytest.mark.parametrize("lesson", LESSONS)
def test_each_chinese_lesson_runs_its_code_up_to_its_setup_cell_and_greets_in_chinese(lesson, capsys):
    """The only code a Chinese lesson does not share with the English one is its setup cell: run the
    lesson's cells up to it (its imports and setup) and read its status line."""
    from tfcourse.course import lesson as lesson_module

    chinese = nbformat.read(ROOT / "zh" / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    code = [c.source for c in chinese.cells if c.cell_type == "code"]
    upto = next(i for i, source in enumerate(code) if 'language="zh"' in source)
    namespace: dict = {}
    try:
        for source in code[: upto + 1]:
            exec(compile(source, f"<{lesson}>", "exec"), namespace)
        assert lesson_module.lesson_language() == "zh"
    finally:
        lesson_module._lesson_language[0] = "en"  # this process goes on with other tests
    out = capsys.readouterr().out
    assert "随机种子" in out and "· seed" not in out
