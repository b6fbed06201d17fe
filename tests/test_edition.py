"""The Chinese edition, from one source (tools/edition.py): every translated lesson has a current
translation of each markdown cell, its code is the English lesson's but for the setup cell, the committed
zh/ folders are what the generator makes, and a Chinese notebook is graded against zh/solutions."""

from __future__ import annotations

import csv
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import nbformat
import pytest

from tfcourse.course import cjk_font
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
def test_every_lesson_uses_the_glossarys_terms(lesson):
    assert edition.glossary_problems(lesson, "zh") == [], "use the terms of translations/zh/glossary.json"


def test_the_glossary_check_names_a_missing_term_and_an_avoided_form_and_ignores_code():
    terms = edition.glossary("zh")
    english = "Each token gets a `mask`; $\\text{token}$ the weight tying of ``` token ```."
    found = edition.term_problems(english, "每个位置都有一个 `mask`，即权重共享。", terms)
    assert found == ["uses 'weight tying' but not '权重绑定'", "uses 'token' but not '词元'"]
    longer = edition.term_problems("Rotary position embeddings (RoPE) rotate.", "旋转位置编码（RoPE）", terms)
    assert longer == []  # the longer term hides the "embedding" inside it
    made_up = [{"en": "warm-up", "zh": "预热", "avoid": ["热身"]}]
    assert edition.term_problems("A warmup of 100 steps.", "100 步的热身。", made_up) == [
        "uses 'warm-up' but not '预热'", "says '热身' where the glossary has '预热' (warm-up)"]


def test_the_glossary_fixes_one_chinese_term_per_english_term():
    terms = edition.glossary("zh")
    english = [term["en"].lower() for term in terms]
    assert len(english) == len(set(english)), "a term is in the glossary twice"
    assert all(term["zh"] and any("\u4e00" <= ch <= "\u9fff" for ch in term["zh"] + "".join(term.get("also", [])))
               or term["zh"].isascii() for term in terms)


def test_the_chinese_readme_is_current_and_linked_from_the_english_one():
    assert edition.readme_problems("zh") == [], "update translations/zh/README.json"
    assert (ROOT / "README.zh.md").read_text(encoding="utf-8") == edition.translated_readme("zh"), \
        "run python tools/edition.py"
    assert "(README.zh.md)" in (ROOT / "README.md").read_text(encoding="utf-8").split("\n## ")[0]
    chinese = (ROOT / "README.zh.md").read_text(encoding="utf-8")
    assert "(README.md)" in chinese.split("\n## ")[0]
    for command in ("make lab", "make test"):  # the same two commands
        assert command in chinese


def test_a_readme_section_changed_in_english_is_stale(tmp_path, monkeypatch):
    sections = edition.readme_sections((ROOT / "README.md").read_text(encoding="utf-8"))
    assert list(sections)[:2] == ["top", "quick-start"] and "".join(sections.values()) == \
        (ROOT / "README.md").read_text(encoding="utf-8")
    fake = tmp_path / "README.md"
    fake.write_text((ROOT / "README.md").read_text(encoding="utf-8").replace("## Quick start\n", "## Quick start\n\nNew.\n", 1))
    monkeypatch.setattr(edition, "ROOT", tmp_path)
    (tmp_path / "translations").mkdir()
    shutil.copytree(ROOT / "translations" / "zh", tmp_path / "translations" / "zh")
    assert edition.readme_problems("zh") == ["README: the zh translation of section 'quick-start' is stale (its English changed)"]


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


def _nbgrader(course: Path, *args: str) -> None:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    result = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"


@pytest.mark.slow
def test_a_chinese_class_runs_on_plain_nbgrader(tmp_path):
    """generate → release → autograde → feedback → export, run from zh/ as the README says, on a lesson with
    few exercises, for a learner who answers as the solutions do. (Fetch, submit and collect go through the
    same exchange as the English class's: tests/test_instructor.py walks them.)"""
    lesson = "07_decoding"
    course = tmp_path / "course"
    zh = course / "zh"
    zh.mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copy(ROOT / "zh" / "nbgrader_config.py", zh)
    shutil.copytree(ROOT / "zh" / "solutions" / lesson, zh / "solutions" / lesson)
    _nbgrader(zh, "generate_assignment", lesson, "--force")
    _nbgrader(zh, "release_assignment", lesson, "--force")
    assert (course / "exchange" / "tfcourse-zh" / "outbound" / lesson).is_dir()  # apart from the English class's
    learner = nbformat.read(zh / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    assert learner.metadata["tfcourse"]["language"] == "zh"
    solution = nbformat.read(ROOT / "zh" / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    answers = {c.metadata["nbgrader"]["grade_id"]: c.source for c in solution.cells
               if c.metadata.get("nbgrader", {}).get("solution")}
    for cell in learner.cells:
        if cell.metadata.get("nbgrader", {}).get("solution"):
            cell.source = answers[cell.metadata["nbgrader"]["grade_id"]]
    (zh / "submitted" / "wang" / lesson).mkdir(parents=True)
    nbformat.write(learner, zh / "submitted" / "wang" / lesson / f"{lesson}.ipynb")
    _nbgrader(zh, "autograde", lesson, "--create")
    _nbgrader(zh, "generate_feedback", lesson)
    report = (zh / "feedback" / "wang" / lesson / f"{lesson}.html").read_text(encoding="utf-8")
    assert "第 07 课" in report and "随机种子" in report  # the lesson's text and its status line, in Chinese
    assert f'font-family: "{cjk_font.FAMILY}"' in report and "base64," in report  # and the font to show them
    _nbgrader(zh, "export")
    (row,) = csv.DictReader((zh / "grades.csv").open())
    assert row["student_id"] == "wang" and float(row["score"]) == float(row["max_score"]) > 0
