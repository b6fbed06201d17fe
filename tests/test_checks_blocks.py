"""Lesson 05 checks (tfcourse.checks.blocks): right answers pass, every named mistake is recognised,
the answers themselves are off-limits, and an unfinished exercise says so."""

from __future__ import annotations

import re
import sys

import pytest
import torch
import torch.nn.functional as F
from torch import Tensor, nn

from tfcourse import blocks
from tfcourse.attention import MultiHeadAttention
from tfcourse.checks.blocks import (
    SHAPE_KEYS,
    check_decoder_layer,
    check_encoder,
    check_encoder_layer,
    check_layer_norm,
    check_shape_table,
    check_sublayer_connection,
    trace_shapes,
)
from tfcourse.checks.core import CheckFailed, OffLimitsError
from tfcourse.ffn import PositionwiseFeedForward


def fails(check, obj, message: str, hidden: bool = False, error=CheckFailed) -> None:
    with pytest.raises(error, match=re.escape(message)):
        check(obj, hidden=hidden)


# ----------------------------------------------------------------------------------------------
# LayerNorm
# ----------------------------------------------------------------------------------------------


def make_layer_norm(normalise):
    """A LayerNorm whose forward is normalise(x, weight, bias, eps)."""

    class LN(nn.Module):
        def __init__(self, d_model: int, eps: float = 1e-5):
            super().__init__()
            self.eps = eps
            self.weight = nn.Parameter(torch.ones(d_model))
            self.bias = nn.Parameter(torch.zeros(d_model))

        def forward(self, x: Tensor) -> Tensor:
            return normalise(x, self.weight, self.bias, self.eps)

    return LN


def stats(x: Tensor, dims=-1, unbiased: bool = False) -> tuple[Tensor, Tensor]:
    return x.mean(dim=dims, keepdim=True), x.var(dim=dims, keepdim=True, unbiased=unbiased)


def right_ln(x, w, b, eps):
    mean, var = stats(x)
    return w * (x - mean) / torch.sqrt(var + eps) + b


LayerNormOK = make_layer_norm(right_ln)


def test_layer_norm_passes(capfd):
    check_layer_norm(LayerNormOK)
    check_layer_norm(LayerNormOK, hidden=True)
    out, err = capfd.readouterr()
    assert out.startswith("✔ LayerNorm matches") and out.count("\n") == 2 and "(the hidden cases: other shapes" in out
    assert err == ""


def _ln_wrong_dim(dims):
    def normalise(x, w, b, eps):
        if x.dim() < 3 and dims != 0:
            return right_ln(x, w, b, eps)
        mean, var = stats(x, dims)
        return w * (x - mean) / torch.sqrt(var + eps) + b

    return normalise


LAYER_NORM_MISTAKES = [
    (lambda x, w, b, eps: w * (x - stats(x)[0]) / (stats(x)[1].sqrt() + eps) + b, "ε outside the square root"),
    (lambda x, w, b, eps: w * (x - stats(x)[0]) / torch.sqrt(stats(x, unbiased=True)[1] + eps) + b,
     "the unbiased variance"),
    (lambda x, w, b, eps: w * (x - stats(x)[0]) / stats(x)[1].sqrt() + b, "LayerNorm without ε"),
    (lambda x, w, b, eps: w * (x - stats(x)[0]) / (stats(x)[1] + eps) + b, "dividing by the variance"),
    (lambda x, w, b, eps: (x - stats(x)[0]) / torch.sqrt(stats(x)[1] + eps), "without the gain and the bias"),
    (lambda x, w, b, eps: (x - stats(x)[0]) / torch.sqrt(stats(x)[1] + eps) + b, "without the gain (self.weight)"),
    (lambda x, w, b, eps: w * (x - stats(x)[0]) / torch.sqrt(stats(x)[1] + eps), "without the bias (self.bias)"),
    (lambda x, w, b, eps: b * (x - stats(x)[0]) / torch.sqrt(stats(x)[1] + eps) + w, "gain and the bias swapped"),
    (lambda x, w, b, eps: w * (x - stats(x)[0]) / torch.sqrt((x * x).mean(-1, keepdim=True) - stats(x)[0] ** 2 + eps)
     + b, "computed as E[x²] − E[x]²"),
    (_ln_wrong_dim(0), "over the batch dimension (dim 0)"),
    (_ln_wrong_dim(1), "over the time dimension (dim 1)"),
    (_ln_wrong_dim((1, 2)), "all dimensions of each example"),
    (_ln_wrong_dim((0, 1, 2)), "over the whole tensor"),
]


