"""Checks for lesson 05, blocks: LayerNorm, the residual sub-layer connection (post-LN and pre-LN),
the encoder layer, the decoder layer, the encoder stack, and the shapes of table 3-1.

Every reference and every "usual mistake" output is computed from the package's own sub-modules
(tfcourse.attention.MultiHeadAttention, tfcourse.ffn.PositionwiseFeedForward, tfcourse.blocks.LayerNorm)
before the learner's code runs; the learner's module then receives the reference's weights through
its state_dict, so names must follow the package: self_attn, cross_attn, ffn, norm1, norm2, norm3.
`hidden=True` runs only the hidden cases: the test cell has already run the visible ones.
Every module check ends with `expect_portable`: a module that is right on the CPU must also run on a GPU.
"""

from __future__ import annotations

import functools
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import torch
from torch import Tensor, nn

from ..attention import causal_mask, padding_mask
from ..blocks import DecoderLayer, Encoder, EncoderLayer, LayerNorm, sublayer_connection
from ..messages import say
from ..models import trace_shapes
from .adapters import called_like_the_lessons
from .debugging import PlantedBug, debug_exercise
from .core import (Case, CheckFailed, Exercise, build_module, call_learner, composite, expect_portable, isolated,
                   load_reference_weights, one_thread, run)

# This lesson's hidden run replaces the visible cases (its count is theirs, not a total), and its ✔ line says so.
HIDDEN_NOTE = " (the hidden cases: other shapes and settings than the visible run's)"
# torch's own LayerNorm, under every name it can be reached by: off-limits in every exercise of this lesson.
LAYER_NORM_BUILTINS = [
    "torch.nn.LayerNorm",
    "torch.nn.functional.layer_norm",
    "torch.layer_norm",
    "torch.native_layer_norm",
]
LAYER_NORM_OFF_LIMITS = ["tfcourse.blocks.LayerNorm", "tfcourse.blocks.layer_norm", *LAYER_NORM_BUILTINS]
LAYER_NORM = Exercise("LayerNorm", LAYER_NORM_OFF_LIMITS, "LayerNorm matches the reference on {n} inputs",
                      hidden_note=HIDDEN_NOTE)
SUBLAYER_OFF_LIMITS = [
    "tfcourse.blocks.sublayer_connection",
    "tfcourse.blocks.EncoderLayer",
    "tfcourse.blocks.DecoderLayer",
    "torch.nn.TransformerEncoderLayer",
    "torch.nn.TransformerDecoderLayer",
    *LAYER_NORM_BUILTINS,
]
SUBLAYER = Exercise("sub-layer connection", SUBLAYER_OFF_LIMITS,
                    "sublayer_connection matches post-LN and pre-LN on {n} cases", hidden_note=HIDDEN_NOTE)
ENCODER_LAYER_OFF_LIMITS = [
    "tfcourse.blocks.EncoderLayer",
    "tfcourse.blocks.Encoder",
    "torch.nn.TransformerEncoderLayer",
    "torch.nn.TransformerEncoder",
    "torch.nn.Transformer",
    *LAYER_NORM_BUILTINS,
]
ENCODER_LAYER = Exercise("encoder layer", ENCODER_LAYER_OFF_LIMITS,
                         "EncoderLayer matches the reference (post-LN and pre-LN) on {n} cases",
                         hidden_note=HIDDEN_NOTE)
DECODER_LAYER_OFF_LIMITS = [
    "tfcourse.blocks.DecoderLayer",
    "tfcourse.blocks.Decoder",
    "torch.nn.TransformerDecoderLayer",
    "torch.nn.TransformerDecoder",
    "torch.nn.Transformer",
    *LAYER_NORM_BUILTINS,
]
DECODER_LAYER = Exercise("decoder layer", DECODER_LAYER_OFF_LIMITS,
                         "DecoderLayer matches the reference (post-LN and pre-LN) on {n} cases",
                         hidden_note=HIDDEN_NOTE)
ENCODER_OFF_LIMITS = [
    "tfcourse.blocks.Encoder",
    "torch.nn.TransformerEncoder",
    "torch.nn.TransformerEncoderLayer",
    "torch.nn.Transformer",
    *LAYER_NORM_BUILTINS,
]
ENCODER = Exercise("encoder stack", ENCODER_OFF_LIMITS,
                   "Encoder matches the reference on {n} stacks (post-LN and pre-LN)", hidden_note=HIDDEN_NOTE)
# The check's own tracer would hand over the answer.
SHAPE_TABLE_OFF_LIMITS = ["tfcourse.models.trace_shapes"]
SHAPE_TABLE = Exercise("table 3-1", SHAPE_TABLE_OFF_LIMITS, "your table 3-1 matches the traced shapes for {n} settings",
                       hidden_note=HIDDEN_NOTE)

# The layers' portability is tried in both arrangements: a stray CPU tensor may hide in either branch.
_BOTH_ARRANGEMENTS = [dict(d_ff=None, dropout=0.0, norm_first=False), dict(d_ff=None, dropout=0.0, norm_first=True)]


def _randomise_norms(module: nn.Module, generator: torch.Generator) -> None:
    """Give every LayerNorm a gain != 1 and a bias != 0, so forgetting one (or mixing up two) shows."""
    with torch.no_grad():
        for sub in module.modules():
            if isinstance(sub, LayerNorm):
                sub.weight.copy_(1.0 + 0.5 * torch.randn(sub.weight.shape, generator=generator))
                sub.bias.copy_(0.3 * torch.randn(sub.bias.shape, generator=generator))


