"""The feedback report carries its Chinese font: a subset of the bundled Noto Sans CJK SC holding the
characters the report uses, embedded in the HTML, so that it reads where no Chinese font is installed.
(tests/test_browser.py shows such a report in a browser that has no Chinese font.)"""

from __future__ import annotations

import base64
import io
import re
from html.parser import HTMLParser
from pathlib import Path

import nbformat
import pytest

from tfcourse.course import cjk_font
from tfcourse.course.autograde import feedback_exporter

ROOT = Path(__file__).resolve().parents[1]
LESSON = "07_decoding"
FONT_FACE = re.compile(r"@font-face\s*\{[^}]*\}")
DATA_URL = re.compile(r"url\(data:font/(woff2?|otf);base64,([A-Za-z0-9+/=]+)\)")

pytestmark = pytest.mark.skipif(cjk_font.bundled_font() is None, reason="mplfonts (the course extra) is not installed")


def feedback_report(notebook) -> str:
    """The HTML `nbgrader generate_feedback` writes for `notebook`, through the course's exporter and
    nbgrader's feedback template (the paths GenerateFeedback gives the exporter)."""
    import nbgrader

    formgrader = Path(nbgrader.__file__).parent / "server_extensions" / "formgrader"
    exporter = feedback_exporter()(template_name="feedback", extra_template_basedirs=[str(formgrader / "templates")],
                                   extra_template_paths=[str(formgrader / "static" / "node_modules" / "bootstrap"
                                                             / "dist" / "css")])
    grades = {"notebook": LESSON, "score": 7.0, "max_score": 9.0, "late_penalty": 0}
    html, _ = exporter.from_notebook_node(notebook, {"nbgrader": grades})
    return html


