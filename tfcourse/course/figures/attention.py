"""Figures of the attention lessons: the input X = embedding + position, why attention is parallel
where an RNN is not, multi-head attention, the three families' attention masks and the KV cache."""

from __future__ import annotations

from xml.sax.saxutils import escape

from .svg import ARROWHEADS, HIGHLIGHT, INK, MUTED_INK, Drawing, _number

MINUS = "\u2212"  # a real minus sign: a hyphen looks too short beside the digits


# ----------------------------------------------------------------------------------------------
# Private helpers: primitives svg.py lacks, written in its style
# ----------------------------------------------------------------------------------------------

def _vertical_text(drawing: Drawing, x: float, y: float, label: str, size: float = 12,
                   ink: str = MUTED_INK) -> None:
    """Text turned a quarter turn anticlockwise, centred on (x, y): a vertical axis's label."""
    drawing.elements.append(
        f'<text x="{_number(x)}" y="{_number(y)}" font-size="{_number(size)}" text-anchor="middle" '
        f'dominant-baseline="central" fill="{ink}" transform="rotate(-90 {_number(x)} {_number(y)})">'
        f'{escape(label)}</text>')


def _outline(drawing: Drawing, x: float, y: float, w: float, h: float, ink: str = HIGHLIGHT,
             width: float = 2.6) -> None:
    """An unfilled rectangle drawn over what is already there: it points at cells, hides nothing."""
    drawing.box(x, y, w, h, fill="none", stroke=ink, width=width, rounded=3)


def _arc(drawing: Drawing, x1: float, y1: float, x2: float, y2: float, lift: float, ink: str) -> None:
    """A curve from (x1, y1) up and over to (x2, y2), with an arrowhead where it lands."""
    top = min(y1, y2) - lift
    path = (f"M{_number(x1)},{_number(y1)} C{_number(x1)},{_number(top)} "
            f"{_number(x2)},{_number(top)} {_number(x2)},{_number(y2 - 1)}")
    marker = ARROWHEADS.get(ink, "arrow")
    drawing.elements.append(f'<path d="{path}" fill="none" stroke="{ink}" stroke-width="1.2" '
                            f'marker-end="url(#{marker})"/>')


def _signed(tenths: int) -> str:
    """A value held in tenths (exact sums, no float rounding) as text: -2 -> '−0.2'."""
    sign = MINUS if tenths < 0 else ""
    return f"{sign}{abs(tenths) // 10}.{abs(tenths) % 10}"


# ----------------------------------------------------------------------------------------------
# 1. X = Embedding(token) + PE(pos)
# ----------------------------------------------------------------------------------------------

SENTENCE = "今天天气真好"
TOKEN_POSITION = 2          # the second 天, counting from 0 as the code does
# Six of d_model dimensions, in tenths so that the sums are exact. Dimension 3 (index 2) is the
# one the figure points at: 0.8 + (−0.2) = 0.6.
EMBEDDING_TENTHS = (3, -5, 8, 1, -7, 4)
PE_TENTHS = (9, -4, -2, 5, 0, 10)
HIGHLIGHT_DIM = 2
CELL_W, CELL_H = 58, 34


def _sentence_row(drawing: Drawing, left: float, top: float) -> None:
    """今天天气真好 as one box per character, its position under it, the chosen token in bold."""
    for pos, char in enumerate(SENTENCE):
        chosen = pos == TOKEN_POSITION
        x = left + pos * 34
        drawing.box(x, top, 30, 30, char, fill="tokens", bold=chosen, size=15,
                    width=2.4 if chosen else 1, stroke=INK if chosen else MUTED_INK)
        drawing.text(x + 15, top + 42, str(pos), size=11, ink=INK if chosen else MUTED_INK,
                     bold=chosen)
    drawing.text(left + len(SENTENCE) * 34 + 10, top + 15,
                 f"the token 天 at position {TOKEN_POSITION} of {SENTENCE} (positions count from 0)",
                 size=12.5, anchor="start")


