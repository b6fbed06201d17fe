"""What a trained GPT's attention heads look at: every head's weights on a sequence, and two scores
that recognise a head with a known job.

    weights = self_attention_weights(model, ids)     # (n_layers, n_heads, T, T) for one sequence
    previous_token_score(weights)                    # (n_layers, n_heads): weight on the token just before
    copying_score(weights, period)                   # on a sequence repeated: weight on what came next last time
    find_heads(model, ids, generator=...)            # the heads whose score passes its threshold

A previous-token head puts most of its weight on position t − 1; a copying (induction) head, on a
sequence whose second half repeats its first, looks from token t back to the token that *followed*
the earlier copy of t — the mechanism that lets a model continue a pattern it has seen in its
context. Scores are averages of attention weights, so each lies in [0, 1]; uniform causal attention
scores about (ln T) / T on both.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from .attention import causal_mask, merge_heads, scaled_dot_product_attention, split_heads
from .layouts import project_qkv
from .validation import expect_tensor, shape_str

# A head is named for a job when its score passes these (uniform attention over T = 64 scores 0.07).
PREVIOUS_TOKEN_THRESHOLD = 0.4
COPYING_THRESHOLD = 0.3


def self_attention_weights(model: nn.Module, ids: Tensor) -> Tensor:
    """The causal self-attention weights of every block of a GPT on one sequence `ids` of shape
    (T,) or (1, T): a (n_layers, n_heads, T, T) tensor, row t how position t spreads over 0..t.

    Read from each block's own projections (w_q, w_k, w_v, or one fused w_qkv) on the input a
    forward hook catches, and rebuilt into the module's output to make sure they are its weights."""
    ids = ids.view(1, -1) if ids.dim() == 1 else ids  # (1, T)
    if ids.dim() != 2 or ids.shape[0] != 1:
        raise ValueError(f"ids must be one sequence, (T,) or (1, T); got shape {shape_str(ids)}")
    attentions = [block.self_attn for block in model.blocks.layers]
    seen: list[dict] = [{} for _ in attentions]
    handles = [attention.register_forward_hook(_catcher(record), with_kwargs=True)
               for attention, record in zip(attentions, seen)]
    was_training = model.training
    model.eval()  # no dropout: the weights the model uses when it generates
    try:
        with torch.no_grad():
            model(ids)
    finally:
        for handle in handles:
            handle.remove()  # leave the model as it was
        model.train(was_training)
    with torch.no_grad():
        return torch.stack([_weights_of(attention, record) for attention, record in zip(attentions, seen)])


def _catcher(record: dict):
    def catch(module: nn.Module, args: tuple, kwargs: dict, output: Tensor) -> None:
        record.update(zip(["x", "memory", "mask"], args))  # however the block passed them:
        record.update(kwargs, output=output)               # by position or by name
    return catch


def _weights_of(attention: nn.Module, record: dict) -> Tensor:
    """(n_heads, T, T): softmax(q kᵀ / √d_head) under the causal mask, from the caught input."""
    if getattr(attention, "n_kv_heads", attention.n_heads) != attention.n_heads:
        raise ValueError(f"{type(attention).__name__} groups its keys (GQA): self_attention_weights reads "
                         "plain multi-head attention only")
    x = record["x"]  # (1, T, d_model)
    q, k, v = (split_heads(t, attention.n_heads) for t in project_qkv(attention, x))  # each (1, n_heads, T, d_head)
    mask = record.get("mask")
    mask = causal_mask(x.shape[1], device=x.device) if mask is None else mask
    out, weights = scaled_dot_product_attention(q, k, v, mask)  # weights (1, n_heads, T, T)
    if not torch.allclose(attention.w_o(merge_heads(out)), record["output"], atol=1e-4, rtol=1e-4):
        raise ValueError(f"{type(attention).__name__}'s output is not softmax(q kᵀ/√d_head) v of its own "
                         "projections (rotary positions?): its weights cannot be read this way")
    return weights[0]


def previous_token_score(weights: Tensor) -> Tensor:
    """The mean weight each head puts on the token just before, over positions 1..T-1 (position 0
    has none): weights (..., T, T) -> (...)."""
    expect_tensor(weights, "weights", expected="(..., T, T)")
    if weights.dim() < 2 or weights.shape[-1] != weights.shape[-2] or weights.shape[-1] < 2:
        raise ValueError(f"weights must be square, (..., T, T) with T >= 2; got shape {shape_str(weights)}")
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1)  # entries [t, t-1], t = 1..T-1


def copying_score(weights: Tensor, period: int) -> Tensor:
    """On a sequence whose positions period..2·period-1 repeat 0..period-1: the mean weight that
    position t of the repeat puts on t - period + 1, the token that followed the earlier copy of
    token t (weights (..., T, T) with T >= 2·period -> (...))."""
    expect_tensor(weights, "weights", expected="(..., T, T)")
    if weights.dim() < 2 or weights.shape[-1] < 2 * period or period < 2:
        raise ValueError(f"weights must cover two copies of period={period} >= 2 tokens; got shape "
                         f"{shape_str(weights)}")
    after_earlier_copy = weights.diagonal(offset=1 - period, dim1=-2, dim2=-1)  # [t, t-period+1], t = period-1..
    return after_earlier_copy[..., 1:period + 1].mean(dim=-1)  # t = period..2 period-1


@dataclass(frozen=True)
class HeadFinding:
    layer: int
    head: int
    kind: str  # "previous-token" or "copying"
    score: float

    def __str__(self) -> str:
        return f"layer {self.layer}, head {self.head}: a {self.kind} head (score {self.score:.2f})"


def repeated_random_ids(vocab_size: int, period: int, generator: torch.Generator) -> Tensor:
    """(2·period,) random token ids, the second half a copy of the first: what a copying head needs."""
    half = torch.randint(0, vocab_size, (period,), generator=generator)
    return torch.cat([half, half])


def find_heads(model: nn.Module, ids: Tensor, period: int = 32, generator: torch.Generator | None = None,
               vocab_size: int | None = None) -> list[HeadFinding]:
    """The heads of `model` that are previous-token heads on `ids` (a real text) and copying heads on
    a random sequence repeated twice (period tokens each), each with its score, best first."""
    found = []
    previous = previous_token_score(self_attention_weights(model, ids))  # (n_layers, n_heads)
    vocab_size = vocab_size or model.config.vocab_size
    generator = generator or torch.Generator().manual_seed(0)
    repeated = repeated_random_ids(vocab_size, period, generator).to(ids.device)
    copying = copying_score(self_attention_weights(model, repeated), period)
    for kind, scores, threshold in [("previous-token", previous, PREVIOUS_TOKEN_THRESHOLD),
                                    ("copying", copying, COPYING_THRESHOLD)]:
        for layer, head in (scores > threshold).nonzero().tolist():
            found.append(HeadFinding(layer, head, kind, scores[layer, head].item()))
    return sorted(found, key=lambda finding: -finding.score)


def uniform_score(length: int) -> float:
    """What uniform causal attention scores on previous_token_score over T = length: the mean of
    1/(t+1) for t = 1..T-1 (a baseline for the thresholds)."""
    return sum(1 / (t + 1) for t in range(1, length)) / (length - 1) if length > 1 else math.nan


__all__ = ["COPYING_THRESHOLD", "PREVIOUS_TOKEN_THRESHOLD", "HeadFinding", "copying_score", "find_heads",
           "previous_token_score", "repeated_random_ids", "self_attention_weights", "uniform_score"]
