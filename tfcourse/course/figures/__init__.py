"""The lessons' drawn figures: each is drawn by code (figures/svg.py), written as an SVG file into
the lesson folders that show it (solutions/NN_topic/figures/, copied to notebooks/ by the release),
and shown by a Markdown cell with its alt text: `![alt](figures/name.svg)`.

    python tools/figures.py      # (re)draw every figure into the lesson folders

`tests/test_figures.py` redraws them and fails when a committed file differs (or is missing, or no
lesson shows it).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from . import architecture, attention, parallel
from .maps import LESSON_STAGES, lesson_map
from .svg import Drawing


@dataclass(frozen=True)
class Figure:
    """One drawn figure: its file name (without .svg), how to draw it, the lessons that show it."""

    name: str
    draw: Callable[[], Drawing]
    lessons: tuple[str, ...]

    @property
    def alt(self) -> str:
        """The alt text a lesson gives the image: the drawing's description."""
        return self.draw().description


# The seeds' figures and the course's own, each with the lessons that show it.
DRAWN = [
    Figure("encoder_decoder", architecture.encoder_decoder, ("00_big_picture", "05_blocks")),
    Figure("data_flow", architecture.data_flow, ("00_big_picture",)),
    Figure("gpt_pipeline", architecture.gpt_pipeline, ("00_big_picture",)),
    Figure("block", architecture.block, ("05_blocks",)),
    Figure("ffn", architecture.ffn, ("04_ffn",)),
    Figure("embedding_plus_position", attention.embedding_plus_position, ("02_embeddings",)),
    Figure("rnn_vs_parallel", attention.rnn_vs_parallel, ("00_big_picture", "10_rnn_vs_transformer")),
    Figure("multi_head", attention.multi_head, ("03_attention",)),
    Figure("three_masks", attention.three_masks, ("00_big_picture", "03_attention")),
    Figure("kv_cache", attention.kv_cache, ("07_decoding",)),
    Figure("data_parallel", parallel.data_parallel, ("13_data_parallel",)),
    Figure("ring_all_reduce", parallel.ring_all_reduce, ("13_data_parallel",)),
]


def figures() -> list[Figure]:
    """Every figure of the course: each lesson's opening map (one file "map" per lesson, its own
    stage highlighted), then the drawn figures."""
    maps = [Figure("map", lambda lesson=lesson: lesson_map(lesson), (lesson,)) for lesson in LESSON_STAGES]
    return maps + DRAWN


def lesson_files(lesson: str) -> dict[str, str]:
    """The SVG files a lesson folder holds, as {file name: SVG text}."""
    return {f"{figure.name}.svg": figure.draw().svg() for figure in figures() if lesson in figure.lessons}


__all__ = ["DRAWN", "Figure", "figures", "lesson_files"]
