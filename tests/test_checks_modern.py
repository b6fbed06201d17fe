"""Lesson 11's checks: right answers pass, every usual mistake is named, the answer is off-limits."""

from __future__ import annotations

import sys
import types

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfcourse.attention import scaled_dot_product_attention
from tfcourse.checks.core import CheckFailed, OffLimitsError
from tfcourse.checks.modern import (check_apply_rope, check_gqa_attention, check_grouped_query_attention,
                                    check_rms_norm, check_swiglu)
from tfcourse import modern
from check_helpers import assert_passes, stub


def fails(check, learner, message, error=CheckFailed, hidden=True):
    with pytest.raises(error, match=message):
        check(learner, hidden=hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 1: RMSNorm
# ----------------------------------------------------------------------------------------------


class RMSNorm(nn.Module):
    def __init__(self, d_model, eps=1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))

    def forward(self, x):
        return self.weight * x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps)


def _rms_variant(forward):
    return type("Variant", (RMSNorm,), {"forward": forward})


def _ms(x):
    return x.pow(2).mean(-1, keepdim=True)


CentresLikeLayerNorm = _rms_variant(lambda self, x: self.weight * (x - x.mean(-1, keepdim=True)) / torch.sqrt(
    (x - x.mean(-1, keepdim=True)).pow(2).mean(-1, keepdim=True) + self.eps))
EpsOutside = _rms_variant(lambda self, x: self.weight * x / (torch.sqrt(_ms(x)) + self.eps))
NoGain = _rms_variant(lambda self, x: x / torch.sqrt(_ms(x) + self.eps))
NoSqrt = _rms_variant(lambda self, x: self.weight * x / (_ms(x) + self.eps))
SumOfSquares = _rms_variant(lambda self, x: self.weight * x / torch.sqrt(x.pow(2).sum(-1, keepdim=True) + self.eps))
FixedEps = _rms_variant(lambda self, x: self.weight * x / torch.sqrt(_ms(x) + 1e-6))
WrongDim = _rms_variant(lambda self, x: self.weight * x / torch.sqrt(x.pow(2).mean(0, keepdim=True) + self.eps))


class WithBias(RMSNorm):
    def __init__(self, d_model, eps=1e-6):
        super().__init__(d_model, eps)
        self.bias = nn.Parameter(torch.zeros(d_model))


class Delegates(RMSNorm):
    def forward(self, x):
        return F.rms_norm(x, (x.shape[-1],), self.weight, self.eps)


class UsesTheReference(RMSNorm):
    def forward(self, x):
        return modern.RMSNorm(x.shape[-1], self.eps)(x) * self.weight


def test_rms_norm_passes(capfd):
    assert_passes(check_rms_norm, RMSNorm, capfd)
    assert_passes(check_rms_norm, RMSNorm, capfd, hidden=False)


@pytest.mark.parametrize(("learner", "message"), [
    (CentresLikeLayerNorm, "LayerNorm's normalisation"),
    (EpsOutside, "eps \\*?outside"),
    (NoGain, "without the gain"),
    (NoSqrt, "square root is missing"),
    (SumOfSquares, "sum\\(x\\^2\\)"),
    (FixedEps, "eps=0.001 was passed"),
    (WrongDim, "over the batch dimension"),
    (WithBias, "has a bias"),
    (type("Stub", (RMSNorm,), {"forward": stub}), "not implemented yet"),
])
def test_rms_norm_names_the_mistake(learner, message):
    fails(check_rms_norm, learner, message)


def test_rms_norm_builtins_and_reference_are_off_limits():
    fails(check_rms_norm, Delegates, "'torch.nn.functional.rms_norm' is off-limits", OffLimitsError, hidden=False)
    fails(check_rms_norm, UsesTheReference, "'tfcourse.modern.RMSNorm' is off-limits", OffLimitsError, hidden=False)
    fails(check_rms_norm, modern.RMSNorm, "off-limits", OffLimitsError, hidden=False)


# ----------------------------------------------------------------------------------------------
# Exercise 2: SwiGLU
# ----------------------------------------------------------------------------------------------


class SwiGLU(nn.Module):
    def __init__(self, d_model, d_ff=None, dropout=0.0):
        super().__init__()
        d_ff = d_ff or 8 * d_model // 3
        self.w_gate = nn.Linear(d_model, d_ff, bias=False)
        self.w_up = nn.Linear(d_model, d_ff, bias=False)
        self.w_down = nn.Linear(d_ff, d_model, bias=False)

    def forward(self, x):
        return self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))