def _vector_row(drawing: Drawing, left: float, top: float, tenths: tuple[int, ...], name: str,
                sign: str, meaning: str) -> None:
    """One vector as a row of cells: its name and operator on the left, what it holds on the right."""
    drawing.text(left - 40, top + CELL_H / 2, name, size=13, anchor="end", bold=name == "X")
    drawing.text(left - 18, top + CELL_H / 2, sign, size=16)
    for dim, value in enumerate(tenths):
        drawing.box(left + dim * CELL_W, top, CELL_W, CELL_H, _signed(value), fill="embedding",
                    rounded=0, width=0.9, size=13, bold=name == "X")
    drawing.text(left + len(tenths) * CELL_W + 16, top + CELL_H / 2, meaning, size=12,
                 anchor="start", ink=MUTED_INK)


def embedding_plus_position() -> Drawing:
    """The token's embedding and its position's encoding, six dimensions each, added dimension by
    dimension into X; the third dimension's column is outlined."""
    x_tenths = tuple(e + p for e, p in zip(EMBEDDING_TENTHS, PE_TENTHS))
    dim = HIGHLIGHT_DIM
    equation = (f"{_signed(EMBEDDING_TENTHS[dim])} + ({_signed(PE_TENTHS[dim])}) = "
                f"{_signed(x_tenths[dim])}")
    description = (
        f"The token 天 at position {TOKEN_POSITION} of {SENTENCE}: its embedding vector and the "
        f"positional-encoding vector of position {TOKEN_POSITION}, both of the same length (six "
        f"dimensions shown, counted from 0 like the positions), are added dimension by dimension into "
        f"the input vector X. Dimension {dim}, the third, is highlighted: {equation}.")
    drawing = Drawing(740, 330, "X = Embedding(token) + PE(pos)", description)
    drawing.text(20, 22, "X = Embedding(token) + PE(pos)", size=15, anchor="start", bold=True)
    _sentence_row(drawing, 20, 44)

    left, top = 200, 146
    for dim_index in range(len(EMBEDDING_TENTHS)):
        drawing.text(left + (dim_index + 0.5) * CELL_W, top - 14, f"dim {dim_index}", size=11,
                     ink=HIGHLIGHT if dim_index == dim else MUTED_INK, bold=dim_index == dim)
    rows = [(EMBEDDING_TENTHS, "Embedding(天)", "", "what the token means"),
            (PE_TENTHS, f"PE({TOKEN_POSITION})", "+", "where it sits"),
            (x_tenths, "X", "=", "what every later layer reads")]
    row_tops = [top, top + CELL_H + 10, top + 2 * CELL_H + 30]
    for (tenths, name, sign, meaning), row_top in zip(rows, row_tops):
        _vector_row(drawing, left, row_top, tenths, name, sign, meaning)
    # The rule of a written sum, between the addends and their total.
    rule_y = row_tops[2] - 10
    drawing.line([(left - 28, rule_y), (left + len(x_tenths) * CELL_W, rule_y)], arrow=False,
                 width=1.2)

    column_x = left + dim * CELL_W
    _outline(drawing, column_x - 3, top - 3, CELL_W + 6, row_tops[2] + CELL_H - top + 6)
    drawing.text(column_x + CELL_W / 2, row_tops[2] + CELL_H + 24, f"dimension {dim} (the third): {equation}",
                 size=12.5, ink=HIGHLIGHT, bold=True)
    return drawing


# ----------------------------------------------------------------------------------------------
# 2. An RNN's chain of steps against self-attention's one matrix product
# ----------------------------------------------------------------------------------------------

# Five tokens of "the cat sits on the mat" (the figure's captions count them, so six would also do).
RNN_TOKENS = ("cat", "sits", "on", "the", "mat")
SUBSCRIPTS = "₀₁₂₃₄₅₆₇₈₉"
COLUMN_W, COLUMN_LEFT = 150, 100


def _sub(n: int) -> str:
    """n as subscript digits: h₁, x₂."""
    return "".join(SUBSCRIPTS[int(digit)] for digit in str(n))


def _column_x(k: int) -> float:
    """The centre of token k's column, shared by both halves so that they line up."""
    return COLUMN_LEFT + (k + 0.5) * COLUMN_W


