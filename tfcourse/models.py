"""Whole models: the same blocks, three families told apart by their masks.

- Encoder-decoder (the paper, T5, BART): the encoder sees the whole source (padding mask only);
  the decoder sees its own past (causal mask) and all of the encoder output (cross-attention).
- Decoder-only (GPT): one stack of blocks with a causal mask; predicts the next token.
- Encoder-only (BERT): one stack with no causal mask, every token sees both sides; a
  classification head or a masked-token head on top.

Data path (encoder-decoder): src ids -> InputEmbedding -> Encoder -> H;
tgt ids -> InputEmbedding -> Decoder(H) -> Linear -> logits (softmax gives next-token probabilities).
"""

from __future__ import annotations

import dataclasses
import functools
import math
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .attention import KVCache, MultiHeadAttention, causal_mask, padding_mask
from .blocks import Decoder, DecoderLayerCache, Encoder, EncoderLayer, LayerNorm
from .config_fields import check_choices
from .embedding import InputEmbedding, LearnedPositionalEmbedding, TokenEmbedding
from .ffn import PositionwiseFeedForward
from .modern import ROPE_LAYOUTS, GroupedQueryAttention, RMSNorm, SwiGLUFeedForward, swiglu_hidden_size
from .validation import expect_divisible, expect_tensor


def _check_config(config: Any) -> None:
    """The checks every config shares: sizes that fit together, options among their choices."""
    expect_divisible(config.d_model, config.n_heads)
    if config.d_ff is not None and config.d_ff < 1:
        raise ValueError(f"d_ff must be positive, got {config.d_ff}")
    if not 0.0 <= config.dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {config.dropout}")
    check_choices(config)


def _no_rope(config: Any) -> None:
    if config.positional == "rope":
        raise ValueError(f"positional='rope' rotates queries and keys inside attention: only the decoder-only GPT "
                         f"does it; {type(config).__name__} takes 'sinusoidal', 'learned' or 'none'")


def layer_options(config: Any) -> dict[str, Any]:
    """The per-layer options of any model config, as the keyword arguments of Encoder/Decoder.

    One place turns a config into layer arguments, so an option set in the config reaches every
    layer of every stack (tests/test_models.py changes each one and looks in every layer).
    """
    return {"dropout": config.dropout, "norm_first": config.norm_first, "activation": config.activation,
            "fused": config.fused_attention}


# ----------------------------------------------------------------------------------------------
# Weight initialisation: one stated policy per family
# ----------------------------------------------------------------------------------------------


def _init_linears(model: nn.Module, init: Any) -> None:
    """`init(weight)` on every nn.Linear weight; biases start at zero."""
    for module in model.modules():
        if isinstance(module, nn.Linear):
            init(module.weight)
            if module.bias is not None:
                nn.init.zeros_(module.bias)


def _init_layer_norms(model: nn.Module) -> None:
    """LayerNorm and RMSNorm start as the plain normalisation: gain 1 (LayerNorm's bias 0)."""
    for module in model.modules():
        if isinstance(module, (LayerNorm, RMSNorm)):
            nn.init.ones_(module.weight)
        if isinstance(module, LayerNorm):
            nn.init.zeros_(module.bias)


def init_transformer_weights(model: nn.Module) -> None:
    """The encoder-decoder, as common reproductions of the paper do (the paper states no init):
    Xavier-uniform for every linear layer, so activations keep their size through each projection,
    biases 0; token tables N(0, 1/d_model), whose x sqrt(d_model) gives entries of size 1 (see
    TokenEmbedding). A tied output layer is the target table itself, so it keeps the table's init."""
    _init_linears(model, nn.init.xavier_uniform_)
    _init_layer_norms(model)
    for module in model.modules():
        if isinstance(module, TokenEmbedding):
            nn.init.normal_(module.weight, std=module.d_model ** -0.5)


def _token_std(table: TokenEmbedding) -> float:
    return 0.02 if table.scale == 1.0 else table.d_model ** -0.5


# The two projections of every block that write into the residual stream: attention's W^O and the
# FFN's last layer (linear2 of the ReLU/GELU FFN, w_down of SwiGLU).
RESIDUAL_PROJECTIONS = ("self_attn.w_o.weight", "ffn.linear2.weight", "ffn.w_down.weight")


