"""Checks for lesson 03, attention: why √d_k, scaled dot-product attention, the causal and padding
masks, splitting and merging heads, and the multi-head attention module.

Every reference answer, and the answer each usual mistake would give, is computed before the
learner's code runs; the mistakes are computed here, independently of the package. The mask and the
module must also work where a GPU run puts them: `causal_mask` on the device it is given, and
`MultiHeadAttention` after `.to()` another dtype or device (`expect_portable`).
"""

from __future__ import annotations

import contextlib
import functools
import math
from collections.abc import Callable
from typing import Any

import numpy as np
import torch
from torch import Tensor, nn

from ..attention import (MultiHeadAttention, causal_mask, merge_heads, padding_mask, scaled_dot_product_attention,
                         split_heads)
from ..layouts import in_layout_of
from ..validation import shape_str
from .debugging import PlantedBug, debug_exercise
from .core import (Case, CheckFailed, ConstructorScreen, Exercise, build_module, call_learner, compare, composite,
                   expect_portable, isolated, learner_namespaces, load_state, off_limits, passed, run, run_case,
                   seeded, success_line)

# While a check runs, the answer for that exercise and the matching torch built-ins are off-limits.
# (The variance is measured: nothing to refuse. Its ✔ line names the d_k measured.)
DOT_PRODUCT_VARIANCE = Exercise("dot product variance", (), "dot_product_variance measures Var(q·k) ≈ d_k, and "
                                "≈ 1 after ÷√d_k, for d_k in {d_ks}")
SDPA_OFF_LIMITS = ["tfcourse.attention.scaled_dot_product_attention",
                   "torch.nn.functional.scaled_dot_product_attention",
                   "torch.nn.functional.multi_head_attention_forward", "torch.nn.MultiheadAttention"]
SDPA = Exercise("scaled dot-product attention", SDPA_OFF_LIMITS, "scaled_dot_product_attention matches the reference "
                "on {n} cases (masks, fully masked rows, dropout)", no_grad=False)  # it checks gradients too
CAUSAL_MASK_OFF_LIMITS = ["tfcourse.attention.causal_mask", "torch.nn.Transformer.generate_square_subsequent_mask"]
CAUSAL_MASK = Exercise("causal mask", CAUSAL_MASK_OFF_LIMITS, "causal_mask matches the reference for {n} sizes, "
                       "square and with a cache offset, on the device asked for")
PADDING_MASK_OFF_LIMITS = ["tfcourse.attention.padding_mask"]
PADDING_MASK = Exercise("padding mask", PADDING_MASK_OFF_LIMITS, "padding_mask matches the reference on {n} batches")
HEADS_OFF_LIMITS = ["tfcourse.attention.split_heads", "tfcourse.attention.merge_heads",
                    "tfcourse.attention.MultiHeadAttention.split_heads",
                    "tfcourse.attention.MultiHeadAttention.merge_heads"]
SPLIT_MERGE_HEADS = Exercise("split and merge heads", HEADS_OFF_LIMITS, "split_heads and merge_heads match the "
                             "reference on {n} shapes and invert each other")
MHA_OFF_LIMITS = ["tfcourse.attention.MultiHeadAttention", "torch.nn.MultiheadAttention",
                  "torch.nn.functional.multi_head_attention_forward",
                  "torch.nn.functional.scaled_dot_product_attention"]
MULTI_HEAD_ATTENTION = Exercise("multi-head attention", MHA_OFF_LIMITS, "MultiHeadAttention matches the reference on "
                                "{n} cases (self, masked, cross), on any device")


# ----------------------------------------------------------------------------------------------
# Why √d_k: the variance of a dot product
# ----------------------------------------------------------------------------------------------


def _as_float(value: Any, what: str) -> float:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise CheckFailed(f"{what}: expected one number, got a tensor of shape {shape_str(value)}")
        value = value.item()
    if isinstance(value, (bool, str)) or not isinstance(value, (int, float, np.number)):
        raise CheckFailed(f"{what}: expected a Python float, got {type(value).__name__}")
    return float(value)