def _time_axis(drawing: Drawing, y: float, ticks: list[tuple[float, float, str]]) -> None:
    """A time axis left to right; each tick is a bracket (from x, to x, label) under the columns."""
    right = _column_x(len(RNN_TOKENS) - 1) + COLUMN_W / 2
    drawing.arrow(COLUMN_LEFT, y, right + 14, y, ink=MUTED_INK, width=1.1)
    drawing.text(right + 20, y, "time", size=11, anchor="start", ink=MUTED_INK)
    for start, end, label in ticks:
        drawing.line([(start, y - 5), (start, y), (end, y), (end, y - 5)], arrow=False, width=1.2)
        drawing.text((start + end) / 2, y + 14, label, size=12)


def _rnn_half(drawing: Drawing, top: float) -> None:
    """The RNN unrolled: h_t = f(h_{t-1}, x_t) per column, each cell fed by the one before it."""
    drawing.text(20, top, "RNN: one step after another", size=14, anchor="start", bold=True)
    drawing.text(20, top + 20, f"{len(RNN_TOKENS)} sequential steps: step t waits for step t {MINUS} 1",
                 size=12.5, anchor="start", ink=MUTED_INK)
    cell_top, cell_w, cell_h = top + 46, 118, 40
    token_top = cell_top + cell_h + 34
    drawing.box(24, cell_top + 8, 40, 24, f"h{_sub(0)}", fill="muted", size=12, stroke=MUTED_INK)
    previous_right = 64
    for k, token in enumerate(RNN_TOKENS):
        t, cx = k + 1, _column_x(k)
        drawing.box(cx - cell_w / 2, cell_top, cell_w, cell_h, f"h{_sub(t)} = f(h{_sub(t - 1)}, x{_sub(t)})",
                    fill="plain", size=12.5)
        drawing.arrow(previous_right + 2, cell_top + cell_h / 2, cx - cell_w / 2 - 2, cell_top + cell_h / 2)
        previous_right = cx + cell_w / 2
        drawing.box(cx - 34, token_top, 68, 26, token, fill="tokens", size=12.5)
        drawing.arrow(cx, token_top - 2, cx, cell_top + cell_h + 2)
        drawing.text(cx + 8, token_top - 16, f"x{_sub(t)}", size=11, anchor="start", ink=MUTED_INK)
    _time_axis(drawing, token_top + 50,
               [(_column_x(k) - 50, _column_x(k) + 50, f"step {k + 1}") for k in range(len(RNN_TOKENS))])


def _attention_half(drawing: Drawing, top: float) -> None:
    """Self-attention: every token enters one matrix product together, every output leaves it."""
    drawing.text(20, top, "Self-attention: all positions together", size=14, anchor="start", bold=True)
    drawing.text(20, top + 20, "every position at once: one matrix product", size=12.5, anchor="start",
                 ink=MUTED_INK)
    out_top, box_top, box_h = top + 44, top + 100, 40
    token_top = box_top + box_h + 34
    left, right = _column_x(0) - 59, _column_x(len(RNN_TOKENS) - 1) + 59
    drawing.box(left, box_top, right - left, box_h, "Q Kᵀ for all positions at once",
                fill="attention", size=13, bold=True)
    for k, token in enumerate(RNN_TOKENS):
        cx = _column_x(k)
        drawing.box(cx - 34, out_top, 68, 26, f"z{_sub(k + 1)}", fill="plain", size=12.5)
        drawing.arrow(cx, box_top - 2, cx, out_top + 28)
        drawing.box(cx - 34, token_top, 68, 26, token, fill="tokens", size=12.5)
        drawing.arrow(cx, token_top - 2, cx, box_top + box_h + 2)
    _time_axis(drawing, token_top + 50, [(left, right, "1 step")])


def rnn_vs_parallel() -> Drawing:
    """Top: an RNN over five tokens, each hidden state waiting for the one before; bottom:
    self-attention over the same tokens, all positions in one matrix product."""
    n = len(RNN_TOKENS)
    description = (
        f"Top: an RNN unrolled over the {n} tokens {' '.join(RNN_TOKENS)}; each hidden state "
        f"h_t = f(h_(t-1), x_t) needs the previous one, so the work takes {n} sequential steps. "
        f"Bottom: self-attention over the same tokens, where all {n} positions go into one matrix "
        f"product Q K^T together and come out together, in 1 step.")
    drawing = Drawing(900, 546, "RNN steps against one attention step", description)
    _rnn_half(drawing, 20)
    drawing.line([(20, 252), (880, 252)], arrow=False, ink="#d0d0d0", width=1)
    _attention_half(drawing, 282)
    return drawing


