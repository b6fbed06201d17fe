"""The architecture figures: the encoder–decoder Transformer, the shapes its data takes, the
decoder-only pipeline from text to the next token, the inside of one block, and the feed-forward
network's expand-and-compress.

Every figure is drawn bottom to top (data enters at the bottom, as in the paper) except the FFN,
which reads left to right like a layer diagram.
"""

from __future__ import annotations

from .svg import HIGHLIGHT, INK, MUTED_INK, Drawing, _number

# Sizes shared by the stacked figures: a sub-layer box, an "Add & LayerNorm" box, the gap between
# two boxes (room for an arrow), and how far outside a box a residual line runs.
SUB_H, NORM_H, GAP, RESIDUAL_OUT = 40, 26, 24, 14
LABEL_SIZE = 12.5
ADD_NORM = "Add & LayerNorm"


# ----------------------------------------------------------------------------------------------
# Small helpers
# ----------------------------------------------------------------------------------------------

def _dot(drawing: Drawing, x: float, y: float) -> None:
    """A small filled dot where a residual line branches off the main path."""
    drawing.elements.append(f'<circle cx="{_number(x)}" cy="{_number(y)}" r="2.6" fill="{INK}"/>')


def _frame(drawing: Drawing, x: float, y: float, w: float, h: float) -> None:
    """The light grey panel behind a repeated stack (drawn first, so boxes sit on top of it)."""
    drawing.box(x, y, w, h, fill="muted", stroke=MUTED_INK, width=1, rounded=10)


def _bracket(drawing: Drawing, x: float, top: float, bottom: float, ink: str, reach: float = 8) -> None:
    """A square bracket from top to bottom: its two ends at x, its spine at x + reach (a positive
    reach opens it to the left, a negative one to the right)."""
    drawing.line([(x, top), (x + reach, top), (x + reach, bottom), (x, bottom)], arrow=False,
                 ink=ink, width=1.6)


def _residual(drawing: Drawing, x_from: float, y_from: float, side_x: float, x_to: float,
              y_to: float) -> None:
    """A dashed residual connection: off the main path at (x_from, y_from), out to side_x, up,
    and in to (x_to, y_to), where the sub-layer's output and its input are added."""
    _dot(drawing, x_from, y_from)
    drawing.line([(x_from, y_from), (side_x, y_from), (side_x, y_to), (x_to, y_to)], dashed=True)


# ----------------------------------------------------------------------------------------------
# 1. The encoder–decoder Transformer (the paper's figure)
# ----------------------------------------------------------------------------------------------

ENC_X, DEC_X, COL_W = 130, 500, 190   # the two columns' left edges and their width


def _post_ln_stack(drawing: Drawing, x: float, bottom: float, sublayers: list[tuple[str, str]],
                   residual_side: str) -> list[tuple[float, float]]:
    """Sub-layers in series from `bottom` upwards, each followed by Add & LayerNorm and bypassed
    by a dashed residual on `residual_side` ("left" or "right").

    Returns each sub-layer box's (top, bottom) y, bottom one first."""
    centre = x + COL_W / 2
    side_x = x - RESIDUAL_OUT if residual_side == "left" else x + COL_W + RESIDUAL_OUT
    norm_edge = x if residual_side == "left" else x + COL_W
    placed = []
    y = bottom  # the bottom edge of the next box
    for k, (label, fill) in enumerate(sublayers):
        if k:  # the arrow from the previous Add & LayerNorm
            drawing.arrow(centre, y + GAP, centre, y + 1)
        sub_top = y - SUB_H
        drawing.box(x, sub_top, COL_W, SUB_H, label, fill=fill, size=LABEL_SIZE)
        norm_top = sub_top - GAP - NORM_H
        drawing.arrow(centre, sub_top, centre, norm_top + NORM_H + 1)
        drawing.box(x, norm_top, COL_W, NORM_H, ADD_NORM, fill="norm", size=LABEL_SIZE)
        # The residual leaves the arrow that feeds this sub-layer, below its arrowhead.
        _residual(drawing, centre, y + GAP - 7, side_x, norm_edge, norm_top + NORM_H / 2)
        placed.append((sub_top, y))
        y = norm_top - GAP
    return placed


