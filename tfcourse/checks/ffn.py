"""Checks for lesson 04, the position-wise feed-forward network.

    check_feed_forward(FeedForward)              the module: max(0, x W1 + b1) W2 + b2
    check_load_paper_weights(load_paper_weights) paper weights (x W) into nn.Linear (W x, weight = Wᵀ)
    check_trace_ffn(trace_ffn)                   every intermediate, the seed's worked example first
    check_positions_affected(positions_affected) which output positions move when input t moves
    check_collapse_linear(collapse_linear)       two linear maps without ReLU are one linear map
    check_ffn_backward(ffn_backward)             the FFN's backward pass by hand, against autograd

A module the learner writes must also run on a GPU: check_feed_forward ends with `expect_portable`.
"""

from __future__ import annotations

import functools
from collections.abc import Callable

import torch
from torch import Tensor, nn

from ..ffn import (WORKED_B1, WORKED_B2, WORKED_W1, WORKED_W2, WORKED_X, PositionwiseFeedForward,
                   worked_example_weights)
from .debugging import PlantedBug, debug_exercise
from .core import (Case, CheckFailed, Exercise, _close, build_module, call_learner, compare, expect_portable,
                   expect_unchanged, isolated, load_state, run, seeded)

# While the learner's FFN runs, the answer itself is off-limits. (torch has no stand-alone FFN
# module to forbid: its only one lives inside nn.TransformerEncoderLayer.)
FFN_OFF_LIMITS = ["tfcourse.ffn.PositionwiseFeedForward"]
# no_grad=False: the learner's code runs with autograd on, as in the notebook (an in-place change of a
# parameter fails there, so it fails here too); the FFN's forward alone runs without it.
FEED_FORWARD = Exercise("feed-forward network", FFN_OFF_LIMITS, "FeedForward matches the reference on {n} shapes",
                        no_grad=False)

TRACE_KEYS = ("hidden", "activated", "output", "residual")
WORKED_LABEL = "the worked example x = (1, -2)"


class _TwoLinear(nn.Module):
    """A bare FFN used as test input: linear1 -> ReLU -> linear2, independent of any exercise."""

    def __init__(self, d_model: int, d_ff: int):
        super().__init__()
        self.linear1 = nn.Linear(d_model, d_ff)
        self.linear2 = nn.Linear(d_ff, d_model)

    def forward(self, x: Tensor) -> Tensor:
        return self.linear2(torch.relu(self.linear1(x)))


def _fmt(t: Tensor) -> str:
    return "(" + ", ".join(f"{v:g}" for v in t.detach().flatten().tolist()) + ")"


# ----------------------------------------------------------------------------------------------
# Exercise 1: the module
# ----------------------------------------------------------------------------------------------


def _build(learner_cls, d_model: int, d_ff: int | None) -> nn.Module:
    args = (d_model,) if d_ff is None else (d_model, d_ff)
    module = build_module(f"{learner_cls.__name__}{args}", learner_cls, *args)
    names = sorted(name for name, _ in module.named_parameters())
    expected = ["linear1.bias", "linear1.weight", "linear2.bias", "linear2.weight"]
    if names != expected:
        raise CheckFailed(f"expected parameters {expected} (two nn.Linear layers named linear1, linear2), got {names}")
    return module.eval()


