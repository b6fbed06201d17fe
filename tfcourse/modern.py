"""From the 2017 block to a modern LLM block (LLaMA, Mistral, Qwen): the five changes, and a small GPT
that can switch each one on or off.

    2017 (the paper)                      a modern decoder block
    post-LN: LN(x + F(x))            ->   pre-LN: x + F(Norm(x)), one final Norm
    LayerNorm (mean, variance, bias) ->   RMSNorm: x / rms(x) * gain
    ReLU FFN, d_ff = 4 d_model       ->   SwiGLU FFN, three matrices, d_ff = 2/3 * 4 d_model
    sinusoidal PE added to the input ->   RoPE: queries and keys rotated by their position
    n_heads keys/values per layer    ->   grouped-query attention: n_kv_heads < n_heads (1: multi-query)

RoPE layout: the lesson's `apply_rope` rotates the *half-split* pairs (dimension i with i + d_head/2), as
GPT-NeoX and Hugging Face's Llama do. Meta's original LLaMA code, the RoFormer paper and CS336 rotate
*interleaved* pairs (2i, 2i + 1). `rotary(x, positions, layout=...)` does either, at any positions (a start
offset, or one position per token for packed or left-padded batches). The two layouts are the same rotation
after a fixed permutation of the output rows of W_q and W_k (`rope_rows_to_half`), so a model trained with
one converts to the other; tests/test_modern.py proves it and compares with Hugging Face's implementation.

The model itself is `tfcourse.models.GPT`: its config switches each of the five changes (`norm`,
`activation`, `positional`, `norm_first`, `n_kv_heads`, `bias`), and `GPTConfig.llama` names the modern block.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import KVCache, _fused_mask, scaled_dot_product_attention
from .validation import expect_divisible, expect_features, expect_tensor, shape_str

# F.scaled_dot_product_attention learned `enable_gqa` in torch 2.5; older versions repeat the heads.
_SDPA_HAS_GQA = tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 5)


# ----------------------------------------------------------------------------------------------
# RMSNorm
# ----------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    """RMSNorm(x) = x / sqrt(mean(x^2) + eps) * gain, over the last dimension (Zhang & Sennrich, 2019).

    LayerNorm without the mean: it only rescales each vector to root-mean-square 1, then applies a
    learned gain. No mean to subtract and no bias: fewer operations, and in practice models train as
    well. eps sits inside the square root, so an all-zero vector divides by sqrt(eps), not by 0.
    """

    def __init__(self, d_model: int, eps: float = 1e-6):
        super().__init__()
        self.d_model, self.eps = d_model, eps
        self.weight = nn.Parameter(torch.ones(d_model))  # the gain; there is no bias

    def forward(self, x: Tensor) -> Tensor:
        expect_features(x, self.d_model)
        rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)  # (..., 1)
        return self.weight * (x / rms)  # (..., d_model)


# ----------------------------------------------------------------------------------------------
# SwiGLU feed-forward network
# ----------------------------------------------------------------------------------------------


def swiglu_hidden_size(d_model: int) -> int:
    """2/3 of 4 d_model: the hidden width at which SwiGLU's three matrices (3 * d_model * d_ff numbers)
    hold as many parameters as the ReLU FFN's two (2 * d_model * 4 d_model), exactly when 3 divides
    d_model. (LLaMA then rounds up to a multiple of 256: 11,008 for d_model 4,096.)"""
    return 2 * (4 * d_model) // 3


class SwiGLUFeedForward(nn.Module):
    """SwiGLU(x) = (SiLU(x W_gate) * (x W_up)) W_down, bias-free, as in PaLM and LLaMA (Shazeer, 2020).

    x W_up are the features; SiLU(x W_gate) = (x W_gate) * sigmoid(x W_gate) decides, feature by
    feature, how much of each passes: a gate computed from the input itself. Three matrices instead of
    two, so d_ff defaults to swiglu_hidden_size(d_model), which keeps the parameter count.
    """

    def __init__(self, d_model: int, d_ff: int | None = None, dropout: float = 0.0):
        super().__init__()
        d_ff = swiglu_hidden_size(d_model) if d_ff is None else d_ff
        self.d_model, self.d_ff = d_model, d_ff
        self.w_gate = nn.Linear(d_model, d_ff, bias=False)  # the gate's pre-activation
        self.w_up = nn.Linear(d_model, d_ff, bias=False)  # the features that the gate lets through
        self.w_down = nn.Linear(d_ff, d_model, bias=False)  # back to d_model, so the residual sum fits
        self.dropout = nn.Dropout(dropout)

    def forward(self, x: Tensor) -> Tensor:
        expect_features(x, self.d_model)
        gated = F.silu(self.w_gate(x)) * self.w_up(x)  # (..., d_ff): element by element
        return self.w_down(self.dropout(gated))  # (..., d_model)


# ----------------------------------------------------------------------------------------------
# Rotary position embedding (RoPE)
# ----------------------------------------------------------------------------------------------


def _check_rope_input(x: Tensor) -> None:
    expect_tensor(x, "x", expected="(..., T, d_head)")
    if x.dim() < 2 or x.shape[-1] % 2 != 0:
        raise ValueError(f"x must be (..., T, d_head) with an even d_head (dimensions rotate in pairs), "
                         f"got shape {shape_str(x)}")


def rotate_half(x: Tensor) -> Tensor:
    """(x1, x2) -> (-x2, x1) over the two halves of the last dimension: the 90-degree turn of every
    pair (x[i], x[i + d/2]), so that x * cos + rotate_half(x) * sin turns each pair by its angle."""
    x1, x2 = x.chunk(2, dim=-1)  # (..., d/2) each
    return torch.cat([-x2, x1], dim=-1)  # (..., d)


def rope_cos_sin(length: int, d_head: int, offset: int = 0, base: float = 10000.0,
                 device: torch.device | str | None = None) -> tuple[Tensor, Tensor]:
    """cos and sin, each (length, d_head), of the angles (offset + t) * theta_i for positions
    offset .. offset + length - 1, with theta_i = base^(-2i / d_head), i = 0 .. d_head/2 - 1
    (the sinusoidal encoding's frequencies). Half-split layout: dimensions i and i + d_head/2 share theta_i."""
    inv_freq = 1.0 / base ** (torch.arange(0, d_head, 2, dtype=torch.float32, device=device) / d_head)  # (d_head/2,)
    positions = torch.arange(offset, offset + length, dtype=torch.float32, device=device)  # (T,)
    angles = torch.outer(positions, inv_freq)  # (T, d_head/2): position times frequency
    angles = torch.cat([angles, angles], dim=-1)  # (T, d_head): pair (i, i + d_head/2) turns by one angle
    return angles.cos(), angles.sin()


def apply_rope(x: Tensor, offset: int = 0, base: float = 10000.0) -> Tensor:
    """Rotate x (..., T, d_head), e.g. queries or keys (B, n_heads, T, d_head), by their positions
    offset .. offset + T - 1 (offset = how many positions a KV cache already holds).

    Each pair of dimensions turns by the angle position * theta_i, so the score between a query at m
    and a key at n, (R_m q) . (R_n k) = q . R_(n-m) k, depends on the offset n - m alone."""
    _check_rope_input(x)
    cos, sin = rope_cos_sin(x.shape[-2], x.shape[-1], offset, base, x.device)  # (T, d_head) each
    return x * cos.to(x.dtype) + rotate_half(x) * sin.to(x.dtype)  # (..., T, d_head)


ROPE_LAYOUTS = ("half", "interleaved")


def rotate_pairs(x: Tensor, layout: str = "half") -> Tensor:
    """The 90-degree turn of every pair: (a, b) -> (-b, a). "half" pairs dimension i with i + d/2
    (rotate_half); "interleaved" pairs 2i with 2i + 1 (RoFormer, Meta's LLaMA)."""
    if layout == "half":
        return rotate_half(x)
    even, odd = x[..., 0::2], x[..., 1::2]  # (..., d/2) each: the two members of every pair
    return torch.stack([-odd, even], dim=-1).flatten(-2)  # (..., d/2, 2) -> (..., d): back in place


def _rope_positions(positions: int | Tensor, length: int, device: torch.device) -> Tensor:
    """A start offset, (T,) or (B, T) integer positions -> float32 positions (T,) or (B, T)."""
    if isinstance(positions, int):
        return torch.arange(positions, positions + length, dtype=torch.float32, device=device)  # (T,)
    expect_tensor(positions, "positions", expected="(T,) or (B, T) integer positions")
    if positions.dim() not in (1, 2) or positions.shape[-1] != length or positions.is_floating_point():
        raise ValueError(f"positions must be integers of shape (T,) or (B, T) with T={length}, "
                         f"got {positions.dtype} {shape_str(positions)}")
    return positions.to(device=device, dtype=torch.float32)


def rotary(x: Tensor, positions: int | Tensor = 0, base: float = 10000.0, layout: str = "half") -> Tensor:
    """RoPE on x (..., T, d_head) at any positions: a start offset (as apply_rope), positions (T,) shared by
    the batch, or (B, T), one per token, for x (B, n_heads, T, d_head) (packed or left-padded sequences).
    layout: "half" (this course, Hugging Face) or "interleaved" (RoFormer, Meta's LLaMA, CS336).
    With layout="half" and an offset it equals apply_rope exactly (tests/test_modern.py)."""
    _check_rope_input(x)
    if layout not in ROPE_LAYOUTS:
        raise ValueError(f"layout must be one of {ROPE_LAYOUTS}, got {layout!r}")
    length, d_head = x.shape[-2], x.shape[-1]
    pos = _rope_positions(positions, length, x.device)  # (T,) or (B, T)
    if pos.dim() == 2 and x.dim() != 4:
        raise ValueError(f"positions of shape (B, T) need x of shape (B, heads, T, d_head), got {shape_str(x)}")
    inv_freq = 1.0 / base ** (torch.arange(0, d_head, 2, dtype=torch.float32, device=x.device) / d_head)  # (d/2,)
    angles = pos[..., None] * inv_freq  # (T, d/2) or (B, T, d/2): position times frequency
    if layout == "half":
        angles = torch.cat([angles, angles], dim=-1)  # dimensions i and i + d/2 turn by one angle
    else:
        angles = angles.repeat_interleave(2, dim=-1)  # dimensions 2i and 2i + 1 turn by one angle
    if angles.dim() == 3:
        angles = angles[:, None]  # (B, 1, T, d_head): the same positions for every head
    cos, sin = angles.cos().to(x.dtype), angles.sin().to(x.dtype)
    return x * cos + rotate_pairs(x, layout) * sin  # (..., T, d_head)


def rope_rows_to_half(weight: Tensor, n_heads: int) -> Tensor:
    """W_q or W_k (n_heads * d_head, d_model) of a model trained with interleaved RoPE -> the same model's
    matrix for half-split RoPE: within each head, output rows 0, 2, 4, ... first, then 1, 3, 5, ...
    Pair (2i, 2i + 1) then sits at (i, i + d_head/2), where the half layout rotates it by the same angle,
    so every attention score, and the model's output, stays the same (what Hugging Face's Llama
    conversion script does)."""
    expect_tensor(weight, "weight", ndim=2, expected="(n_heads * d_head, d_model)")
    rows = weight.shape[0]
    if rows % n_heads != 0 or (rows // n_heads) % 2 != 0:
        raise ValueError(f"weight must have n_heads={n_heads} heads of an even d_head as rows, got {shape_str(weight)}")
    d_head = rows // n_heads
    order = torch.cat([torch.arange(0, d_head, 2), torch.arange(1, d_head, 2)])  # (d_head,) within one head
    return weight.view(n_heads, d_head, -1)[:, order].reshape(rows, -1)  # (n_heads * d_head, d_model)


# ----------------------------------------------------------------------------------------------
# Grouped-query attention
# ----------------------------------------------------------------------------------------------


def _check_gqa_shapes(q: Tensor, k: Tensor, v: Tensor) -> None:
    for name, t in (("q", q), ("k", k), ("v", v)):
        expect_tensor(t, name, ndim=4, expected="(B, heads, T, d_head)")
    if k.shape != v.shape or q.shape[0] != k.shape[0] or q.shape[-1] != k.shape[-1] \
            or q.shape[1] % k.shape[1] != 0:
        raise ValueError(f"expected q (B, n_heads, T_q, d_head) and k, v (B, n_kv_heads, T_k, d_head) with "
                         f"n_kv_heads dividing n_heads, got q {shape_str(q)}, k {shape_str(k)}, v {shape_str(v)}")


def repeat_kv(x: Tensor, n_rep: int) -> Tensor:
    """(B, n_kv_heads, T, d_head) -> (B, n_kv_heads * n_rep, T, d_head): kv head j serves the n_rep
    consecutive query heads j * n_rep .. (j + 1) * n_rep - 1 (each head repeated in place, not the
    whole stack tiled)."""
    expect_tensor(x, "x", ndim=4, expected="(B, n_kv_heads, T, d_head)")
    return x.repeat_interleave(n_rep, dim=1)  # (B, n_kv_heads * n_rep, T, d_head)


def grouped_query_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                            dropout_p: float = 0.0) -> Tensor:
    """Attention for q (B, n_heads, T_q, d_head) with fewer keys/values k, v (B, n_kv_heads, T_k, d_head):
    each group of n_heads / n_kv_heads query heads shares one key/value head. Returns (B, n_heads, T_q, d_head).

    n_kv_heads = n_heads is ordinary multi-head attention; n_kv_heads = 1 is multi-query attention."""
    _check_gqa_shapes(q, k, v)
    n_rep = q.shape[1] // k.shape[1]  # query heads per key/value head
    return scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), mask, dropout_p)[0]