def _stack_height(count: int) -> float:
    """The height of `count` sub-layers, each with its Add & LayerNorm, and the gaps between."""
    return count * (SUB_H + GAP + NORM_H) + (count - 1) * GAP


def _inputs(drawing: Drawing, x: float, stack_bottom: float, tokens: str) -> None:
    """Below a stack: the tokens, then embedding + positional encoding, then an arrow into it."""
    centre = x + COL_W / 2
    embed_top = stack_bottom + 52
    drawing.arrow(centre, embed_top, centre, stack_bottom + 1)
    drawing.box(x, embed_top, COL_W, 40, "token embedding\n+ positional encoding", fill="embedding",
                size=LABEL_SIZE)
    tokens_top = embed_top + 40 + 22
    drawing.arrow(centre, tokens_top, centre, embed_top + 40 + 1)
    drawing.box(centre - 115, tokens_top, 230, 40, tokens, fill="tokens", size=LABEL_SIZE)


def encoder_decoder() -> Drawing:
    """The paper's encoder–decoder Transformer: the encoder stack on the left, the decoder stack
    on the right, the encoder's output feeding the decoder's cross-attention as keys and values."""
    drawing = Drawing(
        820, 640, "The encoder–decoder Transformer",
        "The original encoder–decoder Transformer. On the left, source tokens (猫 追 狗) pass through "
        "token embedding plus positional encoding into the encoder, N identical layers of multi-head "
        "self-attention and feed-forward, each sub-layer followed by Add & LayerNorm with a dashed "
        "residual around it; on the right, the target tokens shifted right pass through their own "
        "embedding into the decoder, N layers of masked multi-head self-attention, encoder–decoder "
        "(cross) attention and feed-forward, each with Add & LayerNorm. The encoder's output "
        "gives the keys and values of every decoder layer's cross-attention (the queries come from "
        "the decoder), and the decoder's output goes through linear + softmax to the output "
        "probabilities at the top right.")
    dec_centre, enc_centre = DEC_X + COL_W / 2, ENC_X + COL_W / 2
    # Top right: the decoder's output becomes probabilities.
    drawing.box(DEC_X, 14, COL_W, 40, "output probabilities\n(predicts: cat chases dog)",
                fill="output", size=12)
    drawing.arrow(dec_centre, 82, dec_centre, 55)
    drawing.box(DEC_X, 82, COL_W, 32, "linear + softmax", fill="output", size=LABEL_SIZE)

    dec_top = 150  # top of the decoder's last Add & LayerNorm
    stack_bottom = dec_top + _stack_height(3)
    enc_top = stack_bottom - _stack_height(2)
    _frame(drawing, ENC_X - 2 * RESIDUAL_OUT, enc_top - 12, COL_W + 3 * RESIDUAL_OUT,
           _stack_height(2) + 36)
    _frame(drawing, DEC_X - RESIDUAL_OUT, dec_top - 12, COL_W + 3 * RESIDUAL_OUT,
           _stack_height(3) + 36)
    drawing.arrow(dec_centre, dec_top, dec_centre, 115)

    _post_ln_stack(drawing, ENC_X, stack_bottom,
                   [("multi-head\nself-attention", "attention"), ("feed-forward", "ffn")], "left")
    decoder = _post_ln_stack(drawing, DEC_X, stack_bottom,
                             [("masked multi-head\nself-attention", "attention"),
                              ("encoder–decoder\n(cross) attention", "attention"),
                              ("feed-forward", "ffn")], "right")
    _inputs(drawing, ENC_X, stack_bottom, "source tokens\n猫 追 狗")
    _inputs(drawing, DEC_X, stack_bottom, "target tokens (shifted right)\n<BOS> cat chases")

    # The encoder's output: up, across, and into the side of every decoder layer's cross-attention.
    cross_top, cross_bottom = decoder[1]
    cross_y = (cross_top + cross_bottom) / 2
    turn_x, over_y = DEC_X - 80, enc_top - 26
    drawing.line([(enc_centre, enc_top), (enc_centre, over_y), (turn_x, over_y), (turn_x, cross_y),
                  (DEC_X + 1, cross_y)], ink=HIGHLIGHT, width=1.8)
    drawing.text((enc_centre + turn_x) / 2, over_y - 22, "encoder output:\nK, V of every decoder layer",
                 size=12, ink=HIGHLIGHT)
    drawing.text((turn_x + DEC_X - RESIDUAL_OUT) / 2, cross_y - 11, "K, V", size=12, ink=HIGHLIGHT)
    drawing.text(dec_centre - 12, cross_bottom + GAP / 2 + 2, "Q", size=12, anchor="end")

    # Each stack's name and its repetition, outside its panel.
    drawing.text(ENC_X - 2 * RESIDUAL_OUT - 10, enc_top + _stack_height(2) / 2, "Encoder\n× N", size=14,
                 anchor="end", bold=True)
    drawing.text(DEC_X + COL_W + 2 * RESIDUAL_OUT + 10, dec_top + _stack_height(3) / 2, "Decoder\n× N",
                 size=14, anchor="start", bold=True)
    return drawing