def _padding(lengths: Sequence[int], length: int) -> Tensor:
    """(B, 1, 1, T) mask for sequences of the given true lengths (padding at the end)."""
    ids = torch.ones(len(lengths), length, dtype=torch.long)
    for row, n in enumerate(lengths):
        ids[row, n:] = 0
    return padding_mask(ids, pad_id=0)  # (B, 1, 1, T)


def _call_text(name: str, args: tuple, kwargs: Mapping[str, Any]) -> str:
    """'EncoderLayer(16, 4, d_ff=None, dropout=0.0, norm_first=False)': a constructor call as messages name it."""
    return f"{name}({', '.join([*map(str, args), *(f'{k}={v}' for k, v in kwargs.items())])})"


def _module_call(call: str, args: tuple, kwargs: Mapping[str, Any], reference: nn.Module, names_hint: str,
                 forward: str, inputs: tuple,
                 expect_structure: Callable[[nn.Module], None] | None = None) -> Callable[[Any], Any]:
    """A Case's call for a module exercise: build the learner's module (`call` names the construction),
    check its structure, give it the reference's weights and run its forward (`forward` names it) in
    eval mode."""

    def build_and_forward(learner_cls: Any) -> Any:
        module = build_module(call, learner_cls, *args, **kwargs)
        if expect_structure is not None:
            expect_structure(module)
        load_reference_weights(module, reference, names_hint)
        return call_learner(forward, module.eval(), *inputs)

    return build_and_forward


def _expect_portable(learner_cls: Any, args: tuple, options: Sequence[dict], inputs: Sequence[Any]) -> None:
    """After the values are right: fresh modules (one per set of keyword options, e.g. post-LN and pre-LN)
    must follow their input to another dtype and device, as a GPU run needs."""
    name = getattr(learner_cls, "__name__", "your module")
    for kwargs in options:
        call = _call_text(name, args, kwargs)
        expect_portable(call, build_module(call, learner_cls, *args, **kwargs), inputs)


# ----------------------------------------------------------------------------------------------
# Exercise: LayerNorm
# ----------------------------------------------------------------------------------------------


def _layer_norm_mistakes(x: Tensor, weight: Tensor, bias: Tensor, eps: float) -> dict[str, Tensor]:
    mean = x.mean(dim=-1, keepdim=True)  # (..., 1)
    var = x.var(dim=-1, keepdim=True, unbiased=False)  # (..., 1)
    centred = x - mean
    x_hat = centred / torch.sqrt(var + eps)
    mistakes = {
        "LayerNorm with ε *outside* the square root, (x − μ) / (√σ² + ε): ε belongs inside, √(σ² + ε)":
            weight * centred / (torch.sqrt(var) + eps) + bias,
        "LayerNorm with the *unbiased* variance (dividing by d − 1, torch.var's default): "
        "LayerNorm divides by d, use unbiased=False":
            weight * centred / torch.sqrt(x.var(dim=-1, keepdim=True, unbiased=True) + eps) + bias,
        "LayerNorm *without* ε: √σ² alone (a constant vector would divide by 0)":
            weight * centred / torch.sqrt(var) + bias,
        "LayerNorm dividing by the variance instead of the standard deviation (√ missing)":
            weight * centred / (var + eps) + bias,
        "the normalised x *without* the gain and the bias (self.weight, self.bias)": x_hat,
        "the normalised x *without* the gain (self.weight)": x_hat + bias,
        "the normalised x *without* the bias (self.bias)": weight * x_hat,
        "LayerNorm with the gain and the bias swapped (bias * x̂ + weight)": bias * x_hat + weight,
        "LayerNorm with the variance computed as E[x²] − E[x]², which loses its precision when the spread is "
        "small next to the mean: average (x − μ)² instead":
            weight * centred / torch.sqrt((x * x).mean(dim=-1, keepdim=True) - mean**2 + eps) + bias,
    }
    if eps != 1e-5:
        mistakes[f"LayerNorm with ε = 1e-5 although eps={eps} was passed: use self.eps"] = (
            weight * centred / torch.sqrt(var + 1e-5) + bias)
    # The wrong dimension: statistics over the batch or over time instead of over the features.
    wrong_dims: list[tuple[str, tuple[int, ...]]] = []
    if x.dim() >= 2:
        wrong_dims.append((say("the batch dimension (dim 0), like BatchNorm"), (0,)))
    if x.dim() >= 3:
        wrong_dims.append((say("the time dimension (dim 1)"), (1,)))
        wrong_dims.append((say("all dimensions of each example (time *and* features)"), tuple(range(1, x.dim()))))
        wrong_dims.append((say("the whole tensor"), tuple(range(x.dim()))))
    for where, dims in wrong_dims:
        m = x.mean(dim=dims, keepdim=True)
        v = x.var(dim=dims, keepdim=True, unbiased=False)
        mistakes[f"LayerNorm with mean and variance over {where} instead of the features (dim=-1)"] = (
            weight * (x - m) / torch.sqrt(v + eps) + bias)
    return mistakes


