"""The checks of lesson 12 (GPT-2 weights, masked-token batches): they accept correct answers written
independently of the package, reject the usual mistakes with a message that names them, and refuse
the reference while they run."""

from __future__ import annotations

import math

import pytest
import torch

from check_helpers import assert_passes, stub
from tfcourse.checks.core import CheckFailed, OffLimitsError
from tfcourse.checks.pretrained import (check_convert_gpt2_attention, check_gelu_tanh, check_mask_tokens,
                                        check_masked_lm_loss)
from tfcourse.data.mlm import mask_tokens as reference_mask_tokens
from tfcourse.data.mlm import masked_lm_loss as reference_masked_lm_loss
from tfcourse.ffn import gelu_tanh as reference_gelu_tanh
from tfcourse.pretrained import convert_gpt2_attention as reference_convert


# ----------------------------------------------------------------------------------------------
# Exercise 1: gelu_tanh
# ----------------------------------------------------------------------------------------------


def my_gelu(x):
    return 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x * x * x)))


def test_gelu_accepts_an_independent_answer(capfd):
    assert_passes(check_gelu_tanh, my_gelu, capfd)


@pytest.mark.parametrize(("wrong", "message"), [
    (lambda x: torch.nn.functional.gelu(x), "off-limits"),
    (lambda x: x * 0.5 * (1 + torch.erf(x / math.sqrt(2))), "exact GELU"),
    (lambda x: x * (1 + torch.tanh(math.sqrt(2 / math.pi) * (x + 0.044715 * x ** 3))), "factor 0.5"),
    (lambda x: 0.5 * x * (1 + torch.tanh(math.sqrt(2 / math.pi) * x)), "cubic term"),
    (lambda x: 0.5 * x * (1 + torch.tanh(2 / math.pi * (x + 0.044715 * x ** 3))), "2 / pi"),
    (lambda x: x * torch.sigmoid(1.702 * x), "sigmoid approximation"),
    (lambda x: torch.relu(x), "ReLU"),
    (lambda x: my_gelu(x).float() if x.dtype == torch.float64 else my_gelu(x), "dtype"),
    (lambda x: my_gelu(x.add_(0)) * 1.001, "differ"),
    (stub, "not implemented yet"),
])
def test_gelu_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_gelu_tanh(wrong, hidden=True)


def test_gelu_refuses_the_reference():
    with pytest.raises(OffLimitsError):
        check_gelu_tanh(lambda x: reference_gelu_tanh(x))
    with pytest.raises(OffLimitsError):
        check_gelu_tanh(lambda x: torch.nn.GELU(approximate="tanh")(x))


# ----------------------------------------------------------------------------------------------
# Exercise 2: convert_gpt2_attention
# ----------------------------------------------------------------------------------------------


def my_convert(c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias, order="qkv", transpose=True,
               transpose_proj=True):
    d = c_attn_weight.shape[0]
    blocks = dict(zip(order, [c_attn_weight[:, i * d:(i + 1) * d] for i in range(3)]))
    biases = dict(zip(order, [c_attn_bias[i * d:(i + 1) * d] for i in range(3)]))
    out = {}
    for p in "qkv":
        out[f"w_{p}.weight"] = blocks[p].T.clone() if transpose else blocks[p].clone()
        out[f"w_{p}.bias"] = biases[p].clone()
    out["w_o.weight"] = c_proj_weight.T.clone() if transpose_proj else c_proj_weight.clone()
    out["w_o.bias"] = c_proj_bias.clone()
    return out


def test_convert_accepts_an_independent_answer(capfd):
    assert_passes(check_convert_gpt2_attention, my_convert, capfd)


def _interleaved(w, b, pw, pb):
    """q, k, v taken as every third row of c_attn's transpose (a layout some checkpoints use)."""
    d = w.shape[0]
    rows = w.T.reshape(d, 3, d).permute(1, 0, 2)  # (3, d, d)
    return {**my_convert(w, b, pw, pb), **{f"w_{p}.weight": rows[i].clone() for i, p in enumerate("qkv")}}


def _without(key):
    return lambda *args: {k: v for k, v in my_convert(*args).items() if k != key}