# ----------------------------------------------------------------------------------------------
# 2. The data flow as tensor shapes
# ----------------------------------------------------------------------------------------------

FLOW_X, FLOW_W, FLOW_ARROW = 110, 230, 34   # the column's left edge, its width, an arrow's length
MODEL_SHAPE = "(B, T, d_model)"


def _shape_arrow(drawing: Drawing, centre: float, bottom: float, top: float, shape: str) -> None:
    """An upward arrow from y=bottom to y=top with the tensor's shape written beside it."""
    drawing.arrow(centre, bottom, centre, top + 1)
    drawing.text(centre + 10, (bottom + top) / 2, shape, size=12, anchor="start")


def _flow_layer(drawing: Drawing, top: float, name: str) -> float:
    """One layer as a panel holding attention below FFN; returns the panel's bottom y."""
    centre = FLOW_X + FLOW_W / 2
    _frame(drawing, FLOW_X - 10, top, FLOW_W + 20, 2 * 40 + FLOW_ARROW + 20)
    ffn_top = top + 10
    drawing.box(FLOW_X, ffn_top, FLOW_W, 40, "feed-forward (FFN)\n+ Add & LayerNorm", fill="ffn",
                size=LABEL_SIZE)
    attention_top = ffn_top + 40 + FLOW_ARROW
    _shape_arrow(drawing, centre, attention_top, ffn_top + 40, MODEL_SHAPE)
    drawing.box(FLOW_X, attention_top, FLOW_W, 40, "multi-head self-attention\n+ Add & LayerNorm",
                fill="attention", size=LABEL_SIZE)
    drawing.text(FLOW_X - 20, top + 10 + 40 + FLOW_ARROW / 2, name, size=13, anchor="end", bold=True)
    return attention_top + 40 + 10


