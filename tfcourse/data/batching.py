"""Language-model batches: cut a long stream of token ids into random (context, next-token target) windows."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

import torch


SequenceT = TypeVar("SequenceT", torch.Tensor, Sequence)


def train_val_split(data: SequenceT, train_fraction: float = 0.9) -> tuple[SequenceT, SequenceT]:
    """Split a 1-D tensor (or list, string...) into its first ``train_fraction`` and the rest.

    There is no shuffling: the order of text matters, and taking the validation set from the
    end keeps its windows from overlapping training windows.
    """
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(
            f"train_fraction must be strictly between 0 and 1, got {train_fraction}"
        )
    if isinstance(data, torch.Tensor) and data.dim() != 1:
        raise ValueError(f"expected a 1-D tensor of token ids, got shape {tuple(data.shape)}")
    n_train = int(len(data) * train_fraction)
    if n_train == 0 or n_train == len(data):
        raise ValueError(
            f"cannot split {len(data)} items with train_fraction={train_fraction}: "
            f"one of the two parts would be empty"
        )
    return data[:n_train], data[n_train:]


def _check_token_ids(data: torch.Tensor) -> None:
    """Errors for anything :func:`get_batch` cannot cut windows from."""
    if not isinstance(data, torch.Tensor):
        raise TypeError(
            f"data must be a torch.Tensor of token ids, got {type(data).__name__}; "
            f"convert it with torch.tensor(ids, dtype=torch.long)"
        )
    if data.dim() != 1:
        raise ValueError(
            f"data must be a 1-D tensor of token ids (N,), got shape {tuple(data.shape)}"
        )
    if data.dtype.is_floating_point or data.dtype.is_complex or data.dtype == torch.bool:
        raise TypeError(
            f"data must hold integer token ids (e.g. torch.long), got dtype {data.dtype}"
        )


def get_batch(
    data: torch.Tensor,
    batch_size: int,
    context_len: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``batch_size`` random windows of ``context_len`` tokens and their next tokens.

    Returns ``(x, y)``, both ``(batch_size, context_len)`` of dtype ``torch.long``, with
    ``x[b] = data[i : i + T]`` and ``y[b] = data[i + 1 : i + T + 1]``: at every position the
    target is the token that comes next. Pass a seeded ``torch.Generator`` for reproducible
    batches; ``device`` is where the batch is returned (default: ``data``'s device).
    """
    _check_token_ids(data)
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size} (an empty batch)")
    if context_len < 1:
        raise ValueError(f"context_len must be at least 1, got {context_len}")
    n_tokens = data.shape[0]
    if n_tokens < context_len + 1:
        raise ValueError(
            f"data has {n_tokens} tokens, but one window needs context_len + 1 = "
            f"{context_len + 1} (the context plus the token after it)"
        )

    # A window starting at i needs data[i + context_len] as its last target,
    # so i ranges over 0 .. n_tokens - context_len - 1 (randint's high is exclusive).
    sample_device = generator.device if generator is not None else torch.device("cpu")
    starts = torch.randint(
        0, n_tokens - context_len, (batch_size,), generator=generator, device=sample_device
    ).to(data.device)  # (B,)
    offsets = torch.arange(context_len, device=data.device)  # (T,)
    positions = starts[:, None] + offsets[None, :]  # (B, 1) + (1, T) -> (B, T)

    x = data[positions].long()  # (B, T): the context
    y = data[positions + 1].long()  # (B, T): the same windows shifted one token ahead
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y
