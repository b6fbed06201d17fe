"""What a mistake costs when a model trains with it (lesson 08, section 8.2): three of the mistakes the
lesson checks name, each put into a GPT the way a learner's code would put it there.

    model, honest = with_mistake(config, "leak")   # a GPT with the mistake; honest() takes it out again
    history = train(model, batches, train_config)  # trains (and evaluates) with the mistake in place
    honest()                                       # measure it as it will be used: the correct mask

The three: no 1/√d_k (the scores are q·k), a causal mask that lets each position see one future token
(position t also sees t + 1, which is its own target), and no positional encoding at all.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..models import GPT, GPTConfig

MISTAKES = {
    "correct": "the model as it should be",
    "no 1/√d_k": "scores q·k instead of q·k/√d_k",
    "mask leaks one future token": "position t also attends to t + 1, the token it is asked to predict",
    "no positional encoding": "no position information at all (the model sees a bag of tokens)",
}


class _Times(nn.Module):
    """A projection followed by a constant factor."""

    def __init__(self, projection: nn.Module, factor: float):
        super().__init__()
        self.projection, self.factor = projection, factor

    def forward(self, x: Tensor) -> Tensor:
        return self.projection(x) * self.factor


def _leaky_mask(module: nn.Module, args: tuple, kwargs: dict) -> tuple[tuple, dict]:
    """A forward pre-hook: the causal mask with one more diagonal, each position seeing the next one."""
    length = args[0].shape[1]
    kwargs = {**kwargs, "mask": torch.ones(length, length, dtype=torch.bool, device=args[0].device).tril(diagonal=1),
              "is_causal": False}  # (T, T): True on and below the first superdiagonal
    return args, kwargs


def with_mistake(config: GPTConfig, mistake: str) -> tuple[GPT, Callable[[], None]]:
    """A fresh GPT of `config` with `mistake` (a key of MISTAKES) built in, and a function that takes a
    mask leak out again (so the model can be measured as it would be used); for the other mistakes,
    which are part of the weights' meaning, it does nothing."""
    if mistake not in MISTAKES:
        raise ValueError(f"mistake must be one of {list(MISTAKES)}, got {mistake!r}")
    if mistake == "no positional encoding":
        config = dataclasses.replace(config, positional="none")
    model = GPT(config)
    handles = []
    for block in model.blocks.layers:
        attention = block.self_attn
        if mistake == "no 1/√d_k":
            # q·√d_head, divided by √d_head inside the attention: the scores are plain q·k, and the
            # gradients are those of a model written without the scaling.
            attention.w_q = _Times(attention.w_q, math.sqrt(attention.d_head))
        elif mistake == "mask leaks one future token":
            handles.append(attention.register_forward_pre_hook(_leaky_mask, with_kwargs=True))

    def honest() -> None:
        for handle in handles:
            handle.remove()
        handles.clear()

    return model, honest


__all__ = ["MISTAKES", "with_mistake"]