def _swiglu_variant(forward):
    return type("Variant", (SwiGLU,), {"forward": forward})


class FourTimesWidth(SwiGLU):
    def __init__(self, d_model, d_ff=None):
        super().__init__(d_model, d_ff or 4 * d_model)


class WithBiases(nn.Module):
    def __init__(self, d_model, d_ff=None):
        super().__init__()
        d_ff = d_ff or 8 * d_model // 3
        self.w_gate, self.w_up, self.w_down = nn.Linear(d_model, d_ff), nn.Linear(d_model, d_ff), nn.Linear(d_ff, d_model)


class UsesReferenceWidth(SwiGLU):
    def __init__(self, d_model, d_ff=None):
        super().__init__(d_model, d_ff or modern.swiglu_hidden_size(d_model))


def test_swiglu_passes(capfd):
    assert_passes(check_swiglu, SwiGLU, capfd)


@pytest.mark.parametrize(("learner", "message"), [
    (_swiglu_variant(lambda self, x: self.w_down(F.silu(self.w_up(x)) * self.w_gate(x))), "gate and up are swapped"),
    (_swiglu_variant(lambda self, x: self.w_down(torch.relu(self.w_gate(x)) * self.w_up(x))), "ReLU instead of SiLU"),
    (_swiglu_variant(lambda self, x: self.w_down(F.gelu(self.w_gate(x)) * self.w_up(x))), "GELU instead of SiLU"),
    (_swiglu_variant(lambda self, x: self.w_down(torch.sigmoid(self.w_gate(x)) * self.w_up(x))), "original GLU"),
    (_swiglu_variant(lambda self, x: self.w_down(F.silu(self.w_gate(x)))), "product with the features"),
    (_swiglu_variant(lambda self, x: self.w_down(F.silu(self.w_gate(x) * self.w_up(x)))), "applied to the product"),
    (_swiglu_variant(lambda self, x: x + self.w_down(F.silu(self.w_gate(x)) * self.w_up(x))), "residual"),
    (FourTimesWidth, "2/3 of the ReLU FFN's 4 d_model"),
    (WithBiases, "bias-free"),
    (type("Stub", (SwiGLU,), {"forward": stub}), "not implemented yet"),
])
def test_swiglu_names_the_mistake(learner, message):
    fails(check_swiglu, learner, message)


def test_swiglu_reference_is_off_limits():
    fails(check_swiglu, UsesReferenceWidth, "'tfcourse.modern.swiglu_hidden_size' is off-limits", OffLimitsError)
    fails(check_swiglu, modern.SwiGLUFeedForward, "off-limits", OffLimitsError)


# ----------------------------------------------------------------------------------------------
# Exercise 3: RoPE
# ----------------------------------------------------------------------------------------------


def make_rope(layout="halves", sign=1.0, use_offset=True, swap=False, exponent=2, start=0):
    def apply(x, offset=0, base=10000.0):
        d, length = x.shape[-1], x.shape[-2]
        inv_freq = base ** (-exponent * torch.arange(d // 2, dtype=x.dtype, device=x.device) / d)  # (d/2,)
        positions = torch.arange(length, dtype=x.dtype, device=x.device) + (offset if use_offset else 0) + start
        angles = torch.outer(positions, inv_freq)  # (T, d/2)
        if layout == "pairs":
            pairs = x.unflatten(-1, (-1, 2))
            turned = torch.stack([-pairs[..., 1], pairs[..., 0]], -1).flatten(-2)
            angles = angles.repeat_interleave(2, dim=-1)
        else:
            x1, x2 = x.chunk(2, -1)
            turned = torch.cat([-x2, x1], -1)
            angles = torch.cat([angles, angles], -1)
        cos, sin = (angles.sin(), angles.cos()) if swap else (angles.cos(), angles.sin())
        return x * cos + sign * turned * sin
    return apply


def test_apply_rope_passes(capfd):
    assert_passes(check_apply_rope, make_rope(), capfd)


@pytest.mark.parametrize(("learner", "message"), [
    (make_rope(layout="pairs"), "interleaved layout"),
    (make_rope(sign=-1.0), "rotation the other way"),
    (make_rope(use_offset=False), "offset is ignored"),
    (make_rope(swap=True), "cos and sin swapped"),
    (make_rope(exponent=1), "exponent is 2i/d_head"),
    (make_rope(start=1), "positions from 1"),
    (lambda x, offset=0, base=10000.0: x * (1.0 + offset + torch.arange(x.shape[-2]))[:, None],
     "values differ.*depends on more than the offset"),
    (stub, "not implemented yet"),
])
def test_apply_rope_names_the_mistake(learner, message):
    fails(check_apply_rope, learner, message, hidden=False)


def test_apply_rope_reference_is_off_limits():
    fails(check_apply_rope, lambda x, offset=0, base=10000.0: modern.apply_rope(x, offset, base), "off-limits",
          OffLimitsError, hidden=False)
    fails(check_apply_rope, modern.apply_rope, "the reference itself", OffLimitsError, hidden=False)


def test_apply_rope_must_not_modify_its_input():
    def in_place(x, offset=0, base=10000.0):
        result = make_rope()(x, offset, base)
        x.zero_()
        return result
    fails(check_apply_rope, in_place, "in place", hidden=False)


# ----------------------------------------------------------------------------------------------
# Exercise 4: grouped-query attention
# ----------------------------------------------------------------------------------------------


def gqa(q, k, v, mask=None):
    n_rep = q.shape[1] // k.shape[1]
    return scaled_dot_product_attention(q, k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1), mask)[0]


def gqa_tiled(q, k, v, mask=None):
    n_rep = q.shape[1] // k.shape[1]
    return scaled_dot_product_attention(q, k.repeat(1, n_rep, 1, 1), v.repeat(1, n_rep, 1, 1), mask)[0]


def gqa_unscaled(q, k, v, mask=None):
    return gqa(q * q.shape[-1] ** 0.5, k, v, mask)


def gqa_no_mask(q, k, v, mask=None):
    return gqa(q, k, v)


def gqa_tuple(q, k, v, mask=None):
    n_rep = q.shape[1] // k.shape[1]
    return scaled_dot_product_attention(q, k.repeat_interleave(n_rep, 1), v.repeat_interleave(n_rep, 1), mask)


def gqa_fused(q, k, v, mask=None):
    return F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)


