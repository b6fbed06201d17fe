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

from dataclasses import asdict, dataclass

import torch
from torch import Tensor, nn

from .attention import KVCache, causal_mask, padding_mask
from .blocks import Decoder, DecoderLayerCache, Encoder
from .embedding import InputEmbedding
from .validation import expect_divisible, expect_token_ids


def _check_dims(d_model: int, n_heads: int, d_ff: int | None, dropout: float) -> None:
    expect_divisible(d_model, n_heads)
    if d_ff is not None and d_ff < 1:
        raise ValueError(f"d_ff must be positive, got {d_ff}")
    if not 0.0 <= dropout < 1.0:
        raise ValueError(f"dropout must be in [0, 1), got {dropout}")


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
    dropout: float = 0.1  # on embeddings, attention weights and sub-layer outputs (paper: 0.1)
    max_len: int = 512  # longest sequence the positional encoding covers
    norm_first: bool = False  # False: post-LN as in the paper; True: pre-LN
    positional: str = "sinusoidal"  # "sinusoidal" (paper) or "learned"
    share_embeddings: bool = False  # one table for source and target (needs a shared vocabulary)
    tie_output: bool = False  # output layer reuses the target embedding matrix (paper, section 3.4)
    pad_id: int = 0  # padding token: masked out of attention

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
    """The encoder-decoder Transformer of "Attention Is All You Need"."""

    def __init__(self, config: TransformerConfig):
        super().__init__()
        self.config = c = config
        self.src_embed = InputEmbedding(c.src_vocab_size, c.d_model, c.max_len, c.dropout, c.positional)
        shared = self.src_embed.token if c.share_embeddings else None
        self.tgt_embed = InputEmbedding(c.tgt_vocab_size, c.d_model, c.max_len, c.dropout, c.positional,
                                        token_embedding=shared)
        self.encoder = Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, c.dropout, c.norm_first)
        self.decoder = Decoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, c.dropout, c.norm_first)
        self.output = nn.Linear(c.d_model, c.tgt_vocab_size, bias=False)  # the pre-softmax linear layer
        if c.tie_output:
            self.output.weight = self.tgt_embed.token.weight  # (V, d_model) serves both directions

    def encode(self, src: Tensor) -> tuple[Tensor, Tensor]:
        """src ids (B, S) -> (H (B, S, d_model), source padding mask (B, 1, 1, S))."""
        expect_token_ids(src, self.config.src_vocab_size, "source token ids")
        src_mask = padding_mask(src, self.config.pad_id)  # (B, 1, 1, S)
        return self.encoder(self.src_embed(src), src_mask), src_mask

    def decode(self, tgt: Tensor, memory: Tensor, src_mask: Tensor,
               caches: list[DecoderLayerCache] | None = None) -> Tensor:
        """tgt ids (B, T) -> logits (B, T, tgt_vocab_size). With `caches`, tgt holds only the new positions."""
        expect_token_ids(tgt, self.config.tgt_vocab_size, "target token ids")
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
    norm_first: bool = True  # GPT-2's pre-LN: stable training without a long warm-up
    positional: str = "learned"  # GPT uses learned position vectors; "sinusoidal" also works
    tie_weights: bool = True  # output layer shares the token table: fewer parameters, better small-data fit
    scale_embedding: bool = False  # GPT-2 does not multiply by sqrt(d_model); see TokenEmbedding
    activation: str = "gelu"  # GPT-2 uses GELU; "relu" gives the paper's FFN
    fused_attention: bool = True  # torch's fused attention kernel (same result, faster)

    def __post_init__(self) -> None:
        _check_dims(self.d_model, self.n_heads, self.d_ff, self.dropout)

    @property
    def d_head(self) -> int:
        return self.d_model // self.n_heads

    def to_dict(self) -> dict:
        return asdict(self)


class GPT(nn.Module):
    """Decoder-only: the encoder block with a causal mask, stacked, then a linear layer to the vocabulary."""

    def __init__(self, config: GPTConfig):
        super().__init__()
        self.config = c = config
        self.embed = InputEmbedding(c.vocab_size, c.d_model, c.max_len, c.dropout, c.positional,
                                    scale=c.scale_embedding)
        self.blocks = Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, c.dropout, c.norm_first,
                              c.activation, fused=c.fused_attention)
        self.output = nn.Linear(c.d_model, c.vocab_size, bias=False)
        if c.tie_weights:
            self.output.weight = self.embed.token.weight

    def forward(self, ids: Tensor, caches: list[KVCache] | None = None) -> Tensor:
        """ids (B, T) -> logits (B, T, vocab_size); logits[:, t] predicts token t + 1.

        With `caches` (from make_caches), ids holds only the new tokens; earlier keys and values
        come from the cache.
        """
        expect_token_ids(ids, self.config.vocab_size)
        offset = len(caches[0]) if caches else 0
        length = ids.shape[1]
        x = self.embed(ids, offset)  # (B, T, d_model); raises if offset + T > max_len
        mask = causal_mask(length, offset + length, ids.device)  # (T, offset + T)
        return self.output(self.blocks(x, mask, caches))  # (B, T, vocab_size)

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

    def __post_init__(self) -> None:
        _check_dims(self.d_model, self.n_heads, self.d_ff, self.dropout)


class EncoderOnly(nn.Module):
    """Bidirectional encoder: every token attends to every non-padding token.

    Classification head: reads the first position ([CLS]) -> (B, n_classes).
    Masked-token head: every position -> (B, T, vocab_size), trained to recover masked tokens.
    """

    def __init__(self, config: EncoderOnlyConfig):
        super().__init__()
        self.config = c = config
        self.embed = InputEmbedding(c.vocab_size, c.d_model, c.max_len, c.dropout, c.positional)
        self.encoder = Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, c.dropout, c.norm_first, c.activation)
        out_features = c.n_classes if c.n_classes is not None else c.vocab_size
        self.head = nn.Linear(c.d_model, out_features)

    def forward(self, ids: Tensor) -> Tensor:
        expect_token_ids(ids, self.config.vocab_size)
        hidden = self.encoder(self.embed(ids), padding_mask(ids, self.config.pad_id))  # (B, T, d_model)
        if self.config.n_classes is not None:
            return self.head(hidden[:, 0])  # (B, n_classes) from the [CLS] position
        return self.head(hidden)  # (B, T, vocab_size)


def count_parameters(model: nn.Module) -> int:
    """Trainable parameters; a tensor shared by several modules (tied weights) counts once."""
    return sum(p.numel() for p in model.parameters() if p.requires_grad)


__all__ = [
    "TransformerConfig", "Transformer", "GPTConfig", "GPT", "EncoderOnlyConfig", "EncoderOnly",
    "count_parameters",
]
