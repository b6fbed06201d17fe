"""The recurrent network the Transformer replaced, for lesson 10's comparison.

    h_t = tanh(x_t W_xh + h_{t-1} W_hh + b)

Each state needs the one before it, so the T steps run one after another; and information from
token i reaches position j only after j - i such steps (the path length).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor, nn


def path_length(i: int, j: int, layer: str, kernel_size: int = 3) -> int:
    """Sequential steps (recurrent), layers (convolution) or attention hops for token i to reach position j >= i."""
    distance = j - i
    if distance == 0:
        return 0
    if layer == "recurrent":
        return distance  # one step per position in between: h_i -> h_{i+1} -> ... -> h_j
    if layer == "self-attention":
        return 1  # position j attends to position i directly
    return math.ceil(distance / (kernel_size - 1))  # each causal layer widens the window by k - 1


def rnn_forward(x: Tensor, w_xh: Tensor, w_hh: Tensor, b: Tensor, h0: Tensor | None = None) -> Tensor:
    """torch's own nn.RNN with the given weights: h_t = tanh(x_t W_xh + h_{t-1} W_hh + b), all states (B, T, H)."""
    rnn = nn.RNN(w_xh.shape[0], w_xh.shape[1], batch_first=True).to(x.device, x.dtype)
    with torch.no_grad():
        rnn.weight_ih_l0.copy_(w_xh.T)  # nn.RNN stores (H, D): x W_ih^T
        rnn.weight_hh_l0.copy_(w_hh.T)
        rnn.bias_ih_l0.copy_(b)
        rnn.bias_hh_l0.zero_()
        states, _ = rnn(x, None if h0 is None else h0[None])
    return states


__all__ = ["path_length", "rnn_forward"]
