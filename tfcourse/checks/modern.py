"""Checks for lesson 11, from the 2017 Transformer to a modern LLM block.

    check_rms_norm(RMSNorm)                         x / sqrt(mean(x^2) + eps) * gain, no mean, no bias
    check_swiglu(SwiGLUFeedForward)                 (SiLU(x W_gate) * x W_up) W_down, d_ff = 2/3 * 4 d_model
    check_apply_rope(apply_rope)                    queries/keys rotated by position, half-split pairs
    check_grouped_query_attention(fn)               n_kv_heads key/value heads shared by groups of query heads
    check_gqa_attention(GroupedQueryAttention)      the layer: projections, RoPE on q and k, GQA, the KV cache

Every reference and every "usual mistake" output is computed from tfcourse.modern before the learner's
code runs. The layer (the last exercise) is judged with the references of apply_rope and
grouped_query_attention in place, so an early bug costs one exercise. Module checks end with
`expect_portable`: a module that is right on the CPU must also run on a GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from .. import modern
from ..attention import KVCache, causal_mask, padding_mask, scaled_dot_product_attention
from ..modern import GroupedQueryAttention, RMSNorm, SwiGLUFeedForward, apply_rope, swiglu_hidden_size
from ..messages import say
from .core import (Case, CheckFailed, Exercise, build_module, call_learner, composite, compare, expect_portable,
                   isolated, load_reference_weights, one_thread, run, run_case)

RMS_NORM_OFF_LIMITS = ["tfcourse.modern.RMSNorm", "torch.nn.RMSNorm", "torch.nn.functional.rms_norm", "torch.rms_norm"]
RMS_NORM = Exercise("RMSNorm", RMS_NORM_OFF_LIMITS, "RMSNorm matches the reference on {n} inputs")
SWIGLU_OFF_LIMITS = ["tfcourse.modern.SwiGLUFeedForward", "tfcourse.modern.swiglu_hidden_size"]

# The ✔ line works out the default width's weights at d = 384 (see check_swiglu).
SWIGLU = Exercise("SwiGLU feed-forward network", SWIGLU_OFF_LIMITS,
                  "SwiGLUFeedForward matches the reference on {n} shapes; at d_model = {d} its default width {width} "
                  "holds 3 x {d} x {width} = {weights:,} weights, as the ReLU FFN's 2 x {d} x {relu_width}")
ROPE_OFF_LIMITS = ["tfcourse.modern.apply_rope", "tfcourse.modern.rope_cos_sin", "tfcourse.modern.rotate_half",
                   "tfcourse.modern.rotary", "tfcourse.modern.rotate_pairs"]
ROPE = Exercise("rotary position embedding", ROPE_OFF_LIMITS,
                "apply_rope matches the reference on {n} inputs: the score q_m . k_n depends on m - n alone")
ATTENTION_BUILTINS = ["torch.nn.functional.scaled_dot_product_attention", "torch.nn.MultiheadAttention"]
GQA_OFF_LIMITS = ["tfcourse.modern.grouped_query_attention", "tfcourse.modern.repeat_kv", *ATTENTION_BUILTINS]
GQA = Exercise("grouped-query attention", GQA_OFF_LIMITS,
               "grouped_query_attention matches the reference on {n} cases (MHA and MQA are its two ends)")
GQA_LAYER_OFF_LIMITS = ["tfcourse.modern.GroupedQueryAttention", *ATTENTION_BUILTINS]
GQA_LAYER = Exercise("grouped-query attention layer", GQA_LAYER_OFF_LIMITS,
                     "{name} matches the reference on {n} layers, with and without the KV cache, which keeps only "
                     "the n_kv_heads heads")

ROPE_ATOL = 1e-4  # angles up to ~100 radians in float32: another (right) way to compute them differs by ~1e-5


def _portable(learner_cls: Any, name: str, args: tuple, inputs: list) -> Callable[[], None]:
    """`run`'s last step for a module: a fresh one must follow its input to another dtype and device, as a
    GPU run needs."""
    call = f"{name}({', '.join(map(str, args))})"
    return lambda: expect_portable(call, build_module(call, learner_cls, *args), inputs)


def _module_call(call: str, args: tuple, reference: nn.Module, names_hint: str, forward: str, x: Tensor,
                 expect_structure: Callable[[nn.Module], None]) -> Callable[[Any], Any]:
    """A Case's call for a module exercise: build the learner's module (`call` names the construction), check
    its structure, give it the reference's weights and run its forward on x (`forward` names it) in eval mode."""

    def build_and_forward(learner_cls: Any) -> Any:
        module = build_module(call, learner_cls, *args)
        expect_structure(module)
        load_reference_weights(module, reference, names_hint)
        return call_learner(forward, module.eval(), x)

    return build_and_forward