@pytest.mark.parametrize("normalise, message", LAYER_NORM_MISTAKES)
def test_layer_norm_mistakes(normalise, message):
    fails(check_layer_norm, make_layer_norm(normalise), message)


def test_layer_norm_ignoring_eps_is_named_in_hidden_cases():
    ignores_eps = make_layer_norm(lambda x, w, b, eps: right_ln(x, w, b, 1e-5))
    check_layer_norm(ignores_eps)  # the visible cases use the default eps
    fails(check_layer_norm, ignores_eps, "ε = 1e-5 although eps=0.001 was passed", hidden=True)


def test_layer_norm_structure():
    class Names(nn.Module):
        def __init__(self, d_model, eps=1e-5):
            super().__init__()
            self.gamma = nn.Parameter(torch.ones(d_model))
            self.beta = nn.Parameter(torch.zeros(d_model))

    fails(check_layer_norm, Names, "exactly two nn.Parameters, weight (the gain) and bias")

    class Init(make_layer_norm(right_ln)):
        def __init__(self, d_model, eps=1e-5):
            super().__init__(d_model, eps)
            nn.init.normal_(self.weight)

    fails(check_layer_norm, Init, "should start with weight = 1 and bias = 0")

    class InPlace(LayerNormOK):
        def forward(self, x):
            return right_ln(x.sub_(0.0).mul_(1.0).add_(1.0), self.weight, self.bias, self.eps)

    fails(check_layer_norm, InPlace, "modified input #1 in place")
    fails(check_layer_norm, lambda d_model: "not a module", "must be an nn.Module subclass")


def test_layer_norm_off_limits_and_stub():
    class Delegates(blocks.LayerNorm):
        pass

    fails(check_layer_norm, Delegates, "'tfcourse.blocks.LayerNorm' is off-limits", error=OffLimitsError)
    uses_torch = make_layer_norm(lambda x, w, b, eps: F.layer_norm(x, x.shape[-1:], w, b, eps))
    fails(check_layer_norm, uses_torch, "'torch.nn.functional.layer_norm' is off-limits", error=OffLimitsError)

    class Wraps(nn.Module):
        def __init__(self, d_model, eps=1e-5):
            super().__init__()
            self.inner = nn.LayerNorm(d_model, eps)

    fails(check_layer_norm, Wraps, "'torch.nn.LayerNorm' is off-limits", error=OffLimitsError)

    class Stub(nn.Module):
        def __init__(self, d_model, eps=1e-5):
            super().__init__()
            raise NotImplementedError()

    fails(check_layer_norm, Stub, "not implemented yet")


# ----------------------------------------------------------------------------------------------
# sublayer_connection
# ----------------------------------------------------------------------------------------------

CONNECTIONS = {
    "post": lambda x, f, n: n(x + f(x)),
    "pre": lambda x, f, n: x + f(n(x)),
    "ln_plus_f": lambda x, f, n: n(x) + f(x),
    "normed_residual": lambda x, f, n: n(x) + f(n(x)),
    "norm_output": lambda x, f, n: x + n(f(x)),
    "post_no_residual": lambda x, f, n: n(f(x)),
    "pre_no_residual": lambda x, f, n: f(n(x)),
    "no_norm": lambda x, f, n: x + f(x),
    "pre_extra_norm": lambda x, f, n: n(x + f(n(x))),
}


def make_connection(post_style: str = "post", pre_style: str = "pre"):
    def sublayer_connection(x, sublayer, norm, norm_first=False):
        return CONNECTIONS[pre_style if norm_first else post_style](x, sublayer, norm)

    return sublayer_connection


def test_sublayer_connection_passes(capfd):
    check_sublayer_connection(make_connection())
    check_sublayer_connection(make_connection(), hidden=True)
    out, err = capfd.readouterr()
    assert out.startswith("✔ sublayer_connection matches") and out.count("\n") == 2 and "(the hidden cases: other shapes" in out
    assert err == ""