# ----------------------------------------------------------------------------------------------
# 3. Multi-head attention
# ----------------------------------------------------------------------------------------------

HEADS_SHOWN = 4
MH_CENTRE = 450
PROJECTIONS = (("W_Q", "Q", MH_CENTRE - 200), ("W_K", "K", MH_CENTRE), ("W_V", "V", MH_CENTRE + 200))
SLICE_W, MATRIX_H = 30, 56
HEAD_W, HEAD_GAP, HEAD_TOP, HEAD_H = 196, 16, 340, 62


def _sliced_matrix(drawing: Drawing, left: float, top: float, slice_w: float, height: float,
                   highlighted: int | None = None) -> None:
    """A T × d_model matrix as HEADS_SHOWN slim columns, one per head, numbered."""
    for k in range(HEADS_SHOWN):
        drawing.box(left + k * slice_w, top, slice_w, height, str(k + 1), fill="attention", rounded=0,
                    width=0.9, size=11, ink=INK if k == highlighted else MUTED_INK)
    if highlighted is not None:
        _outline(drawing, left + highlighted * slice_w, top, slice_w, height, width=2.2)


def _head_x(k: int) -> float:
    """The left edge of head k's box."""
    total = HEADS_SHOWN * HEAD_W + (HEADS_SHOWN - 1) * HEAD_GAP
    return MH_CENTRE - total / 2 + k * (HEAD_W + HEAD_GAP)


def _projections(drawing: Drawing, top: float) -> float:
    """X → W_Q, W_K, W_V → Q, K, V cut into slices; returns the slices' bottom edge."""
    drawing.box(MH_CENTRE - 110, top, 220, 40, "X   (T × d_model)", fill="embedding", size=13)
    w_top, matrix_top = top + 76, top + 146
    for weight, name, cx in PROJECTIONS:
        # One trunk out of X, forking to the three projections.
        drawing.line([(MH_CENTRE, top + 40), (MH_CENTRE, top + 58), (cx, top + 58), (cx, w_top - 2)])
        drawing.box(cx - 55, w_top, 110, 36, weight, fill="attention", size=13, bold=True)
        drawing.arrow(cx, w_top + 36, cx, matrix_top - 2)
        width = HEADS_SHOWN * SLICE_W
        _sliced_matrix(drawing, cx - width / 2, matrix_top, SLICE_W, MATRIX_H, highlighted=0)
        drawing.text(cx - width / 2 - 10, matrix_top + MATRIX_H / 2, name, size=15, anchor="end",
                     bold=True)
    drawing.text(MH_CENTRE + 200 + HEADS_SHOWN * SLICE_W / 2 + 14, matrix_top + MATRIX_H / 2,
                 "each T × d_model,\ncut into slices\nof d_head columns", size=11.5,
                 anchor="start", ink=MUTED_INK)
    drawing.text(20, matrix_top + MATRIX_H + 48, "slice i of Q, K, V\n→ head i", size=11.5,
                 anchor="start", ink=MUTED_INK)
    return matrix_top + MATRIX_H


def _heads(drawing: Drawing, slices_bottom: float) -> None:
    """Slice k of Q, K and V goes to head k; head 1's three lines are the highlighted ones."""
    for k in range(HEADS_SHOWN):
        head_left = _head_x(k)
        for m, (_, _, cx) in enumerate(PROJECTIONS):
            start = cx - HEADS_SHOWN * SLICE_W / 2 + (k + 0.5) * SLICE_W
            end = head_left + HEAD_W / 2 + (m - 1) * 44
            ink = HIGHLIGHT if k == 0 else MUTED_INK
            drawing.arrow(start, slices_bottom + 2, end, HEAD_TOP - 2, ink=ink, width=1.6 if k == 0 else 1)
        drawing.box(head_left, HEAD_TOP, HEAD_W, HEAD_H,
                    f"head {k + 1}\nsoftmax(Q Kᵀ/√d_head) V\n→ T × d_head", fill="attention",
                    size=12.5, stroke=HIGHLIGHT if k == 0 else INK, width=2.2 if k == 0 else 1.3)