# ----------------------------------------------------------------------------------------------
# Exercise 1: RMSNorm
# ----------------------------------------------------------------------------------------------


def _rms_norm_mistakes(x: Tensor, weight: Tensor, eps: float) -> dict[str, Tensor]:
    mean_square = x.pow(2).mean(dim=-1, keepdim=True)  # (..., 1)
    rms = torch.sqrt(mean_square + eps)
    centred = x - x.mean(dim=-1, keepdim=True)
    mistakes = {
        "LayerNorm's normalisation (the mean subtracted first): RMSNorm does not centre x, it only divides by "
        "sqrt(mean(x^2) + eps)": weight * centred / torch.sqrt(centred.pow(2).mean(dim=-1, keepdim=True) + eps),
        "RMSNorm with eps *outside* the square root, x / (sqrt(mean(x^2)) + eps): eps belongs inside":
            weight * x / (torch.sqrt(mean_square) + eps),
        "RMSNorm *without* eps (an all-zero vector would divide by 0)": weight * x / torch.sqrt(mean_square),
        "x divided by mean(x^2) + eps: the square root is missing": weight * x / (mean_square + eps),
        "x times the RMS instead of divided by it": weight * x * rms,
        "the normalised x *without* the gain (self.weight)": x / rms,
        "x divided by sqrt(sum(x^2) + eps), the length: RMSNorm takes the *mean* of the squares, so the "
        "output has RMS 1 and length sqrt(d)": weight * x / torch.sqrt(x.pow(2).sum(dim=-1, keepdim=True) + eps),
        "x divided by the standard deviation (x.std(), which also subtracts the mean and divides by d - 1)":
            weight * x / torch.sqrt(x.var(dim=-1, keepdim=True) + eps),
    }
    if eps != 1e-6:
        mistakes[f"RMSNorm with eps = 1e-6 although eps={eps} was passed: use self.eps"] = (
            weight * x / torch.sqrt(mean_square + 1e-6))
    if x.dim() >= 2:
        for where, dim in ((say("the batch dimension (dim 0)"), 0), (say("the time dimension (dim 1)"), 1))[: x.dim() - 1]:
            mistakes[f"RMSNorm with the mean of the squares over {where} instead of the features (dim=-1)"] = (
                weight * x / torch.sqrt(x.pow(2).mean(dim=dim, keepdim=True) + eps))
    return mistakes


def _expect_gain_only(module: nn.Module, call: str, d_model: int) -> None:
    """One parameter, the gain `weight` (d_model,), starting at 1: no bias."""
    params = dict(module.named_parameters())
    if "bias" in params:
        raise CheckFailed(f"{call} has a bias: RMSNorm has only the gain `weight` (it neither centres nor shifts)")
    if sorted(params) != ["weight"] or tuple(params["weight"].shape) != (d_model,):
        raise CheckFailed(f"{call} should have exactly one nn.Parameter, `weight` (the gain) of shape "
                          f"({d_model},), got {[(k, tuple(v.shape)) for k, v in params.items()]}")
    if not torch.all(params["weight"] == 1):
        raise CheckFailed(f"{call}: a fresh RMSNorm should start with weight = 1, so that at first it only "
                          "rescales")