def init_gpt_weights(model: nn.Module, n_layers: int) -> None:
    """GPT-2's policy with a width-aware scale, for every decoder-only variant alike (the 2017 block,
    GPT-2, the LLaMA-style block): every linear layer N(0, 1/fan_in), biases 0, norms' gains 1, and
    the projections that write into the residual stream (RESIDUAL_PROJECTIONS) a further
    1/sqrt(2 n_layers); position tables and an untied output layer N(0, 0.02); the token table
    N(0, 0.02), or N(0, 1/d_model) when it is multiplied by sqrt(d_model) (scale_embedding: its
    entries are then about 1 in size, as TokenEmbedding explains).

    Why 1/sqrt(fan_in): each projection's output then has the size of its input, at any width.
    GPT-2's fixed 0.02 is about that value at its width (768: 1/sqrt(768) = 0.036) but far too small
    for the course's narrow models: on the CPU recipe (d_model 128) it ended 2,000 steps at val 1.904,
    1/sqrt(fan_in) at 1.79 (README, "Weight initialisation").
    Why the residual scaling: the stream is a sum of 2 n_layers sub-layer outputs plus the embedding;
    scaling each addition by 1/sqrt(2 n_layers) keeps its size at the start independent of depth
    (GPT-2's paper, section 2.3).
    """
    for module in model.modules():
        if isinstance(module, nn.Linear):
            nn.init.normal_(module.weight, std=module.in_features ** -0.5)
            if module.bias is not None:
                nn.init.zeros_(module.bias)
    _init_layer_norms(model)
    output = getattr(model, "output", None)
    tables = [m for m in model.modules() if isinstance(m, TokenEmbedding)]
    for module in model.modules():
        if isinstance(module, TokenEmbedding):
            nn.init.normal_(module.weight, std=_token_std(module))
        elif isinstance(module, LearnedPositionalEmbedding):
            nn.init.normal_(module.weight, std=0.02)
        elif module is output:
            # A tied output layer is the token table: drawn once more with the table's std (as the course's
            # recorded runs were), an untied one N(0, 0.02).
            tied_to = [t for t in tables if t.weight is output.weight]
            nn.init.normal_(output.weight, std=_token_std(tied_to[0]) if tied_to else 0.02)
    for name, parameter in model.named_parameters():
        if name.endswith(RESIDUAL_PROJECTIONS):
            with torch.no_grad():
                parameter.div_(math.sqrt(2 * n_layers))


def init_bert_weights(model: nn.Module) -> None:
    """BERT's policy: every linear layer N(0, 0.02), biases 0, LayerNorm 1 and 0. The token table
    keeps TokenEmbedding's init, because this model multiplies it by sqrt(d_model)."""
    _init_linears(model, lambda weight: nn.init.normal_(weight, std=0.02))
    _init_layer_norms(model)
    for module in model.modules():
        if isinstance(module, LearnedPositionalEmbedding):
            nn.init.normal_(module.weight, std=0.02)


# ----------------------------------------------------------------------------------------------
# Encoder-decoder Transformer
# ----------------------------------------------------------------------------------------------


@dataclass
class TransformerConfig:
    src_vocab_size: int  # source-language vocabulary (ids in [0, src_vocab_size))
    tgt_vocab_size: int  # target-language vocabulary
    d_model: int = 512  # width of every vector between sub-layers (paper: 512)
    n_heads: int = 8  # attention heads; each sees d_head = d_model / n_heads dimensions (paper: 8)
    n_layers: int = 6  # encoder layers and decoder layers, N in the paper (paper: 6)
    d_ff: int | None = None  # FFN inner width; None means 4 * d_model (paper: 2048)
    dropout: float = 0.1  # on the embedding sums and sub-layer outputs (paper: 0.1); this code also drops attention weights
    max_len: int = 512  # longest sequence the positional encoding covers
    norm_first: bool = False  # False: post-LN as in the paper; True: pre-LN
    positional: str = "sinusoidal"  # "sinusoidal" (paper) or "learned"
    share_embeddings: bool = False  # one table for source and target (needs a shared vocabulary)
    tie_weights: bool = False  # output layer reuses the target embedding matrix (paper, section 3.4)
    pad_id: int = 0  # padding token: masked out of attention
    activation: str = "relu"  # the paper's FFN; "gelu" for the later variants
    fused_attention: bool = False  # torch's fused attention kernel (same result, faster, no weights returned)

    def __post_init__(self) -> None:
        _check_config(self)
        _no_rope(self)
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_embeddings needs one shared vocabulary, got src_vocab_size={self.src_vocab_size} "
                f"and tgt_vocab_size={self.tgt_vocab_size}"
            )

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads  # d_k = d_v = d_model / h (paper: 64)

    @property
    def tie_output(self) -> bool:
        """The earlier name of tie_weights (read-only), so that code written before the rename still runs."""
        return self.tie_weights

    @classmethod
    def base(cls, vocab_size: int = 37000) -> "TransformerConfig":
        """The paper's base model (table 3): N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, dropout 0.1,
        with its shared source/target BPE vocabulary of about 37000 tokens and the embedding matrix
        shared three ways (source, target, output)."""
        return cls(vocab_size, vocab_size, d_model=512, n_heads=8, n_layers=6, d_ff=2048, dropout=0.1,
                   share_embeddings=True, tie_weights=True)