class GroupedQueryAttention(nn.Module):
    """Self-attention with n_kv_heads <= n_heads key/value heads and (optionally) RoPE on queries and keys.

    The KV cache stores k and v *before* they are repeated, (B, n_kv_heads, T, d_head): that is the
    saving, n_heads / n_kv_heads times less memory per token (see kv_cache_bytes). Keys are cached
    already rotated, each by its own position, so a new query only needs its own rotation.
    `fused=True` computes the same with torch's fused kernel (tests prove both paths equal).
    """

    def __init__(self, d_model: int, n_heads: int, n_kv_heads: int | None = None, *, dropout: float = 0.0,
                 bias: bool = False, rope: bool = True, rope_base: float = 10000.0, rope_layout: str = "half",
                 fused: bool = False):
        super().__init__()
        expect_divisible(d_model, n_heads)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_kv_heads < 1 or n_heads % n_kv_heads != 0:
            raise ValueError(f"n_kv_heads ({n_kv_heads}) must divide n_heads ({n_heads}): each key/value head "
                             "serves an equal group of query heads")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        if rope_layout not in ROPE_LAYOUTS:
            raise ValueError(f"rope_layout must be one of {ROPE_LAYOUTS}, got {rope_layout!r}")
        self.dropout, self.rope, self.rope_base, self.rope_layout, self.fused = dropout, rope, rope_base, rope_layout, fused
        self.w_q = nn.Linear(d_model, n_heads * self.d_head, bias=bias)
        self.w_k = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)  # fewer heads: a narrower matrix
        self.w_v = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.w_o = nn.Linear(n_heads * self.d_head, d_model, bias=bias)

    def forward(self, x: Tensor, mask: Tensor | None = None, cache: KVCache | None = None,
                is_causal: bool = False, positions: Tensor | None = None) -> Tensor:
        """x (B, T, d_model) -> (B, T, d_model). `is_causal`: `mask` is the plain causal mask.
        `positions` (T,) or (B, T): where each token sits, for RoPE (default: after the cached tokens)."""
        expect_tensor(x, "x", ndim=3, expected="(B, T, d_model)")
        expect_features(x, self.d_model)
        batch, length, _ = x.shape
        if positions is None:
            positions = len(cache) if cache is not None else 0  # the new tokens come after the cached ones
        q = self.w_q(x).view(batch, length, self.n_heads, self.d_head).transpose(1, 2)  # (B, n_heads, T, d_head)
        k = self.w_k(x).view(batch, length, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, n_kv_heads, T, d_head)
        v = self.w_v(x).view(batch, length, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, n_kv_heads, T, d_head)
        if self.rope:
            # Only queries and keys carry position (it enters through their dot product); values carry content.
            q = rotary(q, positions, self.rope_base, self.rope_layout)
            k = rotary(k, positions, self.rope_base, self.rope_layout)
        if cache is not None:
            k, v = cache.append(k, v)  # (B, n_kv_heads, offset + T, d_head): the un-repeated heads
        dropout_p = self.dropout if self.training else 0.0
        if self.fused:
            attn_mask, causal = _fused_mask(mask, is_causal, q.shape[-2], k.shape[-2])
            if _SDPA_HAS_GQA:
                out = F.scaled_dot_product_attention(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p,
                                                     is_causal=causal, enable_gqa=True)
            else:
                n_rep = self.n_heads // self.n_kv_heads
                out = F.scaled_dot_product_attention(q, repeat_kv(k, n_rep), repeat_kv(v, n_rep), attn_mask=attn_mask,
                                                     dropout_p=dropout_p, is_causal=causal)
        else:
            out = grouped_query_attention(q, k, v, mask, dropout_p)  # (B, n_heads, T, d_head)
        out = out.transpose(1, 2).reshape(batch, length, self.n_heads * self.d_head)  # (B, T, d_model)
        return self.w_o(out)


