"""Stage 3: attention. Every position looks at every (allowed) position and takes a weighted mix.

    Attention(Q, K, V) = softmax(Q K^T / sqrt(d_k)) V

Masks are boolean and True means "may attend", as in torch.nn.functional.scaled_dot_product_attention.
A row whose keys are all masked attends to nothing: its weights and output are exactly 0 (not NaN).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .validation import expect_divisible, expect_tensor, shape_str


def _check_mask(mask: Tensor, scores_shape: torch.Size) -> None:
    expect_tensor(mask, "mask")
    if mask.dtype != torch.bool:
        raise TypeError(
            f"mask must be a bool tensor (True = may attend), got dtype {mask.dtype}; "
            "build one with causal_mask() or padding_mask()"
        )
    # Broadcasting aligns shapes from the right; each mask size must be 1 or the scores' size.
    fits = mask.dim() <= len(scores_shape) and all(
        m in (1, s) for m, s in zip(reversed(mask.shape), reversed(scores_shape))
    )
    if not fits:
        raise ValueError(
            f"mask of shape {tuple(mask.shape)} does not broadcast to the attention scores "
            f"{tuple(scores_shape)} = (..., T_q, T_k); use (T_q, T_k), (B, 1, 1, T_k) or (B, 1, T_q, T_k)"
        )


def _check_qkv(q: Tensor, k: Tensor, v: Tensor) -> None:
    expect_tensor(q, "q", expected="(..., T_q, d_k)")
    expect_tensor(k, "k", expected="(..., T_k, d_k)")
    expect_tensor(v, "v", expected="(..., T_k, d_v)")
    if q.dim() < 2 or k.dim() != q.dim() or v.dim() != q.dim():
        raise ValueError(
            f"q, k, v must have the same number (>= 2) of dimensions, got "
            f"{shape_str(q)}, {shape_str(k)}, {shape_str(v)}"
        )
    if q.shape[-1] != k.shape[-1] or k.shape[-2] != v.shape[-2]:
        raise ValueError(
            f"expected q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v), got "
            f"{shape_str(q)}, {shape_str(k)}, {shape_str(v)}"
        )


def scaled_dot_product_attention(
    q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None, dropout_p: float = 0.0
) -> tuple[Tensor, Tensor]:
    """softmax(q k^T / sqrt(d_k)) v for q (..., T_q, d_k), k (..., T_k, d_k), v (..., T_k, d_v).

    Returns (output (..., T_q, d_v), weights (..., T_q, T_k)).
    Why divide by sqrt(d_k): a dot product of two random d_k-dim vectors with unit-variance
    entries has variance d_k; without the division large d_k pushes softmax into a one-hot
    corner where its gradient vanishes.
    """
    _check_qkv(q, k, v)
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        _check_mask(mask, scores.shape)
        # -inf before softmax gives those keys weight exp(-inf) = 0.
        scores = scores.masked_fill(~mask, float("-inf"))
        # A row with no allowed key would be softmax(all -inf) = NaN; give it zero weights instead.
        nothing_allowed = ~mask.any(dim=-1, keepdim=True)  # (..., T_q, 1)
        scores = scores.masked_fill(nothing_allowed, 0.0)
    weights = torch.softmax(scores, dim=-1)  # each row sums to 1 over the keys
    if mask is not None:
        weights = weights.masked_fill(nothing_allowed, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights  # (..., T_q, d_v), (..., T_q, T_k)


def _check_causal_lengths(t_q: int, t_k: int) -> None:
    if t_k < t_q:
        raise ValueError(f"causal_mask needs t_k >= t_q (queries are the last t_q keys), got {t_q}, {t_k}")


def causal_mask(t_q: int, t_k: int | None = None, device: torch.device | str | None = None) -> Tensor:
    """(T_q, T_k) bool mask: query i may attend to key j only if j is not in its future.

    With a key/value cache the T_q queries are the *last* T_q of T_k positions, so query i
    sits at absolute position T_k - T_q + i. The upper triangle (the future) is False.
    """
    if t_k is None:
        t_k = t_q  # no cache: as many keys as queries
    _check_causal_lengths(t_q, t_k)
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)


def padding_mask(ids: Tensor, pad_id: int) -> Tensor:
    """(B, 1, 1, T) bool mask, False at padding keys, for ids (B, T). It broadcasts over heads and queries."""
    expect_tensor(ids, "ids", ndim=2, expected="(B, T)")
    return (ids != pad_id)[:, None, None, :]  # (B, 1, 1, T)


def split_heads(x: Tensor, n_heads: int) -> Tensor:
    """(B, T, d_model) -> (B, n_heads, T, d_head): head h owns dimensions [h*d_head, (h+1)*d_head)."""
    expect_tensor(x, "x", ndim=3, expected="(B, T, d_model)")
    batch, length, d_model = x.shape
    expect_divisible(d_model, n_heads)
    x = x.view(batch, length, n_heads, d_model // n_heads)  # (B, T, n_heads, d_head)
    return x.transpose(1, 2)  # (B, n_heads, T, d_head)


def merge_heads(x: Tensor) -> Tensor:
    """(B, n_heads, T, d_head) -> (B, T, d_model): the concatenation of the heads, the inverse of split_heads."""
    expect_tensor(x, "x", ndim=4, expected="(B, n_heads, T, d_head)")
    batch, n_heads, length, d_head = x.shape
    x = x.transpose(1, 2)  # (B, T, n_heads, d_head)
    return x.reshape(batch, length, n_heads * d_head)  # (B, T, d_model); a copy, as x is not contiguous


@dataclass
class KVCache:
    """Keys and values already computed for earlier positions, so generation computes each once.

    Self-attention appends the new positions' keys/values; cross-attention stores the encoder
    memory's keys/values the first time and reuses them. `KVCache()` grows by concatenation, a new
    tensor at every append; `KVCache(capacity=n)` (what `GPT.make_caches` gives, n = max_len)
    reserves room for n positions at its first append and writes each new position into place.
    """

    k: Tensor | None = None  # (B, n_heads, T_cached, d_head)
    v: Tensor | None = None  # (B, n_heads, T_cached, d_head)
    capacity: int | None = None  # positions to reserve room for; None: grow by concatenation
    _room: tuple[Tensor, Tensor] | None = field(default=None, repr=False, compare=False)

    def __len__(self) -> int:
        return 0 if self.k is None else self.k.shape[2]

    def append(self, k: Tensor, v: Tensor) -> tuple[Tensor, Tensor]:
        if self.capacity is None:
            if self.k is None:
                self.k, self.v = k, v
            else:
                self.k = torch.cat([self.k, k], dim=2)  # (B, n_heads, T_cached + T_new, d_head)
                self.v = torch.cat([self.v, v], dim=2)
            return self.k, self.v
        cached, new = len(self), k.shape[2]
        if cached + new > self.capacity:
            raise ValueError(f"the cache holds {cached} positions and has room for {self.capacity}: {new} more do "
                             "not fit (a cache cannot slide past the context window, max_len)")
        if self._room is None or self.k is None or self.k._base is not self._room[0]:
            self._reserve(k, v, cached)  # the first append, or k and v were replaced from outside
        room_k, room_v = self._room
        room_k[:, :, cached : cached + new] = k  # written into place: no new tensor
        room_v[:, :, cached : cached + new] = v
        self.k, self.v = room_k[:, :, : cached + new], room_v[:, :, : cached + new]  # views of the room
        return self.k, self.v

    def _reserve(self, k: Tensor, v: Tensor, cached: int) -> None:
        """Room for `capacity` positions shaped like k and v, holding what is cached so far."""
        room_k = k.new_empty(*k.shape[:2], self.capacity, k.shape[3])  # (B, n_heads, capacity, d_head)
        room_v = v.new_empty(*v.shape[:2], self.capacity, v.shape[3])
        if cached:
            room_k[:, :, :cached], room_v[:, :, :cached] = self.k, self.v
        self._room = (room_k, room_v)


def _fused_mask(mask: Tensor | None, is_causal: bool, t_q: int, t_k: int) -> tuple[Tensor | None, bool]:
    """(attn_mask, is_causal) for F.scaled_dot_product_attention, decided from shapes alone (reading
    the mask's values would make the CPU wait for the GPU).

    A plain causal mask with as many queries as keys becomes is_causal=True and no mask: the
    FlashAttention kernel accepts that, but no explicit mask. One query at the end of the keys (a
    generation step with the cache) may see every key: no mask at all. Anything else stays explicit.
    """
    if not is_causal:
        return mask, False
    if t_q == t_k:
        return None, True
    if t_q == 1:
        return None, False
    return mask, False  # several new queries after a cache: torch's is_causal would align them wrongly


class MultiHeadAttention(nn.Module):
    """MultiHead(Q, K, V) = Concat(head_1, ..., head_h) W^O,  head_i = Attention(Q W_i^Q, K W_i^K, V W_i^V).

    Self-attention: forward(x). Cross-attention: forward(x, memory) - queries from x (the decoder),
    keys and values from memory (the encoder output H).
    `fused=True` computes the same attention with torch's fused kernel (faster, no weights returned);
    the course's tests prove both paths equal.
    """

    def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, bias: bool = True, fused: bool = False):
        super().__init__()
        expect_divisible(d_model, n_heads)
        self.d_model, self.n_heads, self.d_head = d_model, n_heads, d_model // n_heads
        self.dropout, self.fused = dropout, fused
        self.w_q = nn.Linear(d_model, d_model, bias=bias)  # all heads' W^Q side by side
        self.w_k = nn.Linear(d_model, d_model, bias=bias)
        self.w_v = nn.Linear(d_model, d_model, bias=bias)
        self.w_o = nn.Linear(d_model, d_model, bias=bias)

    def split_heads(self, x: Tensor) -> Tensor:
        """(B, T, d_model) -> (B, n_heads, T, d_head), with this module's n_heads."""
        return split_heads(x, self.n_heads)  # the module-level function

    def merge_heads(self, x: Tensor) -> Tensor:
        """(B, n_heads, T, d_head) -> (B, T, d_model): the concatenation of the heads."""
        return merge_heads(x)  # the module-level function

    def _keys_values(self, source: Tensor, cache: KVCache | None, is_cross: bool) -> tuple[Tensor, Tensor]:
        if is_cross and cache is not None and len(cache) > 0:
            return cache.k, cache.v  # the encoder output does not change while decoding
        k = self.split_heads(self.w_k(source))  # (B, n_heads, T_k, d_head)
        v = self.split_heads(self.w_v(source))  # (B, n_heads, T_k, d_head)
        if cache is not None:
            k, v = cache.append(k, v)
        return k, v

    def forward(
        self,
        x: Tensor,
        memory: Tensor | None = None,
        mask: Tensor | None = None,
        cache: KVCache | None = None,
        return_weights: bool = False,
        is_causal: bool = False,
    ) -> Tensor | tuple[Tensor, Tensor]:
        """`is_causal=True` says that `mask` is the plain causal mask (no padding in it): the fused
        path can then skip it and use the kernels that build it themselves (FlashAttention)."""
        expect_tensor(x, "x", ndim=3, expected="(B, T, d_model)")
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must be (B, T, d_model={self.d_model}), got shape {shape_str(x)}")
        if x.shape[0] == 0:
            raise ValueError(f"x is an empty batch: shape {shape_str(x)}")
        is_cross = memory is not None
        if is_cross:
            expect_tensor(memory, "memory", ndim=3, expected="(B, T_k, d_model)")
        q = self.split_heads(self.w_q(x))  # (B, n_heads, T_q, d_head)
        k, v = self._keys_values(memory if is_cross else x, cache, is_cross)
        dropout_p = self.dropout if self.training else 0.0
        if self.fused and not return_weights:
            if mask is not None:
                _check_mask(mask, q.shape[:-1] + k.shape[-2:-1])
            mask, causal = _fused_mask(mask, is_causal, q.shape[-2], k.shape[-2])
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, dropout_p=dropout_p, is_causal=causal)
            weights = None
        else:
            out, weights = scaled_dot_product_attention(q, k, v, mask, dropout_p)  # (B, n_heads, T_q, d_head)
        out = self.w_o(self.merge_heads(out))  # (B, T_q, d_model)
        return (out, weights) if return_weights else out


__all__ = [
    "scaled_dot_product_attention",
    "causal_mask",
    "padding_mask",
    "split_heads",
    "merge_heads",
    "KVCache",
    "MultiHeadAttention",
]