class Transformer(nn.Module):
    """The encoder-decoder Transformer of "Attention Is All You Need". Weights: init_transformer_weights."""

    def __init__(self, config: TransformerConfig, *, src_embed: nn.Module | None = None,
                 tgt_embed: nn.Module | None = None, encoder: nn.Module | None = None, decoder: nn.Module | None = None):
        """The parts given (e.g. a learner's, from `tfcourse.course.your_parts`) take the place of the
        reference's; with share_embeddings, tgt_embed.token becomes src_embed.token either way."""
        super().__init__()
        self.config = c = config
        if src_embed is None:
            src_embed = InputEmbedding(c.src_vocab_size, c.d_model, c.max_len, c.dropout, positional=c.positional)
        shared = src_embed.token if c.share_embeddings else None
        if tgt_embed is None:
            tgt_embed = InputEmbedding(c.tgt_vocab_size, c.d_model, c.max_len, c.dropout, positional=c.positional,
                                       token_embedding=shared)
        elif shared is not None:
            tgt_embed.token = shared  # one table for both languages
        self.src_embed, self.tgt_embed = src_embed, tgt_embed
        self.encoder = encoder if encoder is not None else Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff,
                                                                   **layer_options(c))
        self.decoder = decoder if decoder is not None else Decoder(c.n_layers, c.d_model, c.n_heads, c.d_ff,
                                                                   **layer_options(c))
        self.output = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)  # the pre-softmax linear layer
        if c.tie_weights:
            self.output.weight = self.tgt_embed.token.weight  # (V, d_model) serves both directions
        init_transformer_weights(self)

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src ids (B, S) -> (H (B, S, d_model), source padding mask (B, 1, 1, S))."""
        expect_tensor(src, "source token ids", ndim=2, expected="(B, S)")  # the range: in src_embed
        src_mask = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        return self.encoder(self.src_embed(src), src_mask), src_mask

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor,
               caches: list[DecoderLayerCache] | None = None) -> Tensor:
        """tgt ids (B, T) -> logits (B, T, tgt_vocab_size). With `caches`, tgt holds only the new positions."""
        expect_tensor(tgt, "target token ids", ndim=2, expected="(B, T)")  # the range: in tgt_embed
        offset = len(caches[0].self_attn) if caches else 0  # positions already decoded
        length = tgt.shape[1]
        # Causal (no peeking at later target tokens) AND not padding.
        self_mask = causal_mask(length, offset + length, tgt.device)  # (T, offset + T)
        if offset == 0:
            self_mask = self_mask & padding_mask(tgt, self.config.pad_id)  # (B, 1, T, T)
        hidden = self.decoder(self.tgt_embed(tgt, offset), memory, self_mask, src_mask, caches)
        return self.output(hidden)  # (B, T, tgt_vocab_size)

    def forward(self, src: Tensor, tgt: Tensor) -> Tensor:
        """Teacher forcing: tgt is the target shifted right (<bos> first); returns logits (B, T, V)."""
        memory, src_mask = self.encode(src)
        return self.decode(tgt, memory, src_mask)

    def make_caches(self) -> list[DecoderLayerCache]:
        return [DecoderLayerCache() for _ in self.decoder.layers]


# ----------------------------------------------------------------------------------------------
# Decoder-only GPT
# ----------------------------------------------------------------------------------------------


@dataclass
class GPTConfig:
    """A decoder-only model. The defaults are the paper's block (tfcourse.config_fields); the named
    configs are the families: `gpt` (the course's GPT, GPT-2's block at a small size), `gpt2_small`,
    and lesson 11's ablation rungs `transformer_2017`, `pre_ln` and `llama`."""

    vocab_size: int  # tokens the model reads and predicts
    max_len: int = 256  # context length: the most tokens the model sees at once
    d_model: int = 384  # residual-stream width
    n_heads: int = 6  # query heads (d_head = d_model / n_heads)
    n_layers: int = 6  # blocks
    d_ff: int | None = None  # FFN inner width; None: 4 * d_model (2/3 of that for SwiGLU: the same parameters)
    n_kv_heads: int | None = None  # key/value heads: None = n_heads (multi-head), fewer = GQA, 1 = multi-query
    dropout: float = 0.1  # on the embeddings, the attention weights and every sub-layer output
    norm_first: bool = False  # False: the paper's post-LN; True: pre-LN (GPT-2, LLaMA) with a final norm
    norm: str = "layer"  # "layer" (LayerNorm) or "rms" (RMSNorm, LLaMA)
    norm_eps: float = 1e-5  # epsilon inside the norm's square root
    activation: str = "relu"  # the FFN: "relu" (paper), "gelu", "gelu_tanh" (GPT-2's weights), "swiglu" (LLaMA)
    bias: bool = True  # biases in the attention projections (LLaMA has none)
    fused_attention: bool = False  # torch's fused attention kernel (same result, faster)
    positional: str = "sinusoidal"  # "sinusoidal", "learned" (GPT-2), "rope" (LLaMA) or "none"
    rope_base: float = 10000.0  # RoPE's base (with positional="rope")
    rope_layout: str = "half"  # RoPE's pairs: "half" (i, i + d_head/2) or "interleaved" (2i, 2i + 1)
    scale_embedding: bool = True  # token vectors times sqrt(d_model) (paper); GPT-2 does not; see TokenEmbedding
    tie_weights: bool = False  # the output layer shares the token table (paper, section 3.4)

    def __post_init__(self) -> None:
        _check_config(self)
        kv = self.n_heads if self.n_kv_heads is None else self.n_kv_heads
        if kv < 1 or self.n_heads % kv != 0:
            raise ValueError(f"n_kv_heads ({self.n_kv_heads}) must divide n_heads ({self.n_heads}): each "
                             "key/value head serves an equal group of query heads")
        if self.rope_layout not in ROPE_LAYOUTS:
            raise ValueError(f"rope_layout must be one of {ROPE_LAYOUTS}, got {self.rope_layout!r}")

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def gpt(cls, vocab_size: int, **options: Any) -> "GPTConfig":
        """The course's GPT (lessons 00, 06-08): GPT-2's block at a small size. Pre-LN with a final
        LayerNorm, learned positions, GELU, tied output, unscaled embeddings; dropout 0.2, because small
        data overfits quickly; torch's fused attention."""
        settings = dict(dropout=0.2, norm_first=True, positional="learned", activation="gelu", tie_weights=True,
                        scale_embedding=False, fused_attention=True)
        return cls(vocab_size, **{**settings, **options})

    @classmethod
    def gpt2_small(cls, **options: Any) -> "GPTConfig":
        """GPT-2 small, the 124M-parameter "gpt2" checkpoint: 12 layers, 12 heads, d_model 768,
        50,257 byte-level BPE tokens, 1,024 positions; pre-LN with a final LayerNorm, learned positions,
        the tanh GELU, tied output. tfcourse.pretrained loads its weights into GPT(this config)."""
        settings = dict(vocab_size=50257, max_len=1024, d_model=768, n_heads=12, n_layers=12, dropout=0.1,
                        activation="gelu_tanh")
        return cls.gpt(**{**settings, **options})

    @classmethod
    def transformer_2017(cls, vocab_size: int, **options: Any) -> "GPTConfig":
        """Lesson 11's first rung: the paper's block as a decoder (post-LN, LayerNorm, ReLU FFN, sinusoidal
        positions added to scaled embeddings, biases), tied output, no dropout, fused attention."""
        return cls(vocab_size, **{**_RUNG, **options})

    @classmethod
    def pre_ln(cls, vocab_size: int, **options: Any) -> "GPTConfig":
        """The paper's block with one change: pre-LN (GPT-2's arrangement)."""
        return cls(vocab_size, **{**_RUNG, "norm_first": True, **options})

    @classmethod
    def llama(cls, vocab_size: int, **options: Any) -> "GPTConfig":
        """Pre-LN + RMSNorm (LLaMA's epsilon 1e-6) + SwiGLU + RoPE, no biases, unscaled embeddings (LLaMA's
        block; grouped-query attention when n_kv_heads < n_heads)."""
        settings = dict(_RUNG, norm_first=True, norm="rms", norm_eps=1e-6, activation="swiglu", positional="rope",
                        bias=False, scale_embedding=False)
        return cls(vocab_size, **{**settings, **options})