def _variance_case(seed: int, d_k: int, scaled: bool) -> Case:
    n_pairs = 20_000 if d_k <= 256 else 4_000
    what = f"dot_product_variance({d_k}, n_pairs={n_pairs}, scaled={scaled})"
    target = 1.0 if scaled else float(d_k)

    def call_seeded(learner_fn: Callable) -> Any:
        """The learner draws q and k from the global generators (torch's or NumPy's): seeded, a rerun
        measures the same."""
        torch.manual_seed(seed)
        np.random.seed(seed)
        return call_learner(what, learner_fn, d_k, n_pairs=n_pairs, scaled=scaled)

    def judge(answer: Any) -> None:
        """Near d_k (near 1 when scaled), within 15 %; a value near what a usual mistake measures is named."""
        value = _as_float(answer, what)
        if not math.isfinite(value):
            raise CheckFailed(f"{what}: got {value}, expected a finite variance near {target:g}")
        if value == target and d_k > 1:
            raise CheckFailed(f"{what}: returned exactly {target:g}, the theoretical value; "
                              "measure it: draw random q and k and take the variance of their dot products")

        def near(x: float) -> bool:
            return abs(value - x) <= 0.15 * x

        if near(target):
            return
        if scaled and d_k > 1 and near(1.0 / d_k):
            raise CheckFailed(f"{what}: got {value:.3g}, about 1/d_k: you divided by d_k instead of √d_k")
        if scaled and d_k > 1 and near(float(d_k)):
            raise CheckFailed(f"{what}: got {value:.3g}, about d_k: with scaled=True divide each dot "
                              "product by √d_k")
        if not scaled and d_k > 1 and near(1.0):
            raise CheckFailed(f"{what}: got {value:.3g}, about 1 instead of d_k = {d_k}: with scaled=False "
                              "use the raw dot products q·k (sum over all d_k products)")
        if d_k > 1 and near(math.sqrt(target)):
            raise CheckFailed(f"{what}: got {value:.3g}, about √{target:g}: that is the standard deviation; "
                              "return the variance (.var())")
        raise CheckFailed(f"{what}: got {value:.3g}, expected about {target:g} (within 15 %)")

    return Case(what, call=call_seeded, inspect=judge)


@isolated
def check_dot_product_variance(learner_fn: Callable, hidden: bool = False) -> None:
    """The measured variance of q·k is about d_k, and about 1 after dividing by √d_k."""
    d_ks = [4, 64, 256] + ([1, 16, 1024] if hidden else [])
    cases = [_variance_case(seed, d_k, scaled) for seed, d_k in enumerate(d_ks) for scaled in (False, True)]
    run(DOT_PRODUCT_VARIANCE, learner_fn, cases, hidden, fields={"d_ks": d_ks})


# ----------------------------------------------------------------------------------------------
# Scaled dot-product attention
# ----------------------------------------------------------------------------------------------


def _attention_variant(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None, *, divide_by: str = "sqrt_d_k",
                       dim: int = -1, mask_after_softmax: bool = False, invert_mask: bool = False,
                       fill: float = float("-inf")) -> tuple[Tensor, Tensor]:
    """Attention as written with one of the usual mistakes (independent of the package)."""
    d_k = q.shape[-1]
    divisor = {"sqrt_d_k": math.sqrt(d_k), "nothing": 1.0, "d_k": float(d_k)}[divide_by]
    scores = q @ k.transpose(-2, -1) / divisor
    allowed = None if mask is None else (~mask if invert_mask else mask)
    if allowed is not None and not mask_after_softmax:
        scores = scores.masked_fill(~allowed, fill)
        scores = scores.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)
    weights = torch.softmax(scores, dim=dim)
    if allowed is not None:
        if mask_after_softmax:
            weights = weights.masked_fill(~allowed, 0.0)
        weights = weights.masked_fill(~allowed.any(dim=-1, keepdim=True), 0.0)
    return weights @ v, weights


def _sdpa_mistakes(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None) -> dict[str, tuple[Tensor, Tensor]]:
    """Description -> (output, weights) that the mistake produces."""
    mistakes = {
        "attention *without* the 1/√d_k scaling": _attention_variant(q, k, v, mask, divide_by="nothing"),
        "scores divided by d_k instead of √d_k": _attention_variant(q, k, v, mask, divide_by="d_k"),
        "softmax over the queries (dim=-2) instead of over the keys (dim=-1): each *row* of weights "
        "must sum to 1": _attention_variant(q, k, v, mask, dim=-2),
    }
    if mask is not None:
        mistakes.update({
            "the mask applied *after* softmax: masked weights were zeroed but the rows no longer sum to 1; "
            "set masked scores to -inf *before* softmax": _attention_variant(q, k, v, mask, mask_after_softmax=True),
            "attention with the mask's meaning inverted: True must mean *may attend*, so fill where the "
            "mask is False (~mask)": _attention_variant(q, k, v, mask, invert_mask=True),
            "masked scores set to 0 instead of -inf (exp(0) = 1, so masked keys still get weight)":
                _attention_variant(q, k, v, mask, fill=0.0),
            "attention that ignores the mask: set the scores where the mask is False to -inf":
                _attention_variant(q, k, v, None),
        })
    return mistakes


