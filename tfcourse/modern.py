"""From the 2017 block to a modern LLM block (LLaMA, Mistral, Qwen): the five changes, and a small GPT
that can switch each one on or off.

    2017 (the paper)                      a modern decoder block
    post-LN: LN(x + F(x))            ->   pre-LN: x + F(Norm(x)), one final Norm
    LayerNorm (mean, variance, bias) ->   RMSNorm: x / rms(x) * gain
    ReLU FFN, d_ff = 4 d_model       ->   SwiGLU FFN, three matrices, d_ff = 2/3 * 4 d_model
    sinusoidal PE added to the input ->   RoPE: queries and keys rotated by their position
    n_heads keys/values per layer    ->   grouped-query attention: n_kv_heads < n_heads (1: multi-query)

RoPE layout: this package rotates the *half-split* pairs (dimension i with i + d_head/2), as GPT-NeoX and
Hugging Face's Llama do. Meta's original LLaMA code and the RoFormer paper rotate *interleaved* pairs
(2i, 2i + 1). The two are the same rotation after a fixed permutation of the dimensions of W_q and W_k,
so a model trained with one can be converted to the other; tests/test_modern.py compares this package
with Hugging Face's implementation and gets exactly the same numbers.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .attention import KVCache, _fused_mask, causal_mask, scaled_dot_product_attention
from .blocks import LayerNorm, sublayer_connection
from .embedding import LearnedPositionalEmbedding, SinusoidalPositionalEncoding, TokenEmbedding
from .ffn import PositionwiseFeedForward
from .validation import expect_divisible, expect_tensor, expect_token_ids, shape_str

# F.scaled_dot_product_attention learned `enable_gqa` in torch 2.5; older versions repeat the heads.
_SDPA_HAS_GQA = tuple(int(part) for part in torch.__version__.split(".")[:2]) >= (2, 5)


def _check_features(x: Tensor, d_model: int) -> None:
    expect_tensor(x, "x", expected="(..., d_model)")
    if x.dim() == 0 or x.shape[-1] != d_model:
        raise ValueError(f"x must end in d_model={d_model}, got shape {shape_str(x)}")


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
        _check_features(x, self.d_model)
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
        _check_features(x, self.d_model)
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
                 bias: bool = False, rope: bool = True, rope_base: float = 10000.0, fused: bool = False):
        super().__init__()
        expect_divisible(d_model, n_heads)
        n_kv_heads = n_heads if n_kv_heads is None else n_kv_heads
        if n_kv_heads < 1 or n_heads % n_kv_heads != 0:
            raise ValueError(f"n_kv_heads ({n_kv_heads}) must divide n_heads ({n_heads}): each key/value head "
                             "serves an equal group of query heads")
        self.d_model, self.n_heads, self.n_kv_heads = d_model, n_heads, n_kv_heads
        self.d_head = d_model // n_heads
        self.dropout, self.rope, self.rope_base, self.fused = dropout, rope, rope_base, fused
        self.w_q = nn.Linear(d_model, n_heads * self.d_head, bias=bias)
        self.w_k = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)  # fewer heads: a narrower matrix
        self.w_v = nn.Linear(d_model, n_kv_heads * self.d_head, bias=bias)
        self.w_o = nn.Linear(n_heads * self.d_head, d_model, bias=bias)

    def forward(self, x: Tensor, mask: Tensor | None = None, cache: KVCache | None = None,
                is_causal: bool = False) -> Tensor:
        """x (B, T, d_model) -> (B, T, d_model). `is_causal`: `mask` is the plain causal mask."""
        expect_tensor(x, "x", ndim=3, expected="(B, T, d_model)")
        _check_features(x, self.d_model)
        batch, length, _ = x.shape
        offset = len(cache) if cache is not None else 0  # the new tokens come after the cached ones
        q = self.w_q(x).view(batch, length, self.n_heads, self.d_head).transpose(1, 2)  # (B, n_heads, T, d_head)
        k = self.w_k(x).view(batch, length, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, n_kv_heads, T, d_head)
        v = self.w_v(x).view(batch, length, self.n_kv_heads, self.d_head).transpose(1, 2)  # (B, n_kv_heads, T, d_head)
        if self.rope:
            # Only queries and keys carry position (it enters through their dot product); values carry content.
            q, k = apply_rope(q, offset, self.rope_base), apply_rope(k, offset, self.rope_base)
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
    """Bytes the tensors of a model's caches actually hold (measured, not computed from a formula)."""
    return sum(t.numel() * t.element_size() for cache in caches for t in (cache.k, cache.v) if t is not None)


# ----------------------------------------------------------------------------------------------
# A GPT that switches each change on or off
# ----------------------------------------------------------------------------------------------

NORMS = ("layer", "rms")
FEED_FORWARDS = ("relu", "gelu", "swiglu")
POSITIONALS = ("sinusoidal", "learned", "rope")


