"""Lesson 04's checks: right answers pass, every usual mistake is named, the answer is off-limits."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfcourse.checks.core import CheckFailed, OffLimitsError
from tfcourse.checks.ffn import (
    check_collapse_linear,
    check_feed_forward,
    check_ffn_backward,
    check_load_paper_weights,
    check_positions_affected,
    check_trace_ffn,
    worked_example_weights,
)
from tfcourse.ffn import WORKED_STEPS, PositionwiseFeedForward
from check_helpers import assert_passes

ROOT = Path(__file__).resolve().parents[1]


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


class SecondLayerBackwards(FeedForward):
    def __init__(self, d_model, d_ff=None):
        super().__init__(d_model, d_ff)
        self.linear2 = nn.Linear(d_model, 4 * d_model if d_ff is None else d_ff)  # should map d_ff -> d_model


def test_feed_forward_passes(capfd):
    assert_passes(check_feed_forward, FeedForward, capfd)


@pytest.mark.parametrize("learner, message", [
    (NoReLU, "without ReLU"),
    (ReLUTwice, "after the second linear"),
    (WithGELU, "GELU instead of ReLU"),
    (WithResidual, "residual is added by the block"),
    (ReLUOnInput, "ReLU applied to the input x"),
    (InPlace, "modified input #1 in place"),
    (WrongDefault, "d_ff defaults to 4 \\* d_model"),
    (Sequential, "two nn.Linear layers named linear1, linear2"),
    (SecondLayerBackwards, r"^SecondLayerBackwards\(8, 32\): linear2.weight has shape \(32, 8\), expected \(8, 32\) "
                           r"\(linear1 = nn.Linear\(d_model, d_ff\), linear2 = nn.Linear\(d_ff, d_model\)\)$"),
    (Stub, "not implemented yet"),
])
def test_feed_forward_names_the_mistake(learner, message):
    with pytest.raises(CheckFailed, match=message):
        check_feed_forward(learner, hidden=True)


class PlainTensorAttribute(FeedForward):
    def __init__(self, d_model, d_ff=None):
        super().__init__(d_model, d_ff)
        self.scale = torch.ones(d_model)  # neither a parameter nor a buffer: .to("cuda") leaves it behind

    def forward(self, x):
        return super().forward(x) * self.scale


class CPUTensorInForward(FeedForward):
    def forward(self, x):
        return super().forward(x) * torch.ones(x.shape[-1])  # made on the CPU, whatever x's device


SCALE = torch.ones(8)  # a module-level tensor: it stays on the CPU whatever device the module is on


class GlobalTensorInForward(FeedForward):
    def forward(self, x):
        return super().forward(x) * SCALE[: x.shape[-1]]  # no constructor in forward: brought in


class NumpyTensorInForward(FeedForward):
    def forward(self, x):
        import numpy as np

        return super().forward(x) * torch.from_numpy(np.ones(x.shape[-1], dtype=np.float32))  # on the CPU


class Float32Inside(FeedForward):
    def forward(self, x):
        return super().forward(x).float()


class BufferAttribute(FeedForward):
    def __init__(self, d_model, d_ff=None):
        super().__init__(d_model, d_ff)
        self.register_buffer("scale", torch.ones(d_model))

    def forward(self, x):
        return super().forward(x) * torch.ones(x.shape[-1], device=x.device, dtype=x.dtype) * self.scale


def test_feed_forward_portable_variant_passes(capfd):
    assert_passes(check_feed_forward, BufferAttribute, capfd)


class PrintsToStderr(FeedForward):
    def forward(self, x):
        print("debug", file=sys.stderr)  # nbgrader would score a test cell with stderr output 0
        return super().forward(x)


def test_feed_forward_a_print_to_stderr_stays_quiet(capfd):
    assert_passes(check_feed_forward, PrintsToStderr, capfd)


@pytest.mark.parametrize("learner, message", [
    (PlainTensorAttribute, r"self\.scale is a plain tensor attribute.*register_buffer\('scale', tensor\)"),
    (CPUTensorInForward, "your forward creates a tensor on the CPU"),
    (GlobalTensorInForward, "your forward creates a tensor on the CPU"),
    (NumpyTensorInForward, "your forward creates a tensor on the CPU"),
    (Float32Inside, r"after \.to\(torch\.float64\) with float64 input your output is torch\.float32"),
])
def test_feed_forward_must_run_on_any_device(learner, message):
    with pytest.raises(CheckFailed, match=message):
        check_feed_forward(learner)


def test_a_forward_of_its_own_tensors_only_is_not_run_on_the_meta_device():
    """A forward that only computes with its inputs, parameters and buffers cannot mix devices: the
    check proves it on the CPU and skips the meta-device run, whose first operation imports
    torch._dynamo (a second of a learner's first check). One that makes a tensor is run there."""
    script = textwrap.dedent("""
        import sys, torch
        sys.path.insert(0, "tests")
        from test_checks_ffn import BufferAttribute, FeedForward
        from tfcourse.checks.ffn import check_feed_forward
        check_feed_forward(FeedForward)
        print("plain forward:", "torch._dynamo" in sys.modules)
        check_feed_forward(BufferAttribute)  # torch.ones(..., device=x.device): tried on the meta device
        print("forward with a constructor:", "torch._dynamo" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert "plain forward: False" in done.stdout and "forward with a constructor: True" in done.stdout


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
    (load_without_no_grad, r"leaf Variable.*inside 'with torch.no_grad\(\):'"),
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
    (trace_relu_early, "'hidden' is the value before the ReLU"),
    (trace_no_relu, "the ReLU was not applied"),
    (trace_output_with_residual, "the residual belongs in 'residual' only"),
    (trace_output_from_hidden, "compute 'output' from 'activated'"),
    (trace_no_residual, "the '\\+ x' of the residual connection is missing"),
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
    (affected_inverted, "True where the output did not change"),
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


# ----------------------------------------------------------------------------------------------
# Exercise 6: ffn_backward, the backward pass by hand
# ----------------------------------------------------------------------------------------------


def ffn_backward(x, W1, b1, W2, b2, grad_y):
    h = x @ W1 + b1  # (B, T, d_ff)
    a = torch.relu(h)
    grad_a = grad_y @ W2.T
    grad_h = grad_a * (h > 0)
    return {
        "dx": grad_h @ W1.T,
        "dW1": torch.einsum("btm,btf->mf", x, grad_h),
        "db1": grad_h.sum(dim=(0, 1)),
        "dW2": torch.einsum("btf,btm->fm", a, grad_y),
        "db2": grad_y.sum(dim=(0, 1)),
    }


def ffn_backward_flattened(x, W1, b1, W2, b2, grad_y):
    """Another right answer: every position as one row of a matrix, and torch.where for the mask."""
    rows, grad_rows = x.reshape(-1, x.shape[-1]), grad_y.reshape(-1, grad_y.shape[-1])  # (B*T, d_model)
    h = rows @ W1 + b1
    grad_h = torch.where(h > 0, grad_rows @ W2.T, torch.zeros_like(h))
    return {"db2": grad_rows.sum(0), "dW2": h.clamp(min=0).T @ grad_rows, "db1": grad_h.sum(0),
            "dW1": rows.T @ grad_h, "dx": (grad_h @ W1.T).reshape(x.shape)}


def _backward_with(**changes):
    def learner(x, W1, b1, W2, b2, grad_y):
        h = x @ W1 + b1
        a = torch.relu(h)
        grad_a = grad_y @ (W2 if changes.get("W2_not_transposed") else W2.T)
        if changes.get("no_mask"):
            grad_h = grad_a
        elif changes.get("relu_on_gradient"):
            grad_h = torch.relu(grad_a)
        else:
            grad_h = grad_a * (h > 0)
        result = ffn_backward(x, W1, b1, W2, b2, grad_y)
        result.update({"dx": grad_h @ (W1 if changes.get("W1_not_transposed") else W1.T),
                       "dW1": torch.einsum("btm,btf->mf", x, grad_h), "db1": grad_h.sum(dim=(0, 1))})
        if changes.get("dW1_transposed"):
            result["dW1"] = result["dW1"].T
        if changes.get("dW2_transposed"):
            result["dW2"] = result["dW2"].T
        if changes.get("dW1_per_sequence"):
            result["dW1"] = x.transpose(-1, -2) @ grad_h  # (B, d_model, d_ff)
        if changes.get("dW2_per_sequence"):
            result["dW2"] = a.transpose(-1, -2) @ grad_y
        if changes.get("dW2_before_relu"):
            result["dW2"] = torch.einsum("btf,btm->fm", h, grad_y)
        if changes.get("dW1_mean"):
            result["dW1"] = result["dW1"] / (x.shape[0] * x.shape[1])
        if changes.get("db1_per_position"):
            result["db1"] = grad_h
        if changes.get("db1_batch_only"):
            result["db1"] = grad_h.sum(dim=0)
        if changes.get("db2_time_only"):
            result["db2"] = grad_y.sum(dim=1)
        if changes.get("db2_mean"):
            result["db2"] = grad_y.mean(dim=(0, 1))
        if changes.get("db2_per_position"):
            result["db2"] = grad_y
        return result

    return learner


def backward_uses_autograd(x, W1, b1, W2, b2, grad_y):
    leaves = [t.clone().requires_grad_() for t in (x, W1, b1, W2, b2)]
    with torch.enable_grad():
        y = torch.relu(leaves[0] @ leaves[1] + leaves[2]) @ leaves[3] + leaves[4]
        grads = torch.autograd.grad(y, leaves, grad_y)
    return dict(zip(("dx", "dW1", "db1", "dW2", "db2"), grads))


def backward_uses_func_vjp(x, W1, b1, W2, b2, grad_y):
    _, vjp = torch.func.vjp(lambda *p: torch.relu(p[0] @ p[1] + p[2]) @ p[3] + p[4], x, W1, b1, W2, b2)
    return dict(zip(("dx", "dW1", "db1", "dW2", "db2"), vjp(grad_y)))


def backward_as_tuple(*args):
    return tuple(ffn_backward(*args).values())


def backward_missing_key(*args):
    result = ffn_backward(*args)
    del result["db1"]
    return result


def backward_in_place(x, W1, b1, W2, b2, grad_y):
    result = ffn_backward(x, W1, b1, W2, b2, grad_y)
    grad_y.mul_(0.5)
    return result


def backward_stub(*args):
    raise NotImplementedError()


@pytest.mark.parametrize("learner", [ffn_backward, ffn_backward_flattened])
def test_ffn_backward_passes(learner, capfd):
    assert_passes(check_ffn_backward, learner, capfd)


@pytest.mark.parametrize("changes, message", [
    (dict(no_mask=True), r"'dx' .*without the ReLU mask"),
    (dict(relu_on_gradient=True), r"'dx' .*the ReLU applied to the gradient"),
    (dict(W1_not_transposed=True), r"'dx' .*dL/dh W1: going back through x W1 multiplies by W1ᵀ"),
    (dict(W2_not_transposed=True), r"'dx' .*went back through W2 instead of W2ᵀ"),
    (dict(dW1_transposed=True), r"'dW1' .*dW1ᵀ: a gradient has the shape of its parameter"),
    (dict(dW2_transposed=True), r"'dW2' .*dW2ᵀ: a gradient has the shape of its parameter"),
    (dict(dW1_per_sequence=True), r"'dW1' .*one dW1 per sequence"),
    (dict(dW2_per_sequence=True), r"'dW2' .*one dW2 per sequence"),
    (dict(dW2_before_relu=True), r"'dW2' .*before the ReLU"),
    (dict(dW1_mean=True), r"'dW1' .*divided by the number of positions"),
    (dict(db1_per_position=True), r"'db1' .*dL/dh itself, one row per position.*sum over the batch and time"),
    (dict(db1_batch_only=True), r"'db1' .*summed over the batch axis only"),
    (dict(db2_time_only=True), r"'db2' .*summed over the time axis only"),
    (dict(db2_mean=True), r"'db2' .*the mean of dL/dy"),
    (dict(db2_per_position=True), r"'db2' .*dL/dy itself, one row per position"),
])
def test_ffn_backward_names_the_mistake(changes, message):
    with pytest.raises(CheckFailed, match=message):
        check_ffn_backward(_backward_with(**changes), hidden=True)


def test_ffn_backward_transposes_are_named_on_non_square_shapes_too():
    """After the square case, a transposed dW has the wrong shape: the message still names the mistake."""
    def transposed_only_when_not_square(x, W1, b1, W2, b2, grad_y):
        result = ffn_backward(x, W1, b1, W2, b2, grad_y)
        if W1.shape[0] != W1.shape[1]:
            result["dW1"] = result["dW1"].T
        return result

    with pytest.raises(CheckFailed, match=r"'dW1' for the worked example.*dW1ᵀ"):
        check_ffn_backward(transposed_only_when_not_square)


def test_ffn_backward_worked_example_shows_the_numbers():
    def wrong_only_on_worked_example(x, W1, b1, W2, b2, grad_y):
        result = ffn_backward(x, W1, b1, W2, b2, grad_y)
        if x.shape[-1] == 2:
            result["dx"] = _backward_with(no_mask=True)(x, W1, b1, W2, b2, grad_y)["dx"]
        return result

    with pytest.raises(CheckFailed, match=r"worked example.*expected \(0, -3\), got \(0, 4\)"):
        check_ffn_backward(wrong_only_on_worked_example)


@pytest.mark.parametrize("learner, message, error", [
    (backward_uses_autograd, "'torch.autograd.grad' is off-limits", OffLimitsError),
    (backward_uses_func_vjp, "'torch.func.vjp' is off-limits", OffLimitsError),
    (backward_as_tuple, "must return a dict", CheckFailed),
    (backward_missing_key, r"missing the key\(s\) \['db1'\]", CheckFailed),
    (backward_in_place, "modified input #6 in place", CheckFailed),
    (backward_stub, "not implemented yet", CheckFailed),
])
def test_ffn_backward_structure_off_limits_and_stub(learner, message, error):
    with pytest.raises(error, match=message):
        check_ffn_backward(learner)


def test_ffn_backward_check_leaves_autograd_usable():
    check_ffn_backward(ffn_backward)
    w = torch.ones(2, requires_grad=True)
    (w * 3).sum().backward()
    assert torch.equal(w.grad, torch.full((2,), 3.0))
