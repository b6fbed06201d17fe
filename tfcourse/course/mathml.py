"""Formulas that read offline: the LaTeX of a Markdown cell turned into MathML.

nbgrader's HTML feedback loads MathJax from a CDN; without a network every formula stays raw
LaTeX. Every current browser draws MathML itself, so the report's formulas are written as
MathML before the Markdown becomes HTML. Code (fenced blocks and `inline code`) is left alone;
a formula the converter cannot read stays as it was, in a code span, so nothing is lost.
"""

from __future__ import annotations

import re

# Fenced code blocks and inline code spans: the dollar signs inside them are code, not math.
CODE = re.compile(r"(```.*?```|~~~.*?~~~|`[^`\n]*`)", re.DOTALL)
# $$display$$ first, then $inline$ (not \$, not "$ 5", and no $ inside).
MATH = re.compile(r"\$\$(?P<display>.+?)\$\$|(?<![\\$])\$(?P<inline>[^\s$](?:[^$\n]*?[^\s\\$])?)\$(?!\$)",
                  re.DOTALL)


def latex_to_mathml(latex: str, display: bool) -> str:
    """One formula as a single line of MathML (``display`` for a centred block)."""
    from latex2mathml.converter import convert

    mathml = convert(latex.strip(), display="block" if display else "inline")
    return mathml.replace("\n", "")


def _formula(match: re.Match) -> str:
    display = match.group("display") is not None
    latex = match.group("display") if display else match.group("inline")
    try:
        mathml = latex_to_mathml(latex, display)
    except Exception:  # the converter does not know every macro: keep the LaTeX, readable as code
        return f"`{match.group(0)}`"
    return f"\n\n{mathml}\n\n" if display else mathml


def markdown_with_mathml(markdown: str) -> str:
    """``markdown`` with each $…$ / $$…$$ formula outside code replaced by MathML."""
    pieces = CODE.split(markdown)
    # split() with one group: even indices are prose, odd ones the code it found.
    return "".join(piece if index % 2 else MATH.sub(_formula, piece) for index, piece in enumerate(pieces))
