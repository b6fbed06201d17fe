"""The lesson 03 checks (attention): a correct answer passes with one ✔ line; every usual mistake
fails with the message that names it; calling the answer (tfcourse or torch) is refused; a stub
says "not implemented yet"."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tfcourse.attention as reference
from tfcourse.checks.attention import (
    check_causal_mask,
    check_dot_product_variance,
    check_multi_head_attention,
    check_padding_mask,
    check_scaled_dot_product_attention,
    check_split_merge_heads,
)
from tfcourse.checks.core import CheckFailed, OffLimitsError
from check_helpers import stub

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny tensors: one thread is fastest

# ------------------------------------------------------------------------------------------------
# Correct answers (written as a learner would)
# ------------------------------------------------------------------------------------------------


def dot_product_variance(d_k, n_pairs=10_000, scaled=False):
    q, k = torch.randn(n_pairs, d_k), torch.randn(n_pairs, d_k)
    dots = (q * k).sum(dim=-1)
    if scaled:
        dots = dots / math.sqrt(d_k)
    return dots.var().item()


def sdpa(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1) / math.sqrt(q.shape[-1])
    if mask is not None:
        scores = scores.masked_fill(~mask, float("-inf"))
        nothing_allowed = ~mask.any(dim=-1, keepdim=True)
        scores = scores.masked_fill(nothing_allowed, 0.0)
    weights = torch.softmax(scores, dim=-1)
    if mask is not None:
        weights = weights.masked_fill(nothing_allowed, 0.0)
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights


def causal(t_q, t_k=None, device=None):
    if t_k is None:
        t_k = t_q
    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)


def padding(ids, pad_id):
    return (ids != pad_id)[:, None, None, :]


def split(x, n_heads):
    batch, length, d_model = x.shape
    return x.view(batch, length, n_heads, d_model // n_heads).transpose(1, 2)


def merge(x):
    batch, n_heads, length, d_head = x.shape
    return x.transpose(1, 2).reshape(batch, length, n_heads * d_head)


class MHA(nn.Module):
    # Variation points for the mistakes below (the correct class leaves them alone).
    split_fn, merge_fn, attend = staticmethod(split), staticmethod(merge), staticmethod(sdpa)
    use_w_o, kv_from_x = True, False

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.w_q, self.w_k = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)
        self.w_v, self.w_o = nn.Linear(d_model, d_model), nn.Linear(d_model, d_model)

    def forward(self, x, memory=None, mask=None):
        source = x if memory is None or self.kv_from_x else memory
        q = self.split_fn(self.w_q(x), self.n_heads)
        k, v = self.split_fn(self.w_k(source), self.n_heads), self.split_fn(self.w_v(source), self.n_heads)
        out, _ = self.attend(q, k, v, mask)
        merged = self.merge_fn(out)
        return self.w_o(merged) if self.use_w_o else merged


def _passes(check, *learner, capfd):
    check(*learner)
    check(*learner, hidden=True)
    out, err = capfd.readouterr()
    assert out.count("✔") == 2 and err == ""


# ------------------------------------------------------------------------------------------------
# Why √d_k
# ------------------------------------------------------------------------------------------------


def test_variance_correct_passes(capfd):
    _passes(check_dot_product_variance, dot_product_variance, capfd=capfd)


@pytest.mark.parametrize("wrong, message", [
    (lambda d_k, n_pairs=10_000, scaled=False: dot_product_variance(d_k, n_pairs) / (d_k**2 if scaled else 1),
     "divided by d_k instead of √d_k"),
    (lambda d_k, n_pairs=10_000, scaled=False: dot_product_variance(d_k, n_pairs), "with scaled=True divide"),
    (lambda d_k, n_pairs=10_000, scaled=False: dot_product_variance(d_k, n_pairs, True), "use the raw dot products"),
    (lambda d_k, n_pairs=10_000, scaled=False: math.sqrt(dot_product_variance(d_k, n_pairs, scaled)),
     "standard deviation"),
    (lambda d_k, n_pairs=10_000, scaled=False: 1.0 if scaled else float(d_k), "the theoretical value"),
    (lambda d_k, n_pairs=10_000, scaled=False: torch.randn(3), "expected one number"),
])
def test_variance_mistakes(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_dot_product_variance(wrong)


def test_variance_stub():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_dot_product_variance(stub)


# ------------------------------------------------------------------------------------------------
# Scaled dot-product attention
# ------------------------------------------------------------------------------------------------


def _sdpa_variant(divide_by="sqrt", dim=-1, after=False, invert=False, fill=float("-inf"), zero_rows=True,
                  nan_safe=True, dropout="ok"):
    def attention(q, k, v, mask=None, dropout_p=0.0):
        d_k = q.shape[-1]
        scores = q @ k.transpose(-2, -1) / {"sqrt": math.sqrt(d_k), "none": 1.0, "d_k": d_k}[divide_by]
        allowed = None if mask is None else (~mask if invert else mask)
        if allowed is not None and not after and nan_safe:
            scores = scores.masked_fill(~allowed, fill)
            if zero_rows:
                scores = scores.masked_fill(~allowed.any(-1, keepdim=True), 0.0)
        elif allowed is not None and not after:  # an additive mask: -inf + score passes NaN gradients back
            scores = scores + torch.zeros_like(scores).masked_fill(~allowed, fill)
        weights = torch.softmax(scores, dim=dim)
        if allowed is not None:
            if after:
                weights = weights.masked_fill(~allowed, 0.0)
            if zero_rows:
                weights = torch.nan_to_num(weights).masked_fill(~allowed.any(-1, keepdim=True), 0.0)
        if dropout_p > 0 and dropout == "ok":
            weights = F.dropout(weights, p=dropout_p)
        elif dropout_p > 0 and dropout == "no_rescale":
            weights = weights * (torch.rand_like(weights) > dropout_p)
        elif dropout_p > 0 and dropout == "on_output":
            return F.dropout(weights @ v, p=dropout_p), weights
        return weights @ v, weights

    return attention


def test_sdpa_correct_passes(capfd):
    _passes(check_scaled_dot_product_attention, sdpa, capfd=capfd)


@pytest.mark.parametrize("wrong, message", [
    (_sdpa_variant(divide_by="none"), r"without the 1/√d_k scaling"),
    (_sdpa_variant(divide_by="d_k"), "divided by d_k instead of √d_k"),
    (_sdpa_variant(dim=-2), r"softmax over the queries \(dim=-2\)"),
    (_sdpa_variant(after=True), r"mask applied after softmax"),
    (_sdpa_variant(invert=True), "mask's meaning inverted"),
    (_sdpa_variant(fill=0.0), "masked scores set to 0 instead of -inf"),
    (lambda q, k, v, mask=None, dropout_p=0.0: sdpa(q, k, v, None, dropout_p), "ignores the mask"),
    (_sdpa_variant(zero_rows=False), "all masked got NaN weights"),
    (_sdpa_variant(fill=-1e9, zero_rows=False), "all masked got non-zero weights"),
    (_sdpa_variant(nan_safe=False), "gradients are NaN"),
    (_sdpa_variant(dropout="none"), "no attention weight was dropped"),
    (_sdpa_variant(dropout="no_rescale"), r"not scaled by 1/\(1 - p\)"),
    (_sdpa_variant(dropout="on_output"), "no attention weight was dropped"),
    (lambda *args, **kwargs: sdpa(*args, **kwargs)[::-1], r"you returned \(weights, output\)"),
    (lambda *args, **kwargs: sdpa(*args, **kwargs)[0], "return a pair"),
])
def test_sdpa_mistakes(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_scaled_dot_product_attention(wrong)


def test_sdpa_hidden_catches_mistakes_only_hidden_cases_show():
    def ignores_leading_batch_dims(q, k, v, mask=None, dropout_p=0.0):
        if q.dim() != 4:
            raise ValueError("expected 4-d q")
        return sdpa(q, k, v, mask, dropout_p)

    check_scaled_dot_product_attention(ignores_leading_batch_dims)
    with pytest.raises(CheckFailed, match="expected 4-d q"):
        check_scaled_dot_product_attention(ignores_leading_batch_dims, hidden=True)


def test_sdpa_in_place_modification_is_caught():
    def scales_q_in_place(q, k, v, mask=None, dropout_p=0.0):
        q /= math.sqrt(q.shape[-1])
        return sdpa(q * math.sqrt(q.shape[-1]), k, v, mask, dropout_p)

    with pytest.raises(CheckFailed, match="modified input #1 in place"):
        check_scaled_dot_product_attention(scales_q_in_place)


def test_sdpa_off_limits():
    with pytest.raises(OffLimitsError, match="off-limits"):
        check_scaled_dot_product_attention(lambda q, k, v, mask=None, dropout_p=0.0:
                                           reference.scaled_dot_product_attention(q, k, v, mask, dropout_p))
    with pytest.raises(OffLimitsError, match="off-limits"):
        check_scaled_dot_product_attention(lambda q, k, v, mask=None, dropout_p=0.0:
                                           (F.scaled_dot_product_attention(q, k, v, attn_mask=mask), None))


def test_sdpa_stub():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_scaled_dot_product_attention(stub)


# ------------------------------------------------------------------------------------------------
# Masks
# ------------------------------------------------------------------------------------------------


def test_causal_mask_correct_passes(capfd):
    _passes(check_causal_mask, causal, capfd=capfd)


@pytest.mark.parametrize("wrong, message", [
    (lambda t_q, t_k=None, device=None: ~causal(t_q, t_k), "True on the future"),
    (lambda t_q, t_k=None, device=None: causal(t_q, t_k).float(), "expected a bool tensor"),
    (lambda t_q, t_k=None, device=None: torch.ones(t_q, t_k or t_q, dtype=torch.bool).tril(
        (t_k or t_q) - t_q - 1), "blocks the diagonal"),
    (lambda t_q, t_k=None, device=None: torch.ones(t_q, t_k or t_q, dtype=torch.bool).triu(
        (t_k or t_q) - t_q), "transposed mask"),
    (lambda t_q, t_k=None, device=None: torch.ones(t_q, t_k or t_q, dtype=torch.bool).tril(), "shift the diagonal"),
    (lambda t_q, t_k=None, device=None: torch.ones(t_q, t_k or t_q, dtype=torch.bool, device=device).tril(
        (t_k or t_q) - t_q + 1), "sees the next \\(future\\) token"),
    (lambda t_q, t_k=None, device=None: torch.zeros(t_q, t_k or t_q).masked_fill(
        ~causal(t_q, t_k), float("-inf")), "additive"),
])
def test_causal_mask_mistakes(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_causal_mask(wrong)


def test_causal_mask_ignoring_the_device_is_named():
    with pytest.raises(CheckFailed, match=r"device='meta'\): your mask is on cpu; create it on the given device"):
        check_causal_mask(lambda t_q, t_k=None, device=None: causal(t_q, t_k))


def test_causal_mask_is_tried_on_the_meta_device_only_when_a_constructor_misses_the_device():
    """Meta's first use costs a second (it imports torch._dynamo): a mask whose constructors all get the
    device asked for is believed from its CPU run; one made elsewhere and moved, or hard-coded, is tried."""
    def recording(make):
        seen = []

        def causal_mask(t_q, t_k=None, device=None):
            seen.append(str(device))
            return make(t_q, t_k, device)
        return causal_mask, seen

    passes_on, seen = recording(lambda t_q, t_k, device: causal(t_q, t_k, device))
    check_causal_mask(passes_on)
    assert "meta" not in seen and "cpu:0" in seen
    moved, seen = recording(lambda t_q, t_k, device: causal(t_q, t_k).to(device))
    check_causal_mask(moved)  # right, and only the meta device can tell
    assert "meta" in seen
    hard_coded, _ = recording(lambda t_q, t_k, device: causal(t_q, t_k, "cpu"))
    with pytest.raises(CheckFailed, match=r"device='meta'\): your mask is on cpu"):
        check_causal_mask(hard_coded)
    made_there_then_moved_back, _ = recording(lambda t_q, t_k, device: causal(t_q, t_k, device).cpu())
    with pytest.raises(CheckFailed, match=r"device='meta'\): your mask leaves the device it is asked for"):
        check_causal_mask(made_there_then_moved_back)


def test_causal_mask_off_limits():
    with pytest.raises(OffLimitsError, match="off-limits"):
        check_causal_mask(lambda t_q, t_k=None, device=None: reference.causal_mask(t_q, t_k, device))
    with pytest.raises(OffLimitsError, match="off-limits"):
        check_causal_mask(lambda t_q, t_k=None, device=None:
                          nn.Transformer.generate_square_subsequent_mask(t_q) == 0)


def test_causal_mask_stub():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_causal_mask(stub)


def test_padding_mask_correct_passes(capfd):
    _passes(check_padding_mask, padding, capfd=capfd)


@pytest.mark.parametrize("wrong, message", [
    (lambda ids, pad_id: (ids == pad_id)[:, None, None, :], "True at the padding"),
    (lambda ids, pad_id: ids != pad_id, r"add the head and query axes"),
    (lambda ids, pad_id: (ids != pad_id)[:, None, :, None], r"masks queries"),
    (lambda ids, pad_id: (ids != pad_id)[:, None, None, :].long(), "expected a bool tensor"),
    (lambda ids, pad_id: (ids.masked_fill_(ids == pad_id, -1) != -1)[:, None, None, :], "in place"),
])
def test_padding_mask_mistakes(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_padding_mask(wrong)


def test_padding_mask_off_limits_and_stub():
    with pytest.raises(OffLimitsError, match="off-limits"):
        check_padding_mask(lambda ids, pad_id: reference.padding_mask(ids, pad_id))
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_padding_mask(stub)


# ------------------------------------------------------------------------------------------------
# Splitting and merging heads
# ------------------------------------------------------------------------------------------------


def _split_no_transpose(x, n_heads):
    batch, length, d_model = x.shape
    return x.reshape(batch, n_heads, length, d_model // n_heads)


def _split_interleaved(x, n_heads):
    batch, length, d_model = x.shape
    return x.view(batch, length, d_model // n_heads, n_heads).permute(0, 3, 1, 2)


def _merge_no_transpose(x):
    batch, n_heads, length, d_head = x.shape
    return x.reshape(batch, length, n_heads * d_head)


def test_heads_correct_passes(capfd):
    _passes(check_split_merge_heads, split, merge, capfd=capfd)


@pytest.mark.parametrize("wrong_split, wrong_merge, message", [
    (_split_no_transpose, merge, "a reshape straight to"),
    (lambda x, n: x.view(x.shape[0], x.shape[1], n, -1), merge, r"= \(B, T, n_heads, d_head\); transpose"),
    (lambda x, n: x.reshape(x.shape[0], x.shape[1], n, -1), merge, "transpose"),
    (_split_interleaved, merge, "interleaved"),
    (split, _merge_no_transpose, "merge by reshape without the transpose"),
    (split, lambda x: x.permute(0, 2, 3, 1).reshape(x.shape[0], x.shape[2], -1), "interleaved dimension by dimension"),
    (split, lambda x: merge(x.flip(1)), "reverse order"),
    (split, lambda x: x.mean(dim=1), "summed or averaged"),
    (split, lambda x: x.transpose(1, 2).view(x.shape[0], x.shape[2], -1), "view size is not compatible"),
])
def test_heads_mistakes(wrong_split, wrong_merge, message):
    with pytest.raises(CheckFailed, match=message):
        check_split_merge_heads(wrong_split, wrong_merge)


def test_heads_off_limits_and_stub():
    with pytest.raises(OffLimitsError, match="off-limits"):
        check_split_merge_heads(lambda x, n: reference.split_heads(x, n), merge)
    with pytest.raises(OffLimitsError, match="off-limits"):
        check_split_merge_heads(split, lambda x: reference.merge_heads(x))
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_split_merge_heads(split, stub)


# ------------------------------------------------------------------------------------------------
# Multi-head attention
# ------------------------------------------------------------------------------------------------


def test_mha_correct_passes(capfd):
    _passes(check_multi_head_attention, MHA, capfd=capfd)


def _mha(**overrides):
    return type("MHA", (MHA,), {key: staticmethod(value) if callable(value) else value
                                for key, value in overrides.items()})


def _scale_by_d_model(q, k, v, mask=None):
    n_heads, d_head = q.shape[1], q.shape[-1]  # q is (B, n_heads, T_q, d_head): d_model = n_heads * d_head
    return sdpa(q * math.sqrt(d_head) / math.sqrt(n_heads * d_head), k, v, mask)


@pytest.mark.parametrize("wrong, message", [
    (_mha(use_w_o=False), r"without the output projection W\^O"),
    (_mha(merge_fn=_merge_no_transpose), "heads merged without the transpose"),
    (_mha(split_fn=_split_no_transpose), "heads split without the transpose"),
    (_mha(attend=_sdpa_variant(divide_by="none")), r"without the 1/√d_k scaling"),
    (_mha(attend=_scale_by_d_model), "√d_model instead of √d_head"),
    (_mha(kv_from_x=True), "keys and values come from memory"),
    (_mha(attend=_sdpa_variant(invert=True)), "mask's meaning inverted"),
    (_mha(attend=_sdpa_variant(after=True)), r"mask applied after softmax"),
    (_mha(attend=lambda q, k, v, mask=None: sdpa(q, k, v)), "ignores the mask"),
])
def test_mha_mistakes(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_multi_head_attention(wrong)


def test_mha_with_a_plain_tensor_attribute_is_named():
    class PlainScale(MHA):
        def __init__(self, d_model, n_heads):
            super().__init__(d_model, n_heads)
            self.head_scale = torch.ones(n_heads)  # a plain attribute: .to(device) leaves it on the CPU

    with pytest.raises(CheckFailed, match=r"self.head_scale is a plain tensor attribute.*register_buffer"):
        check_multi_head_attention(PlainScale)


def test_mha_making_a_default_mask_on_the_cpu_is_named():
    class DefaultMask(MHA):
        def forward(self, x, memory=None, mask=None):
            if mask is None:  # "allow everything", built without device=x.device
                t_k = x.shape[1] if memory is None else memory.shape[1]
                mask = torch.ones(x.shape[1], t_k, dtype=torch.bool)
            return super().forward(x, memory, mask)

    with pytest.raises(CheckFailed, match=r"\(self-attention\): your forward creates a tensor on the CPU"):
        check_multi_head_attention(DefaultMask)


def test_mha_returning_float32_for_float64_is_named():
    class AlwaysFloat32(MHA):
        def forward(self, x, memory=None, mask=None):
            return super().forward(x, memory, mask).float()

    with pytest.raises(CheckFailed, match="with float64 input your output is torch.float32"):
        check_multi_head_attention(AlwaysFloat32)


def test_mha_queries_from_memory_and_bad_parameters():
    class QueriesFromMemory(MHA):
        def forward(self, x, memory=None, mask=None):
            if memory is None:
                return super().forward(x, mask=mask)
            return super().forward(memory, x, mask)  # queries from memory, keys and values from x

    with pytest.raises(CheckFailed, match=r"one row per memory position"):
        check_multi_head_attention(QueriesFromMemory)

    class OneProjection(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            self.qkv = nn.Linear(d_model, 3 * d_model)

    with pytest.raises(CheckFailed, match=r"four nn.Linear.*or one w_qkv"):
        check_multi_head_attention(OneProjection)

    class ReturnsWeights(MHA):
        def forward(self, x, memory=None, mask=None):
            return super().forward(x, memory, mask), None

    with pytest.raises(CheckFailed, match="return only the output tensor"):
        check_multi_head_attention(ReturnsWeights)


def test_mha_that_is_not_a_module_is_named():
    class NotAModule:
        def __init__(self, d_model, n_heads):
            self.n_heads = n_heads

    with pytest.raises(CheckFailed, match=r"^NotAModule must be an nn.Module subclass"):
        check_multi_head_attention(NotAModule)


class FusedMHA(nn.Module):
    """nanoGPT's layout under the lesson's names: one w_qkv whose output splits as q | k | v, and w_o."""

    def __init__(self, d_model, n_heads):
        super().__init__()
        self.n_heads = n_heads
        self.w_qkv = nn.Linear(d_model, 3 * d_model)
        self.w_o = nn.Linear(d_model, d_model)

    def forward(self, x, memory=None, mask=None):
        d_model = x.shape[-1]
        w_q, w_kv = self.w_qkv.weight.split([d_model, 2 * d_model])
        b_q, b_kv = self.w_qkv.bias.split([d_model, 2 * d_model])
        q = nn.functional.linear(x, w_q, b_q)
        k, v = nn.functional.linear(x if memory is None else memory, w_kv, b_kv).split(d_model, dim=-1)
        out, _ = sdpa(split(q, self.n_heads), split(k, self.n_heads), split(v, self.n_heads), mask)
        return self.w_o(merge(out))


def test_mha_in_the_fused_layout_passes(capfd):
    _passes(check_multi_head_attention, FusedMHA, capfd=capfd)


def test_mha_in_the_fused_layout_with_a_wrong_width_is_one_line():
    class TooNarrow(FusedMHA):
        def __init__(self, d_model, n_heads):
            super().__init__(d_model, n_heads)
            self.w_qkv = nn.Linear(d_model, 2 * d_model)

    with pytest.raises(CheckFailed, match=r"^TooNarrow\(16, 4\): w_qkv.weight has shape \(32, 16\), expected "
                                          r"\(48, 16\) \(four nn.Linear"):
        check_multi_head_attention(TooNarrow)


def test_mha_with_a_linear_of_the_wrong_size_is_one_line():
    class WideValues(MHA):
        def __init__(self, d_model, n_heads):
            super().__init__(d_model, n_heads)
            self.w_v = nn.Linear(d_model, 2 * d_model)

    with pytest.raises(CheckFailed, match=r"^WideValues\(16, 4\): w_v.weight has shape \(32, 16\), expected \(16, 16\)"):
        check_multi_head_attention(WideValues)


def test_mha_off_limits_and_stub():
    class Subclass(reference.MultiHeadAttention):
        pass

    class WrapsTorch(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            self.inner = nn.MultiheadAttention(d_model, n_heads, batch_first=True)

    class UsesFused(MHA):
        attend = staticmethod(lambda q, k, v, mask=None: (F.scaled_dot_product_attention(q, k, v, attn_mask=mask),
                                                          None))

    for cheat in (Subclass, WrapsTorch, UsesFused):
        with pytest.raises(OffLimitsError, match="off-limits"):
            check_multi_head_attention(cheat)

    class Stub(nn.Module):
        def __init__(self, d_model, n_heads):
            super().__init__()
            raise NotImplementedError()

    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_multi_head_attention(Stub)


def test_off_limits_are_restored_after_a_check():
    with pytest.raises(OffLimitsError):
        check_multi_head_attention(_mha(attend=lambda q, k, v, mask=None: reference.MultiHeadAttention(4, 2)))
    q = torch.randn(1, 2, 3, 4)
    out, _ = reference.scaled_dot_product_attention(q, q, q)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, q, q))
    assert reference.causal_mask(2).dtype == torch.bool
    assert nn.Transformer.generate_square_subsequent_mask(2).shape == (2, 2)