SUBLAYER_MISTAKES = [
    (("pre", "pre"), "pre-LN, x + F(LN(x)), although norm_first=False"),
    (("ln_plus_f", "pre"), "LN(x) + F(x): in post-LN the residual is added before the norm"),
    (("norm_output", "pre"), "x + LN(F(x)): post-LN normalises the sum"),
    (("post_no_residual", "pre"), "LN(F(x)), the residual connection is missing"),
    (("no_norm", "pre"), "x + F(x), the LayerNorm is missing: LN(x + F(x))"),
    (("post", "post"), "post-LN, LN(x + F(x)), although norm_first=True"),
    (("post", "normed_residual"), "LN(x) + F(LN(x)): the residual must carry x itself"),
    (("post", "pre_no_residual"), "F(LN(x)), the residual connection is missing"),
    (("post", "pre_extra_norm"), "LN(x + F(LN(x))): pre-LN leaves the sum un-normalised"),
    (("post", "no_norm"), "x + F(x), the LayerNorm is missing: x + F(LN(x))"),
]


@pytest.mark.parametrize("styles, message", SUBLAYER_MISTAKES)
def test_sublayer_connection_mistakes(styles, message):
    fails(check_sublayer_connection, make_connection(*styles), message)


def test_sublayer_connection_calls_and_in_place():
    def twice(x, sublayer, norm, norm_first=False):
        sublayer(x)
        return norm(x + sublayer(x)) if not norm_first else x + sublayer(norm(x))

    fails(check_sublayer_connection, twice, "call 'sublayer' exactly once (it was called 2 times)")

    def norm_twice(x, sublayer, norm, norm_first=False):
        norm(x)
        return norm(x + sublayer(x)) if not norm_first else x + sublayer(norm(x))

    fails(check_sublayer_connection, norm_twice, "call 'norm' exactly once")

    def in_place(x, sublayer, norm, norm_first=False):
        x += sublayer(x)
        return norm(x)

    fails(check_sublayer_connection, in_place, "modified input #1 in place")


def test_sublayer_connection_names_a_wrong_value_before_counting_the_calls():
    def twice_and_no_residual(x, sublayer, norm, norm_first=False):
        sublayer(x)
        return norm(sublayer(x))

    fails(check_sublayer_connection, twice_and_no_residual, "LN(F(x)), the residual connection is missing")


def test_sublayer_connection_off_limits_and_stub():
    def delegates(x, sublayer, norm, norm_first=False):
        return blocks.sublayer_connection(x, sublayer, norm, norm_first)

    fails(check_sublayer_connection, delegates, "'tfcourse.blocks.sublayer_connection' is off-limits",
          error=OffLimitsError)

    def uses_torch(x, sublayer, norm, norm_first=False):
        return F.layer_norm(x + sublayer(x), x.shape[-1:])

    fails(check_sublayer_connection, uses_torch, "'torch.nn.functional.layer_norm' is off-limits",
          error=OffLimitsError)

    def stub(x, sublayer, norm, norm_first=False):
        raise NotImplementedError()

    fails(check_sublayer_connection, stub, "not implemented yet")


# ----------------------------------------------------------------------------------------------
# EncoderLayer
# ----------------------------------------------------------------------------------------------


def make_encoder_layer(post=("post", "post"), pre=("pre", "pre"), use_mask=True, same_norm=False):
    """An encoder layer whose two sub-layers are wrapped by the given styles (post-LN / pre-LN case)."""

    class Layer(nn.Module):
        def __init__(self, d_model, n_heads, d_ff=None, dropout=0.1, norm_first=False):
            super().__init__()
            self.norm_first = norm_first
            self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
            self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout)
            self.norm1, self.norm2 = blocks.LayerNorm(d_model), blocks.LayerNorm(d_model)

        def forward(self, x, mask=None):
            styles = pre if self.norm_first else post
            m = mask if use_mask else None
            x = CONNECTIONS[styles[0]](x, lambda h: self.self_attn(h, mask=m), self.norm1)
            return CONNECTIONS[styles[1]](x, self.ffn, self.norm1 if same_norm else self.norm2)

    return Layer


def test_encoder_layer_passes(capfd):
    check_encoder_layer(make_encoder_layer())
    check_encoder_layer(make_encoder_layer(), hidden=True)
    out, err = capfd.readouterr()
    assert out.startswith("✔ EncoderLayer matches") and out.count("\n") == 2 and "(the hidden cases: other shapes" in out
    assert err == ""


