"""A small SVG writer for the lessons' drawn figures: boxes, arrows, text and grids, written as
plain SVG text.

Why not matplotlib: its SVG output changes with its version (and with the fonts installed), so a
test could not hold the committed files equal to what the code draws. This writer's output depends
on nothing but its input: the same drawing gives the same bytes on every machine.

Coordinates are in pixels, x to the right and y downwards (SVG's own convention).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from xml.sax.saxutils import escape

# The course's palette: one colour per stage of the pipeline, used by every figure.
COLOURS = {
    "tokens": "#e8eef7",      # text, tokens and ids
    "embedding": "#fde9c8",   # token embedding and positional encoding
    "attention": "#f9d5d3",   # every kind of attention
    "ffn": "#d7ecd9",         # the feed-forward network
    "norm": "#ede3f5",        # residual + LayerNorm
    "output": "#dcebf0",      # linear + softmax
    "training": "#f1ead8",    # loss and optimizer
    "plain": "#ffffff",
    "muted": "#f2f2f2",
}
INK = "#222222"         # outlines and text
MUTED_INK = "#8a8a8a"   # what a figure shows but does not stress
HIGHLIGHT = "#c0392b"   # the one thing a figure points at (this lesson's stage, a new entry)
# One arrowhead per ink (an SVG marker has one colour).
ARROWHEADS = {INK: "arrow", MUTED_INK: "arrow-muted", HIGHLIGHT: "arrow-highlight"}
FONT = "'Noto Sans', 'Noto Sans CJK SC', 'DejaVu Sans', Arial, sans-serif"


def _number(value: float) -> str:
    """Coordinates with at most two decimals and no trailing zeros: short, stable text."""
    text = f"{value:.2f}".rstrip("0").rstrip(".")
    return "0" if text == "-0" else text


@dataclass
class Drawing:
    """One figure: its size, an accessible title and description, and its elements in order."""

    width: float
    height: float
    title: str
    description: str
    elements: list[str] = field(default_factory=list)

    # ------------------------------------------------------------------------------------------
    # Shapes
    # ------------------------------------------------------------------------------------------

    def box(self, x: float, y: float, w: float, h: float, label: str = "", fill: str = "plain",
            stroke: str = INK, dashed: bool = False, bold: bool = False, size: float = 13,
            rounded: float = 6, width: float = 1.3, ink: str = INK) -> None:
        """A rectangle with its label centred; a label with newlines becomes several lines."""
        dash = ' stroke-dasharray="5 4"' if dashed else ""
        self.elements.append(
            f'<rect x="{_number(x)}" y="{_number(y)}" width="{_number(w)}" height="{_number(h)}" '
            f'rx="{_number(rounded)}" fill="{COLOURS.get(fill, fill)}" stroke="{stroke}" '
            f'stroke-width="{_number(width)}"{dash}/>')
        if label:
            self.text(x + w / 2, y + h / 2, label, size=size, bold=bold, ink=ink)

    def text(self, x: float, y: float, label: str, size: float = 13, anchor: str = "middle",
             bold: bool = False, italic: bool = False, ink: str = INK) -> None:
        """Text centred vertically on y; each line of a multi-line label one line-height apart."""
        lines = label.split("\n")
        top = y - (len(lines) - 1) * size * 0.6
        weight = ' font-weight="bold"' if bold else ""
        style = ' font-style="italic"' if italic else ""
        for k, line in enumerate(lines):
            self.elements.append(
                f'<text x="{_number(x)}" y="{_number(top + k * size * 1.2)}" font-size="{_number(size)}" '
                f'text-anchor="{anchor}" dominant-baseline="central" fill="{ink}"{weight}{style}>'
                f'{escape(line)}</text>')

    def line(self, points: list[tuple[float, float]], arrow: bool = True, dashed: bool = False,
             ink: str = INK, width: float = 1.4) -> None:
        """A polyline through `points`, with an arrowhead at its end unless arrow=False."""
        path = " ".join(f"{_number(x)},{_number(y)}" for x, y in points)
        dash = ' stroke-dasharray="5 4"' if dashed else ""
        head = f' marker-end="url(#{ARROWHEADS.get(ink, "arrow")})"' if arrow else ""
        self.elements.append(f'<polyline points="{path}" fill="none" stroke="{ink}" '
                             f'stroke-width="{_number(width)}"{dash}{head}/>')

    def arrow(self, x1: float, y1: float, x2: float, y2: float, **style) -> None:
        """A straight arrow from (x1, y1) to (x2, y2)."""
        self.line([(x1, y1), (x2, y2)], **style)

    def circle(self, x: float, y: float, r: float, label: str = "", fill: str = "plain",
               size: float = 15) -> None:
        """A circle with a centred label (e.g. ⊕ for an addition)."""
        self.elements.append(f'<circle cx="{_number(x)}" cy="{_number(y)}" r="{_number(r)}" '
                             f'fill="{COLOURS.get(fill, fill)}" stroke="{INK}" stroke-width="1.3"/>')
        if label:
            self.text(x, y, label, size=size)

    def grid(self, x: float, y: float, cell: float, values: list[list[str]],
             labels: list[list[str]] | None = None, size: float = 11) -> None:
        """A table of cells, each filled with the colour given (a palette name or #rrggbb);
        labels, when given, are written in the cells."""
        for i, row in enumerate(values):
            for j, colour in enumerate(row):
                label = labels[i][j] if labels else ""
                self.box(x + j * cell, y + i * cell, cell, cell, label, fill=colour, rounded=0,
                         width=0.8, size=size)

    # ------------------------------------------------------------------------------------------
    # Output
    # ------------------------------------------------------------------------------------------

    def svg(self) -> str:
        """The whole figure as SVG text: the same drawing always gives the same text."""
        head = (f'<svg xmlns="http://www.w3.org/2000/svg" width="{_number(self.width)}" '
                f'height="{_number(self.height)}" viewBox="0 0 {_number(self.width)} {_number(self.height)}" '
                f'role="img" aria-labelledby="title desc" font-family="{FONT}">')
        marker = "<defs>" + "".join(
            f'<marker id="{name}" viewBox="0 0 10 10" refX="9" refY="5" markerWidth="7" markerHeight="7" '
            f'orient="auto-start-reverse"><path d="M0,0 L10,5 L0,10 z" fill="{ink}"/></marker>'
            for ink, name in ARROWHEADS.items()) + "</defs>"
        background = '<rect width="100%" height="100%" fill="#ffffff"/>'
        return "\n".join([head, f'<title id="title">{escape(self.title)}</title>',
                          f'<desc id="desc">{escape(self.description)}</desc>', marker, background,
                          *self.elements, "</svg>"]) + "\n"