def _sdpa_case(learner_fn: Callable, label: str, q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
               dropout_p: float = 0.0, grad: bool = False) -> Case:
    """The call, its reference answer and every usual mistake's, computed before the learner's code runs."""
    args = (q, k, v) if mask is None else (q, k, v, mask)
    kwargs = {"dropout_p": dropout_p} if dropout_p else {}
    what = ("scaled_dot_product_attention(q, k, v" + ("" if mask is None else ", mask")
            + (f", dropout_p={dropout_p}" if kwargs else "") + ")")
    expected_output, expected_weights = scaled_dot_product_attention(q, k, v, mask)
    mistakes = _sdpa_mistakes(q, k, v, mask)

    def attention_pair(learner_fn: Callable, *args: Tensor) -> tuple:
        """The learner's (output, weights). Dropout uses torch's global generator: seeded, reruns drop alike."""
        if dropout_p:
            torch.manual_seed(0)
        result = call_learner(what, learner_fn, *args, **kwargs)
        if not isinstance(result, (tuple, list)) or len(result) != 2:
            raise CheckFailed(f"{label}: return a pair (output, weights), got {type(result).__name__}")
        return result[0], result[1]

    def expect_attention(pair: tuple) -> None:
        """(output, weights) in that order; with dropout, weights dropped and rescaled; else a fully
        masked query's zero weights, then the weights and the output equal to the reference."""
        output, weights = pair
        if (isinstance(output, Tensor) and isinstance(weights, Tensor)
                and expected_output.shape != expected_weights.shape
                and output.shape == expected_weights.shape and weights.shape == expected_output.shape):
            raise CheckFailed(f"{label}: you returned (weights, output); return (output, weights)")
        if dropout_p:
            _check_dropout(output, weights, expected_weights, v, dropout_p, label)
            return
        if mask is not None and isinstance(weights, Tensor) and weights.shape == expected_weights.shape:
            empty = (~mask.any(dim=-1, keepdim=True)).expand_as(weights)  # queries with no allowed key
            if empty.any() and not torch.equal(weights[empty], torch.zeros_like(weights[empty])):
                nan = bool(torch.isnan(weights[empty]).any())
                raise CheckFailed(
                    f"{label}: a query whose keys are all masked got "
                    + ("NaN weights (softmax of a row of -inf is 0/0)" if nan else "non-zero weights")
                    + "; give such rows zero weights and a zero output (see the hint)")
        swapped = {"the output: you returned (weights, output); return (output, weights)": expected_output}
        compare(weights, expected_weights, f"weights ({label})", {**{d: w for d, (_, w) in mistakes.items()},
                                                                  **swapped})
        compare(output, expected_output, f"output ({label})", {d: o for d, (o, _) in mistakes.items()})

    def expect_finite_gradients(_: Any) -> None:
        """A second call, on leaves that need gradients: backward through a fully masked row must not give NaN."""
        leaves = [t.clone().requires_grad_() for t in (q, k, v)]
        output, _ = attention_pair(learner_fn, *leaves, *args[3:])
        call_learner("output.sum().backward()", lambda: output.sum().backward())
        if not all(leaf.grad is not None and torch.isfinite(leaf.grad).all() for leaf in leaves):
            raise CheckFailed(
                f"{label}: the forward pass is right but the gradients are NaN: softmax over a row of "
                "-inf has a NaN gradient even if you zero its output afterwards; fill masked scores "
                "with masked_fill and set fully masked rows to a finite value (e.g. 0) *before* softmax")

    return Case(what, args, kwargs, unchanged_what=f"scaled_dot_product_attention ({label})",
                call=lambda fn: attention_pair(fn, *args), inspect=expect_attention,
                after=expect_finite_gradients if grad else None)


def _check_dropout(output: Tensor, weights: Tensor, expected_weights: Tensor, v: Tensor, p: float,
                   what: str) -> None:
    if not isinstance(weights, Tensor) or weights.shape != expected_weights.shape:
        compare(weights, expected_weights, f"weights ({what})")  # names the shape problem
    zero = weights.abs() <= 1e-7
    kept = torch.isclose(weights, expected_weights / (1 - p), atol=1e-6, rtol=1e-4)
    unscaled = torch.isclose(weights, expected_weights, atol=1e-6, rtol=1e-4)
    if not zero.any():
        raise CheckFailed(f"{what}: no attention weight was dropped; apply dropout to the weights "
                          "(F.dropout(weights, p=dropout_p)) before multiplying by v")
    if not (zero | kept).all():
        if (zero | unscaled).all():
            raise CheckFailed(f"{what}: weights were dropped but the kept ones were not scaled by 1/(1 - p); "
                              "F.dropout does both")
        raise CheckFailed(f"{what}: each weight must be either dropped (0) or the softmax weight × 1/(1 - p)")
    compare(output, weights @ v, f"output ({what}): must be the dropped-out weights @ v")


