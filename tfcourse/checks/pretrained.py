"""Checks for lesson 12, real GPT-2 weights and the encoder-only family.

    check_gelu_tanh(gelu_tanh)                           GPT-2's tanh approximation of GELU
    check_convert_gpt2_attention(convert_gpt2_attention) Conv1D + fused c_attn -> w_q, w_k, w_v, w_o
    check_mask_tokens(mask_tokens)                       BERT's 15 % / 80-10-10 masking, labels -100 elsewhere
    check_masked_lm_loss(masked_lm_loss)                 cross-entropy over the chosen positions only

mask_tokens draws random numbers, and a learner may draw them in any order: its check judges the
rules (what may change, what the labels hold) on every position, and the proportions over many
thousand positions, on a fixed seed, so a verdict never changes from run to run.
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor

from ..data.mlm import IGNORE_INDEX
from ..data.mlm import masked_lm_loss as reference_masked_lm_loss
from ..ffn import gelu_tanh as reference_gelu_tanh
from ..messages import say
from ..pretrained import convert_gpt2_attention as reference_convert
from .core import Case, CheckFailed, Exercise, call_learner, compare, isolated, run, seeded

# no_grad=False: the learner's code runs with autograd on, as in the notebook (masked_lm_loss must keep it).
GELU_OFF_LIMITS = ["tfcourse.ffn.gelu_tanh", "torch.nn.functional.gelu", "torch.nn.GELU"]
GELU_TANH = Exercise("gelu_tanh", GELU_OFF_LIMITS, "gelu_tanh equals GPT-2's GELU on {n} inputs", no_grad=False)
CONVERT_OFF_LIMITS = [
    "tfcourse.pretrained.convert_gpt2_attention",
    "tfcourse.pretrained.gpt2_to_course",
    "tfcourse.pretrained.load_gpt2_state_dict",
    "tfcourse.pretrained.gpt2_from_state_dict",
]
CONVERT_ATTENTION = Exercise("convert_gpt2_attention", CONVERT_OFF_LIMITS,
                             "convert_gpt2_attention maps GPT-2's c_attn / c_proj correctly for {n} widths",
                             no_grad=False)
MASK_OFF_LIMITS = ["tfcourse.data.mlm.mask_tokens"]
MASK_TOKENS = Exercise("mask_tokens", MASK_OFF_LIMITS,
                       "mask_tokens chooses, masks and labels as BERT does on {n} batches", no_grad=False)
MLM_LOSS_OFF_LIMITS = [
    "tfcourse.data.mlm.masked_lm_loss",
    "tfcourse.output.cross_entropy",
    "torch.nn.functional.cross_entropy",
    "torch.nn.functional.nll_loss",
    "torch.nn.CrossEntropyLoss",
    "torch.nn.NLLLoss",
]
MASKED_LM_LOSS = Exercise("masked_lm_loss", MLM_LOSS_OFF_LIMITS,
                          "masked_lm_loss averages over the chosen positions only on {n} batches", no_grad=False)

# ----------------------------------------------------------------------------------------------
# Exercise 1: GELU, tanh approximation
# ----------------------------------------------------------------------------------------------

_SQRT_2_OVER_PI = math.sqrt(2.0 / math.pi)


def _gelu_mistakes(x: Tensor) -> dict[str, Tensor]:
    cube = x + 0.044715 * x ** 3
    return {
        "the exact GELU, x * Phi(x) with erf: close, but GPT-2 was trained with the tanh approximation":
            F.gelu(x),
        "GELU without the factor 0.5": x * (1 + torch.tanh(_SQRT_2_OVER_PI * cube)),
        "GELU without the cubic term 0.044715 x^3": 0.5 * x * (1 + torch.tanh(_SQRT_2_OVER_PI * x)),
        "GELU with 2 / pi instead of sqrt(2 / pi)": 0.5 * x * (1 + torch.tanh(2 / math.pi * cube)),
        "x * sigmoid(1.702 x), the sigmoid approximation, not GPT-2's tanh one": x * torch.sigmoid(1.702 * x),
        "0.5 (1 + tanh(...)) without the leading x: that is the gate alone": 0.5 * (1 + torch.tanh(_SQRT_2_OVER_PI * cube)),
        "ReLU": torch.relu(x),
    }


@isolated
def check_gelu_tanh(learner_fn: Callable, hidden: bool = False) -> None:
    """gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))), elementwise, any shape and dtype."""
    gen = seeded(12)
    inputs = [("x of shape (2, 5, 8)", torch.randn(2, 5, 8, generator=gen) * 3),
              ("x = -6 ... 6 in steps of 0.5", torch.arange(-6.0, 6.25, 0.5))]
    if hidden:
        inputs += [("x of shape (3, 4) in float64", torch.randn(3, 4, generator=gen, dtype=torch.float64) * 2),
                   ("large |x| (tanh saturates)", torch.tensor([-30.0, -15.0, 15.0, 30.0])),
                   ("x of shape (1, 1, 1)", torch.tensor([[[0.7]]]))]
    # Tight: the exact GELU differs from this one by up to 5e-4.
    cases = [Case(f"gelu_tanh({name})", (x,), expected=reference_gelu_tanh(x), mistakes=_gelu_mistakes(x),
                  label=f"gelu_tanh for {name}", unchanged_what="gelu_tanh", atol=2e-6, rtol=1e-5)
             for name, x in inputs]
    run(GELU_TANH, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 2: GPT-2's attention weights into the course's layout
# ----------------------------------------------------------------------------------------------

_KEYS = ("w_q.weight", "w_q.bias", "w_k.weight", "w_k.bias", "w_v.weight", "w_v.bias", "w_o.weight", "w_o.bias")


def _conversion_mistakes(c_attn_w: Tensor, c_attn_b: Tensor, c_proj_w: Tensor, c_proj_b: Tensor,
                         expected: dict[str, Tensor]) -> dict[str, dict[str, Tensor]]:
    d = c_attn_w.shape[0]
    order_note = say("GPT-2 stores q, then k, then v along c_attn's last axis")
    untransposed = dict(zip("qkv", c_attn_w.split(d, dim=1)))  # (d, d) each, still (in, out)
    mistakes: dict[str, dict[str, Tensor]] = {key: {} for key in _KEYS}
    for p in "qkv":
        mistakes[f"w_{p}.weight"][
            "the right block of c_attn, not transposed: Conv1D stores (in, out), nn.Linear (out, in)"] = untransposed[p]
        for other in "qkv".replace(p, ""):
            mistakes[f"w_{p}.weight"][f"the {other} block of c_attn ({order_note})"] = expected[f"w_{other}.weight"]
            mistakes[f"w_{p}.weight"][f"the {other} block of c_attn, not transposed ({order_note})"] = \
                untransposed[other]
            mistakes[f"w_{p}.bias"][f"the {other} part of c_attn's bias ({order_note})"] = expected[f"w_{other}.bias"]
    mistakes["w_o.weight"]["c_proj's weight not transposed: Conv1D stores (in, out), nn.Linear (out, in)"] = c_proj_w
    # A split of c_attn's *first* axis after no transpose gives the rows of every block interleaved:
    rows = c_attn_w.t().reshape(d, 3, d).permute(1, 0, 2)  # (3, d, d): q, k, v weights taken as every third row
    for i, p in enumerate("qkv"):
        mistakes[f"w_{p}.weight"]["every third row of c_attn's transpose: split into contiguous blocks of d_model"] = rows[i]
    return mistakes


def _expect_attention_weights(result: Any, d: int, expected: dict[str, Tensor],
                              mistakes: dict[str, dict[str, Tensor]], what: str) -> None:
    """A dict with MultiHeadAttention's eight names, each tensor compared with its own reference."""
    if not isinstance(result, dict):
        raise CheckFailed(f"{what}: expected a dict with the keys {list(_KEYS)}, got {type(result).__name__}")
    missing = [key for key in _KEYS if key not in result]
    if missing:
        raise CheckFailed(f"{what}: the dict lacks {missing}; expected the keys {list(_KEYS)}, "
                          "the names in MultiHeadAttention's state_dict")
    for key in _KEYS:
        actual = result[key]
        if isinstance(actual, Tensor) and actual.shape != expected[key].shape and actual.dim() == 1 \
                and actual.numel() == 3 * d:
            raise CheckFailed(f"{what}: {key} has shape ({3 * d},): split c_attn's bias into three "
                              f"parts of d_model={d}")
        compare(actual, expected[key], f"{what}: {key}", mistakes[key], atol=0, rtol=0)