def data_flow() -> Drawing:
    """The Transformer's data flow as shapes: ids (B, T) become (B, T, d_model) vectors, every layer
    keeps that shape, and the output layer turns it into (B, T, vocab) probabilities."""
    drawing = Drawing(
        580, 760, "The data flow inside the Transformer, as tensor shapes",
        "A column read from bottom to top: token ids of shape (B, T) go through token embedding plus "
        "positional encoding to (B, T, d_model); layer 1 (multi-head self-attention, then FFN, each "
        "with Add & LayerNorm) through layer N all keep the shape (B, T, d_model); a linear layer "
        "maps it to (B, T, vocab) scores, and softmax turns those into a next-token distribution at "
        "every position. B is the batch size, T the sequence length, vocab the vocabulary size.")
    centre = FLOW_X + FLOW_W / 2
    y = 16
    drawing.box(FLOW_X, y, FLOW_W, 40, "next-token distribution\nat every position", fill="output",
                size=LABEL_SIZE)
    y += 40 + FLOW_ARROW
    _shape_arrow(drawing, centre, y, y - FLOW_ARROW, "(B, T, vocab)")
    drawing.box(FLOW_X, y, FLOW_W, 32, "softmax", fill="output", size=LABEL_SIZE)
    y += 32 + FLOW_ARROW
    _shape_arrow(drawing, centre, y, y - FLOW_ARROW, "(B, T, vocab)")
    drawing.box(FLOW_X, y, FLOW_W, 32, "linear: d_model → vocab", fill="output", size=LABEL_SIZE)
    y += 32 + FLOW_ARROW
    kept_top = y - FLOW_ARROW  # where the shape-keeping stretch ends (the linear's input)
    _shape_arrow(drawing, centre, y, y - FLOW_ARROW, MODEL_SHAPE)
    y = _flow_layer(drawing, y, "layer N")
    # Layers 2 … N−1, elided: the path is broken by a vertical ellipsis.
    _shape_arrow(drawing, centre, y + 26, y, MODEL_SHAPE)
    drawing.text(centre, y + 40, "⋮", size=18)
    drawing.text(centre + 10, y + 40, "layers 2 … N−1", size=12, anchor="start", ink=MUTED_INK)
    y += 54
    drawing.line([(centre, y + FLOW_ARROW), (centre, y)], arrow=False)
    drawing.text(centre + 10, y + FLOW_ARROW / 2, MODEL_SHAPE, size=12, anchor="start")
    y = _flow_layer(drawing, y + FLOW_ARROW, "layer 1")
    _shape_arrow(drawing, centre, y + FLOW_ARROW, y, MODEL_SHAPE)
    kept_bottom = y + FLOW_ARROW  # the embedding's output, the first (B, T, d_model)
    y += FLOW_ARROW
    drawing.box(FLOW_X, y, FLOW_W, 40, "token embedding\n+ positional encoding", fill="embedding",
                size=LABEL_SIZE)
    y += 40 + FLOW_ARROW
    _shape_arrow(drawing, centre, y, y - FLOW_ARROW, "(B, T)")
    drawing.box(FLOW_X, y, FLOW_W, 32, "token ids", fill="tokens", size=LABEL_SIZE)
    y += 32

    # The point of the figure: from the embedding to the output layer, the shape never changes.
    bracket_x = FLOW_X + FLOW_W + 50
    _bracket(drawing, bracket_x, kept_top + 4, kept_bottom - 4, HIGHLIGHT)
    drawing.text(bracket_x + 20, (kept_top + kept_bottom) / 2,
                 "every layer keeps\nthe shape\n(B, T, d_model)", size=13, anchor="start", bold=True,
                 ink=HIGHLIGHT)
    drawing.text(drawing.width / 2, y + 26, "B: batch size · T: sequence length · vocab: vocabulary size",
                 size=12, ink=MUTED_INK)
    drawing.height = y + 44
    return drawing


# ----------------------------------------------------------------------------------------------
# 3. The decoder-only pipeline, text to next token
# ----------------------------------------------------------------------------------------------

GPT_X, GPT_W, GPT_ARROW = 110, 250, 28
# Illustrative numbers only (labelled "e.g." in the figure): 今天 = 8342 is the source's example id.
EXAMPLE_TOKENS = [("今天", 8342), ("天气", 2157), ("真好", 9031)]
EXAMPLE_NEXT = [("啊", 0.41), ("！", 0.22), ("。", 0.12)]


def _note(drawing: Drawing, y: float, text: str) -> None:
    """A muted note to the right of the pipeline, saying which stage a box belongs to."""
    drawing.text(GPT_X + GPT_W + 24, y, text, size=12, anchor="start", ink=MUTED_INK)