def test_grouped_query_attention_passes(capfd):
    assert_passes(check_grouped_query_attention, gqa, capfd)


@pytest.mark.parametrize(("learner", "message"), [
    (gqa_tiled, "tiled as a whole stack"),
    (gqa_unscaled, "without the 1/sqrt\\(d_head\\)"),
    (gqa_no_mask, "ignores the mask"),
    (gqa_tuple, "not a tuple"),
    (stub, "not implemented yet"),
])
def test_grouped_query_attention_names_the_mistake(learner, message):
    fails(check_grouped_query_attention, learner, message, hidden=False)


def test_grouped_query_attention_hidden_cases_catch_the_ignored_mask():
    fails(check_grouped_query_attention, gqa_no_mask, "ignores the mask", hidden=True)


def test_grouped_query_attention_builtin_and_reference_are_off_limits():
    fails(check_grouped_query_attention, gqa_fused, "'torch.nn.functional.scaled_dot_product_attention' is off-limits",
          OffLimitsError, hidden=False)
    fails(check_grouped_query_attention, lambda q, k, v, mask=None: modern.grouped_query_attention(q, k, v, mask),
          "off-limits", OffLimitsError, hidden=False)


# ----------------------------------------------------------------------------------------------
# Exercise 5: the layer (its parts from the namespace it is defined in, as in a notebook)
# ----------------------------------------------------------------------------------------------

LAYER_SOURCE = '''
import torch
from torch import nn


class GroupedQueryAttention(nn.Module):
    def __init__(self, d_model, n_heads, n_kv_heads):
        super().__init__()
        self.n_heads, self.n_kv_heads, self.d_head = n_heads, n_kv_heads, d_model // n_heads
        self.w_q = nn.Linear(d_model, n_heads * self.d_head, bias=False)
        self.w_k = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.w_v = nn.Linear(d_model, n_kv_heads * self.d_head, bias=False)
        self.w_o = nn.Linear(n_heads * self.d_head, d_model, bias=False)

    def forward(self, x, mask=None, cache=None):
        B, T, _ = x.shape
        offset = len(cache) if cache is not None else 0
        q = self.w_q(x).view(B, T, self.n_heads, self.d_head).transpose(1, 2)
        k = self.w_k(x).view(B, T, self.n_kv_heads, self.d_head).transpose(1, 2)
        v = self.w_v(x).view(B, T, self.n_kv_heads, self.d_head).transpose(1, 2)
        q, k = apply_rope(q, OFFSET), apply_rope(k, OFFSET)
        if cache is not None:
            k, v = cache.append(k, v)
        out = grouped_query_attention(q, k, v, mask)
        return self.w_o(out.transpose(1, 2).reshape(B, T, -1))
'''