ENCODER_LAYER_MISTAKES = [
    (dict(post=("pre", "pre")), "a layer built as pre-LN, x + F(LN(x)), although norm_first=False"),
    (dict(pre=("post", "post")), "a layer built as post-LN, LN(x + F(x)), although norm_first=True"),
    (dict(post=("ln_plus_f", "ln_plus_f")), "a layer built as LN(x) + F(x)"),
    (dict(post=("norm_output", "norm_output")), "a layer built as x + LN(F(x))"),
    (dict(post=("post_no_residual", "post_no_residual")), "a layer built as LN(F(x)), the residual connection is missing"),
    (dict(post=("no_norm", "no_norm")), "a layer built as x + F(x), the LayerNorm is missing"),
    (dict(pre=("normed_residual", "normed_residual")), "a layer built as LN(x) + F(LN(x))"),
    (dict(pre=("pre_no_residual", "pre_no_residual")), "a layer built as F(LN(x)), the residual connection is missing"),
    (dict(pre=("pre_extra_norm", "pre_extra_norm")), "a layer built as LN(x + F(LN(x)))"),
    (dict(pre=("no_norm", "no_norm")), "a layer built as x + F(x), the LayerNorm is missing: x + F(LN(x))"),
    (dict(post=("post_no_residual", "post")), "first sub-layer has no residual connection"),
    (dict(post=("post", "post_no_residual")), "second sub-layer has no residual connection"),
    (dict(pre=("pre", "pre_no_residual")), "second sub-layer has no residual connection"),
    (dict(same_norm=True), "uses norm1 for every sub-layer"),
    (dict(use_mask=False), "ignores the mask"),
]


@pytest.mark.parametrize("options, message", ENCODER_LAYER_MISTAKES)
def test_encoder_layer_mistakes(options, message):
    fails(check_encoder_layer, make_encoder_layer(**options), message)


def test_encoder_layer_structure_off_limits_and_stub():
    class Renamed(make_encoder_layer()):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.attention = self.self_attn
            del self.self_attn

    fails(check_encoder_layer, Renamed, "parameter names differ from the reference")

    class Delegates(blocks.EncoderLayer):
        pass

    fails(check_encoder_layer, Delegates, "'tfcourse.blocks.EncoderLayer' is off-limits", error=OffLimitsError)

    class UsesTorch(nn.Module):
        def __init__(self, d_model, n_heads, d_ff=None, dropout=0.1, norm_first=False):
            super().__init__()
            self.inner = nn.TransformerEncoderLayer(d_model, n_heads, d_ff or 4 * d_model, dropout,
                                                    batch_first=True, norm_first=norm_first)

    fails(check_encoder_layer, UsesTorch, "'torch.nn.TransformerEncoderLayer' is off-limits", error=OffLimitsError)

    class TorchNorm(make_encoder_layer()):
        def __init__(self, d_model, *args, **kwargs):
            super().__init__(d_model, *args, **kwargs)
            self.norm1 = nn.LayerNorm(d_model)

    fails(check_encoder_layer, TorchNorm, "'torch.nn.LayerNorm' is off-limits", error=OffLimitsError)

    class Stub(nn.Module):
        def __init__(self, d_model, n_heads, d_ff=None, dropout=0.1, norm_first=False):
            super().__init__()
            raise NotImplementedError()

    fails(check_encoder_layer, Stub, "not implemented yet")


# ----------------------------------------------------------------------------------------------
# DecoderLayer
# ----------------------------------------------------------------------------------------------


def make_decoder_layer(post="post", pre="pre", no_residual_at=None, same_norm=False, self_masked=True,
                       memory_masked=True, kv="memory", q="decoder", cross_causal=False, swap_masks=False,
                       cross_first=False, source_length_output=False, normalise_memory=False):
    class Layer(nn.Module):
        def __init__(self, d_model, n_heads, d_ff=None, dropout=0.1, norm_first=False):
            super().__init__()
            self.norm_first = norm_first
            self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
            self.cross_attn = MultiHeadAttention(d_model, n_heads, dropout)
            self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout)
            self.norm1, self.norm2, self.norm3 = (blocks.LayerNorm(d_model) for _ in range(3))

        def forward(self, x, memory, self_mask=None, memory_mask=None):
            if source_length_output and memory.shape[1] != x.shape[1]:
                return memory.clone()
            s_mask, m_mask = (memory_mask, self_mask) if swap_masks else (self_mask, memory_mask)
            if not self_masked:
                s_mask = None
            if not memory_masked:
                m_mask = None
            if cross_causal:
                m_mask = self_mask

            def attend_self(h):
                return self.self_attn(h, mask=s_mask)

            def attend_memory(h):
                queries = memory if q == "encoder" else h
                keys = h if kv == "decoder" else memory
                if normalise_memory and self.norm_first:
                    keys = self.norm2(memory)
                if q == "encoder":
                    return self.cross_attn(queries, h)
                return self.cross_attn(queries, keys, mask=m_mask)

            subs = [attend_memory, attend_self] if cross_first else [attend_self, attend_memory]
            subs.append(self.ffn)
            norms = [self.norm1] * 3 if same_norm else [self.norm1, self.norm2, self.norm3]
            good = pre if self.norm_first else post
            no_res = "pre_no_residual" if self.norm_first else "post_no_residual"
            for i, (f, n) in enumerate(zip(subs, norms)):
                x = CONNECTIONS[no_res if i == no_residual_at else good](x, f, n)
            return x

    return Layer


