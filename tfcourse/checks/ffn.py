"""Checks for lesson 04, the position-wise feed-forward network."""

from __future__ import annotations

import torch
from torch import nn

from ..ffn import PositionwiseFeedForward
from .core import CheckFailed, call_learner, compare, expect_unchanged, learner_namespaces, off_limits, passed

# While the learner's FFN runs, the answer itself is off-limits.
FFN_OFF_LIMITS = ["tfcourse.ffn.PositionwiseFeedForward"]


def _build(learner_cls, d_model: int, d_ff: int | None) -> nn.Module:
    args = (d_model,) if d_ff is None else (d_model, d_ff)
    module = call_learner(f"{learner_cls.__name__}{args}", learner_cls, *args)
    if not isinstance(module, nn.Module):
        raise CheckFailed(f"{learner_cls.__name__} must be an nn.Module subclass")
    names = sorted(name for name, _ in module.named_parameters())
    expected = ["linear1.bias", "linear1.weight", "linear2.bias", "linear2.weight"]
    if names != expected:
        raise CheckFailed(f"expected parameters {expected} (two nn.Linear layers named linear1, linear2), got {names}")
    return module.eval()


def check_feed_forward(learner_cls, hidden: bool = False) -> None:
    """FFN(x) = max(0, x W1 + b1) W2 + b2 on (B, T, d_model) inputs; d_ff defaults to 4 d_model."""
    cases = [(2, 5, 8, 32), (1, 1, 4, 16)]
    if hidden:
        cases += [(3, 7, 12, 20), (2, 3, 6, None)]  # a d_ff that is not 4 d_model; the default
    for seed, (batch, length, d_model, d_ff) in enumerate(cases):
        torch.manual_seed(seed)
        reference = PositionwiseFeedForward(d_model, d_ff).eval()
        x = torch.randn(batch, length, d_model)
        with torch.no_grad():
            expected = reference(x)
            h = reference.linear1(x)
            mistakes = {
                "the FFN *without* ReLU (two linear layers in a row collapse into one)": reference.linear2(h),
                "ReLU applied *after* the second linear layer too": torch.relu(reference.linear2(torch.relu(h))),
                "GELU instead of ReLU (fine in GPT-2, but this exercise is the paper's ReLU)":
                    reference.linear2(nn.functional.gelu(h)),
                "the FFN output *plus* the input: the residual is added by the block, not the FFN":
                    expected + x,
            }
        with off_limits(FFN_OFF_LIMITS, "feed-forward network", learner_namespaces(learner_cls)):
            module = _build(learner_cls, d_model, d_ff)
            if module.linear1.out_features != reference.d_ff:
                raise CheckFailed(f"linear1 should map d_model={d_model} to d_ff={reference.d_ff}, "
                                  f"got {module.linear1.out_features} (d_ff defaults to 4 * d_model)")
            module.load_state_dict(reference.state_dict())
            x_before = x.clone()
            with torch.no_grad():
                actual = call_learner("forward(x)", module, x)
        expect_unchanged([x_before], [x], "forward(x)")
        compare(actual, expected, f"FFN output for x of shape {tuple(x.shape)}", mistakes)
    passed(f"FeedForward matches the reference on {len(cases)} shapes" + (" (hidden cases included)" if hidden else ""))