# What lesson 11's three rungs share: no dropout (short runs on plenty of data), a tied output, fused attention.
_RUNG = dict(dropout=0.0, tie_weights=True, fused_attention=True)


def ablation_configs(vocab_size: int, **shape: Any) -> dict[str, GPTConfig]:
    """Three named configs, the same shape (d_model, layers, heads, context) for each: the paper's block,
    pre-LN, and LLaMA's block. Lesson 11's ladder (`ablation_ladder`) goes between them one idea at a time."""
    return {
        "2017: post-LN, ReLU, sinusoidal": GPTConfig.transformer_2017(vocab_size, **shape),
        "pre-LN": GPTConfig.pre_ln(vocab_size, **shape),
        "pre-LN + RMSNorm + SwiGLU + RoPE": GPTConfig.llama(vocab_size, **shape),
    }


@dataclass(frozen=True)
class Rung:
    """One rung of the ablation ladder: its parent's config with one idea changed."""

    name: str
    parent: str | None  # the rung it changes; None for the first
    idea: str  # the one idea, in words
    change: dict[str, Any]  # the config fields that idea sets (SwiGLU's d_ff belongs to it)
    config: GPTConfig


def ablation_ladder(vocab_size: int, **shape: Any) -> dict[str, Rung]:
    """Lesson 11's ladder from the paper's block (as a decoder) towards LLaMA's, one idea per rung:
    pre-LN, RMSNorm, SwiGLU at the ReLU FFN's parameter count, RoPE, no biases; and NoPE (no positions at
    all) as a branch from the RoPE rung. Every rung has the same shape; the token vectors stay scaled by
    sqrt(d_model) all the way (the paper's choice; GPTConfig.llama drops it)."""
    d_model = GPTConfig.transformer_2017(vocab_size, **shape).d_model
    steps = [  # (name, parent, idea, the fields it sets)
        ("post-LN (2017)", None, "the paper's block", {}),
        ("pre-LN", "post-LN (2017)", "the norm before each sub-layer, one final norm", dict(norm_first=True)),
        ("+ RMSNorm", "pre-LN", "RMSNorm in place of LayerNorm", dict(norm="rms", norm_eps=1e-6)),
        ("+ SwiGLU", "+ RMSNorm", "a gated FFN, 2/3 as wide: the same parameters",
         dict(activation="swiglu", d_ff=swiglu_hidden_size(d_model))),
        ("+ RoPE", "+ SwiGLU", "positions rotate q and k instead of being added", dict(positional="rope")),
        ("+ no biases", "+ RoPE", "no biases in the attention projections", dict(bias=False)),
        ("NoPE (from + RoPE)", "+ RoPE", "no positional information at all", dict(positional="none")),
    ]
    ladder: dict[str, Rung] = {}
    for name, parent, idea, change in steps:
        base = ladder[parent].config if parent else GPTConfig.transformer_2017(vocab_size, **shape)
        ladder[name] = Rung(name, parent, idea, change, dataclasses.replace(base, **change))
    return ladder