def test_decoder_layer_passes(capfd):
    check_decoder_layer(make_decoder_layer())
    check_decoder_layer(make_decoder_layer(), hidden=True)
    out, err = capfd.readouterr()
    assert out.startswith("✔ DecoderLayer matches") and out.count("\n") == 2 and "(the hidden cases: other shapes" in out
    assert err == ""


DECODER_LAYER_MISTAKES = [
    (dict(post="pre"), "a layer built as pre-LN, x + F(LN(x)), although norm_first=False"),
    (dict(pre="post"), "a layer built as post-LN, LN(x + F(x)), although norm_first=True"),
    (dict(post="ln_plus_f"), "a layer built as LN(x) + F(x)"),
    (dict(pre="normed_residual"), "a layer built as LN(x) + F(LN(x))"),
    (dict(post="post_no_residual"), "a layer built as LN(F(x)), the residual connection is missing"),
    (dict(no_residual_at=0), "first sub-layer has no residual connection"),
    (dict(no_residual_at=1), "second sub-layer has no residual connection"),
    (dict(no_residual_at=2), "third sub-layer has no residual connection"),
    (dict(same_norm=True), "uses norm1 for every sub-layer"),
    (dict(self_masked=False), "self-attention ignores the causal mask"),
    (dict(cross_first=True), "the sub-layers in the wrong order"),
    (dict(memory_masked=False), "cross-attention ignores memory_mask"),
    (dict(kv="decoder"), "takes keys and values from the decoder, cross_attn(h, h)"),
    (dict(q="encoder"), "takes the queries from the encoder, cross_attn(memory, h)"),
    (dict(cross_causal=True), "cross-attention is masked with the causal mask"),
    (dict(swap_masks=True), "self_mask and memory_mask swapped"),
    (dict(source_length_output=True), "your output has the source length"),
    (dict(normalise_memory=True), "also normalises memory with norm2"),
]


@pytest.mark.parametrize("options, message", DECODER_LAYER_MISTAKES)
def test_decoder_layer_mistakes(options, message):
    fails(check_decoder_layer, make_decoder_layer(**options), message)


def test_decoder_layer_structure_off_limits_and_stub():
    class NoCross(nn.Module):
        def __init__(self, d_model, n_heads, d_ff=None, dropout=0.1, norm_first=False):
            super().__init__()
            self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
            self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout)
            self.norm1, self.norm2, self.norm3 = (blocks.LayerNorm(d_model) for _ in range(3))

    fails(check_decoder_layer, NoCross, "missing ['cross_attn.w_k.bias'")

    class Delegates(blocks.DecoderLayer):
        pass

    fails(check_decoder_layer, Delegates, "'tfcourse.blocks.DecoderLayer' is off-limits", error=OffLimitsError)

    class UsesTorch(nn.Module):
        def __init__(self, d_model, n_heads, d_ff=None, dropout=0.1, norm_first=False):
            super().__init__()
            self.inner = nn.TransformerDecoderLayer(d_model, n_heads, batch_first=True)

    fails(check_decoder_layer, UsesTorch, "'torch.nn.TransformerDecoderLayer' is off-limits", error=OffLimitsError)

    class Stub(nn.Module):  # the student version: __init__ stops at the stub
        def __init__(self, d_model, n_heads, d_ff=None, dropout=0.1, norm_first=False):
            super().__init__()
            self.norm_first = norm_first
            raise NotImplementedError()

    fails(check_decoder_layer, Stub, "not implemented yet")

    class ForwardStub(make_decoder_layer()):
        def forward(self, x, memory, self_mask=None, memory_mask=None):
            raise NotImplementedError()

    fails(check_decoder_layer, ForwardStub, "not implemented yet")


