"""The checks of lesson 10 (RNN vs Transformer): right answers pass with one line, every named mistake
is recognised, torch's RNN is off-limits, and a stub says it is not implemented yet."""

from __future__ import annotations

import math

import pytest
import torch

from tfcourse.checks.core import CheckFailed, OffLimitsError
import tfcourse.data.recall
import tfcourse.rnn
from tfcourse.checks.rnn import check_path_length, check_recall_batch, check_rnn_forward
from check_helpers import assert_passes, stub

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


# ----------------------------------------------------------------------------------------------
# Exercise 1: rnn_forward
# ----------------------------------------------------------------------------------------------


def make_rnn(recur=True, tanh=True, store_before=False, transpose=False, backwards=False, use_h0=True,
             last_only=False, in_place=False):
    def rnn_forward(x, w_xh, w_hh, b, h0=None):
        if in_place:
            x.mul_(1.0).add_(0.0)
            x[0, 0, 0] += 1.0
        h = h0 if (h0 is not None and use_h0) else x.new_zeros(x.shape[0], w_hh.shape[0])
        steps = range(x.shape[1] - 1, -1, -1) if backwards else range(x.shape[1])
        states = [None] * x.shape[1]
        for t in steps:
            pre = x[:, t] @ w_xh + b + ((h @ (w_hh.T if transpose else w_hh)) if recur else 0)
            new = torch.tanh(pre) if tanh else pre
            states[t] = h if store_before else new
            h = new
        return h if last_only else torch.stack(states, dim=1)

    return rnn_forward


def test_rnn_accepts_a_correct_answer(capfd):
    assert_passes(check_rnn_forward, make_rnn(), capfd)


@pytest.mark.parametrize(("wrong", "message"), [
    (make_rnn(recur=False), r"computed from x_t alone"),
    (make_rnn(tanh=False), r"\*without\* tanh"),
    (make_rnn(store_before=True), r"shifted by one step"),
    (make_rnn(transpose=True), r"W_hh transposed"),
    (make_rnn(backwards=True), r"read backwards"),
    (make_rnn(use_h0=False), r"started from zeros"),
    (make_rnn(last_only=True), r"returned only one state"),
    (make_rnn(in_place=True), r"modified input #1 in place"),
])
def test_rnn_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_rnn_forward(wrong, hidden=True)


def test_rnn_reference_is_off_limits():
    with pytest.raises(OffLimitsError, match="tfcourse.rnn.rnn_forward"):
        check_rnn_forward(lambda x, w_xh, w_hh, b, h0=None: tfcourse.rnn.rnn_forward(x, w_xh, w_hh, b, h0))


def test_rnn_torch_builtins_are_off_limits():
    def with_module(x, w_xh, w_hh, b, h0=None):
        rnn = torch.nn.RNN(w_xh.shape[0], w_xh.shape[1], batch_first=True)
        return rnn(x)[0]

    with pytest.raises(OffLimitsError, match="torch.nn.RNN"):
        check_rnn_forward(with_module)

    def with_cell(x, w_xh, w_hh, b, h0=None):
        cell = torch.nn.RNNCell(w_xh.shape[0], w_xh.shape[1])
        h = None
        out = []
        for t in range(x.shape[1]):
            h = cell(x[:, t], h)
            out.append(h)
        return torch.stack(out, 1)

    with pytest.raises(OffLimitsError, match="torch.nn.RNNCell"):
        check_rnn_forward(with_cell)


def test_rnn_stub():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_rnn_forward(stub)


# ----------------------------------------------------------------------------------------------
# Exercise 2: path_length
# ----------------------------------------------------------------------------------------------


def make_path(rnn_plus_one=False, attention_grows=False, attention_self_one=False, conv_k=False, conv_floor=False,
              as_float=False):
    def path_length(i, j, layer, kernel_size=3):
        d = j - i
        if layer == "recurrent":
            out = d + 1 if (rnn_plus_one and d) else d
        elif layer == "self-attention":
            out = d if attention_grows else (1 if (d > 0 or attention_self_one) else 0)
        else:
            width = kernel_size if conv_k else kernel_size - 1
            out = d // width if conv_floor else -(-d // width)
        return float(out) if as_float else out

    return path_length