def _merge(drawing: Drawing, top: float) -> None:
    """The heads' outputs side by side (concatenate), then W_O back to T × d_model."""
    concat_w = HEADS_SHOWN * 40
    concat_left = 330 - concat_w / 2
    for k in range(HEADS_SHOWN):
        drawing.arrow(_head_x(k) + HEAD_W / 2, HEAD_TOP + HEAD_H + 2, concat_left + (k + 0.5) * 40,
                      top - 2, width=1.6 if k == 0 else 1.2, ink=HIGHLIGHT if k == 0 else INK)
    _sliced_matrix(drawing, concat_left, top, 40, MATRIX_H, highlighted=0)
    drawing.text(concat_left - 12, top + MATRIX_H / 2, "concatenate\n(T × d_model)", size=12.5,
                 anchor="end")
    middle = top + MATRIX_H / 2
    drawing.arrow(concat_left + concat_w + 2, middle, 538, middle)
    drawing.box(540, middle - 18, 90, 36, "W_O", fill="attention", size=13, bold=True)
    drawing.arrow(632, middle, 688, middle)
    drawing.box(690, middle - 22, 180, 44, "output (T × d_model)", fill="plain", size=13)


def multi_head() -> Drawing:
    """X projected by W_Q, W_K, W_V; Q, K, V cut into head slices; scaled dot-product attention per
    head; the heads concatenated and projected by W_O (4 of 8 heads drawn)."""
    description = (
        "Multi-head attention: X (T × d_model) is projected by W_Q, W_K and W_V into Q, K and V, each "
        "cut into slices of d_head columns, one per head; head i computes softmax(Q K^T / √d_head) V "
        "on slice i; the heads' outputs are concatenated back to T × d_model and projected by W_O into "
        "the output (T × d_model). With d_model = 512 and h = 8 heads, d_head = 64; 4 of the 8 heads "
        "are drawn, head 1's path highlighted.")
    drawing = Drawing(900, 550, "Multi-head attention", description)
    drawing.text(20, 22, "Multi-head attention", size=15, anchor="start", bold=True)
    drawing.box(660, 12, 220, 62, "d_model = 512, h = 8 heads\nd_head = d_model / h = 64\n4 of 8 heads shown",
                fill="muted", stroke=MUTED_INK, size=12)
    slices_bottom = _projections(drawing, 20)
    _heads(drawing, slices_bottom)
    _merge(drawing, HEAD_TOP + HEAD_H + 70)
    return drawing


# ----------------------------------------------------------------------------------------------
# 4. The three families' attention masks
# ----------------------------------------------------------------------------------------------

MASK_SIZE, MASK_CELL = 6, 24
MASK_TOP, PANEL_W, PANEL_LEFT = 128, 218, 14


def _mask_cells(causal: bool) -> list[list[str]]:
    """Row = query, column = key: allowed cells in the attention colour, masked ones white."""
    return [["attention" if not causal or key <= query else "plain" for key in range(MASK_SIZE)]
            for query in range(MASK_SIZE)]


def _mask_panel(drawing: Drawing, left: float, title: str, causal: bool, key_axis: str) -> None:
    """One 6 × 6 mask with its title above, position numbers and both axes' labels."""
    grid_left = left + 52
    size = MASK_SIZE * MASK_CELL
    drawing.text(grid_left + size / 2, MASK_TOP - 24, title, size=12)
    drawing.grid(grid_left, MASK_TOP, MASK_CELL, _mask_cells(causal))
    for k in range(MASK_SIZE):
        drawing.text(grid_left - 9, MASK_TOP + (k + 0.5) * MASK_CELL, str(k + 1), size=10.5, ink=MUTED_INK)
        drawing.text(grid_left + (k + 0.5) * MASK_CELL, MASK_TOP + size + 11, str(k + 1), size=10.5,
                     ink=MUTED_INK)
    _vertical_text(drawing, grid_left - 28, MASK_TOP + size / 2, "query position")
    drawing.text(grid_left + size / 2, MASK_TOP + size + 30, key_axis, size=12, ink=MUTED_INK)