def _expect_gain_and_bias(module: nn.Module, call: str, d_model: int) -> None:
    """Exactly the parameters weight and bias, each (d_model,), starting at 1 and 0."""
    params = dict(module.named_parameters())
    if sorted(params) != ["bias", "weight"]:
        raise CheckFailed(f"{call} should have exactly two nn.Parameters, weight (the gain) and bias, "
                          f"got {sorted(params)}")
    for name in ("weight", "bias"):
        if tuple(params[name].shape) != (d_model,):
            raise CheckFailed(f"{call}: {name} should have shape ({d_model},), got {tuple(params[name].shape)}")
    if not (torch.all(params["weight"] == 1) and torch.all(params["bias"] == 0)):
        raise CheckFailed(f"{call}: a fresh LayerNorm should start with weight = 1 and bias = 0, "
                          "so that at first it only normalises")


@isolated
@one_thread
def check_layer_norm(learner_cls: Any, hidden: bool = False) -> None:
    """LN(x) = gain · (x − mean) / sqrt(var + eps) + bias over the last dimension, biased variance."""
    gen = torch.Generator().manual_seed(5)
    normal = functools.partial(torch.randn, generator=gen)
    inputs: list[tuple[str, Tensor, float | None]] = [
        ("x (2, 5, 8) with mean 1 and std 3", 3.0 * normal(2, 5, 8) + 1.0, None),
        ("x (1, 1, 16) with a tiny spread (std 0.005, so ε matters)", 0.005 * normal(1, 1, 16) + 2.0, None),
        ("x (4, 6), a 2-D batch of vectors", normal(4, 6), None),
    ]
    if hidden:
        constant = normal(3, 7, 12)
        constant[1, 3] = 4.0  # one position whose features are all equal: variance 0
        inputs = [
            ("x (3, 7, 12) with a constant vector at one position", constant, None),
            ("x (2, 2, 3, 8), four dimensions", 2.0 * normal(2, 2, 3, 8), None),
            ("x (2, 4, 10) with a small spread and eps=1e-3", 0.02 * normal(2, 4, 10) - 1.0, 1e-3),
            ("x (1, 1, 4), batch of 1 and T = 1", normal(1, 1, 4), None),
        ]
    name, cases = getattr(learner_cls, "__name__", "LayerNorm"), []
    for description, x, eps in inputs:
        d_model, options = x.shape[-1], {} if eps is None else {"eps": eps}
        reference = LayerNorm(d_model, **options)
        _randomise_norms(reference, gen)
        with torch.no_grad():
            expected = reference(x)
            mistakes = _layer_norm_mistakes(x, reference.weight, reference.bias, reference.eps)
        call = _call_text(name, (d_model,), options)
        forward = f"{call}.forward(x) for {description}"
        cases.append(Case(forward, expected=expected, mistakes=mistakes, label=f"LayerNorm on {description}",
                          unchanged=[x], unchanged_what=f"LayerNorm on {description}",
                          call=_module_call(call, (d_model,), options, reference,
                                            "name the gain `weight` and the shift `bias`", forward, (x,),
                                            functools.partial(_expect_gain_and_bias, call=call, d_model=d_model))))
    run(LAYER_NORM, learner_cls, cases, hidden,
        then=functools.partial(_expect_portable, learner_cls, (8,), [{}], [torch.randn(2, 3, 8)]))


# ----------------------------------------------------------------------------------------------
# Exercise: the sub-layer connection (residual + LayerNorm, post-LN or pre-LN)
# ----------------------------------------------------------------------------------------------


class _Counted(nn.Module):
    """Wraps a module and counts how often it is called."""

    def __init__(self, inner: nn.Module):
        super().__init__()
        self.inner, self.calls = inner, 0

    def forward(self, x: Tensor) -> Tensor:
        self.calls += 1
        return self.inner(x)


def _connection(x: Tensor, f: Callable[[Tensor], Tensor], n: Callable[[Tensor], Tensor], style: str) -> Tensor:
    """One sub-layer with its residual and LayerNorm, arranged right ('post', 'pre') or wrongly."""
    arrangements = {
        "post": lambda: n(x + f(x)),
        "pre": lambda: x + f(n(x)),
        "ln_plus_f": lambda: n(x) + f(x),  # post-LN with the residual added after the norm
        "normed_residual": lambda: n(x) + f(n(x)),  # pre-LN where x was overwritten by LN(x) before the residual
        "norm_output": lambda: x + n(f(x)),  # the norm on the sub-layer output only
        "post_no_residual": lambda: n(f(x)),
        "pre_no_residual": lambda: f(n(x)),
        "no_norm": lambda: x + f(x),
        "pre_extra_norm": lambda: n(x + f(n(x))),  # pre-LN with one more LayerNorm on the sum
    }
    return arrangements[style]()


