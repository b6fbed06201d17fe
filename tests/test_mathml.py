"""Formulas readable offline: the grading report's LaTeX becomes MathML (tfcourse.course.mathml)."""

from __future__ import annotations

import json
from pathlib import Path

import nbformat
import pytest

from tfcourse.course.autograde import MathForOfflineReading, NoComments, feedback_preprocessors
from tfcourse.course.mathml import CODE, MATH, latex_to_mathml, markdown_with_mathml

ROOT = Path(__file__).resolve().parents[1]


def test_inline_and_display_formulas_become_mathml():
    text = markdown_with_mathml("Scale by $\\sqrt{d_k}$:\n$$\\frac{QK^\\top}{\\sqrt{d_k}}$$\nDone.")
    assert "$" not in text
    assert text.count("<math") == 2 and 'display="inline"' in text and 'display="block"' in text
    assert "<msqrt>" in text and "<mfrac>" in text


@pytest.mark.parametrize("markdown", [
    "`$x$` is code", "```python\ncost = '$5' + '$6'\n```", "it costs \\$5 and \\$6", "a $ 5 $ sign", "no math here",
])
def test_code_escaped_dollars_and_plain_text_stay_as_they_are(markdown):
    assert markdown_with_mathml(markdown) == markdown


def test_a_formula_the_converter_cannot_read_stays_as_latex_in_code():
    assert markdown_with_mathml("see $\\begin{nosuchenv}x$ here") == "see `$\\begin{nosuchenv}x$` here"


def _formulas_in_the_lessons() -> list[tuple[str, bool]]:
    found = []
    for path in sorted(ROOT.glob("solutions/*/*.ipynb")):
        for cell in json.loads(path.read_text(encoding="utf-8"))["cells"]:
            if cell["cell_type"] == "markdown":
                prose = CODE.split("".join(cell["source"]))[::2]
                found += [(m.group("display") or m.group("inline"), m.group("display") is not None)
                          for piece in prose for m in MATH.finditer(piece)]
    return found


def test_every_formula_of_every_lesson_converts():
    formulas = _formulas_in_the_lessons()
    assert len(formulas) > 500  # the scan found the lessons' formulas
    failed = []
    for latex, display in formulas:
        try:
            latex_to_mathml(latex, display)
        except Exception as error:  # noqa: BLE001 - collect them all, then report
            failed.append(f"{latex[:60]!r}: {error}")
    assert not failed, f"{len(failed)} formulas do not convert:\n" + "\n".join(failed[:10])


def test_the_feedback_steps_convert_markdown_and_self_grading_drops_comments():
    assert feedback_preprocessors()[-1] is MathForOfflineReading
    text = nbformat.v4.new_markdown_cell("$x^2$")
    code = nbformat.v4.new_code_cell("y = '$x$'")
    code.metadata["nbgrader"] = {"solution": True, "grade_id": "x", "comment": "No response."}
    nb = nbformat.v4.new_notebook(cells=[text, code])
    nb, _ = MathForOfflineReading().preprocess(nb, {})
    assert nb.cells[0].source.startswith("<math") and nb.cells[1].source == "y = '$x$'"
    nb, _ = NoComments().preprocess(nb, {})
    assert "comment" not in nb.cells[1].metadata["nbgrader"]