# ----------------------------------------------------------------------------------------------
# Encoder stack
# ----------------------------------------------------------------------------------------------


def make_encoder(run="all", final_norm=True, pass_mask=True, shared=False, post_norm=False, plain_list=False):
    class Stack(nn.Module):
        def __init__(self, n_layers, d_model, n_heads, d_ff=None, dropout=0.1, norm_first=False):
            super().__init__()
            if shared:
                layer = blocks.EncoderLayer(d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first)
                self.layers = nn.ModuleList([layer] * n_layers)
            else:
                layers = [blocks.EncoderLayer(d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first) for _ in range(n_layers)]
                self.layers = layers if plain_list else nn.ModuleList(layers)
            with_norm = norm_first or post_norm
            self.norm = blocks.LayerNorm(d_model) if with_norm and final_norm else nn.Identity()

        def forward(self, x, mask=None):
            m = mask if pass_mask else None
            if run == "first":
                h = self.layers[0](x, m)
            elif run == "each_on_input":
                for layer in self.layers:
                    h = layer(x, m)
            elif run == "discarded":  # out = layer(x, mask): the outputs never reach x
                for layer in self.layers:
                    layer(x, m)
                h = x
            else:
                h = x
                for layer in self.layers:
                    h = layer(h, m)
            return self.norm(h) if final_norm else h

    return Stack


def test_encoder_passes(capfd):
    check_encoder(make_encoder())
    check_encoder(make_encoder(), hidden=True)
    out, err = capfd.readouterr()
    assert out.startswith("✔ Encoder matches") and out.count("\n") == 2 and "(the hidden cases: other shapes" in out
    assert err == ""


ENCODER_MISTAKES = [
    (dict(run="first"), "the first layer only"),
    (dict(run="each_on_input"), "the last layer applied to the input x"),
    (dict(run="discarded"), "the input x itself (after the final norm): every layer's output was thrown away"),
    (dict(pass_mask=False), "does not pass the mask to its layers"),
    (dict(shared=True), "your layers share their weights"),
    (dict(plain_list=True), "self.layers should be an nn.ModuleList of 3 encoder layers, got list"),
    (dict(post_norm=True), "unexpected ['norm.bias', 'norm.weight']"),
]


@pytest.mark.parametrize("options, message", ENCODER_MISTAKES)
def test_encoder_mistakes(options, message):
    fails(check_encoder, make_encoder(**options), message)


def test_encoder_final_norm_mistakes():
    class NormNotApplied(make_encoder()):
        def forward(self, x, mask=None):
            for layer in self.layers:
                x = layer(x, mask)
            return x

    fails(check_encoder, NormNotApplied, "the pre-LN stack without its final LayerNorm")
    fails(check_encoder, make_encoder(final_norm=False), "missing ['norm.bias', 'norm.weight']")


def test_encoder_off_limits_and_stub():
    class Delegates(blocks.Encoder):
        def __init__(self, n_layers, d_model, n_heads, d_ff=None, dropout=0.1, norm_first=False):
            super().__init__(n_layers, d_model, n_heads, d_ff, dropout, norm_first)

    fails(check_encoder, Delegates, "'tfcourse.blocks.Encoder' is off-limits", error=OffLimitsError)

    class UsesTorch(nn.Module):
        def __init__(self, n_layers, d_model, n_heads, d_ff=None, dropout=0.1, norm_first=False):
            super().__init__()
            layer = blocks.EncoderLayer(d_model, n_heads, d_ff, dropout=dropout, norm_first=norm_first)
            self.inner = nn.TransformerEncoder(layer, n_layers, enable_nested_tensor=False)

    fails(check_encoder, UsesTorch, "'torch.nn.TransformerEncoder' is off-limits", error=OffLimitsError)

    class Stub(nn.Module):
        def __init__(self, *args, **kwargs):
            super().__init__()
            raise NotImplementedError()

    fails(check_encoder, Stub, "not implemented yet")


# ----------------------------------------------------------------------------------------------
# Table 3-1
# ----------------------------------------------------------------------------------------------