@isolated
def check_scaled_dot_product_attention(learner_fn: Callable, hidden: bool = False) -> None:
    """softmax(q kᵀ/√d_k) v with boolean masks (True = may attend), zero rows for fully masked queries."""
    def case(label: str, seed: int, *shapes: tuple[int, ...], dtype: torch.dtype = torch.float32, **spec: Any) -> Case:
        """Seeded q, k, v of these shapes; `spec`: mask, dropout_p, grad (check gradients too)."""
        generator = seeded(seed)
        q, k, v = (torch.randn(shape, generator=generator, dtype=dtype) for shape in shapes)
        return _sdpa_case(learner_fn, label, q, k, v, **spec)

    def tril(t_q: int, t_k: int) -> Tensor:
        return torch.ones(t_q, t_k, dtype=torch.bool).tril()

    keep = torch.tensor([[True] * 5 + [False] * 2, [True] + [False] * 6])  # row 2 hides every key but one
    all_hidden = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    cases = [
        case("self-attention, no mask, q/k/v (2, 3, 5, 8)", 0, (2, 3, 5, 8), (2, 3, 5, 8), (2, 3, 5, 8)),
        case("causal mask (6, 6)", 1, (1, 2, 6, 4), (1, 2, 6, 4), (1, 2, 6, 4), mask=tril(6, 6)),
        case("cross-attention T_q=3, T_k=7, padding mask (2, 1, 1, 7)", 2, (2, 2, 3, 8), (2, 2, 7, 8), (2, 2, 7, 5),
             mask=keep[:, None, None, :]),
        case("a query whose keys are all masked", 3, (1, 1, 3, 4), (1, 1, 3, 4), (1, 1, 3, 4), mask=all_hidden,
             grad=True),
        case("dropout_p=0.5", 4, (2, 2, 5, 8), (2, 2, 5, 8), (2, 2, 5, 8), dropout_p=0.5),
    ]
    if hidden:
        mask = torch.rand(7, 7, generator=torch.Generator().manual_seed(6)) < 0.5
        mask[:, 0] = True  # every query may attend to at least one key
        keep = torch.tensor([[True] * 6, [True] * 4 + [False] * 2, [False] * 6])  # the last one is all padding
        cases += [
            case("T = 1", 5, (1, 1, 1, 16), (1, 1, 1, 16), (1, 1, 1, 16)),
            case("3-d inputs (4, 7, 16) with a random mask", 6, (4, 7, 16), (4, 7, 16), (4, 7, 3), mask=mask),
            case("float64, causal & padding (3, 1, 6, 6) with a fully padded sequence", 7, (3, 4, 6, 32),
                 (3, 4, 6, 32), (3, 4, 6, 32), dtype=torch.float64, mask=tril(6, 6) & keep[:, None, None, :]),
            case("d_k = 256", 8, (2, 2, 9, 256), (2, 2, 9, 256), (2, 2, 9, 256), mask=tril(9, 9)),
        ]
    run(SDPA, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Masks
# ----------------------------------------------------------------------------------------------


def _expect_bool_mask(mask: Any, what: str) -> None:
    if not isinstance(mask, Tensor):
        raise CheckFailed(f"{what}: expected a torch.Tensor, got {type(mask).__name__}")
    if mask.dtype != torch.bool:
        extra = (" (a float mask of 0 and -inf is torch's *additive* convention; this course's masks are "
                 "boolean)") if mask.is_floating_point() else ""
        raise CheckFailed(f"{what}: expected a bool tensor (True = may attend), got dtype {mask.dtype}{extra}")


@isolated
def check_causal_mask(learner_fn: Callable, hidden: bool = False) -> None:
    """(T_q, T_k) bool, True on and below the (shifted) diagonal: no query sees its future."""
    sizes: list[tuple[int, int | None]] = [(4, None), (6, None), (2, 5), (1, 4), (1, None)]
    if hidden:
        sizes += [(3, 3), (9, None), (3, 8)]
    cases = []
    for t_q, t_k in sizes:
        full_k = t_q if t_k is None else t_k
        expected = causal_mask(t_q, t_k)
        ones = torch.ones(t_q, full_k, dtype=torch.bool)
        offset = full_k - t_q
        mistakes = {
            "a mask that is True on the future (the upper triangle): True must mean *may attend*, so the "
            "future must be False": ~expected,
            "a mask that blocks the diagonal: every token must be allowed to see itself":
                ones.tril(diagonal=offset - 1),
            "a mask shifted the other way: each query also sees the next (future) token; the diagonal is the "
            "last position a query may see": ones.tril(diagonal=offset + 1),
            "a transposed mask: you blocked the past (lower triangle) instead of the future (upper triangle)":
                ones.triu(diagonal=offset),
            "the square mask's pattern: for t_k > t_q the queries are the *last* t_q positions, so query i "
            "sits at position t_k - t_q + i (shift the diagonal by t_k - t_q)": ones.tril(),
        }
        what = f"causal_mask({t_q})" if t_k is None else f"causal_mask({t_q}, {t_k})"
        cases.append(Case(what, (t_q,) if t_k is None else (t_q, t_k), expected=expected, mistakes=mistakes,
                          inspect=functools.partial(_expect_bool_mask, what=what)))
    # "meta" stands in for a GPU (a device without data, on any machine); it is needed only when the
    # screened call on the CPU does not show every constructor handed the device (ConstructorScreen).
    gpu = ["cuda"] if hidden and torch.cuda.is_available() else []

    def expect_mask_made_on(device: torch.device | str, watch: contextlib.AbstractContextManager) -> None:
        """causal_mask(3, 5, device=device) is a (3, 5) bool mask on that device (`watch`: a screen, or none)."""
        what = f"causal_mask(3, 5, device={str(device)!r})"
        try:
            with watch:
                mask = call_learner(what, learner_fn, 3, 5, device=device)
        except CheckFailed as failure:
            if "meta tensor" not in str(failure.__cause__):
                raise
            raise CheckFailed(f"{what}: your mask leaves the device it is asked for (.cpu(), .to(...)); keep "
                              "it there, so that on a GPU it sits next to the scores") from None
        if not isinstance(mask, Tensor) or mask.device.type != torch.device(device).type:
            where = mask.device.type if isinstance(mask, Tensor) else type(mask).__name__
            raise CheckFailed(f"{what}: your mask is on {where}; create it on the given device (device=device "
                              "in the tensor you build), so that on a GPU it sits next to the scores")
        if tuple(mask.shape) != (3, 5) or mask.dtype != torch.bool:
            raise CheckFailed(f"{what}: expected a (3, 5) bool mask, got {shape_str(mask)} {mask.dtype}")

    def expect_mask_on_devices() -> None:
        """The mask is made on the device it is asked for, so that on a GPU it sits next to the scores."""
        screen = ConstructorScreen(torch.device("cpu", 0))
        expect_mask_made_on(torch.device("cpu", 0), screen)
        for device in ([] if screen.all_given else ["meta"]) + gpu:
            expect_mask_made_on(device, contextlib.nullcontext())

    run(CAUSAL_MASK, learner_fn, cases, hidden, then=expect_mask_on_devices)


def _expect_key_mask(mask: Any, what: str, expected: Tensor) -> None:
    """A bool mask of shape (B, 1, 1, T); the shapes that leave out the broadcast axes, or mask the
    queries instead of the keys, named."""
    _expect_bool_mask(mask, what)
    batch, length = expected.shape[0], expected.shape[-1]
    if tuple(mask.shape) == (batch, length) and length > 1:
        raise CheckFailed(f"{what}: got shape {shape_str(mask)}; add the head and query axes, "
                          f"(B, 1, 1, T) = {shape_str(expected)}, so it broadcasts over "
                          "(B, n_heads, T_q, T_k)")
    if tuple(mask.shape) == (batch, 1, length, 1) and length > 1:
        raise CheckFailed(f"{what}: got shape {shape_str(mask)}, which masks *queries*; padding "
                          f"hides *keys*, the last axis: (B, 1, 1, T) = {shape_str(expected)}")


@isolated
def check_padding_mask(learner_fn: Callable, hidden: bool = False) -> None:
    """(B, 1, 1, T) bool, False at padding keys."""
    batches = [
        (torch.tensor([[5, 7, 2, 0, 0], [3, 4, 0, 0, 0]]), 0),
        (torch.tensor([[9]]), 0),
        (torch.tensor([[2, 8, 9, 2], [6, 2, 7, 1], [2, 2, 2, 2]]), 2),  # padding anywhere; an all-padding row
    ]
    if hidden:
        batches += [
            (torch.arange(1, 19).reshape(3, 6), 0),  # (3, 6): no padding at all
            (torch.zeros(1, 4, dtype=torch.long), 0),  # batch of 1, nothing but padding
            (torch.tensor([[1, 1, 1, 3, 1, 0, 0, 0]]), 1),
        ]
    cases = []
    inverted = "a mask that is True at the padding: True must mean *may attend*, so padding is False"
    for ids, pad_id in batches:
        what = f"padding_mask(ids of shape {shape_str(ids)}, pad_id={pad_id})"
        expected = padding_mask(ids, pad_id)
        cases.append(Case(what, (ids, pad_id), expected=expected, mistakes={inverted: ~expected},
                          inspect=functools.partial(_expect_key_mask, what=what, expected=expected)))
    run(PADDING_MASK, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Splitting and merging heads
# ----------------------------------------------------------------------------------------------


def _heads_cases(seed: int, batch: int, length: int, d_model: int, n_heads: int, learner_split: Callable,
                 learner_merge: Callable) -> list[tuple[Callable, Case]]:
    """Three calls for one shape, each with the learner's function it calls: split_heads, merge_heads,
    and merge_heads(split_heads(x)), which must give x back."""
    generator = seeded(seed)
    d_head = d_model // n_heads
    x = torch.randn(batch, length, d_model, generator=generator)
    heads = torch.randn(batch, n_heads, length, d_head, generator=generator)
    # x is (B, T, d_model), heads (B, n_heads, T, d_head): each mistake is a reshape of them.
    split_mistakes = {
        "a reshape straight to (B, n_heads, T, d_head) without the transpose: positions and heads get "
        "mixed; view as (B, T, n_heads, d_head), then transpose(1, 2)": x.reshape(batch, n_heads, length, d_head),
        "(B, T, n_heads, d_head): the transpose(1, 2) is missing": x.view(batch, length, n_heads, d_head),
        "heads that take every n_heads-th dimension (interleaved) instead of a contiguous block of d_head "
        "dimensions": x.view(batch, length, d_head, n_heads).permute(0, 3, 1, 2),
    }
    merge_mistakes = {
        "a merge by reshape without the transpose: reading (B, n_heads, T, d_head) as (B, T, d_model) "
        "scrambles positions and heads; transpose(1, 2) first": heads.reshape(batch, length, d_model),
        "heads interleaved dimension by dimension: concatenate whole heads (transpose(1, 2), then "
        "reshape)": heads.permute(0, 2, 3, 1).reshape(batch, length, d_model),
        "the heads concatenated in reverse order": merge_heads(heads.flip(1)),
    }
    split_what = f"split_heads(x of shape {shape_str(x)}, n_heads={n_heads})"
    merge_what = f"merge_heads(x of shape {shape_str(heads)})"
    round_trip_what = f"merge_heads(split_heads(x, {n_heads})) for x of shape {shape_str(x)}"
    expected_split = split_heads(x, n_heads)

    def expect_heads_transposed(split: Any) -> None:
        if isinstance(split, Tensor) and tuple(split.shape) == (batch, length, n_heads, d_head) != tuple(
                expected_split.shape):
            raise CheckFailed(f"{split_what}: got shape {shape_str(split)} = (B, T, n_heads, d_head); "
                              "transpose(1, 2) to (B, n_heads, T, d_head)")

    def expect_heads_concatenated(merged: Any) -> None:
        if isinstance(merged, Tensor) and tuple(merged.shape) == (batch, length, d_head) and n_heads > 1:
            raise CheckFailed(f"{merge_what}: got shape {shape_str(merged)}: the heads were summed or averaged; "
                              f"concatenate them into d_model = n_heads × d_head = {n_heads * d_head}")

    return [
        (learner_split, Case(split_what, (x, n_heads), expected=expected_split, mistakes=split_mistakes,
                             inspect=expect_heads_transposed)),
        (learner_merge, Case(merge_what, (heads,), expected=merge_heads(heads), mistakes=merge_mistakes,
                             inspect=expect_heads_concatenated)),
        (lambda x, n_heads: learner_merge(learner_split(x, n_heads)),
         Case(round_trip_what, (x, n_heads), expected=x, label=round_trip_what + " should give x back",
              unchanged=())),  # the two calls above already check that their inputs are left alone
    ]


@isolated
def check_split_merge_heads(learner_split: Callable, learner_merge: Callable, hidden: bool = False) -> None:
    """split: (B, T, d_model) -> (B, n_heads, T, d_head); merge: the inverse (the concatenation of the heads)."""
    shapes = [(2, 5, 8, 2), (1, 1, 4, 4), (3, 4, 12, 4)]  # the last has T == n_heads
    if hidden:
        shapes += [(2, 6, 12, 3), (1, 3, 16, 1), (2, 7, 64, 8)]
    cases = [case for seed, shape in enumerate(shapes)
             for case in _heads_cases(seed, *shape, learner_split, learner_merge)]
    # Two learner functions, so not run(), which guards one: the guard on both, and run_case for each call.
    namespaces = learner_namespaces(learner_split) + learner_namespaces(learner_merge)
    with off_limits(SPLIT_MERGE_HEADS.off_limits, SPLIT_MERGE_HEADS.name, namespaces):
        for learner, case in cases:
            run_case(SPLIT_MERGE_HEADS, learner, case)
    passed(success_line(SPLIT_MERGE_HEADS, learner_split, len(shapes), hidden))


# ----------------------------------------------------------------------------------------------
# Multi-head attention
# ----------------------------------------------------------------------------------------------


def _mha_variant(ref: MultiHeadAttention, x: Tensor, memory: Tensor | None, mask: Tensor | None, *,
                 split: str = "ok", merge: str = "ok", w_o: bool = True, divide_by: str = "sqrt_d_head",
                 kv_from_x: bool = False, **attention: Any) -> Tensor:
    """Multi-head attention with the reference's weights, written with one of the usual mistakes."""
    n, d_model = ref.n_heads, ref.d_model
    d_head = d_model // n

    def to_heads(t: Tensor) -> Tensor:  # (B, T, d_model) -> (B, n, T, d_head)
        b, length, _ = t.shape
        if split == "no_transpose":
            return t.reshape(b, n, length, d_head)
        return t.view(b, length, n, d_head).transpose(1, 2)

    source = x if memory is None or kv_from_x else memory
    q, k, v = to_heads(ref.w_q(x)), to_heads(ref.w_k(source)), to_heads(ref.w_v(source))
    if divide_by == "sqrt_d_model":
        q = q * math.sqrt(d_head) / math.sqrt(d_model)  # then the usual ÷√d_head makes it ÷√d_model
    out, _ = _attention_variant(q, k, v, mask, divide_by="nothing" if divide_by == "nothing" else "sqrt_d_k",
                                **attention)
    b, _, length, _ = out.shape
    if merge == "no_transpose":
        merged = out.reshape(b, length, d_model)  # (B, n, T, d_head) read as (B, T, d_model): the mistake
    else:
        merged = out.transpose(1, 2).reshape(b, length, d_model)  # (B, n, T, d_head) -> (B, T, d_model)
    return ref.w_o(merged) if w_o else merged


def _mha_mistakes(ref: MultiHeadAttention, x: Tensor, memory: Tensor | None, mask: Tensor | None) -> dict[str, Tensor]:
    def variant(**kwargs: Any) -> Tensor:
        return _mha_variant(ref, x, memory, mask, **kwargs)

    mistakes = {
        "multi-head attention *without* the output projection W^O (apply self.w_o to the merged heads)":
            variant(w_o=False),
        "heads merged without the transpose (reshape (B, n_heads, T, d_head) -> (B, T, d_model) directly)":
            variant(merge="no_transpose"),
        "heads split without the transpose (reshape (B, T, d_model) -> (B, n_heads, T, d_head) directly)":
            variant(split="no_transpose"),
        "multi-head attention *without* the 1/√d_k scaling": variant(divide_by="nothing"),
        "scores divided by √d_model instead of √d_head: d_k is the dimension of *one head*":
            variant(divide_by="sqrt_d_model"),
    }
    if memory is not None and mask is None:  # a padding mask for memory would not fit x's length
        mistakes["self-attention on x: in cross-attention, keys and values come from memory (the encoder "
                 "output H), queries from x"] = variant(kv_from_x=True)
    if mask is not None:
        mistakes["attention with the mask's meaning inverted: True must mean *may attend*"] = variant(invert_mask=True)
        mistakes["the mask applied *after* softmax (rows no longer sum to 1)"] = variant(mask_after_softmax=True)
        mistakes["attention that ignores the mask: pass mask on to scaled_dot_product_attention"] = _mha_variant(
            ref, x, memory, None)
    return mistakes


# The two layouts a learner may write (tfcourse.layouts): their parameters, and how to say so.
LAYOUT_NAMES = {layout: sorted(f"{name}.{kind}" for name in names for kind in ("weight", "bias"))
                for layout, names in (("separate", ("w_q", "w_k", "w_v", "w_o")), ("fused", ("w_qkv", "w_o")))}
LAYOUTS_TEXT = ("four nn.Linear(d_model, d_model) named w_q, w_k, w_v, w_o, or one w_qkv = "
                "nn.Linear(d_model, 3 * d_model) (output q | k | v) and w_o")


def _expect_an_attention_layout(module: nn.Module, reference_state: dict[str, Tensor], build: str) -> dict[str, Tensor]:
    """The reference's weights in the module's layout; one line naming the parameter when its
    names or shapes fit neither layout."""
    names = sorted(name for name, _ in module.named_parameters())
    if names not in LAYOUT_NAMES.values():
        raise CheckFailed(f"{build}: expected the parameters {LAYOUT_NAMES['separate']} or "
                          f"{LAYOUT_NAMES['fused']} ({LAYOUTS_TEXT}), got {names}")
    state = in_layout_of(module, reference_state)
    for name, parameter in module.named_parameters():
        if tuple(parameter.shape) != tuple(state[name].shape):
            raise CheckFailed(f"{build}: {name} has shape {shape_str(parameter)}, expected {shape_str(state[name])} "
                              f"({LAYOUTS_TEXT})")
    return state


def _mha_case(seed: int, label: str, d_model: int, n_heads: int, x_shape: tuple[int, int], memory_length: int = 0,
              mask: Tensor | None = None) -> Case:
    """The reference module (seeded), its inputs, its output and every usual mistake's."""
    torch.manual_seed(seed)
    reference = MultiHeadAttention(d_model, n_heads).eval()
    x = torch.randn(*x_shape, d_model)
    memory = torch.randn(x_shape[0], memory_length, d_model) if memory_length else None
    with torch.no_grad():
        expected, mistakes = reference(x, memory, mask=mask), _mha_mistakes(reference, x, memory, mask)
    args = (x,) if memory is None else (x, memory)
    call = "forward(x" + ("" if memory is None else ", memory") + ("" if mask is None else ", mask=mask") + ")"
    what = f"{call} ({label})"

    def forward(learner_cls: type) -> Any:
        """Build the learner's module, load the reference's weights into it (in its layout), run forward."""
        build = f"{learner_cls.__name__}({d_model}, {n_heads})"
        module = build_module(build, learner_cls, d_model, n_heads)
        state = _expect_an_attention_layout(module, reference.state_dict(), build)
        load_state(module, state, build, strict=False)  # extra buffers (e.g. a cached mask) are fine
        module.eval()
        return call_learner(what, module, *args, mask=mask)

    def expect_one_output(output: Any) -> None:
        """One tensor, whose rows are the queries': from x, not from memory."""
        if isinstance(output, (tuple, list)):
            raise CheckFailed(f"{what}: return only the output tensor (B, T_q, d_model), got a {type(output).__name__}")
        if (memory is not None and isinstance(output, Tensor) and memory.shape[1] != x.shape[1]
                and tuple(output.shape) == tuple(memory.shape)):
            raise CheckFailed(f"{what}: your output has one row per *memory* position; queries "
                              "come from x (the decoder), keys and values from memory")

    return Case(what, args, {"mask": mask}, expected=expected, mistakes=mistakes, unchanged_what=call,
                call=forward, inspect=expect_one_output)


# Judged with the reference attention and head reshapes in place of the learner's (exercises 2 and 5).
@composite(scaled_dot_product_attention=lambda: scaled_dot_product_attention, split_heads=lambda: split_heads,
           merge_heads=lambda: merge_heads)
@isolated
def check_multi_head_attention(learner_cls: type, hidden: bool = False) -> None:
    """MultiHead = Concat(head_1..h) W^O, self- and cross-attention, loaded with the reference's weights."""
    causal = torch.ones(6, 6, dtype=torch.bool).tril()
    keep = torch.tensor([[True] * 7, [True] * 4 + [False] * 3])[:, None, None, :]
    specs = [
        ("self-attention, d_model=16, n_heads=4, x (2, 5, 16)", 16, 4, (2, 5)),
        ("masked self-attention, causal mask (6, 6), d_model=8, n_heads=2", 8, 2, (1, 6), 0, causal),
        ("cross-attention, x (2, 3, 16), memory (2, 7, 16)", 16, 4, (2, 3), 7),
        ("cross-attention with a padding mask (2, 1, 1, 7) for memory", 16, 4, (2, 3), 7, keep),
        ("B = 1, T = 1", 8, 2, (1, 1)),
    ]
    if hidden:
        keep = torch.tensor([[True] * 6, [True] * 3 + [False] * 3, [True] * 5 + [False]])[:, None, None, :]
        specs += [
            ("one head, d_model=12", 12, 1, (2, 4)),
            ("8 heads of d_head 4, causal & padding (3, 1, 6, 6)", 32, 8, (3, 6), 0, causal & keep),
            ("cross-attention to a memory of length 1", 16, 4, (2, 5), 1),
        ]
    cases = [_mha_case(seed, *spec) for seed, spec in enumerate(specs)]

    def expect_portable_modules() -> None:
        """On a GPU too: fresh modules, moved to float64 and to a data-less device; self-attention without
        a mask, cross-attention with a padding mask."""
        generator = seeded(0)
        x, memory = torch.randn(2, 3, 16, generator=generator), torch.randn(2, 4, 16, generator=generator)
        keep = torch.tensor([[True] * 4, [True, True, False, False]])[:, None, None, :]  # (B, 1, 1, T_k)
        for inputs in ([x], [x, memory, keep]):
            build = f"{learner_cls.__name__}(16, 4)"
            kind = "self-attention" if len(inputs) == 1 else "cross-attention with a padding mask"
            expect_portable(f"{build} ({kind})", build_module(build, learner_cls, 16, 4), inputs)

    run(MULTI_HEAD_ATTENTION, learner_cls, cases, hidden, then=expect_portable_modules)



# ----------------------------------------------------------------------------------------------
# Debug exercise: a colleague's attention with one planted mistake
# ----------------------------------------------------------------------------------------------

COLLEAGUES_ATTENTION = PlantedBug(
    "03_attention", "attention_debug_impl", "colleagues_attention",
    source='''def colleagues_attention(q: Tensor, k: Tensor, v: Tensor, mask: Tensor | None = None,
                         dropout_p: float = 0.0) -> tuple[Tensor, Tensor]:
    """A colleague's scaled dot-product attention, called as yours: (output, weights). It has one mistake."""
    d_k = q.shape[-1]
    scores = q @ k.transpose(-2, -1) / math.sqrt(d_k)  # (..., T_q, T_k)
    if mask is not None:
        nothing_allowed = ~mask.any(dim=-1, keepdim=True)  # (..., T_q, 1): a query with no key at all
        scores = scores.masked_fill(nothing_allowed, 0.0)  # finite scores: no NaN, not even in the gradient
    weights = torch.softmax(scores, dim=-1)  # (..., T_q, T_k)
    if mask is not None:
        weights = weights.masked_fill(~mask, 0.0)  # a key the query may not see gets no weight
        weights = weights.masked_fill(nothing_allowed, 0.0)  # ...and a query with no key, no weight at all
    if dropout_p > 0.0:
        weights = F.dropout(weights, p=dropout_p)
    return weights @ v, weights  # (..., T_q, d_v), (..., T_q, T_k)
''',
    mistake="the mask applied after softmax",
    coarse_hint="add up each row of the weights under a causal mask: what must every row sum to, and what "
                "does it sum to here?")
check_attention_debug = debug_exercise(check_scaled_dot_product_attention, COLLEAGUES_ATTENTION)

__all__ = [
    "check_dot_product_variance",
    "check_scaled_dot_product_attention",
    "check_causal_mask",
    "check_padding_mask",
    "check_split_merge_heads",
    "check_multi_head_attention",
    "check_attention_debug",
]