def _feed_forward_case(seed: int, batch: int | None, length: int, d_model: int, d_ff: int | None) -> Case:
    """The reference's weights loaded into the learner's FFN: its output on x of shape (B, T, d_model) or
    (T, d_model) when batch is None."""
    torch.manual_seed(seed)
    reference = PositionwiseFeedForward(d_model, d_ff).eval()
    x = torch.randn(length, d_model) if batch is None else torch.randn(batch, length, d_model)
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
            "ReLU applied to the input x instead of to the hidden layer x W1 + b1":
                reference.linear2(reference.linear1(torch.relu(x))),
        }

    def forward(learner_cls) -> object:
        module = _build(learner_cls, d_model, d_ff)
        if module.linear1.out_features != reference.d_ff:
            raise CheckFailed(f"linear1 should map d_model={d_model} to d_ff={reference.d_ff}, "
                              f"got {module.linear1.out_features} (d_ff defaults to 4 * d_model)")
        load_state(module, reference.state_dict(), f"{learner_cls.__name__}({d_model}, {d_ff})",
                   "linear1 = nn.Linear(d_model, d_ff), linear2 = nn.Linear(d_ff, d_model)",
                   strict=False)  # extra buffers of yours may stay
        with torch.no_grad():
            return call_learner("forward(x)", module, x)

    return Case("forward(x)", call=forward, expected=expected, mistakes=mistakes,
                label=f"FFN output for x of shape {tuple(x.shape)}", unchanged=(x,))


@isolated
def check_feed_forward(learner_cls, hidden: bool = False) -> None:
    """FFN(x) = max(0, x W1 + b1) W2 + b2 on (B, T, d_model) inputs; d_ff defaults to 4 d_model."""
    sizes = [(2, 5, 8, 32), (1, 1, 4, 16)]
    if hidden:
        # a d_ff that is not 4 d_model; the default d_ff; an input without a batch axis (T, d_model)
        sizes += [(3, 7, 12, 20), (2, 3, 6, None), (None, 5, 8, 24)]
    cases = [_feed_forward_case(seed, *size) for seed, size in enumerate(sizes)]
    x = torch.randn(2, 5, 8)
    # Right on the CPU; now a fresh one must also follow the input to another device and dtype (quietly:
    # stderr would cost the test cell its points).
    run(FEED_FORWARD, learner_cls, cases, hidden,
        then=lambda: expect_portable(f"{learner_cls.__name__}(8, 32)", _build(learner_cls, 8, 32), [x]))


# ----------------------------------------------------------------------------------------------
# Exercise 2: the paper's weights into nn.Linear
# ----------------------------------------------------------------------------------------------

# With autograd on, as in the notebook: a copy into a parameter outside torch.no_grad() must fail.
LOAD_PAPER_WEIGHTS = Exercise("paper weights into nn.Linear", (),
                              "load_paper_weights fills linear1/linear2 correctly on {n} shapes", no_grad=False)