def _family_heading(drawing: Drawing, left: float, right: float, family: str, model: str, use: str) -> None:
    """A family's name, its example model and what it is used for, centred over its panels."""
    centre = (left + right) / 2
    drawing.text(centre, 20, family, size=14, bold=True)
    drawing.text(centre, 40, model, size=12.5)
    drawing.text(centre, 58, use, size=12, italic=True, ink=MUTED_INK)
    drawing.line([(left + 12, 72), (right - 12, 72)], arrow=False, ink="#d0d0d0", width=1)


def three_masks() -> Drawing:
    """Encoder-only (all allowed), decoder-only (causal) and the encoder–decoder's two decoder masks
    (causal self-attention, all-allowed cross-attention), each as a 6 × 6 grid."""
    description = (
        "Attention masks as 6 × 6 grids, rows the query positions and columns the key positions, a "
        "filled cell meaning the query may attend to that key. Encoder-only (BERT, for understanding): "
        "every cell filled, bidirectional. Decoder-only (GPT, for generation): the lower triangle with "
        "the diagonal filled, a causal mask, no peeking at the future. Encoder–decoder (T5 and the 2017 "
        "paper, for translation and summarisation): the decoder's causal self-attention mask and its "
        "cross-attention to the 6 source tokens, every cell filled.")
    drawing = Drawing(PANEL_LEFT * 2 + 4 * PANEL_W, 370, "Attention masks of the three families", description)
    panels = [("bidirectional", False, "key position"),
              ("causal: no peeking\nat the future", True, "key position"),
              ("decoder self-attention\n(causal)", True, "key position"),
              ("decoder cross-attention\nto the 6-token source", False, "key position (source)")]
    for k, (title, causal, key_axis) in enumerate(panels):
        _mask_panel(drawing, PANEL_LEFT + k * PANEL_W, title, causal, key_axis)
    families = [("Encoder-only", "BERT", "understanding", 1),
                ("Decoder-only", "GPT", "generation", 1),
                ("Encoder–decoder", "T5, the 2017 paper", "translation, summarisation", 2)]
    left = PANEL_LEFT
    for family, model, use, span in families:
        _family_heading(drawing, left, left + span * PANEL_W, family, model, use)
        left += span * PANEL_W
    legend_y = 344
    drawing.box(PANEL_LEFT + 52, legend_y - 8, 16, 16, fill="attention", rounded=0, width=0.8)
    drawing.text(PANEL_LEFT + 76, legend_y, "may attend", size=12, anchor="start")
    drawing.box(PANEL_LEFT + 176, legend_y - 8, 16, 16, fill="plain", rounded=0, width=0.8)
    drawing.text(PANEL_LEFT + 200, legend_y, f"masked: its score is set to {MINUS}∞ before softmax",
                 size=12, anchor="start")
    return drawing


# ----------------------------------------------------------------------------------------------
# 5. The KV cache
# ----------------------------------------------------------------------------------------------

KV_TOKENS = ("the", "cat", "sits", "on")
KV_CELL_W, KV_CELL_H, KV_CELL_GAP = 56, 26, 6
KV_LEFT, KV_TOP, STEP_H = 250, 78, 122


def _kv_row(drawing: Drawing, top: float, letter: str, count: int) -> None:
    """One row of the cache at a step: the earlier tokens' entries grey, the new one highlighted."""
    drawing.text(KV_LEFT - 12, top + KV_CELL_H / 2, "keys" if letter == "k" else "values", size=12,
                 anchor="end")
    for j in range(count):
        x = KV_LEFT + j * (KV_CELL_W + KV_CELL_GAP)
        label = f"{letter} {KV_TOKENS[j]}"
        if j < count - 1:
            drawing.box(x, top, KV_CELL_W, KV_CELL_H, label, fill="muted", stroke=MUTED_INK, size=12,
                        rounded=3, width=1, ink=MUTED_INK)
        else:
            drawing.box(x, top, KV_CELL_W, KV_CELL_H, label, fill="plain", stroke=HIGHLIGHT, size=12,
                        rounded=3, width=2.2, ink=HIGHLIGHT, bold=True)


