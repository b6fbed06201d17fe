"""Stage 2 of the data path: token ids -> vectors that carry meaning *and* position.

    ids (B, T) --TokenEmbedding--> (B, T, d_model) --+ positional encoding--> dropout --> X (B, T, d_model)

Attention alone is blind to word order (猫追狗 and 狗追猫 give the same set of vectors), so every
position gets a vector of its own that is added to the token's vector.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn

from .validation import expect_tensor, expect_token_ids


class TokenEmbedding(nn.Module):
    """A lookup table of `vocab_size` vectors, multiplied by sqrt(d_model) (paper, section 3.4).

    Why the scaling: the paper states it but gives no reason; what follows is one interpretation,
    the one this package builds on (it matches the authors' tensor2tensor code, which initialises the
    table the same way). The table starts at std 1/sqrt(d_model), the size suited to a matrix that may
    be shared with the output layer, so each looked-up entry is about 1/sqrt(d_model) in size.
    Multiplying by sqrt(d_model) brings the entries to about 1, the size of the sin/cos positional
    encoding they are added to; otherwise position would drown out meaning.
    With scale=False (GPT-2's convention) entries start at std 0.02, the size of GPT-2's learned
    position vectors in the common implementations, and are used as they are.
    """

    def __init__(self, vocab_size: int, d_model: int, scale: bool = True):
        super().__init__()
        self.vocab_size = vocab_size
        self.d_model = d_model
        self.scale = math.sqrt(d_model) if scale else 1.0
        init_std = 1 / math.sqrt(d_model) if scale else 0.02
        self.weight = nn.Parameter(torch.randn(vocab_size, d_model) * init_std)

    def forward(self, ids: Tensor) -> Tensor:
        expect_token_ids(ids, self.vocab_size)
        # Indexing rows equals one_hot(ids) @ weight, without building the one-hot matrix.
        return self.weight[ids] * self.scale  # (B, T, d_model)


def _check_table_size(max_len: int, d_model: int) -> None:
    """A sin/cos table needs an even d_model (one sin and one cos per frequency) and a position."""
    if d_model % 2 != 0:
        raise ValueError(f"d_model must be even for sin/cos pairs, got {d_model}")
    if max_len < 1:
        raise ValueError(f"max_len must be at least 1, got {max_len}")


def sinusoidal_positional_encoding(max_len: int, d_model: int) -> Tensor:
    """The paper's fixed encoding, shape (max_len, d_model):

        PE[pos, 2i]   = sin(pos / 10000^(2i / d_model))
        PE[pos, 2i+1] = cos(pos / 10000^(2i / d_model))

    Each pair of dimensions is a clock turning at its own speed, from one turn every 2*pi
    positions (i = 0) to one turn every 10000*2*pi positions; PE[pos + k] is a rotation of PE[pos],
    which makes relative offsets easy to read off.
    """
    _check_table_size(max_len, d_model)
    position = torch.arange(max_len, dtype=torch.float32).unsqueeze(1)  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)  # (d_model/2,) = 0, 2, 4, ...
    angle = position / (10000.0 ** (two_i / d_model))  # (max_len, d_model/2)
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)  # even dimensions
    pe[:, 1::2] = torch.cos(angle)  # odd dimensions
    return pe


def _check_positions(x: Tensor, offset: int, max_len: int) -> int:
    expect_tensor(x, "x", ndim=3, expected="(B, T, d_model)")
    length = x.shape[1]
    if offset + length > max_len:
        raise ValueError(
            f"sequence of length {length} starting at position {offset} is longer than "
            f"max_len={max_len}; shorten the input or build the model with a larger max_len"
        )
    return length


class SinusoidalPositionalEncoding(nn.Module):
    """Adds the fixed sinusoidal table to x (B, T, d_model). Nothing to learn; works for any T <= max_len."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        self.max_len = max_len
        # A buffer: saved with the model and moved by .to(device), but not trained.
        self.register_buffer("pe", sinusoidal_positional_encoding(max_len, d_model), persistent=False)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        length = _check_positions(x, offset, self.max_len)
        return x + self.pe[offset : offset + length]  # (T, d_model) broadcasts over B


class LearnedPositionalEmbedding(nn.Module):
    """The alternative (BERT, GPT): one trained vector per position. Cannot go past max_len."""

    def __init__(self, d_model: int, max_len: int):
        super().__init__()
        self.max_len = max_len
        self.weight = nn.Parameter(torch.randn(max_len, d_model) * 0.02)

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        length = _check_positions(x, offset, self.max_len)
        return x + self.weight[offset : offset + length]  # (T, d_model) broadcasts over B


class NoPositions(nn.Module):
    """Nothing added: positions enter elsewhere (RoPE rotates queries and keys inside attention), or not
    at all (an ablation). The input still may not be longer than max_len."""

    def __init__(self, max_len: int):
        super().__init__()
        self.max_len = max_len

    def forward(self, x: Tensor, offset: int = 0) -> Tensor:
        _check_positions(x, offset, self.max_len)
        return x


class InputEmbedding(nn.Module):
    """The input layer: X = dropout(TokenEmbedding(ids) + PE). `offset` is the position of ids[:, 0]
    (non-zero when generating with a key/value cache)."""

    def __init__(
        self,
        vocab_size: int,
        d_model: int,
        max_len: int,
        dropout: float = 0.1,
        *,
        positional: str = "sinusoidal",
        token_embedding: TokenEmbedding | None = None,
        scale: bool = True,
    ):
        super().__init__()
        # A caller may pass an existing table to share it (source/target sharing in translation).
        self.token = token_embedding or TokenEmbedding(vocab_size, d_model, scale)
        if positional == "sinusoidal":
            self.position: nn.Module = SinusoidalPositionalEncoding(d_model, max_len)
        elif positional == "learned":
            self.position = LearnedPositionalEmbedding(d_model, max_len)
        elif positional == "none":
            self.position = NoPositions(max_len)
        else:
            raise ValueError(f"positional must be 'sinusoidal', 'learned' or 'none', got {positional!r}")
        self.dropout = nn.Dropout(dropout)

    def forward(self, ids: Tensor, offset: int = 0) -> Tensor:
        return self.dropout(self.position(self.token(ids), offset))  # (B, T, d_model)


__all__ = [
    "TokenEmbedding",
    "sinusoidal_positional_encoding",
    "SinusoidalPositionalEncoding",
    "LearnedPositionalEmbedding",
    "NoPositions",
    "InputEmbedding",
]