# The mistakes of one sub-layer connection, by the arrangement that was asked for.
_CONNECTION_MISTAKES = {
    False: {
        "pre": "pre-LN, x + F(LN(x)), although norm_first=False asked for the paper's post-LN, LN(x + F(x))",
        "ln_plus_f": "LN(x) + F(x): in post-LN the residual is added *before* the norm, LN(x + F(x))",
        "norm_output": "x + LN(F(x)): post-LN normalises the *sum*, LN(x + F(x))",
        "post_no_residual": "LN(F(x)), the residual connection is missing: LN(x + F(x))",
        "no_norm": "x + F(x), the LayerNorm is missing: LN(x + F(x))",
    },
    True: {
        "post": "post-LN, LN(x + F(x)), although norm_first=True asked for pre-LN, x + F(LN(x))",
        "normed_residual": "LN(x) + F(LN(x)): the residual must carry x itself, not LN(x) "
                           "(did you overwrite x with its norm?)",
        "pre_no_residual": "F(LN(x)), the residual connection is missing: x + F(LN(x))",
        "pre_extra_norm": "LN(x + F(LN(x))): pre-LN leaves the sum un-normalised, x + F(LN(x))",
        "no_norm": "x + F(x), the LayerNorm is missing: x + F(LN(x))",
    },
}


def _expect_one_call_each(what: str, sublayer: _Counted, norm: _Counted) -> None:
    """After the value (a wrong output is the news): sublayer and norm each called exactly once."""
    if sublayer.calls != 1:
        raise CheckFailed(f"{what}: call `sublayer` exactly once (it was called {sublayer.calls} times): "
                          "it is the expensive part, and with dropout two calls give different results")
    if norm.calls != 1:
        raise CheckFailed(f"{what}: call `norm` exactly once (it was called {norm.calls} times)")


def _sublayer_case(seed: int, norm_first: bool, shape: tuple[int, ...]) -> Case:
    gen = torch.Generator().manual_seed(100 + seed)
    torch.manual_seed(100 + seed)
    d_model = shape[-1]
    feed_forward = nn.Sequential(nn.Linear(d_model, 2 * d_model), nn.Tanh(), nn.Linear(2 * d_model, d_model))
    norm = LayerNorm(d_model)
    _randomise_norms(norm, gen)
    x = 2.0 * torch.randn(*shape, generator=gen) + 0.5
    with torch.no_grad():
        expected = _connection(x, feed_forward, norm, "pre" if norm_first else "post")
        mistakes = {text: _connection(x, feed_forward, norm, style)
                    for style, text in _CONNECTION_MISTAKES[norm_first].items()}
    sublayer, counted_norm = _Counted(feed_forward), _Counted(norm)
    what = f"sublayer_connection(x {tuple(shape)}, sublayer, norm, norm_first={norm_first})"
    return Case(what, (x, sublayer, counted_norm, norm_first), expected=expected, mistakes=mistakes,
                after=lambda _: _expect_one_call_each(what, sublayer, counted_norm))