def _load_case(seed: int, d_model: int, d_ff: int) -> Case:
    """load_paper_weights on a fresh ffn: each parameter must then hold the paper's weight, transposed
    where nn.Linear needs it, still trainable, sharing no memory with what it was given."""
    g = seeded(100 + seed)
    W1, b1 = torch.randn(d_model, d_ff, generator=g), torch.randn(d_ff, generator=g)
    W2, b2 = torch.randn(d_ff, d_model, generator=g), torch.randn(d_model, generator=g)
    given = {"W1": W1, "b1": b1, "W2": W2, "b2": b2}
    torch.manual_seed(seed)
    ffn = _TwoLinear(d_model, d_ff)
    square = d_model == d_ff  # only a square shape lets a missing transpose or a swap load at all
    expected = {
        "linear1.weight": (W1.t(), {
            "W1 itself: nn.Linear stores its weight as (out_features, in_features), i.e. W1ᵀ": W1,
            "W2ᵀ: W1 and W2 are swapped": W2.t(),
        } if square else {}),
        "linear1.bias": (b1, {"b2: b1 and b2 are swapped": b2} if square else {}),
        "linear2.weight": (W2.t(), {
            "W2 itself: nn.Linear stores its weight as (out_features, in_features), i.e. W2ᵀ": W2,
            "W1ᵀ: W1 and W2 are swapped": W1.t(),
        } if square else {}),
        "linear2.bias": (b2, {"b1: b1 and b2 are swapped": b1} if square else {}),
    }
    what = f"load_paper_weights(ffn, W1, b1, W2, b2) with d_model={d_model}, d_ff={d_ff}"

    def load(load_fn) -> object:
        try:
            return call_learner(what, load_fn, ffn, W1, b1, W2, b2)
        except CheckFailed as error:
            if "leaf Variable" in str(error):  # autograd refused an in-place change of a parameter
                raise CheckFailed(f"{error} — do the copies inside `with torch.no_grad():`") from None
            raise

    def loaded(_: object) -> None:
        for name, (want, mistakes) in expected.items():
            layer, _, attribute = name.partition(".")
            actual = getattr(getattr(ffn, layer), attribute)  # read now: the learner may have replaced it
            where = f"ffn.{name} (d_model={d_model}, d_ff={d_ff})"
            if not isinstance(actual, nn.Parameter):
                raise CheckFailed(f"{where} is no longer an nn.Parameter, so it would not be trained; "
                                  "copy values into the existing parameter instead")
            compare(actual, want.contiguous(), where, {k: v.contiguous() for k, v in mistakes.items()})
            if not actual.requires_grad:
                raise CheckFailed(f"{where} no longer requires grad, so it would not be trained")
            for given_name, tensor in given.items():
                if actual.untyped_storage().data_ptr() == tensor.untyped_storage().data_ptr():
                    raise CheckFailed(f"{where} shares memory with {given_name}: training the module would "
                                      f"overwrite the tensor you were given; copy the values (e.g. with "
                                      f".copy_ inside torch.no_grad())")

    return Case(what, call=load, unchanged=(W1, b1, W2, b2), unchanged_what="load_paper_weights", after=loaded)


