"""Lesson 04's checks: right answers pass, every usual mistake is named, the answer is off-limits."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfcourse.checks.core import CheckFailed, OffLimitsError
from tfcourse.checks.ffn import (
    WORKED_STEPS,
    check_collapse_linear,
    check_feed_forward,
    check_load_paper_weights,
    check_positions_affected,
    check_trace_ffn,
    worked_example_weights,
)
from tfcourse.ffn import PositionwiseFeedForward
from check_helpers import assert_passes


# ----------------------------------------------------------------------------------------------
# Exercise 1: FeedForward
# ----------------------------------------------------------------------------------------------


class FeedForward(nn.Module):
    def __init__(self, d_model, d_ff=None):
        super().__init__()
        d_ff = 4 * d_model if d_ff is None else d_ff
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


class NoReLU(FeedForward):
    def forward(self, x):
        return self.linear2(self.linear1(x))


class ReLUTwice(FeedForward):
    def forward(self, x):
        return torch.relu(self.linear2(torch.relu(self.linear1(x))))


class WithGELU(FeedForward):
    def forward(self, x):
        return self.linear2(F.gelu(self.linear1(x)))


class WithResidual(FeedForward):
    def forward(self, x):
        return x + self.linear2(torch.relu(self.linear1(x)))


class ReLUOnInput(FeedForward):
    def forward(self, x):
        return self.linear2(self.linear1(torch.relu(x)))


class InPlace(FeedForward):
    def forward(self, x):
        x.mul_(1.5)
        return self.linear2(torch.relu(self.linear1(x)))


class WrongDefault(FeedForward):
    def __init__(self, d_model, d_ff=None):
        super().__init__(d_model, 2 * d_model if d_ff is None else d_ff)


class Sequential(nn.Module):
    def __init__(self, d_model, d_ff=None):
        super().__init__()
        self.net = nn.Sequential(nn.Linear(d_model, d_ff or 4 * d_model), nn.ReLU(), nn.Linear(d_ff or 4 * d_model, d_model))

    def forward(self, x):
        return self.net(x)


class Delegates(nn.Module):
    def __init__(self, d_model, d_ff=None):
        super().__init__()
        self.inner = PositionwiseFeedForward(d_model, d_ff)

    def forward(self, x):
        return self.inner(x)


class Stub(nn.Module):
    def __init__(self, d_model, d_ff=None):
        super().__init__()
        raise NotImplementedError()


def test_feed_forward_passes(capfd):
    assert_passes(check_feed_forward, FeedForward, capfd)


@pytest.mark.parametrize("learner, message", [
    (NoReLU, "without\\* ReLU"),
    (ReLUTwice, "after\\* the second linear"),
    (WithGELU, "GELU instead of ReLU"),
    (WithResidual, "residual is added by the block"),
    (ReLUOnInput, "ReLU applied to the input x"),
    (InPlace, "modified input #1 in place"),
    (WrongDefault, "d_ff defaults to 4 \\* d_model"),
    (Sequential, "two nn.Linear layers named linear1, linear2"),
    (Stub, "not implemented yet"),
])
def test_feed_forward_names_the_mistake(learner, message):
    with pytest.raises(CheckFailed, match=message):
        check_feed_forward(learner, hidden=True)


def test_feed_forward_default_d_ff_is_a_hidden_case():
    with pytest.raises(CheckFailed, match="d_ff defaults"):
        check_feed_forward(WrongDefault, hidden=True)


def test_feed_forward_reference_is_off_limits():
    with pytest.raises(OffLimitsError, match="off-limits"):
        check_feed_forward(Delegates)


def test_feed_forward_not_a_module():
    def make(d_model, d_ff=None):
        return lambda x: x

    with pytest.raises(CheckFailed, match="nn.Module"):
        check_feed_forward(make)


# ----------------------------------------------------------------------------------------------
# Exercise 2: load_paper_weights
# ----------------------------------------------------------------------------------------------


def load_paper_weights(ffn, W1, b1, W2, b2):
    with torch.no_grad():
        ffn.linear1.weight.copy_(W1.T)
        ffn.linear1.bias.copy_(b1)
        ffn.linear2.weight.copy_(W2.T)
        ffn.linear2.bias.copy_(b2)


def load_with_state_dict(ffn, W1, b1, W2, b2):
    ffn.load_state_dict({"linear1.weight": W1.T, "linear1.bias": b1, "linear2.weight": W2.T, "linear2.bias": b2})


def load_no_transpose(ffn, W1, b1, W2, b2):
    with torch.no_grad():
        ffn.linear1.weight.copy_(W1)
        ffn.linear1.bias.copy_(b1)
        ffn.linear2.weight.copy_(W2)
        ffn.linear2.bias.copy_(b2)


def load_swapped_weights(ffn, W1, b1, W2, b2):
    load_paper_weights(ffn, W2, b1, W1, b2)


def load_swapped_biases(ffn, W1, b1, W2, b2):
    load_paper_weights(ffn, W1, b2, W2, b1)


def load_shared(ffn, W1, b1, W2, b2):
    ffn.linear1.weight = nn.Parameter(W1.T)
    ffn.linear1.bias = nn.Parameter(b1)
    ffn.linear2.weight = nn.Parameter(W2.T)
    ffn.linear2.bias = nn.Parameter(b2)


def load_frozen(ffn, W1, b1, W2, b2):
    ffn.linear1.weight = nn.Parameter(W1.T.clone(), requires_grad=False)
    load_paper_weights(ffn, W1, b1, W2, b2)


def load_plain_tensor(ffn, W1, b1, W2, b2):
    load_paper_weights(ffn, W1, b1, W2, b2)
    del ffn.linear1.weight
    ffn.linear1.weight = W1.T.clone()


def load_and_clobber(ffn, W1, b1, W2, b2):
    load_paper_weights(ffn, W1, b1, W2, b2)
    b2.zero_()


def load_without_no_grad(ffn, W1, b1, W2, b2):
    ffn.linear1.weight.copy_(W1.T)


def load_stub(ffn, W1, b1, W2, b2):
    raise NotImplementedError()


@pytest.mark.parametrize("learner", [load_paper_weights, load_with_state_dict])
def test_load_paper_weights_passes(learner, capfd):
    assert_passes(check_load_paper_weights, learner, capfd)


@pytest.mark.parametrize("learner, message", [
    (load_no_transpose, "W1 itself: nn.Linear stores its weight as \\(out_features, in_features\\)"),
    (load_swapped_weights, "W1 and W2 are swapped"),
    (load_swapped_biases, "b1 and b2 are swapped"),
    (load_shared, "shares memory with W1"),
    (load_frozen, "no longer requires grad"),
    (load_plain_tensor, "no longer an nn.Parameter"),
    (load_and_clobber, "modified input #4 in place"),
    (load_without_no_grad, r"leaf Variable.*inside `with torch.no_grad\(\):`"),
    (load_stub, "not implemented yet"),
])
def test_load_paper_weights_names_the_mistake(learner, message):
    with pytest.raises(CheckFailed, match=message):
        check_load_paper_weights(learner, hidden=True)


# ----------------------------------------------------------------------------------------------
# Exercise 3: trace_ffn, the worked example
# ----------------------------------------------------------------------------------------------


def trace_ffn(ffn, x):
    hidden = ffn.linear1(x)
    activated = torch.relu(hidden)
    output = ffn.linear2(activated)
    return {"hidden": hidden, "activated": activated, "output": output, "residual": x + output}


def trace_relu_early(ffn, x):
    return {**trace_ffn(ffn, x), "hidden": torch.relu(ffn.linear1(x))}


def trace_no_relu(ffn, x):
    return {**trace_ffn(ffn, x), "activated": ffn.linear1(x)}


def trace_output_with_residual(ffn, x):
    result = trace_ffn(ffn, x)
    return {**result, "output": result["residual"]}


def trace_output_from_hidden(ffn, x):
    hidden = ffn.linear1(x)
    output = ffn.linear2(hidden)
    return {"hidden": hidden, "activated": torch.relu(hidden), "output": output, "residual": x + output}


def trace_no_residual(ffn, x):
    result = trace_ffn(ffn, x)
    return {**result, "residual": result["output"]}


def trace_residual_without_relu(ffn, x):
    return {**trace_ffn(ffn, x), "residual": x + ffn.linear2(ffn.linear1(x))}


def trace_list(ffn, x):
    return list(trace_ffn(ffn, x).values())


def trace_missing_key(ffn, x):
    result = trace_ffn(ffn, x)
    del result["activated"]
    return result


def trace_in_place(ffn, x):
    result = trace_ffn(ffn, x)
    x.add_(1.0)
    return result


def trace_stub(ffn, x):
    raise NotImplementedError()


def test_trace_passes(capfd):
    assert_passes(check_trace_ffn, trace_ffn, capfd)


@pytest.mark.parametrize("learner, message", [
    (trace_relu_early, "`hidden` is the value \\*before\\* the ReLU"),
    (trace_no_relu, "the ReLU was not applied"),
    (trace_output_with_residual, "the residual belongs in `residual` only"),
    (trace_output_from_hidden, "compute `output` from `activated`"),
    (trace_no_residual, "the `\\+ x` of the residual connection is missing"),
    (trace_residual_without_relu, "x \\+ \\(FFN without ReLU\\)"),
    (trace_list, "must return a dict"),
    (trace_missing_key, "missing the key\\(s\\) \\['activated'\\]"),
    (trace_in_place, "modified input #1 in place"),
    (trace_stub, "not implemented yet"),
])
def test_trace_names_the_mistake(learner, message):
    with pytest.raises(CheckFailed, match=message):
        check_trace_ffn(learner, hidden=True)


def test_trace_worked_example_shows_the_numbers():
    with pytest.raises(CheckFailed, match=r"worked example.*expected \(1, -2, 3\), got \(1, 0, 3\)"):
        check_trace_ffn(trace_relu_early)


def test_worked_example_weights_give_the_seed_numbers():
    w = worked_example_weights()
    hidden = w["x"] @ w["W1"] + w["b1"]
    activated = hidden.clamp(min=0)
    output = activated @ w["W2"] + w["b2"]
    for name, value in [("hidden", hidden), ("activated", activated), ("output", output),
                        ("residual", output + w["x"])]:
        assert torch.equal(value, WORKED_STEPS[name]), name
    assert not torch.equal(hidden @ w["W2"] + w["b2"], output)  # without ReLU the answer differs


# ----------------------------------------------------------------------------------------------
# Exercise 4: positions_affected
# ----------------------------------------------------------------------------------------------


def positions_affected(layer, x, t):
    changed = x.clone()
    changed[:, t] += torch.randn_like(changed[:, t])
    difference = layer(changed) - layer(x)
    return difference.abs().amax(dim=(0, 2)) > 0


def positions_affected_isclose(layer, x, t):
    changed = x.clone()
    changed[:, t] += 1.0
    return ~torch.isclose(layer(changed), layer(x)).all(dim=-1).all(dim=0)


def affected_inverted(layer, x, t):
    return ~positions_affected(layer, x, t)


def affected_feature_axis(layer, x, t):
    changed = x.clone()
    changed[..., t % x.shape[-1]] += 1.0
    return (layer(changed) != layer(x)).any(dim=-1).any(dim=0)


def affected_per_batch(layer, x, t):
    changed = x.clone()
    changed[:, t] += 1.0
    return (layer(changed) != layer(x)).any(dim=-1)  # (B, T): the batch axis is not reduced


def affected_in_place(layer, x, t):
    before = layer(x)
    x[:, t] += 1.0
    return (layer(x) != before).any(dim=-1).any(dim=0)


def affected_as_float(layer, x, t):
    return positions_affected(layer, x, t).float()


def affected_stub(layer, x, t):
    raise NotImplementedError()


@pytest.mark.parametrize("learner", [positions_affected, positions_affected_isclose])
def test_positions_affected_passes(learner, capfd):
    assert_passes(check_positions_affected, learner, capfd)


@pytest.mark.parametrize("learner, message", [
    (affected_inverted, "True where the output did \\*not\\* change"),
    (affected_feature_axis, "did you change feature t of every position"),
    (affected_per_batch, "expected shape \\(5\\), got \\(2, 5\\)"),
    (affected_in_place, "modified input #1 in place"),
    (affected_as_float, "expected dtype torch.bool"),
    (affected_stub, "not implemented yet"),
])
def test_positions_affected_names_the_mistake(learner, message):
    with pytest.raises(CheckFailed, match=message):
        check_positions_affected(learner, hidden=True)


# ----------------------------------------------------------------------------------------------
# Exercise 5: collapse_linear
# ----------------------------------------------------------------------------------------------


def collapse_linear(linear1, linear2):
    weight = linear2.weight @ linear1.weight
    bias = linear2.weight @ linear1.bias + linear2.bias
    return weight, bias


def collapse_by_probing(linear1, linear2):
    with torch.no_grad():
        bias = linear2(linear1(torch.zeros(linear1.in_features)))
        weight = (linear2(linear1(torch.eye(linear1.in_features))) - bias).T
    return weight, bias


def collapse_reversed(linear1, linear2):
    return linear1.weight @ linear2.weight, collapse_linear(linear1, linear2)[1]


def collapse_bias_b2(linear1, linear2):
    return collapse_linear(linear1, linear2)[0], linear2.bias


def collapse_bias_no_b2(linear1, linear2):
    return collapse_linear(linear1, linear2)[0], linear2.weight @ linear1.bias


def collapse_bias_sum(linear1, linear2):
    return collapse_linear(linear1, linear2)[0], linear1.bias + linear2.bias


def collapse_list(linear1, linear2):
    return list(collapse_linear(linear1, linear2))


def collapse_stub(linear1, linear2):
    raise NotImplementedError()


@pytest.mark.parametrize("learner", [collapse_linear, collapse_by_probing])
def test_collapse_passes(learner, capfd):
    assert_passes(check_collapse_linear, learner, capfd)


@pytest.mark.parametrize("learner, message", [
    (collapse_reversed, "the order is reversed"),
    (collapse_bias_b2, "b2 alone"),
    (collapse_bias_no_b2, "linear2's own bias b2 is missing"),
    (collapse_bias_sum, "b1 must go through W2 first"),
    (collapse_list, "must return a tuple"),
    (collapse_stub, "not implemented yet"),
])
def test_collapse_names_the_mistake(learner, message):
    with pytest.raises(CheckFailed, match=message):
        check_collapse_linear(learner, hidden=True)