def layer(*edits, apply_rope=None, grouped_query_attention=None):
    """The learner's layer, defined in a namespace of its own that holds its apply_rope and GQA."""
    source = LAYER_SOURCE.replace("OFFSET", "offset")
    for old, new in edits:
        assert old in source, old
        source = source.replace(old, new)
    module = types.ModuleType("learner_layer")  # like a notebook: the class looks its parts up in its module
    module.apply_rope = apply_rope or make_rope()
    module.grouped_query_attention = grouped_query_attention or gqa
    exec(compile(source, "learner_layer", "exec"), vars(module))  # noqa: S102
    sys.modules["learner_layer"] = module
    return module.GroupedQueryAttention


def test_gqa_layer_passes(capfd):
    assert_passes(check_gqa_attention, layer(), capfd)


@pytest.mark.parametrize(("edits", "message"), [
    ([("q, k = apply_rope(q, offset), apply_rope(k, offset)",
       "q, k, v = apply_rope(q, offset), apply_rope(k, offset), apply_rope(v, offset)")], "values rotated too"),
    ([("q, k = apply_rope(q, offset), apply_rope(k, offset)", "q = apply_rope(q, offset)")], "only the queries rotated"),
    ([("q, k = apply_rope(q, offset), apply_rope(k, offset)", "pass")], "without RoPE"),
    ([("q, k = apply_rope(q, offset), apply_rope(k, offset)", "q, k = apply_rope(q), apply_rope(k)")],
     "as if at positions 0, 1"),
    ([("k, v = cache.append(k, v)", "k, v = cache.append(k.repeat_interleave(self.n_heads // self.n_kv_heads, 1), "
       "v.repeat_interleave(self.n_heads // self.n_kv_heads, 1))")], "stores 8 heads"),
    ([("out = grouped_query_attention(q, k, v, mask)", "raise NotImplementedError()")], "not implemented yet"),
])
def test_gqa_layer_names_the_mistake(edits, message):
    fails(check_gqa_attention, layer(*edits), message, hidden=False)


def test_gqa_layer_may_cache_keys_before_rope(capfd):
    """Another right design (rotate every cached key again at each step): the outputs are what count."""
    learner = layer(("q, k = apply_rope(q, offset), apply_rope(k, offset)\n        if cache is not None:\n"
                     "            k, v = cache.append(k, v)",
                     "q = apply_rope(q, offset)\n        if cache is not None:\n            k, v = cache.append(k, v)\n"
                     "        k = apply_rope(k, 0)"))
    assert_passes(check_gqa_attention, learner, capfd)


def test_gqa_layer_is_judged_with_the_reference_parts_in_place(capfd):
    check_gqa_attention(layer(apply_rope=make_rope(sign=-1.0), grouped_query_attention=gqa_tiled), hidden=False)
    out, err = capfd.readouterr()
    assert out.startswith("✔ ") and "fix Exercise 3 (apply_rope) and Exercise 4 (grouped_query_attention) first" in out, out
    assert out.count("Exercise 3") == 1, out  # each earlier exercise once, however many of its names stood in
    assert err == ""


def test_gqa_layer_names_only_the_earlier_exercise_that_fails(capfd):
    check_gqa_attention(layer(apply_rope=make_rope(sign=-1.0)), hidden=False)
    out, _ = capfd.readouterr()
    assert "fix Exercise 3 (apply_rope) first" in out and "Exercise 4" not in out, out


def test_gqa_layer_success_line_names_the_learners_class(capfd):
    learner = layer()
    learner.__name__ = "MyAttention"
    check_gqa_attention(learner, hidden=False)
    out, _ = capfd.readouterr()
    assert out == ("✔ MyAttention matches the reference on 2 layers, with and without the KV cache, which keeps "
                   "only the n_kv_heads heads\n"), out


def test_gqa_layer_cache_must_hold_every_position():
    keeps_the_last_call_only = ("k, v = cache.append(k, v)",
                                "k, v = cache.append(k, v)\n            cache.k, cache.v = k[:, :, -T:], v[:, :, -T:]")
    fails(check_gqa_attention, layer(keeps_the_last_call_only), "it holds 3 positions, expected 6", hidden=False)


def test_gqa_layer_reference_and_builtin_are_off_limits():
    fails(check_gqa_attention, modern.GroupedQueryAttention, "off-limits", OffLimitsError, hidden=False)
    fused = layer(("out = grouped_query_attention(q, k, v, mask)",
                   "out = torch.nn.functional.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)"))
    fails(check_gqa_attention, fused, "'torch.nn.functional.scaled_dot_product_attention' is off-limits",
          OffLimitsError, hidden=False)