@isolated
def check_convert_gpt2_attention(learner_fn: Callable, hidden: bool = False) -> None:
    """convert_gpt2_attention(c_attn_weight (d, 3d), c_attn_bias (3d,), c_proj_weight (d, d), c_proj_bias (d,))
    -> {"w_q.weight": (d, d), "w_q.bias": (d,), ... "w_o.bias": (d,)} in nn.Linear's layout."""
    sizes = [4, 6]
    if hidden:
        sizes += [1, 12, 8]
    cases = []
    for seed, d in enumerate(sizes):
        gen = seeded(40 + seed)
        given = (torch.randn(d, 3 * d, generator=gen), torch.randn(3 * d, generator=gen),
                 torch.randn(d, d, generator=gen), torch.randn(d, generator=gen))
        expected = {k: v.clone() for k, v in reference_convert(*given).items()}
        what = f"convert_gpt2_attention with d_model={d}"
        mistakes = _conversion_mistakes(*given, expected)
        cases.append(Case(what, given, unchanged_what="convert_gpt2_attention", inspect=functools.partial(
            _expect_attention_weights, d=d, expected=expected, mistakes=mistakes, what=what)))
    run(CONVERT_ATTENTION, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 3: BERT's masked-token batch
# ----------------------------------------------------------------------------------------------


def _call_mask(learner_fn: Callable, ids: Tensor, kwargs: dict, seed: int, what: str) -> tuple[Tensor, Tensor]:
    result = call_learner(what, learner_fn, ids, generator=seeded(seed), **kwargs)
    if not (isinstance(result, tuple) and len(result) == 2):
        raise CheckFailed(f"{what}: expected a tuple (inputs, labels), got {type(result).__name__}")
    for name, tensor in zip(("inputs", "labels"), result):
        if not isinstance(tensor, Tensor) or type(tensor) is not Tensor:
            raise CheckFailed(f"{what}: {name} must be a plain torch.Tensor, got {type(tensor).__name__}")
        if tensor.shape != ids.shape:
            raise CheckFailed(f"{what}: {name} has shape {tuple(tensor.shape)}, expected that of ids, {tuple(ids.shape)}")
        if tensor.dtype != torch.long:
            raise CheckFailed(f"{what}: {name} has dtype {tensor.dtype}, expected torch.long (token ids)")
    return result


def _judge_masking(ids: Tensor, inputs: Tensor, labels: Tensor, special_ids: list[int], mask_id: int,
                   mask_prob: float, what: str) -> None:
    """What must hold at every position, whatever the random draws; then, over many thousand positions,
    the proportions (tolerances of about five standard deviations)."""
    special = torch.isin(ids, torch.tensor(special_ids))
    chosen = labels != IGNORE_INDEX
    many = int((~special).sum()) >= 50  # enough ordinary tokens that none, or all, chosen is no accident
    if many and not chosen.any():
        raise CheckFailed(f"{what}: no position is chosen (every label is {IGNORE_INDEX}); about 15 % of the "
                          "ordinary tokens should be")
    if many and (chosen.all() or (chosen == ~special).all()):
        raise CheckFailed(f"{what}: every position has a label; only the chosen positions (about 15 %) get the "
                          f"original id, all others {IGNORE_INDEX}, so the loss looks at the chosen ones only")
    if (chosen & special).any():
        token = ids[chosen & special][0].item()
        raise CheckFailed(f"{what}: a special token (id {token}: padding, [CLS] or [MASK]) was chosen; the 15 % "
                          "must be drawn from the ordinary tokens only")
    if not torch.equal(labels[chosen], ids[chosen]):
        if torch.equal(labels[chosen], inputs[chosen]):
            raise CheckFailed(f"{what}: the labels hold the altered inputs ([MASK] or the random token); they must "
                              "hold the original ids, the tokens the model has to recover")
        raise CheckFailed(f"{what}: at the chosen positions the labels must be the original ids, and they are not")
    if not torch.equal(inputs[~chosen], ids[~chosen]):
        raise CheckFailed(f"{what}: a position that was not chosen (label {IGNORE_INDEX}) was changed in the inputs; "
                          "only the chosen positions may change, or the model learns from tokens it is not asked about")
    replaced = chosen & (inputs != ids) & (inputs != mask_id)
    if torch.isin(inputs[replaced], torch.tensor(special_ids)).any():
        token = inputs[replaced & torch.isin(inputs, torch.tensor(special_ids))][0].item()
        raise CheckFailed(f"{what}: a random replacement drew the special token id {token}; draw the random "
                          "tokens from the ordinary ids only")
    if ids.numel() < 4096:
        return
    n_ordinary, n_chosen = int((~special).sum()), int(chosen.sum())
    rate = n_chosen / n_ordinary
    if abs(rate - mask_prob) > 5 * math.sqrt(mask_prob * (1 - mask_prob) / n_ordinary) + 0.005:
        hint = ""
        if abs(rate - 0.8 * mask_prob) < 0.02:
            hint = " — that is about 80 % of it: the random and the unchanged positions need labels too"
        elif abs(rate - mask_prob * n_ordinary / ids.numel()) < 0.02 and n_ordinary < ids.numel():
            hint = " — as if 15 % of *all* positions were drawn and the special ones then dropped from the count"
        raise CheckFailed(f"{what}: {100 * rate:.0f} % of the ordinary tokens were chosen, expected "
                          f"{100 * mask_prob:.0f} % (mask_prob){hint}")
    masked = float((inputs[chosen] == mask_id).float().mean())
    kept = float((inputs[chosen] == ids[chosen]).float().mean())
    other = 1.0 - masked - kept
    spread = 5 * math.sqrt(0.25 / n_chosen)
    n_random_ids = len(set(inputs[chosen & (inputs != ids) & (inputs != mask_id)].tolist()))
    if abs(masked - 0.8) > spread or abs(kept - 0.1) > spread or abs(other - 0.1) > spread:
        raise CheckFailed(f"{what}: of the chosen positions {100 * masked:.0f} % became [MASK], {100 * other:.0f} % a "
                          f"random token and {100 * kept:.0f} % kept their token; BERT's split is 80 % / 10 % / 10 %")
    n_ordinary_ids = len(set(range(int(ids.max()) + 1)) - set(special_ids))
    if n_random_ids < min(10, n_ordinary_ids // 2):
        raise CheckFailed(f"{what}: the random replacements use only {n_random_ids} different ids; draw each one "
                          "uniformly from all ordinary ids")


def _mask_case(learner_fn: Callable, index: int, batch: int, length: int, vocab: int, pad_id: int, cls_id: int,
               mask_id: int, mask_prob: float | None) -> Case:
    """One batch to mask. Its rules are judged on every batch; the proportions and the seeding only on
    batches of many thousand positions."""
    gen, special_ids = seeded(70 + index), [pad_id, cls_id, mask_id]
    # Token ids with [CLS] first and padding at the end of most rows (padding is never chosen).
    ordinary = torch.tensor([i for i in range(vocab) if i not in special_ids])
    ids = ordinary[torch.randint(len(ordinary), (batch, length), generator=gen)]
    ids[:, 0] = cls_id
    lengths = torch.randint(max(1, length // 2), length + 1, (batch,), generator=gen)
    ids = torch.where(torch.arange(length)[None, :] < lengths[:, None], ids, torch.full_like(ids, pad_id))
    kwargs = dict(mask_id=mask_id, vocab_size=vocab, special_ids=special_ids)
    if mask_prob is not None:
        kwargs["mask_prob"] = mask_prob
    what = (f"mask_tokens(ids of shape {tuple(ids.shape)}, mask_id={mask_id}, vocab_size={vocab}, "
            f"special_ids={special_ids}" + (f", mask_prob={mask_prob})" if mask_prob is not None else ")"))

    def first_call(learner: Callable) -> tuple[Tensor, Tensor]:
        torch.manual_seed(1)  # the global stream, for a learner who ignores `generator`
        return _call_mask(learner, ids, kwargs, 100 + index, what)

    def judge(result: tuple[Tensor, Tensor]) -> None:
        inputs, labels = result
        _judge_masking(ids, inputs, labels, special_ids, mask_id, mask_prob or 0.15, what)
        if ids.numel() >= 4096:  # the seeding, where chance cannot decide the verdict either
            torch.manual_seed(2)  # the same generator seed, another global seed: the same batch
            again = _call_mask(learner_fn, ids, kwargs, 100 + index, what)
            if not (torch.equal(again[0], inputs) and torch.equal(again[1], labels)):
                raise CheckFailed(f"{what}: two calls with generators of the same seed gave different batches; "
                                  "draw every random number from `generator` (generator=generator), not from "
                                  "torch's global generator")
            if torch.equal(_call_mask(learner_fn, ids, kwargs, 999 + index, what)[1], labels):  # another seed
                raise CheckFailed(f"{what}: generators of different seeds chose the same positions; draw the "
                                  "random numbers from `generator`")

    return Case(what, call=first_call, inspect=judge, unchanged=[ids], unchanged_what="mask_tokens")


@isolated
def check_mask_tokens(learner_fn: Callable, hidden: bool = False) -> None:
    """mask_tokens(ids, mask_id, vocab_size, special_ids, mask_prob=0.15, generator=None) -> (inputs, labels)."""
    # (batch, length, vocab, pad, cls, mask, mask_prob or None for the default); large ones for proportions.
    batches = [(128, 128, 60, 0, 1, 2, None), (1, 1, 10, 0, 1, 2, None)]
    if hidden:
        batches += [(64, 256, 300, 0, 298, 299, None), (96, 96, 40, 5, 6, 7, 0.3), (2, 3, 8, 0, 1, 2, None)]
    cases = [_mask_case(learner_fn, index, *batch) for index, batch in enumerate(batches)]
    run(MASK_TOKENS, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 4: the masked-LM loss
# ----------------------------------------------------------------------------------------------


def _loss_mistakes(logits: Tensor, labels: Tensor) -> dict[str, Tensor]:
    chosen = labels != IGNORE_INDEX
    log_probs = torch.log_softmax(logits, dim=-1)  # (B, T, V)
    safe = labels.clamp(min=0)
    nll = -log_probs.gather(-1, safe[..., None])[..., 0]  # (B, T)
    return {
        "the mean over *all* B * T positions (the ignored ones counted as 0): divide by the chosen positions only":
            (nll * chosen).sum() / labels.numel(),
        "the *sum* over the chosen positions instead of their mean": nll[chosen].sum(),
        "the loss without its minus sign": -nll[chosen].mean(),
        "every position counted, the -100 labels read as token 0": nll.mean(),
        "the mean of 1 - p(original) instead of -log p(original)": (1 - log_probs.exp().gather(
            -1, safe[..., None])[..., 0])[chosen].mean(),
        "-p(original), probabilities instead of log-probabilities": -(log_probs.exp().gather(
            -1, safe[..., None])[..., 0])[chosen].mean(),
    }


@isolated
def check_masked_lm_loss(learner_fn: Callable, hidden: bool = False) -> None:
    """masked_lm_loss(logits (B, T, V), labels (B, T)) = mean of -log p(label) over labels != -100."""
    gen = seeded(90)
    shapes = [(2, 8, 11, 0.3, 1.0), (1, 5, 7, 0.5, 1.0)]
    if hidden:
        shapes += [(4, 16, 30, 0.15, 1.0), (3, 6, 9, 0.4, 1000.0), (1, 1, 5, 1.0, 1.0)]
    cases = []
    for batch, length, vocab, rate, scale in shapes:
        logits = torch.randn(batch, length, vocab, generator=gen) * scale
        labels = torch.randint(0, vocab, (batch, length), generator=gen)
        chosen = torch.rand(batch, length, generator=gen) < rate
        chosen.view(-1)[0] = True  # at least one chosen position
        labels = torch.where(chosen, labels, torch.full_like(labels, IGNORE_INDEX))
        name = f"logits {tuple(logits.shape)}" + (" x 1000 (large logits)" if scale > 1 else "") + \
               f", {int(chosen.sum())} chosen positions"

        # The learner gets a leaf that needs grad: the loss's gradient is part of the answer (after its value).
        def needs_grad(loss: Tensor, name: str = name) -> None:
            if not loss.requires_grad:
                raise CheckFailed(f"masked_lm_loss({name}): the loss does not depend on the logits for autograd "
                                  "(no .item(), .detach() or new tensors from numbers): training needs its gradient")
        cases.append(Case(f"masked_lm_loss({name})", (logits.clone().requires_grad_(True), labels),
                          expected=reference_masked_lm_loss(logits, labels), mistakes=_loss_mistakes(logits, labels),
                          label=f"masked-LM loss for {name}", unchanged_what="masked_lm_loss", atol=1e-5, rtol=1e-5,
                          after=needs_grad))
    run(MASKED_LM_LOSS, learner_fn, cases, hidden)


__all__ = ["check_gelu_tanh", "check_convert_gpt2_attention", "check_mask_tokens", "check_masked_lm_loss"]