@isolated
def check_load_paper_weights(load_fn, hidden: bool = False) -> None:
    """load_paper_weights(ffn, W1, b1, W2, b2) sets ffn.linear1/linear2 so that ffn computes
    max(0, x W1 + b1) W2 + b2 with W1 of shape (d_model, d_ff) and W2 of shape (d_ff, d_model)."""
    # A square shape first: there a missing transpose or a swap shows in the values, not as a crash.
    sizes = [(4, 4), (2, 3)]
    if hidden:
        sizes += [(5, 20), (1, 1), (6, 6)]
    run(LOAD_PAPER_WEIGHTS, load_fn, [_load_case(seed, *size) for seed, size in enumerate(sizes)], hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 3: every intermediate, the worked example first
# ----------------------------------------------------------------------------------------------

TRACE_FFN = Exercise("trace of the FFN", (), "trace_ffn gives every intermediate right on {n} inputs, the worked "
                     "example (1, -2) -> (1, -2, 3) -> (1, 0, 3) -> (4, 1) -> (5, -1) first")



def _compare_named(fn_name: str, keys: tuple[str, ...], label: str, expected: dict[str, Tensor],
                   mistakes: dict[str, dict[str, Tensor]], compare_one: Callable[..., None], result: object) -> None:
    """A learner's dict of named tensors against `expected`, key by key, each with its own mistakes;
    on the worked example the numbers are shown (they are tiny)."""
    keys = list(keys)
    if not isinstance(result, dict):
        raise CheckFailed(f"{fn_name} must return a dict with keys {keys}, got {type(result).__name__}")
    missing = [key for key in keys if key not in result]
    if missing:
        raise CheckFailed(f"{fn_name}'s dict is missing the key(s) {missing}; expected keys {keys}")
    for key in keys:
        try:
            compare_one(result[key], expected[key], f"`{key}` for {label}", mistakes[key])
        except CheckFailed as error:
            if label.startswith(WORKED_LABEL) and isinstance(result[key], Tensor):  # tiny: show the numbers
                raise CheckFailed(f"{error} — expected {_fmt(expected[key])}, got {_fmt(result[key])}") from None
            raise


def _trace_case(label: str, ffn: nn.Module, x: Tensor) -> Case:
    """trace_ffn(ffn, x): every intermediate, each with the usual mistakes for it."""
    with torch.no_grad():
        h = ffn.linear1(x)
        a = torch.relu(h)
        out = ffn.linear2(a)
        no_relu = ffn.linear2(h)
    expected = {"hidden": h, "activated": a, "output": out, "residual": x + out}
    mistakes = {
        "hidden": {"ReLU(x W1 + b1): `hidden` is the value *before* the ReLU": a},
        "activated": {"`hidden`: the ReLU was not applied": h},
        "output": {"x + FFN(x): the residual belongs in `residual` only": x + out,
                   "the FFN without ReLU: compute `output` from `activated`, not `hidden`": no_relu},
        "residual": {"FFN(x) alone: the `+ x` of the residual connection is missing": out,
                     "x + (FFN without ReLU)": x + no_relu},
    }
    return Case(f"trace_ffn(ffn, x) for {label}", (ffn, x), unchanged_what="trace_ffn",
                inspect=functools.partial(_compare_named, "trace_ffn", TRACE_KEYS, label, expected, mistakes, compare))


@isolated
def check_trace_ffn(trace_fn, hidden: bool = False) -> None:
    """trace_ffn(ffn, x) -> {"hidden": x W1 + b1, "activated": ReLU(hidden), "output": FFN(x),
    "residual": x + FFN(x)} for any ffn with linear1 and linear2 and any x of shape (..., d_model)."""
    worked = _TwoLinear(2, 3)
    worked.load_state_dict({"linear1.weight": WORKED_W1.t(), "linear1.bias": WORKED_B1,  # nn.Linear holds W1ᵀ, W2ᵀ
                            "linear2.weight": WORKED_W2.t(), "linear2.bias": WORKED_B2})
    cases = [_trace_case(WORKED_LABEL, worked, WORKED_X.clone())]
    shapes = [(2, 5, 8, 32), (1, 1, 4, 16)] + ([(3, 4, 6, 10), (None, 7, 5, 20)] if hidden else [])
    for seed, (batch, length, d_model, d_ff) in enumerate(shapes):
        torch.manual_seed(200 + seed)
        ffn = _TwoLinear(d_model, d_ff)
        x = torch.randn(length, d_model) if batch is None else torch.randn(batch, length, d_model)
        cases.append(_trace_case(f"x of shape {tuple(x.shape)}", ffn, x))
    run(TRACE_FFN, trace_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 4: position-wise independence
# ----------------------------------------------------------------------------------------------

POSITIONS_AFFECTED = Exercise("positions affected", (), "positions_affected finds exactly the outputs that move, on "
                              "{n} layers and positions")


class _CausalMean(nn.Module):
    """Output t is the mean of inputs 0..t: position t influences t, t+1, ..., T-1 (like causal attention)."""

    def forward(self, x: Tensor) -> Tensor:
        counts = torch.arange(1, x.shape[1] + 1, dtype=x.dtype).view(1, -1, 1)  # (1, T, 1)
        return x.cumsum(dim=1) / counts  # (B, T, d_model)


class _GlobalMean(nn.Module):
    """Every output sees every input (like attention without a mask)."""

    def forward(self, x: Tensor) -> Tensor:
        return x + x.mean(dim=1, keepdim=True)  # (B, T, d_model)


class _ShiftRight(nn.Module):
    """Output t is input t - 1: position t influences only t + 1 (nothing when t is the last)."""

    def forward(self, x: Tensor) -> Tensor:
        return torch.cat([torch.zeros_like(x[:, :1]), x[:, :-1]], dim=1)  # (B, T, d_model)


def _positions_case(seed: int, kind: str, batch: int, length: int, d_model: int, t: int) -> Case:
    """positions_affected on a layer of the given kind, whose answer is known by construction."""
    torch.manual_seed(300 + seed)
    layer = {"ffn": lambda: _TwoLinear(d_model, 4 * d_model), "causal": _CausalMean, "global": _GlobalMean,
             "shift": _ShiftRight}[kind]().eval()
    x = torch.randn(batch, length, d_model)
    positions = torch.arange(length)
    expected = {"ffn": positions == t, "causal": positions >= t, "global": torch.ones(length, dtype=torch.bool),
                "shift": positions == t + 1}[kind]
    mistakes = {"the opposite: True where the output did *not* change": ~expected}
    if kind == "ffn" and length > 1:
        mistakes["True everywhere: did you change feature t of every position (x[..., t]) "
                 "instead of position t (x[:, t])?"] = torch.ones(length, dtype=torch.bool)
    name = {"ffn": "a position-wise FFN", "causal": "a causal running mean", "global": "a mean over all positions",
            "shift": "a shift by one position"}[kind]
    label = f"{name}, x of shape {tuple(x.shape)}, t={t}"
    return Case(f"positions_affected(layer, x, t) for {label}", (layer, x, t), expected=expected, mistakes=mistakes,
                label=f"positions_affected for {label}", unchanged_what="positions_affected")


@isolated
def check_positions_affected(learner_fn, hidden: bool = False) -> None:
    """positions_affected(layer, x, t) -> bool tensor (T,): True where layer's output changes when
    the input at position t changes. x: (B, T, d_model)."""
    sizes = [("ffn", 2, 5, 8, 2), ("causal", 2, 6, 4, 1), ("global", 1, 4, 4, 3)]
    if hidden:
        sizes += [("ffn", 1, 1, 4, 0), ("ffn", 3, 7, 6, 6), ("shift", 2, 5, 3, 1), ("shift", 2, 5, 3, 4),
                  ("causal", 1, 8, 2, 0)]
    run(POSITIONS_AFFECTED, learner_fn, [_positions_case(seed, *size) for seed, size in enumerate(sizes)], hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 5: without the ReLU, two linear layers are one
# ----------------------------------------------------------------------------------------------

COLLAPSE_LINEAR = Exercise("collapse of two linear layers", (),
                           "collapse_linear turns two linear layers into one on {n} shapes", no_grad=False)


def _collapse_case(seed: int, d_in: int, d_mid: int, d_out: int) -> Case:
    """collapse_linear on Linear(d_in, d_mid) then Linear(d_mid, d_out): the layers left as they were, then the
    weight and the bias, each with its usual mistakes."""
    torch.manual_seed(400 + seed)
    linear1, linear2 = nn.Linear(d_in, d_mid), nn.Linear(d_mid, d_out)
    with torch.no_grad():
        W1, b1, W2, b2 = (p.detach().clone() for p in (linear1.weight, linear1.bias, linear2.weight, linear2.bias))
        weight, bias = W2 @ W1, W2 @ b1 + b2  # (d_out, d_in), (d_out,)
    weight_mistakes = {"W1 @ W2: the order is reversed (linear1 acts first, so its matrix stands on the right)":
                       W1 @ W2} if d_in == d_mid == d_out else {}
    bias_mistakes = {"b2 alone: b1 also passes through linear2, so the bias is W2 b1 + b2": b2,
                     "W2 b1 alone: linear2's own bias b2 is missing": W2 @ b1}
    if d_mid == d_out:
        bias_mistakes["b1 + b2: b1 must go through W2 first (W2 b1 + b2)"] = b1 + b2
    label = f"Linear({d_in}, {d_mid}) then Linear({d_mid}, {d_out})"

    def collapsed(result: object) -> None:
        # The parameters read now: the learner may have replaced one.
        expect_unchanged([W1, b1, W2, b2], [linear1.weight.detach(), linear1.bias.detach(), linear2.weight.detach(),
                                            linear2.bias.detach()], "collapse_linear")
        if not (isinstance(result, tuple) and len(result) == 2):
            raise CheckFailed(f"collapse_linear must return a tuple (weight, bias), got {type(result).__name__}")
        compare(result[0], weight, f"weight for {label}", weight_mistakes)
        compare(result[1], bias, f"bias for {label}", bias_mistakes)

    return Case(f"collapse_linear(linear1, linear2) for {label}", (linear1, linear2), after=collapsed)


@isolated
def check_collapse_linear(learner_fn, hidden: bool = False) -> None:
    """collapse_linear(linear1, linear2) -> (weight, bias) of the one nn.Linear-style map
    x -> x @ weight.T + bias that equals linear2(linear1(x))."""
    sizes = [(4, 4, 4), (3, 8, 2)]  # square first: there a wrong order gives a wrong value, not a crash
    if hidden:
        sizes += [(5, 20, 5), (1, 1, 1), (6, 2, 3)]
    run(COLLAPSE_LINEAR, learner_fn, [_collapse_case(seed, *size) for seed, size in enumerate(sizes)], hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 6: the backward pass by hand
# ----------------------------------------------------------------------------------------------

# Computing the gradients is the exercise: autograd, in every form, is off-limits while it runs.
BACKWARD_OFF_LIMITS = ["torch.autograd.grad", "torch.autograd.backward", "torch.Tensor.backward",
                       "torch.autograd.functional.vjp", "torch.autograd.functional.jacobian",
                       "torch.func.grad", "torch.func.vjp", "torch.func.jacrev"]
# With autograd on, as in the notebook (the answer is checked against autograd all the same).
FFN_BACKWARD = Exercise("the FFN's backward pass by hand", BACKWARD_OFF_LIMITS,
                        "ffn_backward agrees with autograd on {n} inputs, the ReLU's mask, the transposes and the "
                        "sums over positions included", no_grad=False)
BACKWARD_KEYS = ("dx", "dW1", "db1", "dW2", "db2")
BACKWARD_ATOL, BACKWARD_RTOL = 1e-4, 1e-4


def _autograd_reference(t: dict[str, Tensor]) -> dict[str, Tensor]:
    """The right answer, by autograd in float64 (computed before the learner's code runs)."""
    leaves = {k: t[k].double().requires_grad_() for k in ("x", "W1", "b1", "W2", "b2")}
    with torch.enable_grad():
        y = torch.relu(leaves["x"] @ leaves["W1"] + leaves["b1"]) @ leaves["W2"] + leaves["b2"]
        grads = torch.autograd.grad(y, list(leaves.values()), grad_outputs=t["grad_y"].double())
    return {f"d{k}": grad.to(t["x"].dtype) for k, grad in zip(leaves, grads)}


def _backward_mistakes(t: dict[str, Tensor]) -> dict[str, dict[str, Tensor]]:
    """What the usual mistakes return, key by key; some have other shapes than the right answer."""
    x, W1, b1, W2, gy = (t[k].double() for k in ("x", "W1", "b1", "W2", "grad_y"))
    dtype = t["x"].dtype
    h = x @ W1 + b1  # (B, T, d_ff)
    a = torch.relu(h)
    mask = (h > 0).double()
    ga = gy @ W2.T  # dL/da, (B, T, d_ff)
    gh = ga * mask  # dL/dh
    square = W1.shape[0] == W1.shape[1]
    positions = x.shape[0] * x.shape[1]

    def outer(left: Tensor, right: Tensor) -> Tensor:  # sum over every position of leftᵀ right
        return left.flatten(0, -2).T @ right.flatten(0, -2)

    def per_sequence(left: Tensor, right: Tensor) -> Tensor:  # one leftᵀ right per batch row
        return left.transpose(-1, -2) @ right  # (B, ., .)

    no_mask = "the gradient *without* the ReLU mask: the ReLU lets dL/da through only where h = x W1 + b1 > 0"
    relu_grad = ("max(0, dL/da), the ReLU applied to the gradient: the mask depends on the sign of "
                 "h = x W1 + b1, not on the sign of the gradient")
    via_W2 = "a gradient that went back through W2 instead of W2ᵀ: dL/da = dL/dy W2ᵀ"
    gh_relu = torch.relu(ga)  # the ReLU applied to the gradient instead of the mask
    shared = ("{name} is shared by every position of every sequence, so its gradient is the *sum* over the "
              "batch and time axes")
    mistakes: dict[str, dict[str, Tensor]] = {
        "dx": {no_mask: ga @ W1.T, relu_grad: gh_relu @ W1.T},
        "dW1": {no_mask: outer(x, ga), relu_grad: outer(x, gh_relu),
                "dL/dhᵀ x, i.e. dW1ᵀ: a gradient has the shape of its parameter, W1 is (d_model, d_ff), "
                "so dW1 = xᵀ dL/dh": outer(gh, x),
                "one dW1 per sequence, shape (B, d_model, d_ff): " + shared.format(name="W1"): per_sequence(x, gh),
                "xᵀ dL/dh divided by the number of positions: " + shared.format(name="W1"): outer(x, gh) / positions},
        "db1": {no_mask: ga.sum(dim=(0, 1)), relu_grad: gh_relu.sum(dim=(0, 1)),
                "dL/dh itself, one row per position: " + shared.format(name="b1"): gh,
                "dL/dh summed over the batch axis only: " + shared.format(name="b1"): gh.sum(dim=0),
                "dL/dh summed over the time axis only: " + shared.format(name="b1"): gh.sum(dim=1),
                "the *mean* of dL/dh over the positions: " + shared.format(name="b1"): gh.mean(dim=(0, 1))},
        "dW2": {"hᵀ dL/dy with h taken *before* the ReLU: W2 multiplies a = max(0, h)": outer(h, gy),
                "dL/dyᵀ a, i.e. dW2ᵀ: a gradient has the shape of its parameter, W2 is (d_ff, d_model), "
                "so dW2 = aᵀ dL/dy": outer(gy, a),
                "one dW2 per sequence, shape (B, d_ff, d_model): " + shared.format(name="W2"): per_sequence(a, gy),
                "aᵀ dL/dy divided by the number of positions: " + shared.format(name="W2"): outer(a, gy) / positions},
        "db2": {"dL/dy itself, one row per position: " + shared.format(name="b2"): gy,
                "dL/dy summed over the batch axis only: " + shared.format(name="b2"): gy.sum(dim=0),
                "dL/dy summed over the time axis only: " + shared.format(name="b2"): gy.sum(dim=1),
                "the *mean* of dL/dy over the positions: " + shared.format(name="b2"): gy.mean(dim=(0, 1))},
    }
    if square:  # only here do the wrong products have the right shape
        gh_w2 = (gy @ W2) * mask  # back through W2 instead of W2ᵀ
        mistakes["dx"]["dL/dh W1: going back through x W1 multiplies by W1ᵀ, dx = dL/dh W1ᵀ"] = gh @ W1
        for key, value in {"dx": gh_w2 @ W1.T, "dW1": outer(x, gh_w2), "db1": gh_w2.sum(dim=(0, 1))}.items():
            mistakes[key][via_W2] = value
    return {key: {text: value.to(dtype) for text, value in per_key.items()} for key, per_key in mistakes.items()}


def _compare_gradient(actual: object, expected: Tensor, what: str, mistakes: dict[str, Tensor]) -> None:
    """compare(), but a mistake may also have another shape than the answer (a bias gradient per position)."""
    if isinstance(actual, Tensor) and actual.shape != expected.shape:
        for description, wrong in mistakes.items():
            if _close(actual.detach(), wrong, BACKWARD_ATOL, BACKWARD_RTOL):
                raise CheckFailed(f"{what}: your output equals {description}")
    compare(actual, expected, what, mistakes, atol=BACKWARD_ATOL, rtol=BACKWARD_RTOL)


@isolated
def check_ffn_backward(learner_fn, hidden: bool = False) -> None:
    """ffn_backward(x, W1, b1, W2, b2, grad_y) -> {"dx", "dW1", "db1", "dW2", "db2"}: the gradients of
    L through y = max(0, x W1 + b1) W2 + b2 (paper convention), given grad_y = dL/dy; x: (B, T, d_model)."""
    # A square case first (d_model = d_ff): there a missing transpose gives wrong values, not a crash.
    shapes = [(2, 3, 4, 4), (2, 5, 8, 32)]
    if hidden:
        # a batch of 1 with T = 1; T = 1; a batch of 1; another square case
        shapes += [(1, 1, 3, 12), (3, 1, 5, 7), (1, 6, 4, 10), (4, 3, 6, 6)]
    inputs = []  # (label, x (B, T, d_model), W1 (d_model, d_ff), b1, W2 (d_ff, d_model), b2, grad_y like x)
    for seed, (batch, length, d_model, d_ff) in enumerate(shapes):
        g = seeded(500 + seed)
        inputs.append((f"x of shape {(batch, length, d_model)}, d_ff={d_ff}", {
            "x": torch.randn(batch, length, d_model, generator=g),
            "W1": torch.randn(d_model, d_ff, generator=g) / d_model**0.5,
            "b1": 0.5 * torch.randn(d_ff, generator=g),
            "W2": torch.randn(d_ff, d_model, generator=g) / d_ff**0.5,
            "b2": 0.5 * torch.randn(d_model, generator=g),
            "grad_y": torch.randn(batch, length, d_model, generator=g),
        }))
    # Second, the worked example with L = the sum of the two outputs, so dL/dy = (1, 1).
    worked = worked_example_weights()
    inputs.insert(1, (f"{WORKED_LABEL} with dL/dy = (1, 1)", {**worked, "x": worked["x"].view(1, 1, 2),
                                                               "grad_y": torch.ones(1, 1, 2)}))
    cases = [Case(f"ffn_backward for {label}", tuple(t[k] for k in ("x", "W1", "b1", "W2", "b2", "grad_y")),
                  unchanged_what="ffn_backward", inspect=functools.partial(
                      _compare_named, "ffn_backward", BACKWARD_KEYS, label, _autograd_reference(t),
                      _backward_mistakes(t), _compare_gradient))
             for label, t in inputs]
    run(FFN_BACKWARD, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Debug exercise: a colleague's trace_ffn with one planted mistake
# ----------------------------------------------------------------------------------------------

COLLEAGUES_TRACE_FFN = PlantedBug(
    "04_ffn", "trace_debug_impl", "colleagues_trace_ffn",
    source='''def colleagues_trace_ffn(ffn: nn.Module, x: Tensor) -> dict[str, Tensor]:
    """A colleague's trace_ffn, called as yours: every intermediate of ffn on x (..., d_model). It has one mistake."""
    hidden = ffn.linear1(x)  # (..., d_ff): expand
    activated = torch.relu(hidden)  # (..., d_ff): negatives become 0
    output = ffn.linear2(hidden)  # (..., d_model): compress back
    residual = x + output  # (..., d_model): the residual connection
    return {"hidden": hidden, "activated": activated, "output": output, "residual": residual}
''',
    mistake="the FFN without ReLU",
    coarse_hint="set the four values of the trace next to the table of section 4 (the cell below the check does): "
                "the first key that is wrong tells you which line to read")
check_trace_ffn_debug = debug_exercise(check_trace_ffn, COLLEAGUES_TRACE_FFN)

__all__ = [
    "FFN_OFF_LIMITS", "BACKWARD_OFF_LIMITS", "BACKWARD_KEYS", "check_feed_forward", "check_load_paper_weights",
    "check_trace_ffn", "check_positions_affected", "check_collapse_linear", "check_ffn_backward",
    "check_trace_ffn_debug", "worked_example_weights",
]