@isolated
@one_thread
def check_rms_norm(learner_cls: Any, hidden: bool = False) -> None:
    """RMSNorm(d_model, eps=1e-6): x / sqrt(mean(x^2) + eps) * weight over the last dimension."""
    gen = torch.Generator().manual_seed(11)
    normal = functools.partial(torch.randn, generator=gen)
    inputs: list[tuple[str, Tensor, float | None]] = [
        ("x (2, 5, 8) with mean 1 and std 3", 3.0 * normal(2, 5, 8) + 1.0, None),
        ("x (1, 1, 16) with tiny values (RMS 0.002, so eps matters)", 0.002 * normal(1, 1, 16), None),
        ("x (4, 6), a 2-D batch of vectors", normal(4, 6), None),
    ]
    if hidden:
        zeros = normal(3, 7, 12)
        zeros[1, 3] = 0.0  # an all-zero vector: its RMS is 0
        inputs = [
            ("x (3, 7, 12) with an all-zero vector at one position", zeros, None),
            ("x (2, 2, 3, 8), four dimensions", 2.0 * normal(2, 2, 3, 8) - 1.0, None),
            ("x (2, 4, 10) with small values and eps=1e-3", 0.03 * normal(2, 4, 10), 1e-3),
            ("x (1, 1, 4), batch of 1 and T = 1", normal(1, 1, 4), None),
        ]
    name, cases = getattr(learner_cls, "__name__", "RMSNorm"), []
    for description, x, eps in inputs:
        d_model = x.shape[-1]
        args = (d_model,) if eps is None else (d_model, eps)
        reference = RMSNorm(*args)
        with torch.no_grad():
            reference.weight.copy_(1.0 + 0.5 * torch.randn(d_model, generator=gen))  # a gain != 1 shows when missing
            expected = reference(x)
            mistakes = _rms_norm_mistakes(x, reference.weight, reference.eps)
        call = f"{name}({d_model}" + (f", eps={eps})" if eps is not None else ")")
        forward = f"{call}.forward(x) for {description}"
        cases.append(Case(forward, expected=expected, mistakes=mistakes, label=f"RMSNorm on {description}",
                          unchanged=[x], call=_module_call(call, args, reference, "name the gain `weight`", forward, x,
                                                           functools.partial(_expect_gain_only, call=call,
                                                                             d_model=d_model))))
    run(RMS_NORM, learner_cls, cases, hidden, then=_portable(learner_cls, name, (8,), [torch.randn(2, 3, 8)]))


# ----------------------------------------------------------------------------------------------
# Exercise 2: SwiGLU
# ----------------------------------------------------------------------------------------------

SWIGLU_NAMES = ["w_down.weight", "w_gate.weight", "w_up.weight"]


def _swiglu_mistakes(reference: SwiGLUFeedForward, x: Tensor) -> dict[str, Tensor]:
    gate, up, down = reference.w_gate(x), reference.w_up(x), reference.w_down
    return {
        "SiLU applied to x W_up and multiplied by x W_gate: gate and up are swapped, the SiLU goes on the gate":
            down(F.silu(up) * gate),
        "ReLU instead of SiLU on the gate (that would be ReGLU)": down(torch.relu(gate) * up),
        "GELU instead of SiLU on the gate (that would be GEGLU)": down(F.gelu(gate) * up),
        "sigmoid instead of SiLU on the gate (that is the original GLU; SiLU(z) = z * sigmoid(z))":
            down(torch.sigmoid(gate) * up),
        "SiLU(x W_gate) W_down alone: the product with the features x W_up is missing": down(F.silu(gate)),
        "SiLU applied to the product, SiLU(x W_gate * x W_up): only the gate goes through SiLU":
            down(F.silu(gate * up)),
        "SiLU on both projections: only the gate goes through SiLU, x W_up stays linear":
            down(F.silu(gate) * F.silu(up)),
        "the sum SiLU(x W_gate) + x W_up instead of the product: the gate *multiplies* the features":
            down(F.silu(gate) + up),
        "the FFN output *plus* the input: the residual is added by the block, not the FFN":
            down(F.silu(gate) * up) + x,
    }


def _expect_three_bias_free_layers(module: nn.Module, call: str, d_model: int, d_ff: int | None,
                                   expected_width: int) -> None:
    """w_gate, w_up and w_down without biases, w_gate `expected_width` features wide."""
    names = sorted(n for n, _ in module.named_parameters())
    if any(n.endswith("bias") for n in names):
        raise CheckFailed(f"{call} has biases {[n for n in names if n.endswith('bias')]}: SwiGLU, as in LLaMA, "
                          "is bias-free (nn.Linear(..., bias=False))")
    if names != SWIGLU_NAMES:
        raise CheckFailed(f"expected parameters {SWIGLU_NAMES} (three bias-free nn.Linear layers named w_gate, "
                          f"w_up, w_down), got {names}")
    width = module.w_gate.out_features
    if width != expected_width:
        default = f"2 * (4 * {d_model}) // 3 = {expected_width}"
        raise CheckFailed(f"{call}: w_gate maps d_model={d_model} to {width} features, expected "
                          + (f"d_ff = {d_ff}" if d_ff is not None else
                             f"the default d_ff = {default} (2/3 of the ReLU FFN's 4 d_model: three "
                             "matrices instead of two, the same number of parameters)"))