def _next_token_bars(drawing: Drawing, top: float) -> float:
    """The next-token distribution as a small bar list of candidates; returns its bottom y."""
    height = 26 + 22 * (len(EXAMPLE_NEXT) + 1) + 6
    drawing.box(GPT_X, top, GPT_W, height, fill="plain", stroke=INK)
    drawing.text(GPT_X + GPT_W / 2, top + 15, "next-token probabilities (e.g.)", size=12, bold=True)
    bar_x, bar_full = GPT_X + 46, 150   # a probability of 1 would fill bar_full pixels
    for k, (token, probability) in enumerate(EXAMPLE_NEXT):
        row_y = top + 38 + 22 * k
        drawing.text(GPT_X + 30, row_y, token, size=13, anchor="middle")
        drawing.box(bar_x, row_y - 7, probability * bar_full, 14, fill="output", rounded=2, width=1)
        drawing.text(bar_x + probability * bar_full + 8, row_y, f"{probability:.2f}", size=12,
                     anchor="start")
    drawing.text(GPT_X + 30, top + 38 + 22 * len(EXAMPLE_NEXT), "…", size=13)
    drawing.text(bar_x, top + 38 + 22 * len(EXAMPLE_NEXT), "every other token in the vocabulary",
                 size=11, anchor="start", ink=MUTED_INK)
    return top + height


def _block_stack(drawing: Drawing, top: float, height: float) -> None:
    """The N blocks: a pile of identical boxes (two peeking out behind), with × N beside them."""
    for offset in (8, 4):
        drawing.box(GPT_X + offset, top - offset, GPT_W, height, fill="norm", width=1)
    drawing.box(GPT_X, top, GPT_W, height, "Transformer block\n(masked self-attention + FFN,\n"
                "residual + LayerNorm)", fill="norm", size=12)
    drawing.text(GPT_X - 14, top + height / 2, "× N", size=15, anchor="end", bold=True)


def gpt_pipeline() -> Drawing:
    """The decoder-only (GPT) machine: text enters at the bottom, goes through tokenizer, embedding
    and N blocks, and leaves at the top as the next token's probabilities."""
    drawing = Drawing(
        560, 600, "The decoder-only Transformer, from text to the next token",
        "A vertical pipeline read from bottom to top: the text 今天天气真好 enters the tokenizer, "
        "which gives the tokens 今天, 天气, 真好 and their ids (e.g. 8342, 2157, 9031); token "
        "embedding plus positional encoding turns them into vectors, N identical Transformer blocks "
        "process them, and linear + softmax gives the next token's probabilities, for example "
        "啊 0.41, ！ 0.22, 。 0.12.")
    centre = GPT_X + GPT_W / 2
    y = 14
    y = _next_token_bars(drawing, y)
    _note(drawing, y - 40, "4 · scores → probabilities")
    drawing.arrow(centre, y + GPT_ARROW, centre, y + 1)
    y += GPT_ARROW
    drawing.box(GPT_X, y, GPT_W, 32, "linear + softmax", fill="output", size=LABEL_SIZE)
    y += 32
    drawing.arrow(centre, y + GPT_ARROW, centre, y + 1)
    y += GPT_ARROW
    _block_stack(drawing, y + 8, 56)
    _note(drawing, y + 8 + 28, "3 · N identical blocks")
    y += 8 + 56
    drawing.arrow(centre, y + GPT_ARROW, centre, y + 1)
    y += GPT_ARROW
    drawing.box(GPT_X, y, GPT_W, 40, "token embedding\n+ positional encoding", fill="embedding",
                size=LABEL_SIZE)
    _note(drawing, y + 20, "2 · vectors with positions")
    y += 40
    drawing.arrow(centre, y + GPT_ARROW, centre, y + 1)
    y += GPT_ARROW
    cell_w = 70
    cells_x = centre - cell_w * len(EXAMPLE_TOKENS) / 2
    for k, (token, token_id) in enumerate(EXAMPLE_TOKENS):
        drawing.box(cells_x + k * cell_w, y, cell_w, 44, f"{token}\n{token_id}", fill="tokens",
                    size=12.5, rounded=0, width=1)
    drawing.text(cells_x - 10, y + 12, "tokens", size=12, anchor="end", ink=MUTED_INK)
    drawing.text(cells_x - 10, y + 32, "ids (e.g.)", size=12, anchor="end", ink=MUTED_INK)
    y += 44
    drawing.arrow(centre, y + GPT_ARROW, centre, y + 1)
    y += GPT_ARROW
    drawing.box(GPT_X, y, GPT_W, 32, "tokenizer", fill="tokens", size=LABEL_SIZE)
    _note(drawing, y - 6, "1 · text → tokens → ids")
    y += 32
    drawing.arrow(centre, y + GPT_ARROW, centre, y + 1)
    y += GPT_ARROW
    drawing.box(GPT_X, y, GPT_W, 34, "text: 今天天气真好", fill="plain", size=13)
    drawing.height = y + 34 + 16
    return drawing


