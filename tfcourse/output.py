"""Stage 4: the output layer. A linear map to one score (logit) per vocabulary entry, then softmax.

Training minimises cross-entropy, -log p(correct next token). Both are written with the
log-sum-exp trick, subtracting the row maximum first, so huge logits never overflow exp().
"""

from __future__ import annotations

import torch
from torch import Tensor

from .validation import expect_tensor, shape_str

# The label of a position the loss skips (padding, an unmasked token): torch's cross_entropy default too.
IGNORE_INDEX = -100


def log_softmax(logits: Tensor, dim: int = -1) -> Tensor:
    """log softmax(z)_i = z_i - log sum_j exp(z_j) = (z_i - m) - log sum_j exp(z_j - m), m = max_j z_j.

    After subtracting m the largest exponent is exp(0) = 1: no overflow, and the sum is >= 1 so
    its log is finite.
    """
    shifted = logits - logits.amax(dim=dim, keepdim=True)
    return shifted - torch.log(torch.exp(shifted).sum(dim=dim, keepdim=True))


def softmax(logits: Tensor, dim: int = -1) -> Tensor:
    """Probabilities that sum to 1 along `dim`, computed stably via log_softmax."""
    return torch.exp(log_softmax(logits, dim))


def cross_entropy(logits: Tensor, targets: Tensor, ignore_index: int | None = None,
                  label_smoothing: float = 0.0) -> Tensor:
    """Mean of -log p(target) for logits (..., V) and integer targets (...).

    ignore_index: positions whose target equals it (padding) do not count.
    label_smoothing: the target distribution puts 1 - eps on the right token and eps spread
    uniformly over all V tokens (the paper uses eps = 0.1).
    """
    expect_tensor(logits, "logits", expected="(..., V)")
    expect_tensor(targets, "targets", expected="(...)")
    if logits.shape[:-1] != targets.shape:
        raise ValueError(
            f"logits (..., V) and targets (...) must agree on the leading dimensions, "
            f"got logits {shape_str(logits)} and targets {shape_str(targets)}"
        )
    if targets.dtype.is_floating_point:
        raise TypeError(f"targets must be integer class ids, got dtype {targets.dtype}")
    log_probs = log_softmax(logits.float(), dim=-1).reshape(-1, logits.shape[-1])  # (N, V)
    targets = targets.reshape(-1)  # (N,)
    keep = torch.ones_like(targets, dtype=torch.bool) if ignore_index is None else targets != ignore_index
    safe_targets = targets.masked_fill(~keep, 0)  # any valid index; these rows are dropped below
    nll = -log_probs.gather(1, safe_targets[:, None]).squeeze(1)  # (N,)
    if label_smoothing > 0.0:
        uniform = -log_probs.mean(dim=-1)  # (N,) cross-entropy against the uniform distribution
        nll = (1.0 - label_smoothing) * nll + label_smoothing * uniform
    # Zero the ignored rows and divide by the count, instead of nll[keep]: boolean indexing would make
    # the CPU wait for a GPU. masked_fill (not nll * keep) keeps a non-finite ignored row out of the sum.
    return nll.masked_fill(~keep, 0.0).sum() / keep.sum()


__all__ = ["IGNORE_INDEX", "log_softmax", "softmax", "cross_entropy"]