def right_table(B, n, m, d_model, n_heads, vocab_size):
    d_head = d_model // n_heads
    return {
        "src_ids": (B, n), "src_embeddings": (B, n, d_model), "encoder_input": (B, n, d_model),
        "q": (B, n, d_model), "q_heads": (B, n_heads, n, d_head), "encoder_attn_weights": (B, n_heads, n, n),
        "attn_output": (B, n, d_model), "encoder_layer_output": (B, n, d_model), "memory": (B, n, d_model),
        "tgt_ids": (B, m), "decoder_input": (B, m, d_model), "decoder_self_attn_weights": (B, n_heads, m, m),
        "cross_attn_weights": (B, n_heads, m, n), "decoder_output": (B, m, d_model),
        "logits": (B, m, vocab_size), "probs": (B, m, vocab_size),
    }


def test_shape_table_passes(capfd):
    check_shape_table(right_table)
    check_shape_table(right_table, hidden=True)
    out, err = capfd.readouterr()
    assert out.startswith("✔ your table 3-1 matches") and out.count("\n") == 2 and "(the hidden cases: other shapes" in out
    assert err == ""
    assert set(trace_shapes(2, 3, 4, 8, 2, 10)) == set(SHAPE_KEYS)


def table_with(key, shape_fn):
    def table(B, n, m, d_model, n_heads, vocab_size):
        t = right_table(B, n, m, d_model, n_heads, vocab_size)
        t[key] = shape_fn(B, n, m, d_model, n_heads, vocab_size)
        return t

    return table