@isolated
@one_thread
def check_swiglu(learner_cls: Any, hidden: bool = False) -> None:
    """SwiGLUFeedForward(d_model, d_ff=None): (SiLU(x W_gate) * x W_up) W_down, bias-free; d_ff defaults to
    2 * (4 d_model) // 3."""
    shapes = [(2, 5, 12, None), (1, 1, 6, 10)]  # (B or None for a 2-D input, T, d_model, d_ff)
    if hidden:
        # a d_model that 3 does not divide (the width rounds down), an explicit d_ff, a 2-D input
        shapes = [(3, 7, 8, None), (2, 3, 9, 24), (None, 5, 12, 20), (1, 1, 4, None)]
    name, cases = getattr(learner_cls, "__name__", "SwiGLUFeedForward"), []
    for seed, (batch, length, d_model, d_ff) in enumerate(shapes):
        torch.manual_seed(20 + seed)
        reference = SwiGLUFeedForward(d_model, d_ff).eval()
        x = torch.randn(length, d_model) if batch is None else torch.randn(batch, length, d_model)
        with torch.no_grad():
            expected = reference(x)
            mistakes = _swiglu_mistakes(reference, x)
        args = (d_model,) if d_ff is None else (d_model, d_ff)
        call = f"{name}{args}".replace(",)", ")")
        forward = f"forward(x) of {call} for x of shape {tuple(x.shape)}"
        structure = functools.partial(_expect_three_bias_free_layers, call=call, d_model=d_model, d_ff=d_ff,
                                      expected_width=reference.d_ff)
        cases.append(Case(forward, expected=expected, mistakes=mistakes, unchanged=[x],
                          label=f"SwiGLU output of {call} for x of shape {tuple(x.shape)}",
                          call=_module_call(call, args, reference, "name the three layers w_gate, w_up and w_down",
                                            forward, x, structure)))
    width = swiglu_hidden_size(384)  # (off-limits only while the learner's code runs)
    run(SWIGLU, learner_cls, cases, hidden, then=_portable(learner_cls, name, (12,), [torch.randn(2, 5, 12)]),
        fields=dict(d=384, width=width, weights=3 * 384 * width, relu_width=4 * 384))


# ----------------------------------------------------------------------------------------------
# Exercise 3: RoPE
# ----------------------------------------------------------------------------------------------


def _rotate(x: Tensor, cos: Tensor, sin: Tensor, interleaved: bool = False, clockwise: bool = False) -> Tensor:
    """x * cos + (x turned by 90 degrees) * sin, for half-split pairs or interleaved ones."""
    if interleaved:
        pairs = x.unflatten(-1, (-1, 2))  # (..., d/2, 2): (x[2i], x[2i + 1])
        turned = torch.stack([-pairs[..., 1], pairs[..., 0]], dim=-1).flatten(-2)  # (..., d)
    else:
        x1, x2 = x.chunk(2, dim=-1)
        turned = torch.cat([-x2, x1], dim=-1)  # (..., d)
    if clockwise:
        turned = -turned
    return x * cos + turned * sin


def _angles(length: int, d_head: int, start: float, base: float, frequencies: str = "right",
            layout: str = "halves") -> Tensor:
    """(length, d_head) angles for positions start .. start + length - 1, right or in one of the wrong ways."""
    i = torch.arange(0, d_head, 2, dtype=torch.float64)  # 2i
    exponent = {"right": i / d_head, "i_over_d": (i / 2) / d_head}[frequencies]
    inv_freq = base ** (-exponent)  # (d/2,)
    positions = torch.arange(length, dtype=torch.float64) + start  # (T,)
    angles = torch.outer(positions, inv_freq)  # (T, d/2)
    if layout == "halves":
        return torch.cat([angles, angles], dim=-1)  # (T, d)
    return angles.repeat_interleave(2, dim=-1)  # (T, d): theta_0, theta_0, theta_1, theta_1, ...


