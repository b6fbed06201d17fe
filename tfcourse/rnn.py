"""The recurrent networks the Transformer replaced, for lesson 10's comparison.

    RNN:   h_t = tanh(x_t W_xh + h_{t-1} W_hh + b)
    LSTM:  i, f, g, o = chunks of x_t W_xh + h_{t-1} W_hh + b   (PyTorch's order)
           c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g);   h_t = sigmoid(o) * tanh(c_t)

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


def lstm_cell(x: Tensor, h: Tensor, c: Tensor, w_xh: Tensor, w_hh: Tensor, b: Tensor) -> tuple[Tensor, Tensor]:
    """One LSTM step, gates in PyTorch's order i, f, g, o: x (B, D), h and c (B, H), w_xh (D, 4H),
    w_hh (H, 4H), b (4H,) -> (h', c'), each (B, H)."""
    gates = x @ w_xh + h @ w_hh + b  # (B, 4H): all four gates in one product
    i, f, g, o = gates.chunk(4, dim=-1)  # (B, H) each
    i, f, o = torch.sigmoid(i), torch.sigmoid(f), torch.sigmoid(o)  # fractions in (0, 1)
    g = torch.tanh(g)  # the candidate, in (-1, 1): it can add or subtract
    c_next = f * c + i * g  # keep part of the old cell, add part of the candidate
    h_next = o * torch.tanh(c_next)  # (B, H)
    return h_next, c_next


def torch_lstm_cell(x: Tensor, h: Tensor, c: Tensor, w_xh: Tensor, w_hh: Tensor,
                    b: Tensor) -> tuple[Tensor, Tensor]:
    """torch's own nn.LSTMCell with the given weights (the independent reference for lstm_cell)."""
    cell = nn.LSTMCell(w_xh.shape[0], w_hh.shape[0]).to(x.device, x.dtype)
    with torch.no_grad():
        cell.weight_ih.copy_(w_xh.T)  # nn.LSTMCell stores (4H, D): x W_ih^T, chunks i, f, g, o
        cell.weight_hh.copy_(w_hh.T)
        cell.bias_ih.copy_(b)
        cell.bias_hh.zero_()
        return cell(x, (h, c))


__all__ = ["path_length", "rnn_forward", "lstm_cell", "torch_lstm_cell"]