def norm_class(config: GPTConfig) -> Callable[[int], nn.Module]:
    """The configured norm, called as norm(d_model)."""
    kind = RMSNorm if config.norm == "rms" else LayerNorm
    return functools.partial(kind, eps=config.norm_eps)


def feed_forward(d_model: int, d_ff: int | None = None, dropout: float = 0.0, *,
                 activation: str = "relu") -> nn.Module:
    """The FFN for an activation: SwiGLU's three matrices, or lesson 04's two with ReLU or a GELU."""
    if activation == "swiglu":
        return SwiGLUFeedForward(d_model, d_ff, dropout)
    return PositionwiseFeedForward(d_model, d_ff, dropout, activation=activation)


def attention_class(config: GPTConfig) -> Callable[..., nn.Module]:
    """The configured self-attention, called as attention(d_model, n_heads, dropout, fused=...):
    lesson 03's multi-head attention, or lesson 11's grouped-query attention when the model uses
    RoPE or fewer key/value heads. Both name their projections w_q, w_k, w_v, w_o."""
    c = config
    if c.positional != "rope" and c.n_kv_heads in (None, c.n_heads):
        return functools.partial(MultiHeadAttention, bias=c.bias)

    def grouped(d_model: int, n_heads: int, dropout: float = 0.0, *, fused: bool = False) -> nn.Module:
        return GroupedQueryAttention(d_model, n_heads, c.n_kv_heads, dropout=dropout, bias=c.bias,
                                     rope=c.positional == "rope", rope_base=c.rope_base, rope_layout=c.rope_layout,
                                     fused=fused)

    return grouped