@dataclass
class ModernGPTConfig:
    """A decoder-only model; the defaults are the modern block, the named constructors the ablation's rungs."""

    vocab_size: int  # tokens the model reads and predicts
    max_len: int = 256  # context length (RoPE could go further; the model keeps one limit for all variants)
    d_model: int = 384  # residual-stream width
    n_heads: int = 6  # query heads (d_head = d_model / n_heads)
    n_kv_heads: int | None = None  # key/value heads: None = n_heads (multi-head), fewer = GQA, 1 = multi-query
    n_layers: int = 6  # blocks
    d_ff: int | None = None  # FFN width; None: 4 d_model (ReLU, GELU) or 2/3 of that (SwiGLU), equal parameters
    dropout: float = 0.0  # small runs on lots of data do not overfit
    norm_first: bool = True  # pre-LN: x + F(Norm(x)) and a final Norm; False is the paper's post-LN
    norm: str = "rms"  # "layer" (the paper, GPT-2) or "rms" (LLaMA)
    ffn: str = "swiglu"  # "relu" (the paper), "gelu" (GPT-2) or "swiglu" (LLaMA)
    positional: str = "rope"  # "sinusoidal" (the paper), "learned" (GPT-2) or "rope" (LLaMA)
    bias: bool = False  # biases in the attention projections: the paper has them, LLaMA drops them
    tie_weights: bool = True  # the output layer shares the token table (fewer parameters on small data)
    fused_attention: bool = True  # torch's fused attention kernel: the same result, faster

    def __post_init__(self) -> None:
        expect_divisible(self.d_model, self.n_heads)
        for name, value, allowed in (("norm", self.norm, NORMS), ("ffn", self.ffn, FEED_FORWARDS),
                                     ("positional", self.positional, POSITIONALS)):
            if value not in allowed:
                raise ValueError(f"{name} must be one of {allowed}, got {value!r}")
        kv = self.n_heads if self.n_kv_heads is None else self.n_kv_heads
        if kv < 1 or self.n_heads % kv != 0:
            raise ValueError(f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads})")
        if not 0.0 <= self.dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {self.dropout}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def transformer_2017(cls, vocab_size: int, **shape) -> ModernGPTConfig:
        """The paper's block as a decoder: post-LN, LayerNorm, ReLU FFN, sinusoidal positions, biases."""
        return cls(vocab_size, norm_first=False, norm="layer", ffn="relu", positional="sinusoidal", bias=True, **shape)

    @classmethod
    def pre_ln(cls, vocab_size: int, **shape) -> ModernGPTConfig:
        """The paper's block with one change: pre-LN (GPT-2's arrangement)."""
        return cls(vocab_size, norm_first=True, norm="layer", ffn="relu", positional="sinusoidal", bias=True, **shape)

    @classmethod
    def llama(cls, vocab_size: int, **shape) -> ModernGPTConfig:
        """Pre-LN + RMSNorm + SwiGLU + RoPE, no biases (LLaMA's block; GQA when n_kv_heads < n_heads)."""
        return cls(vocab_size, norm_first=True, norm="rms", ffn="swiglu", positional="rope", bias=False, **shape)


def ablation_configs(vocab_size: int, **shape) -> dict[str, ModernGPTConfig]:
    """The ablation's three rungs, same shape (d_model, layers, heads, context) for each."""
    return {
        "2017: post-LN, ReLU, sinusoidal": ModernGPTConfig.transformer_2017(vocab_size, **shape),
        "pre-LN": ModernGPTConfig.pre_ln(vocab_size, **shape),
        "pre-LN + RMSNorm + SwiGLU + RoPE": ModernGPTConfig.llama(vocab_size, **shape),
    }


def make_norm(config: ModernGPTConfig) -> nn.Module:
    return RMSNorm(config.d_model) if config.norm == "rms" else LayerNorm(config.d_model)


def make_feed_forward(config: ModernGPTConfig) -> nn.Module:
    if config.ffn == "swiglu":
        return SwiGLUFeedForward(config.d_model, config.d_ff, config.dropout)
    return PositionwiseFeedForward(config.d_model, config.d_ff, config.dropout, activation=config.ffn)


class ModernBlock(nn.Module):
    """Self-attention (GQA, RoPE when configured) -> FFN, each wrapped by tfcourse.blocks.sublayer_connection
    (post-LN or pre-LN) with the configured norm."""

    def __init__(self, config: ModernGPTConfig):
        super().__init__()
        c = config
        self.norm_first = c.norm_first
        self.self_attn = GroupedQueryAttention(c.d_model, c.n_heads, c.n_kv_heads, dropout=c.dropout, bias=c.bias,
                                               rope=c.positional == "rope", fused=c.fused_attention)
        self.ffn = make_feed_forward(c)
        self.norm1, self.norm2 = make_norm(c), make_norm(c)
        self.dropout1, self.dropout2 = nn.Dropout(c.dropout), nn.Dropout(c.dropout)

    def forward(self, x: Tensor, mask: Tensor | None = None, cache: KVCache | None = None,
                is_causal: bool = False) -> Tensor:
        def attend(h: Tensor) -> Tensor:
            return self.dropout1(self.self_attn(h, mask, cache, is_causal))

        def feed_forward(h: Tensor) -> Tensor:
            return self.dropout2(self.ffn(h))

        x = sublayer_connection(x, attend, self.norm1, self.norm_first)  # (B, T, d_model)
        return sublayer_connection(x, feed_forward, self.norm2, self.norm_first)  # (B, T, d_model)