# ----------------------------------------------------------------------------------------------
# 4. Inside one block (post-LN, as in the paper)
# ----------------------------------------------------------------------------------------------

BLOCK_X, BLOCK_W = 100, 200
PLUS_R = 11
# One sub-layer's vertical pieces, bottom to top: its input arrow, the sub-layer box, the arrow to
# ⊕, ⊕ itself, the arrow to LayerNorm, and LayerNorm.
IN_ARROW, SUBLAYER_H, TO_PLUS, TO_NORM, BLOCK_NORM_H = 32, 44, 26, 24, 30
SUBLAYER_SPAN = IN_ARROW + SUBLAYER_H + TO_PLUS + 2 * PLUS_R + TO_NORM + BLOCK_NORM_H
RESIDUAL_X = BLOCK_X + BLOCK_W + 26   # where the residual lines run up


def _sublayer(drawing: Drawing, bottom: float, label: str, fill: str) -> float:
    """One post-LN sub-layer from y=bottom upwards: its input arrow, the sub-layer, ⊕ with the
    dashed residual, LayerNorm; returns the LayerNorm's top y."""
    centre = BLOCK_X + BLOCK_W / 2
    box_top = bottom - IN_ARROW - SUBLAYER_H
    drawing.arrow(centre, bottom, centre, box_top + SUBLAYER_H + 1)
    drawing.box(BLOCK_X, box_top, BLOCK_W, SUBLAYER_H, label, fill=fill, size=LABEL_SIZE)
    plus_y = box_top - TO_PLUS - PLUS_R
    drawing.arrow(centre, box_top, centre, plus_y + PLUS_R + 1)
    drawing.circle(centre, plus_y, PLUS_R, "+", size=16)
    branch_y = bottom - IN_ARROW / 2
    _residual(drawing, centre, branch_y, RESIDUAL_X, centre + PLUS_R + 1, plus_y)
    drawing.text(RESIDUAL_X + 6, (branch_y + plus_y) / 2, "residual", size=12, anchor="start",
                 ink=MUTED_INK)
    norm_top = plus_y - PLUS_R - TO_NORM - BLOCK_NORM_H
    drawing.arrow(centre, plus_y - PLUS_R, centre, norm_top + BLOCK_NORM_H + 1)
    drawing.box(BLOCK_X, norm_top, BLOCK_W, BLOCK_NORM_H, "LayerNorm", fill="norm", size=LABEL_SIZE)
    return norm_top


def _formula(drawing: Drawing, top: float, bottom: float, name: str, formula: str) -> None:
    """A sub-layer's name and its formula, to the right of it, with a muted bracket."""
    x = RESIDUAL_X + 112
    _bracket(drawing, x - 12, top, bottom, MUTED_INK, reach=-8)
    middle = (top + bottom) / 2
    drawing.text(x, middle - 10, name, size=13, anchor="start", bold=True)
    drawing.text(x, middle + 10, formula, size=12.5, anchor="start")


