"""The seam between the lessons' calling conventions and the reference's: used by the checks (to
stand a reference in for a learner's part) and by `tfcourse.course.assemble` (to build models from
the learner's parts). The checks never import the course; the course imports this."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from torch import nn


def called_like_the_lessons(layer: type, **parts: Any) -> Callable[..., nn.Module]:
    """A reference layer (keyword-only options), callable as the lessons' layers are: (d_model,
    n_heads, d_ff, dropout, norm_first); `parts` (attention=..., feed_forward=..., norm=...) go to
    every layer built. `__wrapped__` names the reference layer."""

    def build(d_model: int, n_heads: int, d_ff: int | None = None, dropout: float = 0.1, norm_first: bool = False,
              **options: Any) -> nn.Module:
        return layer(d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first, **parts, **options)

    build.__wrapped__ = layer
    return build


__all__ = ["called_like_the_lessons"]