def _rope_mistakes(x: Tensor, offset: int, base: float) -> dict[str, Tensor]:
    length, d = x.shape[-2], x.shape[-1]
    xd = x.double()

    def rot(angles: Tensor, **how: bool) -> Tensor:
        return _rotate(xd, angles.cos(), angles.sin(), **how).to(x.dtype)

    right = _angles(length, d, offset, base)
    mistakes = {
        "the interleaved layout, pairs (x[2i], x[2i+1]) as in Meta's LLaMA code and RoFormer: this course pairs "
        "dimension i with i + d_head/2 (the two halves), as Hugging Face's Llama does":
            rot(_angles(length, d, offset, base, layout="pairs"), interleaved=True),
        "a rotation the other way (by -angle): rotate_half(x) is (-x2, x1), not (x2, -x1)": rot(right, clockwise=True),
        "cos and sin swapped: x * sin(angle) + rotate_half(x) * cos(angle); it is x * cos + rotate_half(x) * sin":
            _rotate(xd, right.sin(), right.cos()).to(x.dtype),
        "angles repeated element by element (theta_0, theta_0, theta_1, ...): with the half-split pairs, dimension i "
        "and i + d_head/2 share one angle, so concatenate the angles with themselves":
            rot(_angles(length, d, offset, base, layout="pairs")),
        "frequencies base^(-i/d_head) for i = 0, 1, 2, ...: the exponent is 2i/d_head (the sinusoidal encoding's)":
            rot(_angles(length, d, offset, base, frequencies="i_over_d")),
        "frequencies base^(+2i/d_head): the angle is position * base^(-2i/d_head), slower for later pairs":
            rot(torch.cat([torch.outer(torch.arange(length, dtype=torch.float64) + offset,
                                        base ** (torch.arange(0, d, 2, dtype=torch.float64) / d))] * 2, dim=-1)),
    }
    if offset != 0:
        mistakes["positions from 0: the offset is ignored (with a KV cache the new tokens sit at positions "
                 "offset, offset + 1, ...)"] = rot(_angles(length, d, 0, base))
    mistakes["positions from 1 instead of 0 (position offset + t, t = 0 .. T-1)"] = (
        rot(_angles(length, d, offset + 1, base)))
    return mistakes


def _relative_only(learner_fn: Any, d_head: int) -> bool:
    """Does the learner's rotation give q_m . k_n that depends on m - n alone? (Tried on a few offsets.)"""
    gen = torch.Generator().manual_seed(31)
    q, k = torch.randn(1, 1, 1, d_head, generator=gen), torch.randn(1, 1, 1, d_head, generator=gen)
    try:
        def score(m: int, n: int) -> float:
            return float((learner_fn(q, m) * learner_fn(k, n)).sum())
        return all(abs(score(m, n) - score(m + s, n + s)) < 1e-3 for m, n, s in [(3, 1, 4), (0, 5, 9), (7, 7, 2)])
    except Exception:  # noqa: BLE001 - a crash here is reported by the main comparison already
        return False


def _expect_rotation(actual: Any, what: str, expected: Tensor, mistakes: dict[str, Tensor], learner_fn: Any,
                     d_head: int) -> None:
    """The comparison, done here: where the values merely differ, the message also says whether the
    learner's scores q_m . k_n still depend on m - n alone."""
    try:
        compare(actual, expected, what, mistakes, atol=ROPE_ATOL)
    except CheckFailed as failure:
        if "values differ" in str(failure) and not _relative_only(learner_fn, d_head):
            raise CheckFailed(f"{failure}; and with your rotation the score q_m . k_n changes when m and n "
                              "move together, so it depends on more than the offset m - n") from None
        raise


@isolated
@one_thread
def check_apply_rope(learner_fn: Any, hidden: bool = False) -> None:
    """apply_rope(x, offset=0, base=10000.0): x (..., T, d_head) rotated, pair (i, i + d_head/2) by the angle
    (offset + t) * base^(-2i/d_head)."""
    inputs: list[tuple[tuple[int, ...], int, float | None]] = [((2, 3, 5, 8), 0, None), ((1, 2, 4, 16), 7, None)]
    if hidden:
        # T = 1 after a long cache, a 3-D input, LLaMA 3's base, a single pair
        inputs = [((1, 1, 1, 4), 0, None), ((2, 4, 6, 32), 100, None), ((3, 9, 2), 3, None),
                  ((1, 2, 5, 8), 2, 500000.0), ((2, 1, 3, 2), 1, None)]
    cases = []
    for seed, (shape, offset, base) in enumerate(inputs):
        x = torch.randn(*shape, generator=torch.Generator().manual_seed(40 + seed))
        args = (x, offset) if base is None else (x, offset, base)
        expected, mistakes = apply_rope(*args), _rope_mistakes(x, offset, 10000.0 if base is None else base)
        what = (f"apply_rope(x, offset={offset}" + (f", base={base:g})" if base is not None else ")")
                + f" for x of shape {tuple(shape)}")
        cases.append(Case(what, args, inspect=functools.partial(_expect_rotation, what=what, expected=expected,
                                                                mistakes=mistakes, learner_fn=learner_fn,
                                                                d_head=shape[-1])))
    run(ROPE, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 4: grouped-query attention
# ----------------------------------------------------------------------------------------------


def _attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, scale: bool = True) -> Tensor:
    if not scale:
        q = q * q.shape[-1] ** 0.5  # undoes the 1/sqrt(d_head) inside
    return scaled_dot_product_attention(q, k, v, mask)[0]