def block() -> Drawing:
    """One Transformer block as in the paper (post-LN): self-attention and the FFN in series, each
    bypassed by a dashed residual into ⊕ and followed by LayerNorm; the block repeats N times."""
    output_top, end_h = 16, 34
    frame_top = output_top + end_h + 20
    input_top = frame_top + 14 + 2 * SUBLAYER_SPAN + 6
    drawing = Drawing(
        680, input_top + end_h + 16, "Inside one Transformer block (post-LN)",
        "One block read from bottom to top: the input x of shape (B, T, d_model) goes into sub-layer "
        "A, multi-head self-attention, whose output is added to x (a dashed residual line bypasses "
        "the attention into a ⊕) and then LayerNorm gives z1; sub-layer B does the same with the "
        "feed-forward network, giving z2 = LayerNorm(z1 + FFN(z1)), the block's output, of the same "
        "shape as x. The whole block is repeated N times.")
    centre = BLOCK_X + BLOCK_W / 2
    frame_bottom = input_top - 6
    _frame(drawing, BLOCK_X - 22, frame_top, RESIDUAL_X + 76 - (BLOCK_X - 22), frame_bottom - frame_top)
    drawing.box(BLOCK_X, input_top, BLOCK_W, end_h, "input x: (B, T, d_model)", fill="plain",
                size=LABEL_SIZE)
    a_top = _sublayer(drawing, input_top, "multi-head\nself-attention", "attention")
    drawing.text(centre - 8, a_top - IN_ARROW / 2, "z1", size=12, anchor="end", italic=True)
    b_top = _sublayer(drawing, a_top, "feed-forward\nnetwork (FFN)", "ffn")
    drawing.arrow(centre, b_top, centre, output_top + end_h + 1)
    drawing.box(BLOCK_X, output_top, BLOCK_W, end_h, "output z2: (B, T, d_model)", fill="plain",
                size=LABEL_SIZE)
    drawing.text(BLOCK_X + BLOCK_W + 12, output_top + end_h / 2, "same shape as x", size=12,
                 anchor="start", ink=MUTED_INK)
    _formula(drawing, a_top, input_top - 6, "sub-layer A", "z1 = LayerNorm(x + MultiHead(x))")
    _formula(drawing, b_top, a_top - 6, "sub-layer B", "z2 = LayerNorm(z1 + FFN(z1))")
    drawing.text(BLOCK_X - 34, (frame_top + frame_bottom) / 2, "× N", size=16, anchor="end", bold=True)
    return drawing


# ----------------------------------------------------------------------------------------------
# 5. The position-wise FFN: expand, ReLU, compress
# ----------------------------------------------------------------------------------------------

CELL_W, CELL_H = 44, 20
CELLS_TOP = 112
# Illustrative values (the figure says "e.g."): 4 cells stand for d_model, 16 for d_ff.
FFN_INPUT = [0.8, -0.5, 1.2, 0.1]
FFN_HIDDEN = [1.1, -0.7, -1.6, 0.4, 2.0, -0.2, 0.9, 0.3, -1.1, 1.5, -0.9, -0.4, 0.6, 1.8, -1.3, 0.2]
FFN_OUTPUT = [0.5, -0.3, 0.9, 0.2]
# The four columns' left edges: input, hidden before ReLU, hidden after ReLU, output.
FFN_COLUMNS = [70, 290, 450, 670]


def _value(value: float) -> str:
    """A cell's number with a true minus sign."""
    return f"{value:.1f}".replace("-", "−")


def _column_top(count: int) -> float:
    """The top of a column of `count` cells, centred on the 16-cell hidden column."""
    return CELLS_TOP + (len(FFN_HIDDEN) - count) * CELL_H / 2


def _cells(drawing: Drawing, x: float, values: list[float], fill: str, zero_negatives: bool = False) -> None:
    """A column of cells with their values; with zero_negatives, a negative becomes a grey 0."""
    top = _column_top(len(values))
    for k, value in enumerate(values):
        zeroed = zero_negatives and value < 0
        drawing.box(x, top + k * CELL_H, CELL_W, CELL_H, "0" if zeroed else _value(value),
                    fill="muted" if zeroed else fill, size=11, rounded=0, width=0.8,
                    stroke=MUTED_INK if zeroed else INK, ink=MUTED_INK if zeroed else INK)


def _fan(drawing: Drawing, left_x: float, left_count: int, right_x: float, right_count: int) -> None:
    """Every cell of one column joined to every cell of the next: a dense (linear) layer."""
    left_top, right_top = _column_top(left_count), _column_top(right_count)
    for i in range(left_count):
        for j in range(right_count):
            drawing.line([(left_x, left_top + (i + 0.5) * CELL_H),
                          (right_x, right_top + (j + 0.5) * CELL_H)], arrow=False, ink=MUTED_INK,
                         width=0.5)