SHAPE_MISTAKES = [
    ("q_heads", lambda B, n, m, d, h, V: (B, n, h, d // h), "the shape before the transpose"),
    ("encoder_attn_weights", lambda B, n, m, d, h, V: (B, h, n, d // h), "one number per (query, key) pair"),
    ("cross_attn_weights", lambda B, n, m, d, h, V: (B, h, n, m), "rows are the queries (from the decoder"),
    ("cross_attn_weights", lambda B, n, m, d, h, V: (B, h, m, m), "keys come from the encoder output H"),
    ("decoder_self_attn_weights", lambda B, n, m, d, h, V: (B, h, m, n), "pairs target with target positions"),
    ("logits", lambda B, n, m, d, h, V: (B, m, d), "projects d_model to the vocabulary"),
    ("decoder_output", lambda B, n, m, d, h, V: (B, n, d), "keeps the target length m"),
    ("probs", lambda B, n, m, d, h, V: (B, m), "keeps the shape"),
    ("memory", lambda B, n, m, d, h, V: (B, m, d), "table['memory'] is"),
    ("q", lambda B, n, m, d, h, V: [B, n, float(d)], "should be a tuple of ints"),
]


@pytest.mark.parametrize("key, shape_fn, message", SHAPE_MISTAKES)
def test_shape_table_mistakes(key, shape_fn, message):
    fails(check_shape_table, table_with(key, shape_fn), message)


def test_shape_table_structure_off_limits_and_stub():
    def missing(*args):
        t = right_table(*args)
        del t["probs"]
        return t

    fails(check_shape_table, missing, "your table lacks the stages ['probs']")
    fails(check_shape_table, lambda *args: {**right_table(*args), "extra": (1,)}, "unknown stages ['extra']")
    fails(check_shape_table, lambda *args: list(right_table(*args).items()), "return a dict")
    fails(check_shape_table, lambda *args: trace_shapes(*args), "'tfcourse.models.trace_shapes' is off-limits",
          error=OffLimitsError)

    def stub(*args):
        raise NotImplementedError()

    fails(check_shape_table, stub, "not implemented yet")


def test_reference_compositions_agree_with_the_package():
    """The checks' hand-composed 'right' arrangement equals the package layers (so mistakes are meaningful)."""
    from tfcourse.checks.blocks import _connection

    torch.manual_seed(0)
    for norm_first in (False, True):
        layer = blocks.EncoderLayer(8, 2, dropout=0.0, norm_first=norm_first).eval()
        x = torch.randn(2, 3, 8)
        style = "pre" if norm_first else "post"
        with torch.no_grad():
            h = _connection(x, lambda t: layer.self_attn(t), layer.norm1, style)
            torch.testing.assert_close(_connection(h, layer.ffn, layer.norm2, style), layer(x))


# ----------------------------------------------------------------------------------------------
# Every module must also run on a GPU: tensors registered, none made on the CPU inside forward
# ----------------------------------------------------------------------------------------------


def with_plain_tensor(cls):
    """The right module, plus a tensor attribute that is neither a parameter nor a buffer."""

    class Plain(cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.scale = torch.ones(1)  # .to("cuda") would leave it on the CPU

    return Plain


def with_cpu_tensor(cls, only_pre_ln=False):
    """The right module, whose forward multiplies by a tensor made on the CPU (torch.ones without device=)."""

    class MadeOnCPU(cls):
        def __init__(self, *args, **kwargs):
            super().__init__(*args, **kwargs)
            self.pre_ln = kwargs.get("norm_first", False)

        def forward(self, x, *args, **kwargs):
            out = super().forward(x, *args, **kwargs)
            if only_pre_ln and not self.pre_ln:
                return out
            return out * torch.ones(out.shape[-1])

    return MadeOnCPU


def with_device_aware_tensor(cls):
    class Fine(cls):
        def forward(self, x, *args, **kwargs):
            out = super().forward(x, *args, **kwargs)
            return out * torch.ones(out.shape[-1], device=out.device, dtype=out.dtype)

    return Fine


RIGHT_MODULES = [
    (check_layer_norm, LayerNormOK, "(8)"),
    (check_encoder_layer, make_encoder_layer(), "(16, 4, d_ff=None, dropout=0.0, norm_first=False)"),
    (check_decoder_layer, make_decoder_layer(), "(16, 4, d_ff=None, dropout=0.0, norm_first=False)"),
    (check_encoder, make_encoder(), "(2, 16, 4, d_ff=None, dropout=0.0, norm_first=False)"),
]


@pytest.mark.parametrize("check, cls, call", RIGHT_MODULES)
def test_a_plain_tensor_attribute_is_named(check, cls, call):
    fails(check, with_plain_tensor(cls), f"{call}: self.scale is a plain tensor attribute, which .to(device) "
                                         "does not move to the GPU; register it with self.register_buffer('scale'")


@pytest.mark.parametrize("check, cls, call", RIGHT_MODULES)
def test_a_tensor_made_on_the_cpu_in_forward_is_named(check, cls, call):
    fails(check, with_cpu_tensor(cls), f"{call}: your forward creates a tensor on the CPU")


@pytest.mark.parametrize("check, cls", [(check_encoder_layer, make_encoder_layer()),
                                        (check_decoder_layer, make_decoder_layer()),
                                        (check_encoder, make_encoder())])
def test_both_arrangements_are_tried_on_another_device(check, cls):
    fails(check, with_cpu_tensor(cls, only_pre_ln=True), "norm_first=True): your forward creates a tensor on the CPU")


@pytest.mark.parametrize("check, cls, _", RIGHT_MODULES)
def test_a_tensor_made_on_the_input_device_passes(check, cls, _, capfd):
    check(with_device_aware_tensor(cls))
    out, err = capfd.readouterr()
    assert out.startswith("✔ ") and err == ""


def with_stderr_print(cls):
    class Prints(cls):
        def forward(self, x, *args, **kwargs):
            print("debug", file=sys.stderr)  # nbgrader would score a test cell with stderr output 0
            return super().forward(x, *args, **kwargs)

    return Prints


@pytest.mark.parametrize("check, cls, _", RIGHT_MODULES)
def test_a_print_to_stderr_stays_quiet(check, cls, _, capfd):
    check(with_stderr_print(cls))
    out, err = capfd.readouterr()
    assert out.startswith("✔ ") and err == ""


def test_reference_parts_keep_the_torch_builtins_the_learner_may_not_use():
    """The reference LayerNorm (torch.layer_norm inside) stands in for an unfinished exercise in later
    checks, where torch.layer_norm is off-limits to the learner's code: it keeps working there."""
    from tfcourse.checks.core import off_limits

    def learners_norm(x):
        return torch.layer_norm(x, x.shape[-1:])

    x = torch.randn(2, 8)
    with off_limits(["torch.layer_norm", "torch.nn.functional.layer_norm"], "encoder layer"):
        torch.testing.assert_close(blocks.LayerNorm(8)(x), blocks.layer_norm(x, torch.ones(8), torch.zeros(8)))
        with pytest.raises(OffLimitsError, match="'torch.layer_norm' is off-limits"):
            learners_norm(x)
