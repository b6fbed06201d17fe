"""Stage 3, second half of a block: the position-wise feed-forward network.

    FFN(x) = max(0, x W1 + b1) W2 + b2        W1: d_model -> d_ff,  W2: d_ff -> d_model

Attention mixes information *between* positions; the FFN then works on each position alone,
with the same weights everywhere ("position-wise"): expand to d_ff = 4 d_model, keep the positive
part (ReLU, the non-linearity), project back to d_model so the residual sum fits.
"""

from __future__ import annotations

from torch import Tensor, nn

from .validation import expect_tensor, shape_str

ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU}


class PositionwiseFeedForward(nn.Module):
    """Linear(d_model, d_ff) -> ReLU -> dropout -> Linear(d_ff, d_model). d_ff defaults to 4 * d_model.

    GELU (GPT-2, BERT) is available as activation="gelu"; SwiGLU (LLaMA) is a gated variant
    that the lessons discuss but this reference does not need.
    """

    def __init__(self, d_model: int, d_ff: int | None = None, dropout: float = 0.0, activation: str = "relu"):
        super().__init__()
        if activation not in ACTIVATIONS:
            raise ValueError(f"activation must be one of {sorted(ACTIVATIONS)}, got {activation!r}")
        self.d_model = d_model
        self.d_ff = d_ff if d_ff is not None else 4 * d_model
        self.linear1 = nn.Linear(d_model, self.d_ff)  # W1, b1: expand
        self.activation = ACTIVATIONS[activation]()
        self.dropout = nn.Dropout(dropout)
        self.linear2 = nn.Linear(self.d_ff, d_model)  # W2, b2: project back

    def forward(self, x: Tensor) -> Tensor:
        expect_tensor(x, "x", expected="(..., d_model)")
        if x.shape[-1] != self.d_model:
            raise ValueError(f"x must end in d_model={self.d_model}, got shape {shape_str(x)}")
        # nn.Linear acts on the last dimension only, so every position is transformed independently.
        return self.linear2(self.dropout(self.activation(self.linear1(x))))  # (..., d_model)


__all__ = ["PositionwiseFeedForward"]
