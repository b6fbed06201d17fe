"""Each lesson's opening map: the pipeline from text to the next token, with the stage the lesson
builds highlighted (the course map of lesson 00 names the lesson that builds each stage instead)."""

from __future__ import annotations

from ..stages import STAGES
from .svg import HIGHLIGHT, INK, MUTED_INK, Drawing


# The stage each lesson builds (lesson 00 is the course map itself).
LESSON_STAGES = {
    "00_big_picture": None,
    "01_tokenization": "tokens",
    "02_embeddings": "embedding",
    "03_attention": "attention",
    "04_ffn": "ffn",
    "05_blocks": "blocks",
    "06_models": "output",
    "07_decoding": "output",
    "08_training": "training",
    "09_translation": "training",
    "10_rnn_vs_transformer": "attention",
    "11_modern_llm": "blocks",
    "12_pretrained": "blocks",
    "13_data_parallel": "training",
}
# Where lesson 00's map sends the reader for each stage: the lessons above that build it.
BUILT_IN = {stage: ", ".join(lesson[:2] for lesson, built in LESSON_STAGES.items() if built == stage)
            for stage in STAGES}
# The stage boxes' labels, wrapped to fit, and the palette colour of each.
LABELS = {
    "tokens": "text → tokens\n→ ids",
    "embedding": "embedding\n× √d_model\n+ positions",
    "attention": "attention",
    "ffn": "feed-forward\nnetwork",
    "blocks": "N × block\n(residual +\nLayerNorm)",
    "output": "linear +\nsoftmax →\nnext token",
    "training": "training\n(loss, AdamW)",
}
FILL = {"tokens": "tokens", "embedding": "embedding", "attention": "attention", "ffn": "ffn",
        "blocks": "norm", "output": "output", "training": "training"}
BOX_W, BOX_H, GAP, LEFT, TOP = 106, 74, 20, 16, 40


def lesson_map(lesson: str) -> Drawing:
    """The pipeline as seven boxes left to right, `lesson`'s stage outlined and bold."""
    if lesson not in LESSON_STAGES:
        raise ValueError(f"lesson must be one of {list(LESSON_STAGES)}, got {lesson!r}")
    stage = LESSON_STAGES[lesson]
    width = LEFT * 2 + len(STAGES) * BOX_W + (len(STAGES) - 1) * GAP
    if stage is None:
        description = ("The course's data-flow map: " + ", then ".join(
            f"{STAGES[key]} (lesson {BUILT_IN[key]})" for key in STAGES) + ".")
        heading = "The course: each stage of the pipeline and the lessons that build it"
    else:
        description = (f"The data-flow map, {' → '.join(STAGES.values())}, with this lesson's stage "
                       f"highlighted: {STAGES[stage]}.")
        heading = f"This lesson: {STAGES[stage]}"
    drawing = Drawing(width, TOP + BOX_H + (46 if stage is None else 24), "Data-flow map", description)
    drawing.text(LEFT, 18, heading, size=14, anchor="start", bold=True)
    for k, key in enumerate(STAGES):
        x = LEFT + k * (BOX_W + GAP)
        here = key == stage
        drawing.box(x, TOP, BOX_W, BOX_H, LABELS[key], fill=FILL[key], bold=here, size=12.5,
                    stroke=HIGHLIGHT if here else (MUTED_INK if stage else INK),
                    width=3 if here else 1.2, ink=INK if here or stage is None else "#555555")
        if k:
            drawing.arrow(x - GAP + 3, TOP + BOX_H / 2, x - 2, TOP + BOX_H / 2)
        if stage is None:
            drawing.text(x + BOX_W / 2, TOP + BOX_H + 18, f"lesson {BUILT_IN[key]}", size=12)
    return drawing