def chinese_lesson():
    """The Chinese lesson's start, up to its first test cell, as autograding leaves it: the graded
    cells with their scores (full marks). (The whole lesson's report takes longer, for no more cover.)"""
    notebook = nbformat.read(ROOT / "zh" / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    graded = [i for i, cell in enumerate(notebook.cells) if cell.metadata.get("nbgrader", {}).get("grade")]
    notebook.cells = notebook.cells[:graded[0] + 1]
    for cell in notebook.cells:
        grading = cell.metadata.get("nbgrader", {})
        if grading.get("grade") or grading.get("task"):
            grading["score"] = grading.get("points", 0)
    return notebook


@pytest.fixture(scope="module")
def chinese_report() -> str:
    return feedback_report(chinese_lesson())


class _Text(HTMLParser):
    """The text a browser shows: what is outside tags, scripts and styles."""

    def __init__(self):
        super().__init__()
        self.parts, self._hidden = [], 0

    def handle_starttag(self, tag, attrs):
        self._hidden += tag in ("script", "style")

    def handle_endtag(self, tag):
        self._hidden -= tag in ("script", "style")

    def handle_data(self, data):
        if not self._hidden:
            self.parts.append(data)


def shown_text(html: str) -> str:
    parser = _Text()
    parser.feed(html)
    return "".join(parser.parts)


def embedded_font(html: str):
    """The report's one @font-face (for the course's family) and the font its data URL holds."""
    from fontTools.ttLib import TTFont

    (face,) = [face for face in FONT_FACE.findall(html) if cjk_font.FAMILY in face]
    (flavor, data), = DATA_URL.findall(face)
    return face, flavor, TTFont(io.BytesIO(base64.b64decode(data)))


def test_a_chinese_report_embeds_the_characters_it_shows(chinese_report):
    face, flavor, font = embedded_font(chinese_report)
    shown = cjk_font.cjk_characters(shown_text(chinese_report))
    assert len(shown) > 100  # a lesson's text, and the report's own words in Chinese (得分, 测试单元格)
    assert "得分" in shown_text(chinese_report)  # the template's own words, translated after the export
    cmap = font.getBestCmap()
    missing = [c for c in cjk_font.cjk_characters(chinese_report) if ord(c) not in cmap]
    assert not missing, f"the embedded font lacks {''.join(missing)}"
    assert all(cjk_font.is_cjk(chr(code)) for code in cmap), "the subset holds more than the page's CJK"
    assert flavor == ("woff2" if cjk_font.woff2_available() else "woff") and font.flavor == flavor
    names = font["name"]
    assert "Open Font License" in names.getDebugName(13) and names.getDebugName(1).startswith("Noto Sans CJK SC")
    size = len(DATA_URL.search(face).group(2))
    print(f"{len(cmap)} characters, {flavor}, {size / 1024:.0f} KiB in base64")  # (with -s)
    assert size < 400 * 1024, f"the embedded font is {size / 1024:.0f} KiB"


def test_the_reports_font_stacks_get_the_family(chinese_report):
    """Every font stack of the report's stylesheets (bootstrap's body and code ones among them) gets
    the course's family in front, for CJK characters only (unicode-range): Latin text keeps its fonts."""
    style = chinese_report[chinese_report.index(f'font-family: "{cjk_font.FAMILY}"'):]
    style = style[:style.index("</style>")]
    family = f'"{cjk_font.FAMILY}"'
    assert f'body {{ font-family: {family}, "Helvetica Neue",Helvetica,Arial,sans-serif; }}' in style
    assert f'code,kbd,pre,samp {{ font-family: {family}, Menlo,Monaco,Consolas,"Courier New",monospace; }}' in style
    assert chinese_report.index(style) > chinese_report.index("bootstrap")  # after them: the copies win
    assert chinese_report.index(style) < chinese_report.index("</head>")


def test_a_report_without_chinese_is_left_as_it_was():
    notebook = chinese_lesson()
    notebook.cells = [nbformat.v4.new_markdown_cell("# Decoding\nGreedy, then top-k.")]
    notebook.metadata["tfcourse"] = {"language": "en"}
    html = feedback_report(notebook)
    assert cjk_font.FAMILY not in html
    assert cjk_font.with_embedded_font(html) == html


def test_font_stacks_are_copied_from_top_level_rules_only():
    css = """/* a comment { font-family: x } */
    body { color: red; font-family: Arial, sans-serif }
    pre{font-family:monospace !important}
    .a { font-family: inherit; --jp-code-font-family: mono; }
    @media print { body { font-family: serif } }
    @font-face { font-family: "Other"; src: url(x.woff) }"""
    family = f'"{cjk_font.FAMILY}"'
    assert cjk_font.font_stack_rules(css).splitlines() == [
        f"body {{ font-family: {family}, Arial, sans-serif; }}",
        f"pre {{ font-family: {family}, monospace !important; }}",
    ]


def test_a_page_without_a_head_is_refused():
    with pytest.raises(ValueError, match="</head>"):
        cjk_font.with_embedded_font("<p>今天天气真好</p>")


def test_a_cut_font_is_kept_for_the_next_report_with_the_same_characters(tmp_path, monkeypatch):
    path = cjk_font.bundled_font()
    assert path is not None, "the course's font (mplfonts) is part of the course extra"
    monkeypatch.setenv("TFCOURSE_CACHE_DIR", str(tmp_path / "cache"))
    first = cjk_font.cached_subset("今天天气真好", path)

    def characters(cut: tuple[bytes, str]) -> set[str]:  # (the bytes hold the time the font was cut)
        from fontTools.ttLib import TTFont

        return {chr(code) for code in TTFont(io.BytesIO(cut[0])).getBestCmap()}

    assert characters(first) == set("今天气真好") and first[1] == cjk_font.subset_font("好", path)[1]

    def refuse(*args):
        raise AssertionError("cut again although the cache has it")

    monkeypatch.setattr(cjk_font, "subset_font", refuse)
    assert cjk_font.cached_subset("今天天气真好", path) == first  # the very bytes kept
    with pytest.raises(AssertionError, match="cut again"):  # other characters: another font
        cjk_font.cached_subset("得分", path)
    monkeypatch.undo()
    blocked = tmp_path / "not-a-folder"
    blocked.write_text("")  # the cache cannot be made here: the font is cut each time, nothing fails
    monkeypatch.setenv("TFCOURSE_CACHE_DIR", str(blocked))
    assert characters(cjk_font.cached_subset("今天天气真好", path)) == characters(first)