def _kv_step(drawing: Drawing, t: int) -> None:
    """Step t: the new token's q (left) attends over the t keys; its k and v join the cache."""
    top = KV_TOP + (t - 1) * STEP_H
    token = KV_TOKENS[t - 1]
    drawing.text(20, top + 14, f"step {t}", size=13.5, anchor="start", bold=True)
    drawing.text(20, top + 34, f"new token “{token}”", size=12, anchor="start")
    # The query stands on the left, at the middle of the keys row, so that its lines fan out right.
    keys_top, values_top = top + 4, top + 4 + KV_CELL_H + 10
    q_x, q_y = 138, keys_top
    drawing.box(q_x, q_y, 56, KV_CELL_H, f"q {token}", fill="plain", stroke=HIGHLIGHT, size=12,
                rounded=3, width=2.2, ink=HIGHLIGHT, bold=True)
    _kv_row(drawing, keys_top, "k", t)
    _kv_row(drawing, values_top, "v", t)
    # q meets every key: one arc over the keys row per key, from q's top to that key's top.
    for j in range(t):
        key_centre = KV_LEFT + j * (KV_CELL_W + KV_CELL_GAP) + KV_CELL_W / 2
        _arc(drawing, q_x + 28, q_y, key_centre, keys_top, lift=14 + 8 * j,
             ink=HIGHLIGHT if j == t - 1 else MUTED_INK)
    plural = "key" if t == 1 else "keys"
    drawing.text(KV_LEFT + t * (KV_CELL_W + KV_CELL_GAP) + 8, keys_top + KV_CELL_H / 2,
                 f"q attends over {t} {plural}", size=12, anchor="start", ink=MUTED_INK)


def kv_cache() -> Drawing:
    """Four generation steps: the cache's keys and values grow by the one new token's k and v, and
    the new token's query attends over all of them."""
    description = (
        "The KV cache over four generation steps of “the cat sits on”: at step t only the new token's "
        "q, k and v are computed (highlighted); its k and v join the cached keys and values of the "
        "earlier tokens (grey), and its query attends over all t keys. A note compares the work: "
        "without a cache every step recomputes k and v for all t tokens (t² in all), with it only one "
        "token's worth (t in all).")
    drawing = Drawing(900, KV_TOP + len(KV_TOKENS) * STEP_H - 10, "KV cache", description)
    drawing.text(20, 22, "KV cache: each step adds one token's k and v", size=15, anchor="start", bold=True)
    drawing.text(20, 46, "step t: compute q, k, v for the new token only; attend over t cached keys",
                 size=12.5, anchor="start", ink=MUTED_INK)
    for t in range(1, len(KV_TOKENS) + 1):
        _kv_step(drawing, t)
    note_top = KV_TOP + 60
    drawing.box(640, note_top, 240, 150, fill="muted", stroke=MUTED_INK)
    drawing.text(656, note_top + 24, "without a cache:", size=12.5, anchor="start", bold=True)
    drawing.text(656, note_top + 56, "recompute k, v for all t tokens\nat every step (t² work)",
                 size=12.5, anchor="start")
    drawing.text(656, note_top + 100, "with it:", size=12.5, anchor="start", bold=True, ink=HIGHLIGHT)
    drawing.text(656, note_top + 124, "1 token's worth (t work)", size=12.5, anchor="start")
    _kv_legend(drawing, 640, note_top + 180)
    return drawing


def _kv_legend(drawing: Drawing, left: float, top: float) -> None:
    """What the two kinds of cell mean."""
    drawing.box(left, top, 30, 20, fill="muted", stroke=MUTED_INK, rounded=3, width=1)
    drawing.text(left + 40, top + 10, "cached: computed at an earlier step", size=12, anchor="start")
    drawing.box(left, top + 30, 30, 20, fill="plain", stroke=HIGHLIGHT, rounded=3, width=2.2)
    drawing.text(left + 40, top + 40, "computed at this step", size=12, anchor="start")


__all__ = ["embedding_plus_position", "rnn_vs_parallel", "multi_head", "three_masks", "kv_cache"]
