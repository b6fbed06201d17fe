"""Stage 3, second half of a block: the position-wise feed-forward network.

    FFN(x) = max(0, x W1 + b1) W2 + b2        W1: d_model -> d_ff,  W2: d_ff -> d_model

Attention mixes information *between* positions; the FFN then works on each position alone,
with the same weights everywhere ("position-wise"): expand to d_ff = 4 d_model, keep the positive
part (ReLU, the non-linearity), project back to d_model so the residual sum fits.
"""

from __future__ import annotations

import math
from functools import partial

import torch
from torch import Tensor, nn

from .validation import expect_tensor, shape_str


def gelu_tanh(x: Tensor) -> Tensor:
    """GELU as GPT-2 computes it, the tanh approximation of x * Phi(x) (Phi: the normal CDF):

        gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2 / pi) (x + 0.044715 x^3)))

    It differs from the exact GELU, x * Phi(x), by at most about 5e-4 - enough that GPT-2's
    checkpoint is reproduced exactly only with this form (its weights were trained through it).
    """
    expect_tensor(x, "x")
    inner = math.sqrt(2.0 / math.pi) * (x + 0.044715 * x.pow(3))  # the tanh's argument
    return 0.5 * x * (1.0 + torch.tanh(inner))


# The FFN's non-linearity by name. "gelu_tanh" is gelu_tanh above in torch's fused kernel
# (tests/test_pretrained.py proves the two equal).
ACTIVATIONS = {"relu": nn.ReLU, "gelu": nn.GELU, "gelu_tanh": partial(nn.GELU, approximate="tanh")}


class PositionwiseFeedForward(nn.Module):
    """Linear(d_model, d_ff) -> ReLU -> dropout -> Linear(d_ff, d_model). d_ff defaults to 4 * d_model.

    GELU (BERT) is available as activation="gelu", GPT-2's tanh approximation as "gelu_tanh"; SwiGLU (LLaMA) is a gated variant
    that the lessons discuss but this reference does not need.
    """

    def __init__(self, d_model: int, d_ff: int | None = None, dropout: float = 0.0, *, activation: str = "relu"):
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


# The seed's worked example: d_model = 2, d_ff = 3, x = (1, -2). In the paper's convention
# (row vector times matrix) these weights give
#   h = x W1 + b1 = (1, -2, 3),  ReLU(h) = (1, 0, 3),  FFN(x) = ReLU(h) W2 + b2 = (4, 1),  x + FFN(x) = (5, -1).
# Row 2 of W2 is not zero, so forgetting the ReLU gives a visibly different answer, (-6, -3).
WORKED_X = torch.tensor([1.0, -2.0])
WORKED_W1 = torch.tensor([[2.0, 0.0, 1.0],
                          [1.0, 1.0, -1.0]])  # (d_model, d_ff) = (2, 3)
WORKED_B1 = torch.tensor([1.0, 0.0, 0.0])  # (d_ff,)
WORKED_W2 = torch.tensor([[0.0, -1.0],
                          [5.0, 2.0],
                          [1.0, 1.0]])  # (d_ff, d_model) = (3, 2)
WORKED_B2 = torch.tensor([1.0, -1.0])  # (d_model,)
WORKED_STEPS = {
    "hidden": torch.tensor([1.0, -2.0, 3.0]),
    "activated": torch.tensor([1.0, 0.0, 3.0]),
    "output": torch.tensor([4.0, 1.0]),
    "residual": torch.tensor([5.0, -1.0]),
}


def worked_example_weights() -> dict[str, Tensor]:
    """Copies of the worked example's x and paper-convention weights (W1: (2, 3), W2: (3, 2))."""
    return {"x": WORKED_X.clone(), "W1": WORKED_W1.clone(), "b1": WORKED_B1.clone(),
            "W2": WORKED_W2.clone(), "b2": WORKED_B2.clone()}


__all__ = ["PositionwiseFeedForward", "gelu_tanh", "ACTIVATIONS", "worked_example_weights", "WORKED_STEPS"]
