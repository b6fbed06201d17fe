"""Predict, then run: an ungraded comparison of the learner's guess with what a cell measures.

    PREDICTION = None  # your guess: how many parameters has one W_Q of the base model?
    ...                # the experiment runs either way
    compare_prediction(PREDICTION, measured, "parameters of one W_Q")

A guess written down before the answer appears is what makes the result stick: the comparison says how
close it was (numbers: the ratio; shapes, words and choices: equal or not), and without one it only
invites a guess next time. Nothing here is graded.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import Any

import torch

from ..messages import say


def _plain(value: Any) -> Any:
    """A tensor or a torch.Size as plain Python, to compare and print."""
    if isinstance(value, torch.Size):
        return tuple(value)
    if isinstance(value, torch.Tensor):
        return value.item() if value.numel() == 1 else value.tolist()
    return value


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool)


def _closeness(predicted: float, measured: float, tolerance: float) -> str:
    if predicted == measured or (measured != 0 and abs(predicted - measured) <= tolerance * abs(measured)):
        return say("✔ right") if predicted == measured else say(f"✔ right (within {tolerance:.0%})")
    if measured == 0 or predicted == 0 or (predicted < 0) != (measured < 0):
        return say(f"✘ off by {abs(predicted - measured):.3g}")
    ratio = max(predicted / measured, measured / predicted)
    if abs(predicted) > abs(measured):
        return say(f"✘ too high, by a factor of {ratio:.3g}") if ratio >= 1.5 else say(f"✘ too high, by {abs(ratio - 1):.0%}")
    return say(f"✘ too low, by a factor of {ratio:.3g}") if ratio >= 1.5 else say(f"✘ too low, by {abs(ratio - 1):.0%}")


def _same_or_not(same: bool) -> str:
    return say("✔ right") if same else say("✘ not that")


def compare_prediction(prediction: Any, measured: Any, what: str, *, tolerance: float = 0.1) -> str:
    """Print (and return) how `prediction` compares with `measured`, the value of `what`.

    Numbers are right within `tolerance` (relative, default 10 %); anything else (a shape, a word, the
    name of the winner) must be equal. `prediction` None: the measured value, and an invitation to guess.
    """
    predicted, actual = _plain(prediction), _plain(measured)
    if predicted is None:
        line = say(f"{what}: {actual!r}  (no prediction written: next time put your guess in the variable first, "
                   "then run the cell — a guess you committed to teaches more than an answer you read)")
    elif _is_number(predicted) and _is_number(actual):
        line = say(f"{what}: you predicted {predicted!r}, measured {actual:.4g}: {_closeness(predicted, actual, tolerance)}")
    elif isinstance(predicted, str) and isinstance(actual, str):
        same = predicted.strip().lower() == actual.strip().lower()
        line = say(f"{what}: you predicted {predicted!r}, it is {actual!r}: {_same_or_not(same)}")
    else:
        if isinstance(predicted, Sequence) and not isinstance(predicted, str):
            predicted = tuple(predicted)
        if isinstance(actual, Sequence) and not isinstance(actual, str):
            actual = tuple(actual)
        same = predicted == actual
        line = say(f"{what}: you predicted {predicted!r}, it is {actual!r}: {_same_or_not(same)}")
    print(line)
    return line


__all__ = ["compare_prediction"]