def decoder_only_blocks(config: GPTConfig) -> Encoder:
    """The block stack of a decoder-only model: lesson 05's EncoderLayer (used with a causal mask) with
    the configured attention, FFN and norm, n_layers of them, and a final norm when pre-LN."""
    c, norm = config, norm_class(config)
    layer = functools.partial(EncoderLayer, attention=attention_class(c), feed_forward=feed_forward, norm=norm)
    return Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, layer=layer, norm=norm, **layer_options(c))


class GPT(nn.Module):
    """Decoder-only: the encoder block with a causal mask, stacked, then a linear layer to the vocabulary.
    One stack for every variant its config names (the 2017 block, GPT-2, the LLaMA-style block).
    Weights: init_gpt_weights."""

    def __init__(self, config: GPTConfig, *, embed: nn.Module | None = None, blocks: nn.Module | None = None):
        """`embed` and `blocks` given (e.g. a learner's, from `tfcourse.course.your_parts`) take the
        place of the reference's; tying and the weight initialisation are the same either way."""
        super().__init__()
        self.config = c = config
        if embed is None:
            # With RoPE, positions enter inside attention, as rotations of queries and keys.
            positional = "none" if c.positional == "rope" else c.positional
            embed = InputEmbedding(c.vocab_size, c.d_model, c.max_len, c.dropout, positional=positional,
                                   scale=c.scale_embedding)
        self.embed = embed
        self.blocks = blocks if blocks is not None else decoder_only_blocks(c)
        self.output = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_weights:
            self.output.weight = self.embed.token.weight
        init_gpt_weights(self, c.n_layers)

    def forward(self, ids: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        """ids (B, T) -> logits (B, T, vocab_size); logits[:, t] predicts token t + 1.

        With `caches` (from make_caches), ids holds only the new tokens; earlier keys and values
        come from the cache.
        """
        offset = len(caches[0]) if caches else 0
        x = self.embed(ids, offset)  # (B, T, d_model); checks the ids, raises if offset + T > max_len
        length = ids.shape[1]
        mask = causal_mask(length, offset + length, ids.device)  # (T, offset + T)
        hidden = self.blocks(x, mask, caches, is_causal=True)  # (B, T, d_model)
        return self.output(hidden)  # (B, T, vocab_size)

    def make_caches(self) -> list[KVCache]:
        """One KVCache per block, each with room for max_len positions (filled in place, not regrown)."""
        return [KVCache(capacity=self.config.max_len) for _ in self.blocks.layers]


# ----------------------------------------------------------------------------------------------
# Encoder-only (BERT-style)
# ----------------------------------------------------------------------------------------------


@dataclass
class EncoderOnlyConfig:
    """A bidirectional encoder. The defaults are the paper's block; `bert` names BERT's choices."""

    vocab_size: int  # tokens, including [CLS], [MASK] and padding
    n_classes: int | None = None  # set for a sequence classifier; None gives a masked-token head
    max_len: int = 512  # longest input
    d_model: int = 256  # width
    n_heads: int = 4  # attention heads
    n_layers: int = 4  # blocks
    d_ff: int | None = None  # None means 4 * d_model
    dropout: float = 0.1  # regularisation
    norm_first: bool = False  # the paper's post-LN (BERT keeps it)
    positional: str = "sinusoidal"  # the paper's; BERT learns its position vectors
    activation: str = "relu"  # the paper's FFN; BERT's is GELU
    pad_id: int = 0  # padding is masked out of attention
    fused_attention: bool = False  # torch's fused attention kernel (same result, faster)

    def __post_init__(self) -> None:
        _check_config(self)
        _no_rope(self)

    @classmethod
    def bert(cls, vocab_size: int, **options: Any) -> "EncoderOnlyConfig":
        """BERT's choices: learned position vectors and GELU, post-LN as in the paper."""
        return cls(vocab_size, **{"positional": "learned", "activation": "gelu", **options})


class EncoderOnly(nn.Module):
    """Bidirectional encoder: every token attends to every non-padding token.

    Classification head: reads the first position ([CLS]) -> (B, n_classes).
    Masked-token head: every position -> (B, T, vocab_size), trained to recover masked tokens.
    Weights: init_bert_weights.
    """

    def __init__(self, config: EncoderOnlyConfig):
        super().__init__()
        self.config = c = config
        self.embed = InputEmbedding(c.vocab_size, c.d_model, c.max_len, c.dropout, positional=c.positional)
        self.encoder = Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, **layer_options(c))
        out_features = c.n_classes if c.n_classes is not None else c.vocab_size
        self.head = nn.Linear(c.d_model, out_features)
        init_bert_weights(self)

    def forward(self, ids: Tensor) -> Tensor:
        x = self.embed(ids)  # (B, T, d_model); checks the ids
        hidden = self.encoder(x, padding_mask(ids, self.config.pad_id))  # (B, T, d_model)
        if self.config.n_classes is not None:
            return self.head(hidden[:, 0])  # (B, n_classes) from the [CLS] position
        return self.head(hidden)  # (B, T, vocab_size)