@pytest.mark.parametrize(("wrong", "message"), [
    (lambda *a: my_convert(*a, transpose=False), "not transposed: Conv1D stores"),
    (lambda *a: my_convert(*a, transpose_proj=False), "c_proj's weight not transposed"),
    (lambda *a: my_convert(*a, order="kqv"), "the k block of c_attn .GPT-2 stores q, then k, then v"),
    (lambda *a: my_convert(*a, order="qvk"), "w_k.weight: your output equals the v block"),
    (lambda w, b, pw, pb: {**my_convert(w, b, pw, pb), "w_q.bias": b}, r"shape \(\d+,\): split c_attn's bias"),
    (_interleaved, "every third row"),
    (_without("w_o.bias"), r"lacks \['w_o.bias'\]"),
    (lambda *a: list(my_convert(*a).values()), "expected a dict"),
    (lambda w, b, pw, pb: my_convert(w.t_().t_(), b.mul_(1), pw, pb) | {"w_o.bias": pb + 1}, "differ"),
    (stub, "not implemented yet"),
])
def test_convert_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_convert_gpt2_attention(wrong, hidden=True)


def test_convert_refuses_the_reference():
    with pytest.raises(OffLimitsError):
        check_convert_gpt2_attention(lambda *args: reference_convert(*args))


# ----------------------------------------------------------------------------------------------
# Exercise 3: mask_tokens
# ----------------------------------------------------------------------------------------------


def my_mask(ids, mask_id, vocab_size, special_ids, mask_prob=0.15, generator=None, *, split=(0.8, 0.1),
            choose_specials=False, random_from_all=False, labels_everywhere=False, labels_from_inputs=False,
            global_rng=False, labels_only_masked=False):
    """An independent answer: per position a draw decides chosen / what happens (different draw order)."""
    gen = None if global_rng else generator
    draw = torch.rand(ids.shape + (2,), generator=gen)  # (B, T, 2): both draws at once
    special = torch.zeros_like(ids, dtype=torch.bool)
    for s in special_ids:
        special |= ids == s
    chosen = draw[..., 0] < mask_prob
    if not choose_specials:
        chosen &= ~special
    pool = torch.arange(vocab_size) if random_from_all else \
        torch.tensor([i for i in range(vocab_size) if i not in special_ids])
    random_tokens = pool[torch.randint(0, len(pool), ids.shape, generator=gen)]
    to_mask = chosen & (draw[..., 1] < split[0])
    to_random = chosen & (draw[..., 1] >= split[0]) & (draw[..., 1] < split[0] + split[1])
    inputs = ids.clone()
    inputs[to_mask] = mask_id
    inputs[to_random] = random_tokens[to_random]
    labels = torch.full_like(ids, -100)
    labels[chosen] = ids[chosen]
    if labels_only_masked:
        labels[~to_mask] = -100
    if labels_everywhere:
        labels = ids.clone()
    if labels_from_inputs:
        labels[chosen] = inputs[chosen]
    return inputs, labels


def test_mask_accepts_an_independent_answer(capfd):
    assert_passes(check_mask_tokens, my_mask, capfd)


def test_mask_accepts_the_reference_algorithm_written_out(capfd):
    """The reference's own code, recompiled (so not the guarded object): passes."""
    import inspect
    import textwrap

    namespace = dict(vars(__import__("tfcourse.data.mlm", fromlist=["x"])))
    source = textwrap.dedent(inspect.getsource(reference_mask_tokens)).replace('"""BERT', '"""My')
    exec(compile(source.replace("def mask_tokens", "def mine"), "mine", "exec"), namespace)  # noqa: S102
    assert_passes(check_mask_tokens, namespace["mine"], capfd)


@pytest.mark.parametrize(("options", "message"), [
    (dict(choose_specials=True), "special token .* was chosen"),
    (dict(split=(1.0, 0.0)), "100 % became \\[MASK\\], 0 % a random token and 0 % kept"),
    (dict(split=(0.8, 0.2)), "BERT's split is 80 % / 10 % / 10 %"),
    (dict(split=(0.1, 0.1)), r"1\d % became \[MASK\], 10 % a random token and 7\d % kept"),
    (dict(labels_everywhere=True), "every position has a label"),
    (dict(labels_from_inputs=True), "labels hold the altered inputs"),
    (dict(labels_only_masked=True), "not chosen .* was changed"),
    (dict(random_from_all=True), "random replacement drew the special token"),
    (dict(global_rng=True), "draw every random number from `generator`|draw every random number from 'generator'"),
    (dict(mask_prob=0.3), "were chosen, expected 15 %"),
])
def test_mask_names_the_mistake(options, message):
    prob = options.pop("mask_prob", None)

    def wrong(ids, mask_id, vocab_size, special_ids, mask_prob=0.15, generator=None):
        return my_mask(ids, mask_id, vocab_size, special_ids, prob or mask_prob, generator, **options)

    with pytest.raises(CheckFailed, match=message):
        check_mask_tokens(wrong, hidden=True)