def _gqa_mask(kind: str, batch: int, t_q: int, t_k: int) -> Tensor | None:
    if kind == "causal":
        return causal_mask(t_q, t_k)
    if kind == "padding":
        ids = torch.ones(batch, t_k, dtype=torch.long)
        ids[0, 3:] = 0
        ids[-1, 1:] = 0
        return padding_mask(ids, pad_id=0)  # (B, 1, 1, T_k)
    if kind == "one_key":
        mask = torch.zeros(t_q, t_k, dtype=torch.bool)
        mask[:, 2] = True
        return mask
    return None


def _expect_one_output_per_query_head(actual: Any, what: str, n_heads: int, n_kv: int,
                                     per_kv_head: tuple[int, ...]) -> None:
    """The output alone (not a tuple), with one head per query head, not the shape `per_kv_head` of one per
    kv head."""
    if isinstance(actual, tuple):
        raise CheckFailed(f"{what}: return the output tensor alone, not a tuple (e.g. not (output, weights))")
    if isinstance(actual, Tensor) and actual.shape == per_kv_head and n_kv != n_heads:
        raise CheckFailed(f"{what}: your output has n_kv_heads = {n_kv} heads; every one of the {n_heads} query "
                          "heads gives an output: repeat the kv heads to n_heads before attending")


def _gqa_case(seed: int, label: str, sizes: tuple[int, ...], kind: str) -> Case:
    batch, n_heads, n_kv, t_q, t_k, d_head = sizes
    g = torch.Generator().manual_seed(50 + seed)
    q = torch.randn(batch, n_heads, t_q, d_head, generator=g)
    k, v = torch.randn(batch, n_kv, t_k, d_head, generator=g), torch.randn(batch, n_kv, t_k, d_head, generator=g)
    mask = _gqa_mask(kind, batch, t_q, t_k)
    n_rep = n_heads // n_kv
    expected = modern.grouped_query_attention(q, k, v, mask)
    tiled_k, tiled_v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)  # (B, n_heads, T_k, d_head)
    grouped_k, grouped_v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)
    mistakes = {
        "the kv heads tiled as a whole stack (k.repeat(1, n_rep, 1, 1)): query head h belongs to kv head "
        "h // n_rep, so each kv head is repeated in place, repeat_interleave(n_rep, dim=1)":
            _attention(q, tiled_k, tiled_v, mask),
        "attention *without* the 1/sqrt(d_head) scaling": _attention(q, grouped_k, grouped_v, mask, scale=False),
    }
    if mask is not None:
        mistakes["attention that ignores the mask"] = _attention(q, grouped_k, grouped_v, None)
    what = f"grouped_query_attention for {label}: q {tuple(q.shape)}, k and v {tuple(k.shape)}"
    return Case(what, (q, k, v, mask), expected=expected, mistakes=mistakes,
                inspect=functools.partial(_expect_one_output_per_query_head, what=what, n_heads=n_heads, n_kv=n_kv,
                                          per_kv_head=(batch, n_kv, t_q, d_head)))