def _residual_projections(model: nn.Module) -> list[nn.Parameter]:
    """The matrices that write into the residual stream: attention's W_o and the FFN's last layer."""
    found = []
    for module in model.modules():
        if isinstance(module, GroupedQueryAttention):
            found.append(module.w_o.weight)
        elif isinstance(module, SwiGLUFeedForward):
            found.append(module.w_down.weight)
        elif isinstance(module, PositionwiseFeedForward):
            found.append(module.linear2.weight)
    return found


def init_modern_weights(model: nn.Module, n_layers: int) -> None:
    """The course's GPT policy (tfcourse.models.init_gpt_weights), for every variant alike: linear layers
    N(0, 1/fan_in) so each projection keeps the size of its input, biases 0, norms' gains 1; the residual
    projections a further 1/sqrt(2 n_layers), so the stream's size at the start does not grow with depth;
    token tables N(0, 0.02) unless scaled by sqrt(d_model) (then TokenEmbedding's own N(0, 1/d_model))."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=module.in_features ** -0.5)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
        elif isinstance(module, (LayerNorm, RMSNorm)):
            nn.init.ones_(module.weight)
            if isinstance(module, LayerNorm):
                nn.init.zeros_(module.bias)
        elif isinstance(module, LearnedPositionalEmbedding):
            nn.init.normal_(module.weight, std=0.02)
    for module in model.modules():  # after the linear layers: a tied output layer is the token table
        if isinstance(module, TokenEmbedding):
            nn.init.normal_(module.weight, std=0.02 if module.scale == 1.0 else module.d_model ** -0.5)
    with torch.no_grad():
        for weight in _residual_projections(model):
            weight.div_((2 * n_layers) ** 0.5)


class ModernGPT(nn.Module):
    """Decoder-only: token embedding (+ additive positions unless RoPE) -> N ModernBlocks -> (final norm
    when pre-LN) -> linear to the vocabulary. ids (B, T) -> logits (B, T, vocab_size)."""

    def __init__(self, config: ModernGPTConfig):
        super().__init__()
        self.config = c = config
        # Sinusoidal entries are about 1 in size, so token vectors are scaled to match (lesson 02);
        # with RoPE or learned positions, GPT-2's unscaled table.
        self.token = TokenEmbedding(c.vocab_size, c.d_model, scale=c.positional == "sinusoidal")
        self.position: nn.Module | None = {
            "sinusoidal": lambda: SinusoidalPositionalEncoding(c.d_model, c.max_len),
            "learned": lambda: LearnedPositionalEmbedding(c.d_model, c.max_len),
            "rope": lambda: None,  # positions enter inside attention, as rotations of q and k
        }[c.positional]()
        self.dropout = nn.Dropout(c.dropout)
        self.blocks = nn.ModuleList(ModernBlock(c) for _ in range(c.n_layers))
        # Pre-LN leaves the residual stream un-normalised: one final norm before the output layer.
        self.norm = make_norm(c) if c.norm_first else nn.Identity()
        self.output = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_weights:
            self.output.weight = self.token.weight
        init_modern_weights(self, c.n_layers)

    def forward(self, ids: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        """ids (B, T) -> logits (B, T, vocab_size). With `caches` (make_caches), ids are only the new tokens."""
        expect_token_ids(ids, self.config.vocab_size)
        offset = len(caches[0]) if caches else 0
        length = ids.shape[1]
        if offset + length > self.config.max_len:
            raise ValueError(f"sequence of length {length} starting at position {offset} is longer than "
                             f"max_len={self.config.max_len}")
        x = self.token(ids)  # (B, T, d_model)
        if self.position is not None:
            x = self.position(x, offset)  # (B, T, d_model)
        x = self.dropout(x)
        mask = causal_mask(length, offset + length, ids.device)  # (T, offset + T)
        for i, block in enumerate(self.blocks):
            x = block(x, mask, caches[i] if caches is not None else None, is_causal=True)  # (B, T, d_model)
        return self.output(self.norm(x))  # (B, T, vocab_size)

    def make_caches(self) -> list[KVCache]:
        return [KVCache() for _ in self.blocks]


__all__ = [
    "RMSNorm", "swiglu_hidden_size", "SwiGLUFeedForward", "rotate_half", "rope_cos_sin", "apply_rope",
    "repeat_kv", "grouped_query_attention", "GroupedQueryAttention", "kv_cache_bytes", "cache_bytes",
    "ModernGPTConfig", "ablation_configs", "ModernBlock", "ModernGPT", "init_modern_weights",
]
