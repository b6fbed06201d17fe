"""The lessons' drawn figures: committed files equal what the code draws, every lesson shows its
map, every figure is shown where it is filed, with its alt text."""

from __future__ import annotations

import re
import xml.etree.ElementTree as ET
from pathlib import Path

import nbformat
import pytest

from tfcourse.course.figures import figures, lesson_files
from tfcourse.course.figures.maps import LESSON_STAGES, lesson_map
from tfcourse.course.figures.svg import Drawing, _number

ROOT = Path(__file__).resolve().parents[1]
LESSONS = sorted(p.name for p in (ROOT / "solutions").iterdir() if p.is_dir() and p.name[:2].isdigit())
IMAGE = re.compile(r"!\[([^\]]*)\]\((figures/[^)\s]+)\)")
SVG = "{http://www.w3.org/2000/svg}"


def _images(folder: str, lesson: str) -> list[tuple[int, str, str]]:
    """(cell index, alt text, path) of every image a lesson's Markdown shows."""
    nb = nbformat.read(ROOT / folder / lesson / f"{lesson}.ipynb", as_version=4)
    return [(i, alt, path) for i, cell in enumerate(nb.cells) if cell.cell_type == "markdown"
            for alt, path in IMAGE.findall(cell.source)]


@pytest.mark.parametrize("folder", ["solutions", "notebooks"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_committed_figures_are_what_the_code_draws(folder, lesson):
    wanted = lesson_files(lesson)
    on_disk = {p.name: p.read_text(encoding="utf-8") for p in (ROOT / folder / lesson / "figures").glob("*.svg")}
    assert sorted(on_disk) == sorted(wanted), f"{folder}/{lesson}/figures: run `python tools/figures.py`"
    for name, text in wanted.items():
        assert on_disk[name] == text, f"{folder}/{lesson}/figures/{name} is stale: run `python tools/figures.py`"


@pytest.mark.parametrize("folder", ["solutions", "notebooks"])
@pytest.mark.parametrize("lesson", LESSONS)
def test_each_lesson_shows_its_map_first_and_every_figure_it_holds(folder, lesson):
    images = _images(folder, lesson)
    assert images and images[0][2] == "figures/map.svg" and images[0][0] <= 3, (
        f"{lesson} should open with its map (figures/map.svg) in its first cells")
    shown = {path.removeprefix("figures/") for _, _, path in images}
    assert shown == set(lesson_files(lesson)), f"{lesson}: figures filed but not shown, or shown but not filed"
    descriptions = {f"{figure.name}.svg": figure.alt for figure in figures() if lesson in figure.lessons}
    for _, alt, path in images:
        assert alt == descriptions[path.removeprefix("figures/")], (
            f"{lesson}: the alt text of {path} should be the figure's description (its <desc>)")


def test_every_lesson_has_a_map_that_highlights_its_stage():
    assert sorted(LESSON_STAGES) == LESSONS
    for lesson, stage in LESSON_STAGES.items():
        svg = lesson_map(lesson).svg()
        if stage is None:
            assert "lesson 01" in svg and "stroke-width=\"3\"" not in svg
        else:
            assert svg.count('stroke-width="3"') == 1, f"{lesson}: exactly one stage is highlighted"
    with pytest.raises(ValueError, match="lesson must be one of"):
        lesson_map("99_nothing")


@pytest.mark.parametrize("figure", figures(), ids=lambda f: f"{f.lessons[0]}-{f.name}")
def test_every_figure_is_well_formed_accessible_and_drawn_the_same_twice(figure):
    text = figure.draw().svg()
    assert text == figure.draw().svg(), "drawing twice gave different SVG"
    root = ET.fromstring(text)
    assert root.tag == f"{SVG}svg" and root.get("role") == "img"
    title, desc = root.find(f"{SVG}title"), root.find(f"{SVG}desc")
    assert title is not None and title.text and desc is not None and len(desc.text) > 30
    assert float(root.get("width")) <= 900, "wider than a notebook's text column"
    assert figure.lessons and all(lesson in LESSONS for lesson in figure.lessons)


def test_the_writer_escapes_text_and_writes_short_stable_numbers():
    drawing = Drawing(100, 50, "a < b", "x & y")
    drawing.box(0.5, 1.0, 10.125, 20, "q < k & v")
    text = drawing.svg()
    assert "q &lt; k &amp; v" in text and "<title id=\"title\">a &lt; b</title>" in text
    assert 'x="0.5" y="1" width="10.13"' in text or 'x="0.5" y="1" width="10.12"' in text
    assert [_number(v) for v in (3.0, -0.0, 2.50, 1 / 3)] == ["3", "0", "2.5", "0.33"]
    ET.fromstring(text)