@isolated
@one_thread
def check_grouped_query_attention(learner_fn: Any, hidden: bool = False) -> None:
    """grouped_query_attention(q, k, v, mask=None) for q (B, n_heads, T_q, d_head), k and v
    (B, n_kv_heads, T_k, d_head) -> (B, n_heads, T_q, d_head): query head h uses kv head h // (n_heads / n_kv_heads)."""
    # (label, (B, n_heads, n_kv_heads, T_q, T_k, d_head), mask kind)
    settings = [("grouped-query, 8 query heads sharing 2 kv heads", (2, 8, 2, 5, 5, 8), "causal"),
                ("multi-query, 4 query heads sharing 1 kv head", (1, 4, 1, 3, 3, 4), "none")]
    if hidden:
        settings = [("multi-head, n_kv_heads = n_heads = 4", (2, 4, 4, 6, 6, 8), "causal"),
                    ("T = 1, 6 query heads, 3 kv heads", (1, 6, 3, 1, 1, 4), "none"),
                    ("one new query after 6 cached keys", (2, 6, 2, 1, 7, 8), "causal"),
                    ("a padding mask (B, 1, 1, T)", (3, 4, 2, 5, 5, 8), "padding"),
                    ("a mask that hides all but one key", (2, 6, 3, 4, 4, 4), "one_key")]
    cases = [_gqa_case(seed, label, sizes, kind) for seed, (label, sizes, kind) in enumerate(settings)]
    run(GQA, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 5: the GQA layer with RoPE and a KV cache
# ----------------------------------------------------------------------------------------------

LAYER_NAMES = ("name the projections like tfcourse.modern.GroupedQueryAttention: w_q, w_k, w_v, w_o, "
               "bias-free nn.Linear layers")

# The earlier exercises a layer uses: while it is judged, the references stand in for the learner's.
LAYER_PARTS = dict(rotate_half=lambda: modern.rotate_half, rope_cos_sin=lambda: modern.rope_cos_sin,
                   apply_rope=lambda: modern.apply_rope, repeat_kv=lambda: modern.repeat_kv,
                   grouped_query_attention=lambda: modern.grouped_query_attention)


def _layer_by_hand(ref: GroupedQueryAttention, x: Tensor, mask: Tensor | None, past: tuple[Tensor, Tensor] | None,
                   offset: int, rotate: str = "qk", use_offset: bool = True, tiled: bool = False) -> Tensor:
    """The layer's forward, written out so that one step can be done wrongly (rotate: which of q, k, v)."""
    batch, length, _ = x.shape
    q = ref.w_q(x).view(batch, length, ref.n_heads, ref.d_head).transpose(1, 2)  # (B, n_heads, T, d_head)
    k = ref.w_k(x).view(batch, length, ref.n_kv_heads, ref.d_head).transpose(1, 2)  # (B, n_kv, T, d_head)
    v = ref.w_v(x).view(batch, length, ref.n_kv_heads, ref.d_head).transpose(1, 2)
    start = offset if use_offset else 0
    q, k, v = (apply_rope(t, start) if name in rotate else t for name, t in (("q", q), ("k", k), ("v", v)))
    if past is not None:
        k, v = torch.cat([past[0], k], dim=2), torch.cat([past[1], v], dim=2)
    n_rep = ref.n_heads // ref.n_kv_heads
    if tiled:
        k, v = k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1)
    else:
        k, v = k.repeat_interleave(n_rep, dim=1), v.repeat_interleave(n_rep, dim=1)
    out = scaled_dot_product_attention(q, k, v, mask)[0]  # (B, n_heads, T, d_head)
    return ref.w_o(out.transpose(1, 2).reshape(batch, length, -1))  # (B, T, d_model)


def _layer_mistakes(ref: GroupedQueryAttention, x: Tensor, mask: Tensor) -> dict[str, Tensor]:
    """What the usual mistakes give on the whole sequence x (B, T, d_model)."""
    wrong = functools.partial(_layer_by_hand, ref, x, mask, None, 0)
    mistakes = {
        "the layer with the values rotated too: RoPE turns queries and keys only (position enters through "
        "their dot product; values carry content)": wrong(rotate="qkv"),
        "the layer with only the queries rotated: rotate the keys too": wrong(rotate="q"),
        "the layer with only the keys rotated: rotate the queries too": wrong(rotate="k"),
        "the layer without RoPE: apply_rope to q and k": wrong(rotate=""),
    }
    if ref.n_kv_heads not in (1, ref.n_heads):
        mistakes["the layer with the kv heads tiled as a whole stack (repeat instead of repeat_interleave)"] = (
            wrong(tiled=True))
    return mistakes


