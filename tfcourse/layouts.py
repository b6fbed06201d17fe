"""The two parameter layouts of multi-head attention, and the one seam that converts between them.

    separate  w_q, w_k, w_v, w_o: four nn.Linear(d_model, d_model)     (the paper; tfcourse's reference)
    fused     w_qkv: one nn.Linear(d_model, 3 * d_model) whose output splits as q | k | v, and w_o
              (nanoGPT's c_attn layout under the lesson's names)

Both compute the same attention: the fused weight is the three separate weights stacked, W_qkv =
[W_q; W_k; W_v] (3·d_model, d_model), and its bias likewise. Whatever reads or writes an attention
module's projections goes through here — the exercise checks, `your_parts()`, lesson 09's
cross-attention plot, the GPT-2 loader — so a learner may write either layout.

    q, k, v = project_qkv(attention, x)              # (B, T, d_model) each, in either layout
    state = in_layout_of(model, reference_state)     # w_q/w_k/w_v tensors fused where model fuses them
"""

from __future__ import annotations

from collections.abc import Mapping

import torch
from torch import Tensor, nn

SEPARATE = ("w_q", "w_k", "w_v")
FUSED = "w_qkv"


def attention_layout(attention: nn.Module) -> str:
    """"separate" or "fused"; a ValueError names what is missing when it is neither."""
    if all(isinstance(getattr(attention, name, None), nn.Linear) for name in SEPARATE):
        return "separate"
    if isinstance(getattr(attention, FUSED, None), nn.Linear):
        return "fused"
    raise ValueError(f"{type(attention).__name__} has neither w_q, w_k, w_v (three nn.Linear) nor one "
                     f"w_qkv = nn.Linear(d_model, 3 * d_model): cannot read its projections")


def project_qkv(attention: nn.Module, x: Tensor, memory: Tensor | None = None) -> tuple[Tensor, Tensor, Tensor]:
    """The queries from x, the keys and values from memory (x itself for self-attention), each
    (B, T, d_model) before the heads are split, whichever layout `attention` uses."""
    source = x if memory is None else memory
    if attention_layout(attention) == "separate":
        return attention.w_q(x), attention.w_k(source), attention.w_v(source)
    d_model = attention.w_qkv.out_features // 3
    weights = attention.w_qkv.weight.split(d_model)  # 3 x (d_model, d_model): W_q, W_k, W_v
    biases = (None,) * 3 if attention.w_qkv.bias is None else attention.w_qkv.bias.split(d_model)
    q = nn.functional.linear(x, weights[0], biases[0])  # (B, T_q, d_model)
    k = nn.functional.linear(source, weights[1], biases[1])  # (B, T_k, d_model)
    v = nn.functional.linear(source, weights[2], biases[2])
    return q, k, v


def _fused_prefixes(model: nn.Module) -> list[str]:
    """The name prefixes ("blocks.layers.0.self_attn.") of the fused attention modules in `model`."""
    return [f"{name}." if name else "" for name, module in model.named_modules()
            if isinstance(getattr(module, FUSED, None), nn.Linear)
            and not any(hasattr(module, separate) for separate in SEPARATE)]


def in_layout_of(model: nn.Module, state: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """`state` (separate-layout names, as tfcourse's reference and the GPT-2 converter write them)
    with each fused attention module's w_q/w_k/w_v tensors stacked into its w_qkv. Everything
    else is passed through; a model without fused attention gets `state` unchanged."""
    converted = dict(state)
    for prefix in _fused_prefixes(model):
        for kind in ("weight", "bias"):
            names = [f"{prefix}{p}.{kind}" for p in SEPARATE]
            if all(name in converted for name in names):
                converted[f"{prefix}{FUSED}.{kind}"] = torch.cat([converted.pop(name) for name in names])  # (3d, ...)
    return converted


__all__ = ["SEPARATE", "FUSED", "attention_layout", "project_qkv", "in_layout_of"]