def ffn() -> Drawing:
    """The position-wise FFN on one position's vector: d_model widens to d_ff (4×), ReLU zeroes the
    negatives, and it narrows back to d_model, the same shape as its input."""
    drawing = Drawing(
        800, 560, "The feed-forward network: expand, ReLU, compress",
        "FFN(x) = max(0, x W1 + b1) W2 + b2 on one position, left to right: a vector of d_model = 512 "
        "numbers (4 cells drawn) is expanded by W1, b1 to d_ff = 2048 numbers, 4× wider (16 cells "
        "drawn); ReLU turns the negative ones into 0 (greyed); W2, b2 compress the result back to "
        "d_model = 512. The output has the same shape as the input, so the residual can add it to "
        "x and blocks can be stacked.")
    drawing.text(drawing.width / 2, 24, "FFN(x) = max(0, x W1 + b1) W2 + b2", size=16, bold=True)
    drawing.text(drawing.width / 2, 48, "applied to every position separately, with the same weights",
                 size=12, ink=MUTED_INK)
    x_in, x_pre, x_post, x_out = FFN_COLUMNS
    _fan(drawing, x_in + CELL_W, 4, x_pre, 16)
    for k in range(len(FFN_HIDDEN)):  # ReLU acts on each number alone: one line per cell
        y = CELLS_TOP + (k + 0.5) * CELL_H
        drawing.line([(x_pre + CELL_W, y), (x_post, y)], arrow=False, ink=MUTED_INK, width=0.8)
    _fan(drawing, x_post + CELL_W, 16, x_out, 4)
    _cells(drawing, x_in, FFN_INPUT, "plain")
    _cells(drawing, x_pre, FFN_HIDDEN, "ffn")
    _cells(drawing, x_post, FFN_HIDDEN, "ffn", zero_negatives=True)
    _cells(drawing, x_out, FFN_OUTPUT, "plain")

    # Above the columns: what each column is; between them: the step that makes the next.
    heading_y = CELLS_TOP - 26
    for x, heading in zip(FFN_COLUMNS, ["x", "x W1 + b1", "after ReLU", "FFN(x)"]):
        drawing.text(x + CELL_W / 2, heading_y, heading, size=13, bold=True)
    steps_y = CELLS_TOP + len(FFN_HIDDEN) * CELL_H + 26
    for left, right, step in [(x_in, x_pre, "W1, b1: expand"), (x_pre, x_post, "ReLU"),
                              (x_post, x_out, "W2, b2: compress")]:
        drawing.text((left + CELL_W + right) / 2, steps_y, step, size=12.5, ink=INK)
        drawing.arrow(left + CELL_W + 16, steps_y + 18, right - 16, steps_y + 18)
    sizes_y = steps_y + 48
    for x, size in zip(FFN_COLUMNS, ["d_model = 512", "d_ff = 2048\n(4× wider)", "d_ff = 2048",
                                     "d_model = 512"]):
        drawing.text(x + CELL_W / 2, sizes_y, size, size=12.5, bold=size.startswith("d_ff = 2048\n"))

    legend_y = sizes_y + 44
    drawing.box(x_post - 150, legend_y - CELL_H / 2, CELL_W, CELL_H, "0", fill="muted", size=11,
                rounded=0, width=0.8, stroke=MUTED_INK, ink=MUTED_INK)
    drawing.text(x_post - 150 + CELL_W + 8, legend_y, "0 after ReLU (it was negative)", size=12,
                 anchor="start")
    drawing.text(drawing.width / 2, legend_y + 34,
                 "same shape in and out: the residual can add it, and blocks can stack", size=13,
                 bold=True, ink=HIGHLIGHT)
    drawing.text(drawing.width / 2, legend_y + 54, "(cell values are illustrative; 4 and 16 cells "
                 "stand for 512 and 2048)", size=11, ink=MUTED_INK)
    drawing.height = legend_y + 72
    return drawing


__all__ = ["block", "data_flow", "encoder_decoder", "ffn", "gpt_pipeline"]