@isolated
@one_thread
def check_sublayer_connection(learner_fn: Any, hidden: bool = False) -> None:
    """sublayer_connection(x, sublayer, norm, norm_first): LN(x + F(x)) or x + F(LN(x))."""
    settings = [(False, (2, 5, 8)), (True, (2, 5, 8))]  # (norm_first, shape of x)
    if hidden:
        settings = [(False, (1, 1, 4)), (True, (3, 2, 6)), (True, (1, 1, 4)), (False, (2, 7, 12))]
    cases = [_sublayer_case(seed, norm_first, shape) for seed, (norm_first, shape) in enumerate(settings)]
    run(SUBLAYER, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Layers: the reference and the usual mistakes, composed from the reference's own sub-modules
# ----------------------------------------------------------------------------------------------


def _stack_connections(x: Tensor, steps: Sequence[tuple[Callable[[Tensor], Tensor], nn.Module]],
                       styles: Sequence[str]) -> Tensor:
    for (f, n), style in zip(steps, styles):
        x = _connection(x, f, n, style)
    return x


def _arrangement_mistakes(x: Tensor, steps: list, norm_first: bool, good: str) -> dict[str, Tensor]:
    """Mistakes that concern how each sub-layer is wrapped (shared by the encoder and decoder layers)."""
    k = len(steps)
    out: dict[str, Tensor] = {}
    wrong = _CONNECTION_MISTAKES[norm_first]
    for style, text in wrong.items():
        out[f"a layer built as {text}"] = _stack_connections(x, steps, [style] * k)
    no_residual = "pre_no_residual" if norm_first else "post_no_residual"
    names = ["first", "second", "third"]
    for i in range(k):
        styles = [good] * k
        styles[i] = no_residual
        out[f"a layer whose {names[i]} sub-layer has no residual connection"] = _stack_connections(x, steps, styles)
    same_norm = [(f, steps[0][1]) for f, _ in steps]
    out["a layer that uses norm1 for every sub-layer: each sub-layer needs its own LayerNorm"] = (
        _stack_connections(x, same_norm, [good] * k))
    return out


# ----------------------------------------------------------------------------------------------
# Exercise: the encoder layer
# ----------------------------------------------------------------------------------------------

ENCODER_LAYER_NAMES = ("name the sub-modules like tfcourse.blocks.EncoderLayer: self_attn (MultiHeadAttention), "
                       "ffn (PositionwiseFeedForward), norm1 and norm2 (LayerNorm)")


# Earlier exercises of this lesson that the layers call by name, with the references that stand in
# while a layer is judged on its own (a bug in your LayerNorm costs the LayerNorm exercise only).
LAYER_PARTS = dict(LayerNorm=lambda: LayerNorm, sublayer_connection=lambda: sublayer_connection)
STACK_PARTS = dict(LAYER_PARTS, EncoderLayer=lambda: called_like_the_lessons(EncoderLayer))


def _seeded_reference(layer: type, seed: int, args: tuple, case: dict) -> tuple[nn.Module, torch.Generator, dict]:
    """The reference `layer(*args, d_ff=..., dropout=0.0, norm_first=...)` built under torch's seed
    `seed`, its LayerNorms randomised; the generator that then draws the case's inputs; the options."""
    gen = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    options = dict(d_ff=case["d_ff"], dropout=0.0, norm_first=case["norm_first"])
    reference = layer(*args, **options).eval()
    _randomise_norms(reference, gen)
    return reference, gen, options


def _encoder_layer_case(seed: int, case: dict, name: str) -> Case:
    nf, args = case["norm_first"], (case["d_model"], case["n_heads"])
    reference, gen, options = _seeded_reference(EncoderLayer, 200 + seed, args, case)
    x = torch.randn(case["batch"], case["length"], case["d_model"], generator=gen)
    mask = None if case["lengths"] is None else _padding(case["lengths"], case["length"])
    good = "pre" if nf else "post"
    with torch.no_grad():
        expected = reference(x, mask)
        steps = [(lambda h: reference.self_attn(h, mask=mask), reference.norm1), (reference.ffn, reference.norm2)]
        mistakes = _arrangement_mistakes(x, steps, nf, good)
        if mask is not None:
            unmasked = [(lambda h: reference.self_attn(h), reference.norm1), (reference.ffn, reference.norm2)]
            mistakes["a layer that ignores the mask: pass mask= to self-attention"] = (
                _stack_connections(x, unmasked, [good, good]))
    call = _call_text(name, args, options)
    what = f"{call} on x {tuple(x.shape)} with {'no mask' if mask is None else 'a padding mask'}"
    return Case(what, expected=expected, mistakes=mistakes, unchanged=[x],
                call=_module_call(call, args, options, reference, ENCODER_LAYER_NAMES, what, (x, mask)))


@composite(**LAYER_PARTS)
@isolated
@one_thread
def check_encoder_layer(learner_cls: Any, hidden: bool = False) -> None:
    """Self-attention -> FFN, each wrapped by sublayer_connection; post-LN by default, pre-LN with norm_first."""
    # (batch, T, d_model, n_heads, d_ff, norm_first, true lengths for a padding mask or None)
    settings = [
        dict(batch=2, length=5, d_model=16, n_heads=4, d_ff=None, norm_first=False, lengths=None),
        dict(batch=2, length=5, d_model=16, n_heads=4, d_ff=None, norm_first=True, lengths=[5, 3]),
        dict(batch=1, length=1, d_model=8, n_heads=2, d_ff=None, norm_first=False, lengths=None),
    ]
    if hidden:
        settings = [
            dict(batch=3, length=7, d_model=12, n_heads=3, d_ff=20, norm_first=True, lengths=None),
            dict(batch=2, length=6, d_model=16, n_heads=2, d_ff=None, norm_first=False, lengths=[1, 4]),
            dict(batch=1, length=1, d_model=8, n_heads=2, d_ff=None, norm_first=True, lengths=None),
        ]
    name = getattr(learner_cls, "__name__", "EncoderLayer")
    cases = [_encoder_layer_case(seed, case, name) for seed, case in enumerate(settings)]
    run(ENCODER_LAYER, learner_cls, cases, hidden,
        then=functools.partial(_expect_portable, learner_cls, (16, 4), _BOTH_ARRANGEMENTS,
                               [torch.randn(2, 5, 16), _padding([5, 3], 5)]))


# ----------------------------------------------------------------------------------------------
# Exercise: the decoder layer
# ----------------------------------------------------------------------------------------------

DECODER_LAYER_NAMES = ("name the sub-modules like tfcourse.blocks.DecoderLayer: self_attn, cross_attn "
                       "(MultiHeadAttention), ffn (PositionwiseFeedForward), norm1, norm2, norm3 (LayerNorm)")


def _decoder_mistakes(reference: DecoderLayer, x: Tensor, memory: Tensor, self_mask: Tensor,
                      memory_mask: Tensor | None, nf: bool) -> dict[str, Tensor]:
    good = "pre" if nf else "post"
    r = reference

    def self_attention(mask: Tensor | None) -> Callable[[Tensor], Tensor]:
        return lambda h: r.self_attn(h, mask=mask)

    def cross(mask: Tensor | None) -> Callable[[Tensor], Tensor]:
        return lambda h: r.cross_attn(h, memory, mask=mask)

    def layer(first: Callable[[Tensor], Tensor], second: Callable[[Tensor], Tensor]) -> Tensor:
        """The layer with `first` and `second` where masked self-attention and cross-attention belong."""
        return _stack_connections(x, [(first, r.norm1), (second, r.norm2), (r.ffn, r.norm3)], [good] * 3)

    right = [(self_attention(self_mask), r.norm1), (cross(memory_mask), r.norm2), (r.ffn, r.norm3)]
    mistakes = _arrangement_mistakes(x, right, nf, good)
    mistakes["a decoder layer whose self-attention ignores the causal mask: pass self_mask to self_attn, "
             "or every position sees its future"] = layer(self_attention(None), cross(memory_mask))
    mistakes["a decoder layer with the sub-layers in the wrong order: masked self-attention comes first, "
             "then cross-attention, then the FFN"] = layer(cross(memory_mask), self_attention(self_mask))
    if memory_mask is not None:
        mistakes["a decoder layer whose cross-attention ignores memory_mask (the source's padding)"] = (
            layer(self_attention(self_mask), cross(None)))
    if nf:
        mistakes["a pre-LN decoder layer that also normalises memory with norm2: only the decoder stream is "
                 "normalised, H is used as it is"] = (
            layer(self_attention(self_mask), lambda h: r.cross_attn(h, r.norm2(memory), mask=memory_mask)))
    t_tgt, t_src = x.shape[1], memory.shape[1]
    # Keys and values from the decoder itself: cross_attn(h, h) - self-attention a second time.
    kv_mask = memory_mask if t_src == t_tgt else None  # a source padding mask only fits equal lengths
    mistakes["a decoder layer whose cross-attention takes keys and values from the decoder, cross_attn(h, h): "
             "K and V must come from the encoder output H, cross_attn(h, memory)"] = (
        layer(self_attention(self_mask), lambda h: r.cross_attn(h, h, mask=kv_mask)))
    if t_src == t_tgt:
        # Queries from the encoder: cross_attn(memory, h). Only the shapes of equal lengths add up.
        mistakes["a decoder layer whose cross-attention takes the queries from the encoder, cross_attn(memory, h): "
                 "Q comes from the decoder, K and V from H"] = (
            layer(self_attention(self_mask), lambda h: r.cross_attn(memory, h)))
        mistakes["a decoder layer whose cross-attention is masked with the causal mask: the decoder may see the "
                 "*whole* source sentence, only its own future is hidden"] = (
            layer(self_attention(self_mask), cross(self_mask)))
        mistakes["a decoder layer with self_mask and memory_mask swapped"] = (
            layer(self_attention(memory_mask), cross(self_mask)))
    return mistakes


def _expect_target_length(actual: Any, what: str, x: Tensor, memory: Tensor) -> None:
    """An output of the source's shape: the queries were taken from memory instead of the decoder."""
    if isinstance(actual, Tensor) and actual.shape == memory.shape and memory.shape != x.shape:
        raise CheckFailed(f"{what}: your output has the *source* length {memory.shape[1]}; the decoder's "
                          f"output keeps its own shape {tuple(x.shape)}: queries come from the decoder")


def _decoder_layer_case(seed: int, case: dict, name: str) -> Case:
    nf, args = case["norm_first"], (case["d_model"], case["n_heads"])
    reference, gen, options = _seeded_reference(DecoderLayer, 300 + seed, args, case)
    x = torch.randn(case["batch"], case["t_tgt"], case["d_model"], generator=gen)
    memory = 1.5 * torch.randn(case["batch"], case["t_src"], case["d_model"], generator=gen) - 0.5
    self_mask = causal_mask(case["t_tgt"])  # (T_tgt, T_tgt)
    memory_mask = None if case["lengths"] is None else _padding(case["lengths"], case["t_src"])
    with torch.no_grad():
        expected = reference(x, memory, self_mask, memory_mask)
        mistakes = _decoder_mistakes(reference, x, memory, self_mask, memory_mask, nf)
    call = _call_text(name, args, options)
    mask_text = "no memory_mask" if memory_mask is None else "a padding memory_mask"
    what = f"{call} on x {tuple(x.shape)}, memory {tuple(memory.shape)}, causal self_mask, {mask_text}"
    return Case(what, expected=expected, mistakes=mistakes, unchanged=[x, memory],
                call=_module_call(call, args, options, reference, DECODER_LAYER_NAMES, what,
                                  (x, memory, self_mask, memory_mask)),
                inspect=functools.partial(_expect_target_length, what=what, x=x, memory=memory))


@composite(**LAYER_PARTS)
@isolated
@one_thread
def check_decoder_layer(learner_cls: Any, hidden: bool = False) -> None:
    """Masked self-attention -> cross-attention (Q from the decoder, K/V from H) -> FFN, each wrapped."""
    settings = [
        dict(batch=2, t_tgt=5, t_src=5, d_model=16, n_heads=4, d_ff=None, norm_first=False, lengths=None),
        dict(batch=2, t_tgt=4, t_src=6, d_model=16, n_heads=4, d_ff=None, norm_first=True, lengths=[6, 3]),
        dict(batch=1, t_tgt=1, t_src=3, d_model=8, n_heads=2, d_ff=None, norm_first=False, lengths=None),
    ]
    if hidden:
        settings = [
            dict(batch=3, t_tgt=6, t_src=6, d_model=12, n_heads=3, d_ff=20, norm_first=True, lengths=[6, 2, 4]),
            dict(batch=2, t_tgt=7, t_src=2, d_model=16, n_heads=2, d_ff=None, norm_first=False, lengths=[1, 2]),
            dict(batch=1, t_tgt=3, t_src=1, d_model=8, n_heads=2, d_ff=None, norm_first=True, lengths=None),
        ]
    name = getattr(learner_cls, "__name__", "DecoderLayer")
    cases = [_decoder_layer_case(seed, case, name) for seed, case in enumerate(settings)]
    run(DECODER_LAYER, learner_cls, cases, hidden,
        then=functools.partial(_expect_portable, learner_cls, (16, 4), _BOTH_ARRANGEMENTS,
                               [torch.randn(2, 4, 16), torch.randn(2, 6, 16), causal_mask(4), _padding([6, 3], 6)]))


# ----------------------------------------------------------------------------------------------
# Exercise: the encoder stack
# ----------------------------------------------------------------------------------------------


ENCODER_NAMES = ("name the stack like tfcourse.blocks.Encoder: self.layers (nn.ModuleList of encoder layers) and "
                 "self.norm, a LayerNorm for pre-LN (norm_first=True) and nn.Identity() for post-LN")


def _encoder_mistakes(reference: Encoder, x: Tensor, mask: Tensor | None, nf: bool) -> dict[str, Tensor]:
    layers, final = reference.layers, reference.norm
    mistakes = {}
    if len(layers) > 1:
        mistakes["the first layer only: apply all N layers, one after the other"] = final(layers[0](x, mask))
        mistakes["the last layer applied to the input x: feed each layer's output into the next"] = (
            final(layers[-1](x, mask)))
    mistakes["the input x itself (after the final norm): every layer's output was thrown away — "
             "x = layer(x, mask), so that the next layer reads it"] = final(x)
    if nf:
        h = x
        for layer in layers:
            h = layer(h, mask)
        mistakes["the pre-LN stack *without* its final LayerNorm (self.norm)"] = h
    if mask is not None:
        mistakes["a stack that does not pass the mask to its layers"] = reference(x)
    return mistakes


def _expect_separate_layers(module: nn.Module, call: str, n_layers: int) -> None:
    """self.layers: an nn.ModuleList of n_layers layers, none sharing its weights with another."""
    stack = getattr(module, "layers", None)
    if not isinstance(stack, nn.ModuleList) or len(stack) != n_layers:
        got = type(stack).__name__ if not isinstance(stack, nn.ModuleList) else f"{len(stack)} layers"
        raise CheckFailed(f"{call}: self.layers should be an nn.ModuleList of {n_layers} encoder layers, got {got}")
    params = [id(p) for layer in stack for p in layer.parameters()]  # a parameter twice: in two layers
    if len({id(layer) for layer in stack}) < n_layers or len(set(params)) < len(params):
        raise CheckFailed(f"{call}: your layers share their weights; build {n_layers} separate layers "
                          "(a loop or comprehension that calls EncoderLayer(...) each time), not [layer] * n_layers")


def _encoder_case(seed: int, case: dict, name: str) -> Case:
    nf, n_layers = case["norm_first"], case["n_layers"]
    args = (n_layers, case["d_model"], case["n_heads"])
    reference, gen, options = _seeded_reference(Encoder, 400 + seed, args, case)
    x = torch.randn(case["batch"], case["length"], case["d_model"], generator=gen)
    mask = None if case["lengths"] is None else _padding(case["lengths"], case["length"])
    with torch.no_grad():
        expected = reference(x, mask)
        mistakes = _encoder_mistakes(reference, x, mask, nf)
    call = _call_text(name, args, options)
    what = f"{call} on x {tuple(x.shape)} with {'no mask' if mask is None else 'a padding mask'}"
    return Case(what, expected=expected, mistakes=mistakes, unchanged=[x],
                call=_module_call(call, args, options, reference, ENCODER_NAMES, what, (x, mask),
                                  functools.partial(_expect_separate_layers, call=call, n_layers=n_layers)))


@composite(**STACK_PARTS)
@isolated
@one_thread
def check_encoder(learner_cls: Any, hidden: bool = False) -> None:
    """N encoder layers with their own weights; pre-LN ends with one LayerNorm; (B, T, d_model) in and out."""
    settings = [
        dict(n_layers=3, batch=2, length=5, d_model=16, n_heads=4, d_ff=None, norm_first=False, lengths=[5, 2]),
        dict(n_layers=2, batch=2, length=4, d_model=16, n_heads=4, d_ff=None, norm_first=True, lengths=None),
    ]
    if hidden:
        settings = [
            dict(n_layers=1, batch=1, length=1, d_model=8, n_heads=2, d_ff=None, norm_first=True, lengths=None),
            dict(n_layers=4, batch=3, length=6, d_model=12, n_heads=3, d_ff=20, norm_first=False,
                 lengths=[6, 1, 3]),
            dict(n_layers=6, batch=2, length=3, d_model=8, n_heads=2, d_ff=None, norm_first=True, lengths=[3, 2]),
        ]
    name = getattr(learner_cls, "__name__", "Encoder")
    cases = [_encoder_case(seed, case, name) for seed, case in enumerate(settings)]
    run(ENCODER, learner_cls, cases, hidden,
        then=functools.partial(_expect_portable, learner_cls, (2, 16, 4), _BOTH_ARRANGEMENTS,
                               [torch.randn(2, 5, 16), _padding([5, 3], 5)]))


# ----------------------------------------------------------------------------------------------
# Exercise: table 3-1, the shape at every stage
# ----------------------------------------------------------------------------------------------

SHAPE_KEYS = (
    "src_ids", "src_embeddings", "encoder_input", "q", "q_heads", "encoder_attn_weights", "attn_output",
    "encoder_layer_output", "memory", "tgt_ids", "decoder_input", "decoder_self_attn_weights",
    "cross_attn_weights", "decoder_output", "logits", "probs",
)


def _shape_mistakes(key: str, batch: int, n: int, m: int, d_model: int, n_heads: int,
                    vocab: int) -> dict[tuple, str]:
    d_head = d_model // n_heads
    per_key: dict[str, dict[tuple, str]] = {
        "q_heads": {
            (batch, n, n_heads, d_head): "(B, n, n_heads, d_head) is the shape *before* the transpose: the heads are "
                                         "moved in front of time, (B, n_heads, n, d_head)",
            (batch, n, d_model): "after the split each head holds d_head = d_model / n_heads features: "
                                 "(B, n_heads, n, d_head)",
        },
        "encoder_attn_weights": {
            (batch, n_heads, n, d_head): "attention weights hold one number per (query, key) pair: "
                                         "(B, n_heads, T_q, T_k)",
            (batch, n, n): "every head has its own weights: (B, n_heads, n, n)",
        },
        "decoder_self_attn_weights": {
            (batch, n_heads, m, n): "the decoder's *self*-attention pairs target with target positions: "
                                    "(B, n_heads, m, m)",
        },
        "cross_attn_weights": {
            (batch, n_heads, n, m): "rows are the queries (from the decoder, m of them), columns the keys "
                                    "(from the encoder output H, n of them): (B, n_heads, m, n)",
            (batch, n_heads, m, m): "cross-attention keys come from the encoder output H (length n): "
                                    "(B, n_heads, m, n)",
        },
        "decoder_output": {
            (batch, n, d_model): "the decoder keeps the *target* length m: (B, m, d_model)",
        },
        "logits": {
            (batch, m, d_model): "the output linear layer projects d_model to the vocabulary: (B, m, V)",
            (batch, n, vocab): "logits are per *target* position: (B, m, V)",
        },
        "probs": {
            (batch, m): "softmax turns the scores into a distribution but keeps the shape: (B, m, V)",
        },
    }
    return per_key.get(key, {})


def _expect_table(table: Any, what: str, expected: dict[str, tuple], sizes: tuple[int, ...]) -> None:
    """A dict with every stage and no other, each a tuple of ints equal to the traced shape; a wrong
    shape that is a usual mistake is named."""
    if not isinstance(table, dict):
        raise CheckFailed(f"{what}: return a dict stage -> shape, got {type(table).__name__}")
    missing = [k for k in SHAPE_KEYS if k not in table]
    extra = [k for k in table if k not in SHAPE_KEYS]
    if missing:
        raise CheckFailed(f"{what}: your table lacks the stages {missing}")
    if extra:
        raise CheckFailed(f"{what}: unknown stages {extra}; the stages are {list(SHAPE_KEYS)}")
    for key in SHAPE_KEYS:
        value = table[key]
        if not isinstance(value, (tuple, list, torch.Size)) or not all(
                isinstance(s, int) and not isinstance(s, bool) for s in value):
            raise CheckFailed(f"{what}: table[{key!r}] should be a tuple of ints, got {value!r}")
        got = tuple(value)
        if got != expected[key]:
            reason = _shape_mistakes(key, *sizes).get(got, "")
            raise CheckFailed(f"{what}: table[{key!r}] is {got}, but the real tensor has shape {expected[key]}"
                              + (f" — {reason}" if reason else ""))


@isolated
@one_thread
def check_shape_table(learner_fn: Any, hidden: bool = False) -> None:
    """The learner's table 3-1 (a dict stage -> shape) against shapes traced through a real model."""
    settings = [(2, 6, 8, 16, 4, 30), (1, 3, 5, 12, 3, 11)]  # (B, n, m, d_model, n_heads, vocab_size)
    if hidden:
        settings = [(4, 1, 1, 8, 2, 7), (3, 9, 4, 24, 6, 50), (1, 7, 7, 32, 8, 19)]
    cases = []
    for sizes in settings:
        what = "table(B={}, n={}, m={}, d_model={}, n_heads={}, vocab_size={})".format(*sizes)
        cases.append(Case(what, sizes, inspect=functools.partial(_expect_table, what=what, sizes=sizes,
                                                                 expected=trace_shapes(*sizes))))
    run(SHAPE_TABLE, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Debug exercise: a colleague's sub-layer connection with one planted mistake
# ----------------------------------------------------------------------------------------------

COLLEAGUES_SUBLAYER_CONNECTION = PlantedBug(
    "05_blocks", "sublayer_debug_impl", "colleagues_sublayer_connection",
    source='''def colleagues_sublayer_connection(x: Tensor, sublayer, norm: nn.Module, norm_first: bool = False) -> Tensor:
    """A colleague's sub-layer connection, called as yours (sublayer: a function of one tensor)."""
    if norm_first:
        x = norm(x)  # pre-LN: the sub-layer reads the normalised stream
        return x + sublayer(x)  # (B, T, d_model)
    return norm(x + sublayer(x))  # post-LN: normalise the sum, (B, T, d_model)
''',
    mistake="the residual must carry x itself, not LN(x)",
    coarse_hint="compare the norm_first branch, line by line, with the pre-LN row of section 4's table, "
                "x + F(LN(x)): is every x there the tensor that came in?")
check_sublayer_debug = debug_exercise(check_sublayer_connection, COLLEAGUES_SUBLAYER_CONNECTION)

__all__ = [
    "check_layer_norm",
    "check_sublayer_connection",
    "check_encoder_layer",
    "check_decoder_layer",
    "check_encoder",
    "check_shape_table",
    "check_sublayer_debug",
    "SHAPE_KEYS",
]