def _cached_mistakes(ref: GroupedQueryAttention, x: Tensor, prefix: int, whole: dict[str, Tensor]) -> dict[str, Tensor]:
    """The mistakes on the positions after a cache of `prefix` positions: the same mistake made in both calls
    gives the whole sequence's wrong output; ignoring the offset goes wrong in the second call only."""
    mistakes = {text: out[:, prefix:] for text, out in whole.items()}
    # What a right cache holds after the first `prefix` positions: (B, n_kv_heads, prefix, d_head), keys rotated.
    past_k, past_v = (t.view(x.shape[0], prefix, ref.n_kv_heads, ref.d_head).transpose(1, 2)
                      for t in (ref.w_k(x[:, :prefix]), ref.w_v(x[:, :prefix])))
    rest_mask = causal_mask(x.shape[1] - prefix, x.shape[1])
    mistakes["the new tokens rotated as if at positions 0, 1, ...: with a cache they sit at len(cache), "
             "len(cache) + 1, ... (read offset = len(cache) *before* appending, then apply_rope(q, offset))"] = (
        _layer_by_hand(ref, x[:, prefix:], rest_mask, (apply_rope(past_k), past_v), prefix, use_offset=False))
    return mistakes


def _expect_cache_of_kv_heads(actual: Any, cache: KVCache, call: str, length: int, n_kv: int) -> None:
    """After both calls the cache holds every position, and only the n_kv_heads heads (cached before the
    repeat for the query heads)."""
    if not isinstance(cache.k, Tensor) or len(cache) != length:
        raise CheckFailed(f"{call}: after two calls with the same KVCache it holds {len(cache)} positions, expected "
                          f"{length}: append the new keys and values with cache.append(k, v)")
    if cache.k.shape[1] != n_kv:
        raise CheckFailed(f"{call}: your KVCache stores {cache.k.shape[1]} heads, expected n_kv_heads = {n_kv}: "
                          "cache k and v *before* repeating them for the query heads, that is GQA's memory saving")


def _layer_case(seed: int, name: str, d_model: int, n_heads: int, n_kv: int, batch: int, length: int) -> Case:
    """One layer, built once, then called on the whole sequence and (when it has two positions or more) on the
    same sequence in two calls with one KVCache, the first `prefix` positions, then the rest, which must give
    the whole sequence's output at those positions: each call a Case of its own."""
    torch.manual_seed(60 + seed)
    reference = GroupedQueryAttention(d_model, n_heads, n_kv).eval()
    x = torch.randn(batch, length, d_model)
    mask = causal_mask(length)
    prefix = length // 2
    call = f"{name}({d_model}, {n_heads}, {n_kv})"
    with torch.no_grad():
        expected = reference(x, mask)
        mistakes = _layer_mistakes(reference, x, mask)
        steps = [Case(f"{call} on x {tuple(x.shape)} with a causal mask", (x, mask), expected=expected,
                      mistakes=mistakes)]
        if prefix:
            cache, rest = KVCache(), f"{call} on positions {prefix}..{length - 1} after a KVCache of the first {prefix}"
            steps += [Case(f"{call} on the first {prefix} positions with an empty KVCache",
                           (x[:, :prefix], causal_mask(prefix), cache)),
                      Case(rest, (x[:, prefix:], causal_mask(length - prefix, length), cache),
                           expected=expected[:, prefix:], mistakes=_cached_mistakes(reference, x, prefix, mistakes),
                           inspect=functools.partial(_expect_cache_of_kv_heads, cache=cache, call=call,
                                                     length=length, n_kv=n_kv))]

    def build_and_call(learner_cls: Any) -> None:
        module = build_module(call, learner_cls, d_model, n_heads, n_kv)
        load_reference_weights(module, reference, LAYER_NAMES)
        module.eval()
        for step in steps:
            run_case(GQA_LAYER, module, step)

    return Case(call, call=build_and_call)


@composite(**LAYER_PARTS)
@isolated
@one_thread
def check_gqa_attention(learner_cls: Any, hidden: bool = False) -> None:
    """GroupedQueryAttention(d_model, n_heads, n_kv_heads): projections, RoPE on q and k, GQA, and a KVCache
    that gives the whole sequence's outputs."""
    layers = [(32, 8, 2, 2, 6), (16, 4, 1, 1, 1)]  # (d_model, n_heads, n_kv_heads, B, T)
    if hidden:
        layers = [(24, 6, 6, 2, 5), (32, 4, 2, 3, 7), (16, 4, 2, 1, 2)]
    name = getattr(learner_cls, "__name__", "GroupedQueryAttention")
    cases = [_layer_case(seed, name, *sizes) for seed, sizes in enumerate(layers)]
    run(GQA_LAYER, learner_cls, cases, hidden,
        then=_portable(learner_cls, name, (16, 4, 2), [torch.randn(2, 5, 16), causal_mask(5)]))


__all__ = ["check_rms_norm", "check_swiglu", "check_apply_rope", "check_grouped_query_attention", "check_gqa_attention"]