def test_path_length_accepts_a_correct_answer(capfd):
    assert_passes(check_path_length, make_path(), capfd)


@pytest.mark.parametrize(("wrong", "message"), [
    (make_path(rnn_plus_one=True), r"counts tokens instead of steps"),
    (make_path(attention_grows=True), r"grows with the distance for self-attention"),
    (make_path(attention_self_one=True), r"1 step for self-attention even when i == j"),
    (make_path(conv_k=True), r"widens a convolution's window by k per layer"),
    (make_path(conv_floor=True), r"rounds the number of convolution layers down"),
    (make_path(as_float=True), r"must return an int"),
])
def test_path_length_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_path_length(wrong, hidden=True)


def test_path_length_other_errors_name_the_question():
    def two_mistakes(i, j, layer, kernel_size=3):
        return make_path(rnn_plus_one=True, conv_k=True)(i, j, layer, kernel_size)

    with pytest.raises(CheckFailed, match=r"path_length\(1, 100, 'recurrent', kernel_size=3\) returned 100, expected 99"):
        check_path_length(two_mistakes)


def test_path_length_reference_is_off_limits():
    with pytest.raises(OffLimitsError, match="tfcourse.rnn.path_length"):
        check_path_length(lambda i, j, layer, kernel_size=3: tfcourse.rnn.path_length(i, j, layer, kernel_size))


def test_path_length_stub():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_path_length(stub)


# ----------------------------------------------------------------------------------------------
# Exercise 3: make_recall_batch
# ----------------------------------------------------------------------------------------------


def make_recall(order="keys_first", distractors="own_range", key_at="start", target="key", extra=0, global_rng=False):
    def make_recall_batch(batch_size, length, n_keys, n_distractors, generator):
        g = None if global_rng else generator
        low = n_keys if distractors == "own_range" else 0

        def draw_keys():
            return torch.randint(0, n_keys, (batch_size,), generator=g)

        def draw_distractors():
            return torch.randint(low, n_keys + n_distractors, (batch_size, length - 1 + extra), generator=g)

        if order == "keys_first":
            keys, rest = draw_keys(), draw_distractors()
        else:
            rest = draw_distractors()
            keys = draw_keys()
        x = torch.cat([keys[:, None], rest], 1) if key_at == "start" else torch.cat([rest, keys[:, None]], 1)
        y = keys if target == "key" else x[:, -1]
        return x, y

    return make_recall_batch


def test_recall_accepts_a_correct_answer(capfd):
    assert_passes(check_recall_batch, make_recall(), capfd)


@pytest.mark.parametrize(("wrong", "message"), [
    (make_recall(distractors="all"), r"distractors are drawn from \*all\* symbols"),
    (make_recall(key_at="end"), r"key at the \*end\*"),
    (make_recall(order="distractors_first"), r"drawn in another order"),
    (make_recall(target="last"), r"y is the key, the \*first\* token"),
    (make_recall(extra=1), r"the key plus length - 1 distractors"),
    (make_recall(global_rng=True), r"draw every random number with generator=generator"),
])
def test_recall_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_recall_batch(wrong, hidden=True)


def test_recall_reference_is_off_limits():
    with pytest.raises(OffLimitsError, match="tfcourse.data.recall.recall_batch"):
        check_recall_batch(lambda b, n, k, d, g: tfcourse.data.recall.recall_batch(b, n, k, d, g))


def test_recall_stub():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_recall_batch(stub)


def test_references_agree_with_the_lesson_numbers():
    from tfcourse.rnn import path_length as reference_path_length

    assert reference_path_length(1, 100, "recurrent") == 99
    assert reference_path_length(1, 100, "self-attention") == 1
    assert reference_path_length(1, 100, "convolution", 3) == math.ceil(99 / 2)