# ----------------------------------------------------------------------------------------------
# Table 3-1: the shape at every stage
# ----------------------------------------------------------------------------------------------


def trace_shapes(batch: int, n: int, m: int, d_model: int, n_heads: int, vocab_size: int) -> dict[str, tuple]:
    """Table 3-1: run a tiny encoder-decoder (2 layers, shared input layer) on random ids and record the shape
    at every stage, from the source ids to the output probabilities. The keys are in data-flow order."""
    torch.manual_seed(0)
    embed = InputEmbedding(vocab_size, d_model, max_len=max(n, m), dropout=0.0)
    encoder = Encoder(2, d_model, n_heads, dropout=0.0).eval()
    decoder = Decoder(2, d_model, n_heads, dropout=0.0).eval()
    output = nn.Linear(d_model, vocab_size)
    shapes: dict[str, tuple] = {}
    with torch.no_grad():
        src = torch.randint(0, vocab_size, (batch, n))
        shapes["src_ids"] = tuple(src.shape)
        shapes["src_embeddings"] = tuple(embed.token(src).shape)
        x = embed(src)
        shapes["encoder_input"] = tuple(x.shape)
        attn = encoder.layers[0].self_attn
        q = attn.w_q(x)
        shapes["q"] = tuple(q.shape)
        shapes["q_heads"] = tuple(attn.split_heads(q).shape)
        out, weights = attn(x, return_weights=True)
        shapes["encoder_attn_weights"] = tuple(weights.shape)
        shapes["attn_output"] = tuple(out.shape)
        shapes["encoder_layer_output"] = tuple(encoder.layers[0](x).shape)
        memory = encoder(x)
        shapes["memory"] = tuple(memory.shape)
        tgt = torch.randint(0, vocab_size, (batch, m))
        shapes["tgt_ids"] = tuple(tgt.shape)
        y = embed(tgt)
        shapes["decoder_input"] = tuple(y.shape)
        layer = decoder.layers[0]
        _, self_weights = layer.self_attn(y, mask=causal_mask(m), return_weights=True)
        shapes["decoder_self_attn_weights"] = tuple(self_weights.shape)
        _, cross_weights = layer.cross_attn(y, memory, return_weights=True)
        shapes["cross_attn_weights"] = tuple(cross_weights.shape)
        hidden = decoder(y, memory, causal_mask(m))
        shapes["decoder_output"] = tuple(hidden.shape)
        logits = output(hidden)
        shapes["logits"] = tuple(logits.shape)
        shapes["probs"] = tuple(torch.softmax(logits, dim=-1).shape)
    return shapes


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters; a tensor shared by several modules (tied weights) counts once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "TransformerConfig", "Transformer", "GPTConfig", "GPT", "EncoderOnlyConfig", "EncoderOnly",
    "ablation_configs", "Rung", "ablation_ladder", "norm_class", "feed_forward", "attention_class", "decoder_only_blocks",
    "RESIDUAL_PROJECTIONS", "count_parameters", "trace_shapes", "layer_options", "init_transformer_weights",
    "init_gpt_weights", "init_bert_weights",
]