def kv_cache_bytes(n_layers: int, batch: int, length: int, n_kv_heads: int, d_head: int,
                   dtype: torch.dtype = torch.float32) -> int:
    """Bytes a KV cache holds: keys and values (2) for every layer, sequence, position, kv head and
    dimension, at the dtype's size. Multi-head attention has n_kv_heads = n_heads; GQA divides by n_heads / n_kv_heads."""
    element = torch.empty((), dtype=dtype).element_size()  # bytes per number: 4 for float32, 2 for bfloat16
    return 2 * n_layers * batch * length * n_kv_heads * d_head * element


def cache_bytes(caches: list[KVCache]) -> int:
    """Bytes of the keys and values a model's caches hold, the positions filled so far (measured from the
    tensors, not computed from a formula; the room a cache reserves for later positions is not counted)."""
    return sum(t.numel() * t.element_size() for cache in caches for t in (cache.k, cache.v) if t is not None)


__all__ = [
    "RMSNorm", "swiglu_hidden_size", "SwiGLUFeedForward", "rotate_half", "rope_cos_sin", "apply_rope",
    "ROPE_LAYOUTS", "rotate_pairs", "rotary", "rope_rows_to_half", "repeat_kv", "grouped_query_attention",
    "GroupedQueryAttention", "kv_cache_bytes", "cache_bytes",
]
