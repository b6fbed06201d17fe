"""The long-range recall task of the RNN lesson: remember the first token across many distractors."""

from __future__ import annotations

import torch
from torch import Tensor


def recall_batch(batch_size: int, length: int, n_keys: int, n_distractors: int,
                 generator: torch.Generator) -> tuple[Tensor, Tensor]:
    """x (B, length): a key in [0, n_keys) first, then length - 1 distractors; y (B,): the key."""
    keys = torch.randint(0, n_keys, (batch_size,), generator=generator)  # (B,)
    distractors = torch.randint(n_keys, n_keys + n_distractors, (batch_size, length - 1), generator=generator)
    return torch.cat([keys[:, None], distractors], dim=1), keys  # (B, length), (B,)


__all__ = ["recall_batch"]
