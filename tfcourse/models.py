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

import math
from dataclasses import dataclass
from typing import Any

import torch
from torch import Tensor, nn

from .attention import KVCache, causal_mask, padding_mask
from .blocks import Decoder, DecoderLayerCache, Encoder, LayerNorm
from .embedding import InputEmbedding, LearnedPositionalEmbedding, TokenEmbedding
from .validation import expect_divisible, expect_tensor


def _check_dims(d_model: int, n_heads: int, d_ff: int | None, dropout: float) -> None:
    expect_divisible(d_model, n_heads)
    if d_ff is not None and d_ff < 1:
        raise ValueError(f"d_ff must be positive, got {d_ff}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")


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
    """LayerNorm starts as the plain normalisation: gain 1, bias 0."""
    for module in model.modules():
        if isinstance(module, LayerNorm):
            nn.init.ones_(module.weight)
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


def init_gpt_weights(model: nn.Module, n_layers: int) -> None:
    """GPT-2's policy with a width-aware scale: every linear layer N(0, 1/fan_in), biases 0, and the
    two projections that write into the residual stream (attention's W^O, the FFN's second linear)
    a further 1/sqrt(2 n_layers); token and position tables N(0, 0.02); an untied output layer too.

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
    for module in model.modules():
        if isinstance(module, (TokenEmbedding, LearnedPositionalEmbedding)) or module is output:
            nn.init.normal_(module.weight, std=0.02)  # a tied output layer is the token table itself
    for name, parameter in model.named_parameters():
        if name.endswith(("self_attn.w_o.weight", "ffn.linear2.weight")):
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
    tie_output: bool = False  # output layer reuses the target embedding matrix (paper, section 3.4)
    pad_id: int = 0  # padding token: masked out of attention
    activation: str = "relu"  # the paper's FFN; "gelu" for the later variants
    fused_attention: bool = False  # torch's fused attention kernel (same result, faster, no weights returned)

    def __post_init__(self) -> None:
        _check_dims(self.d_model, self.n_heads, self.d_ff, self.dropout)
        if self.share_embeddings and self.src_vocab_size != self.tgt_vocab_size:
            raise ValueError(
                f"share_embeddings needs one shared vocabulary, got src_vocab_size={self.src_vocab_size} "
                f"and tgt_vocab_size={self.tgt_vocab_size}"
            )

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads  # d_k = d_v = d_model / h (paper: 64)

    @classmethod
    def base(cls, vocab_size: int = 37000) -> "TransformerConfig":
        """The paper's base model (table 3): N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, dropout 0.1,
        with its shared source/target BPE vocabulary of about 37000 tokens and the embedding matrix
        shared three ways (source, target, output)."""
        return cls(vocab_size, vocab_size, d_model=512, n_heads=8, n_layers=6, d_ff=2048, dropout=0.1,
                   share_embeddings=True, tie_output=True)


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
        if c.tie_output:
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
    vocab_size: int  # tokens the model reads and predicts
    max_len: int = 256  # context length: the most tokens the model sees at once
    d_model: int = 384  # residual-stream width
    n_heads: int = 6  # attention heads (d_head = d_model / n_heads)
    n_layers: int = 6  # blocks
    d_ff: int | None = None  # FFN inner width; None means 4 * d_model
    dropout: float = 0.2  # small data overfits quickly; dropout slows that down
    norm_first: bool = True  # GPT-2's pre-LN: stable with larger learning rates and a shorter warm-up
    positional: str = "learned"  # GPT uses learned position vectors; "sinusoidal" also works
    tie_weights: bool = True  # output layer shares the token table: fewer parameters, better small-data fit
    scale_embedding: bool = False  # GPT-2 does not multiply by sqrt(d_model); see TokenEmbedding
    activation: str = "gelu"  # GELU as in GPT-2 ("gelu_tanh": GPT-2's own approximation, needed to load its weights); "relu" gives the paper's FFN
    fused_attention: bool = True  # torch's fused attention kernel (same result, faster)

    def __post_init__(self) -> None:
        _check_dims(self.d_model, self.n_heads, self.d_ff, self.dropout)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    @classmethod
    def gpt2_small(cls, **options: Any) -> "GPTConfig":
        """GPT-2 small, the 124M-parameter "gpt2" checkpoint: 12 layers, 12 heads, d_model 768,
        50,257 byte-level BPE tokens, 1,024 positions; pre-LN with a final LayerNorm, learned positions,
        the tanh GELU, tied output. tfcourse.pretrained loads its weights into GPT(this config)."""
        settings = dict(vocab_size=50257, max_len=1024, d_model=768, n_heads=12, n_layers=12, dropout=0.1,
                        norm_first=True, positional="learned", tie_weights=True, scale_embedding=False,
                        activation="gelu_tanh")
        settings.update(options)
        return cls(**settings)


class GPT(nn.Module):
    """Decoder-only: the encoder block with a causal mask, stacked, then a linear layer to the vocabulary.
    Weights: init_gpt_weights (GPT-2's)."""

    def __init__(self, config: GPTConfig, *, embed: nn.Module | None = None, blocks: nn.Module | None = None):
        """`embed` and `blocks` given (e.g. a learner's, from `tfcourse.course.your_parts`) take the
        place of the reference's; tying and the weight initialisation are the same either way."""
        super().__init__()
        self.config = c = config
        if embed is None:
            embed = InputEmbedding(c.vocab_size, c.d_model, c.max_len, c.dropout, positional=c.positional,
                                   scale=c.scale_embedding)
        self.embed = embed
        self.blocks = blocks if blocks is not None else Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff,
                                                                **layer_options(c))
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
        return [KVCache() for _ in self.blocks.layers]


# ----------------------------------------------------------------------------------------------
# Encoder-only (BERT-style)
# ----------------------------------------------------------------------------------------------


@dataclass
class EncoderOnlyConfig:
    vocab_size: int  # tokens, including [CLS], [MASK] and padding
    n_classes: int | None = None  # set for a sequence classifier; None gives a masked-token head
    max_len: int = 512  # longest input
    d_model: int = 256  # width
    n_heads: int = 4  # attention heads
    n_layers: int = 4  # blocks
    d_ff: int | None = None  # None means 4 * d_model
    dropout: float = 0.1  # regularisation
    norm_first: bool = False  # BERT keeps the paper's post-LN
    positional: str = "learned"  # BERT learns its position vectors
    activation: str = "gelu"  # BERT's activation
    pad_id: int = 0  # padding is masked out of attention
    fused_attention: bool = False  # torch's fused attention kernel (same result, faster)

    def __post_init__(self) -> None:
        _check_dims(self.d_model, self.n_heads, self.d_ff, self.dropout)


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
    "count_parameters", "trace_shapes", "layer_options", "init_transformer_weights", "init_gpt_weights",
    "init_bert_weights",
]