def test_mask_hidden_cases_honour_mask_prob():
    def ignores_mask_prob(ids, mask_id, vocab_size, special_ids, mask_prob=0.15, generator=None):
        return my_mask(ids, mask_id, vocab_size, special_ids, 0.15, generator)

    check_mask_tokens(ignores_mask_prob)  # the visible cases use the default
    with pytest.raises(CheckFailed, match="expected 30 % .mask_prob."):
        check_mask_tokens(ignores_mask_prob, hidden=True)


def test_mask_rejects_modifying_ids_and_wrong_types():
    def in_place(ids, mask_id, vocab_size, special_ids, mask_prob=0.15, generator=None):
        inputs, labels = my_mask(ids, mask_id, vocab_size, special_ids, mask_prob, generator)
        ids.copy_(inputs)
        return inputs, labels

    with pytest.raises(CheckFailed, match="in place"):
        check_mask_tokens(in_place)
    with pytest.raises(CheckFailed, match="torch.long"):
        check_mask_tokens(lambda ids, **kw: tuple(t.float() for t in my_mask(ids, **kw)))
    with pytest.raises(CheckFailed, match="expected a tuple"):
        check_mask_tokens(lambda ids, **kw: my_mask(ids, **kw)[0])
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_mask_tokens(stub)


def test_mask_refuses_the_reference():
    with pytest.raises(OffLimitsError):
        check_mask_tokens(lambda ids, **kw: reference_mask_tokens(ids, **kw))


# ----------------------------------------------------------------------------------------------
# Exercise 4: masked_lm_loss
# ----------------------------------------------------------------------------------------------


def my_loss(logits, labels):
    keep = labels != -100
    picked = logits[keep]  # (N, V)
    shifted = picked - picked.max(dim=-1, keepdim=True).values
    log_probs = shifted - shifted.exp().sum(dim=-1, keepdim=True).log()
    return -log_probs.gather(1, labels[keep][:, None]).mean()


def test_loss_accepts_an_independent_answer(capfd):
    assert_passes(check_masked_lm_loss, my_loss, capfd)


def _all_positions(logits, labels):
    log_probs = torch.log_softmax(logits, -1)
    nll = -log_probs.gather(-1, labels.clamp(min=0)[..., None])[..., 0]
    return (nll * (labels != -100)).sum() / labels.numel()


@pytest.mark.parametrize(("wrong", "message"), [
    (_all_positions, r"the mean over all B \* T positions"),
    (lambda lg, lb: my_loss(lg, lb) * int((lb != -100).sum()), "the sum over the chosen positions instead of their mean"),
    (lambda lg, lb: -my_loss(lg, lb), "without its minus sign"),
    (lambda lg, lb: -torch.log_softmax(lg, -1).gather(-1, lb.clamp(min=0)[..., None]).mean(), "read as token 0"),
    (lambda lg, lb: -torch.log(torch.softmax(lg[lb != -100], -1).gather(1, lb[lb != -100][:, None])).mean() * 1.0
     if lg.abs().max() < 100 else -torch.log(torch.exp(lg[lb != -100]) / torch.exp(lg[lb != -100]).sum(-1, keepdim=True)
                                             ).gather(1, lb[lb != -100][:, None]).mean(), "NaN or inf"),
    (lambda lg, lb: torch.tensor(my_loss(lg, lb).item()), "does not depend on the logits"),
    (lambda lg, lb: torch.nn.functional.cross_entropy(lg.transpose(1, 2), lb), "off-limits"),
    (stub, "not implemented yet"),
])
def test_loss_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_masked_lm_loss(wrong, hidden=True)


def test_loss_refuses_the_reference():
    with pytest.raises(OffLimitsError):
        check_masked_lm_loss(lambda lg, lb: reference_masked_lm_loss(lg, lb))


def test_loss_value_is_judged_before_its_gradient():
    """A wrong value computed without autograd is named by its value first."""
    with pytest.raises(CheckFailed, match="values differ from the reference"):
        check_masked_lm_loss(lambda lg, lb: torch.tensor(my_loss(lg, lb).item() + 1.0))


def test_convert_judges_every_key_as_a_tensor():
    with pytest.raises(CheckFailed, match=r"d_model=4: w_k.bias: expected a torch.Tensor, got NoneType"):
        check_convert_gpt2_attention(lambda *a: {**my_convert(*a), "w_k.bias": None})
