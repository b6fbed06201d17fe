"""The checks of lesson 10 (RNN vs Transformer): right answers pass with one line, every named mistake
is recognised, torch's RNN and LSTM are off-limits, and a stub says it is not implemented yet."""

from __future__ import annotations

import math

import pytest
import torch

from tfcourse.checks.core import CheckFailed, OffLimitsError
import tfcourse.data.recall
import tfcourse.rnn
from tfcourse.checks.rnn import check_lstm_cell, check_path_length, check_recall_batch, check_rnn_forward
from check_helpers import assert_passes, stub

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


# ----------------------------------------------------------------------------------------------
# Exercise 1: rnn_forward
# ----------------------------------------------------------------------------------------------


def make_rnn(recur=True, tanh=True, store_before=False, transpose=False, backwards=False, use_h0=True,
             last_only=False, in_place=False, previous_input=False, bias=True, state_in_place=False,
             with_h0_state=False, skip_first=False, stack_dim=1):
    def rnn_forward(x, w_xh, w_hh, b, h0=None):
        if in_place:
            x.mul_(1.0).add_(0.0)
            x[0, 0, 0] += 1.0
        h = h0 if (h0 is not None and use_h0) else x.new_zeros(x.shape[0], w_hh.shape[0])
        if state_in_place:
            h = h.clone()
        steps = range(x.shape[1] - 1, -1, -1) if backwards else range(x.shape[1])
        states = [None] * x.shape[1]
        for t in steps:
            x_t = x[:, t - 1] if previous_input else x[:, t]  # the off-by-one: step 0 reads x[:, -1]
            pre = x_t @ w_xh + (b if bias else 0) + ((h @ (w_hh.T if transpose else w_hh)) if recur else 0)
            new = torch.tanh(pre) if tanh else pre
            if state_in_place:  # one tensor, overwritten each step: every entry of the list is that tensor
                h.copy_(new)
                states[t] = h
                continue
            states[t] = h if store_before else new
            h = new
        if with_h0_state:
            states = [h0 if h0 is not None else x.new_zeros(x.shape[0], w_hh.shape[0])] + states
        if skip_first:
            states = states[1:]
        return h if last_only else torch.stack(states, dim=stack_dim)

    return rnn_forward


def test_rnn_accepts_a_correct_answer(capfd):
    assert_passes(check_rnn_forward, make_rnn(), capfd)


@pytest.mark.parametrize(("wrong", "message"), [
    (make_rnn(recur=False), r"computed from x_t alone"),
    (make_rnn(tanh=False), r"without tanh"),
    (make_rnn(store_before=True), r"shifted by one step"),
    (make_rnn(transpose=True), r"W_hh transposed"),
    (make_rnn(backwards=True), r"read backwards"),
    (make_rnn(use_h0=False), r"started from zeros"),
    (make_rnn(last_only=True), r"returned only one state"),
    (make_rnn(in_place=True), r"modified input #1 in place"),
    (make_rnn(previous_input=True), r"your output equals the recurrence reading the previous step's input "
                                    r"\(x\[:, t - 1\], so step 0 reads the last one\): step t reads x\[:, t\]"),
    (make_rnn(bias=False), r"without the bias b"),
    (make_rnn(state_in_place=True), r"the last state h_T at every position: the list holds one tensor changed in place"),
    (make_rnn(with_h0_state=True), r"returned T \+ 1 states \(2, 6, 4\): the initial state is not one of them"),
    (make_rnn(skip_first=True), r"returned T - 1 states \(2, 4, 4\): the loop must visit every step"),
    (make_rnn(stack_dim=0), r"stacked along dim 0, \(T, B, H\) = \(5, 2, 4\): stack them along dim=1"),
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
# Exercise 2: lstm_cell
# ----------------------------------------------------------------------------------------------


def make_lstm(order="ifgo", tanh_on=(), sigmoid_g=False, cell_tanh=True, h_from_old_c=False,
              forget_on_input=False, no_input_gate=False, recur=True, swap_outputs=False, return_tanh_c=False,
              in_place=False, only_h=False, bias=True, gates_from_c=False, forget_h=False):
    """An LSTM step written independently of the check: one weight slice per gate."""
    def lstm_cell(x, h, c, w_xh, w_hh, b):
        if in_place:
            c.mul_(1.0)
            c[0, 0] += 1.0
        size = h.shape[1]
        gates = {}
        state = c if gates_from_c else h
        for k, name in enumerate(order):
            part = slice(k * size, (k + 1) * size)
            pre = x @ w_xh[:, part] + (b[part] if bias else 0) + (state @ w_hh[:, part] if recur else 0)
            squash = torch.tanh if (name in tanh_on or (name == "g" and not sigmoid_g)) else torch.sigmoid
            gates[name] = squash(pre)
        i, f, g, o = gates["i"], gates["f"], gates["g"], gates["o"]
        if forget_on_input:
            c_next = i * c + f * g
        elif forget_h:
            c_next = f * h + i * g
        else:
            c_next = f * c + (g if no_input_gate else i * g)
        cell = c if h_from_old_c else c_next
        h_next = o * (torch.tanh(cell) if cell_tanh else cell)
        if only_h:
            return h_next
        returned_c = torch.tanh(c_next) if return_tanh_c else c_next
        return (returned_c, h_next) if swap_outputs else (h_next, returned_c)

    return lstm_cell


def lstm_by_columns(x, h, c, w_xh, w_hh, b):
    """A correct alternative: one product, weights concatenated, gates by torch.split, a list returned."""
    stacked = torch.cat([x, h], dim=1) @ torch.cat([w_xh, w_hh], dim=0) + b  # (B, 4H)
    i, f, g, o = torch.split(stacked, h.shape[1], dim=1)
    c_next = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    return [torch.sigmoid(o) * torch.tanh(c_next), c_next]


@pytest.mark.parametrize("learner", [make_lstm(), lstm_by_columns], ids=["per-gate slices", "concatenated"])
def test_lstm_accepts_correct_answers(learner, capfd):
    assert_passes(check_lstm_cell, learner, capfd)


@pytest.mark.parametrize(("wrong", "message"), [
    (make_lstm(order="ifog"), r"chunks read as \(i, f, o, g\): PyTorch's order is i, f, g, o"),
    (make_lstm(order="igfo"), r"chunks read as \(i, g, f, o\)"),
    (make_lstm(order="oifg"), r"chunks read as \(o, i, f, g\)"),
    (make_lstm(tanh_on="i"), r"tanh instead of the sigmoid on the input gate i"),
    (make_lstm(tanh_on="f"), r"tanh instead of the sigmoid on the forget gate f"),
    (make_lstm(tanh_on="o"), r"tanh instead of the sigmoid on the output gate o"),
    (make_lstm(sigmoid_g=True), r"sigmoid on the candidate g"),
    (make_lstm(cell_tanh=False), r"without tanh on c' for the output"),
    (make_lstm(forget_on_input=True), r"forget gate applied to the new input"),
    (make_lstm(order="figo"), r"forget gate applied to the new input"),  # the same cell, reached by a swap
    (make_lstm(h_from_old_c=True), r"h' computed from the old cell c"),
    (make_lstm(no_input_gate=True), r"without the input gate"),
    (make_lstm(recur=False), r"without the recurrent term h @ w_hh"),
    (make_lstm(swap_outputs=True), r"returned \(c', h'\): return \(h', c'\) in that order"),
    (make_lstm(return_tanh_c=True), r"c': your output equals tanh\(c'\)"),
    (make_lstm(only_h=True), r"must return the pair \(h', c'\), got Tensor"),
    (make_lstm(in_place=True), r"lstm_cell: your code modified input #3 in place"),
    (make_lstm(bias=False), r"h': your output equals the cell without the bias b"),
    (make_lstm(gates_from_c=True), r"gates computed from c @ w_hh: the recurrent term reads the hidden state h"),
    (make_lstm(forget_h=True), r"forget gate applied to h \(c' = f \* h \+ i \* g\)"),
])
def test_lstm_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_lstm_cell(wrong, hidden=True)


def test_lstm_messages_are_one_line():
    for wrong in (make_lstm(order="ifog"), make_lstm(cell_tanh=False), make_lstm(swap_outputs=True)):
        with pytest.raises(CheckFailed) as failure:
            check_lstm_cell(wrong)
        assert "\n" not in str(failure.value)


def test_lstm_every_named_mistake_is_a_different_cell():
    """On the check's first input no two named mistakes (nor a mistake and the answer) coincide."""
    from tfcourse.checks.core import _close
    from tfcourse.checks.rnn import _lstm_mistakes
    from tfcourse.rnn import torch_lstm_cell

    g = torch.Generator().manual_seed(100)
    x, h, c = torch.randn(2, 3, generator=g), torch.randn(2, 4, generator=g), 2 * torch.randn(2, 4, generator=g)
    w_xh, w_hh, b = torch.randn(3, 16, generator=g), torch.randn(4, 16, generator=g) / 2, torch.randn(16, generator=g)
    outputs = [torch_lstm_cell(x, h, c, w_xh, w_hh, b)[0], *_lstm_mistakes(x, h, c, w_xh, w_hh, b).values()]
    assert len(outputs) == 1 + 1 + 22 + 3 + 8  # the answer, f on the input, 22 other orders, 3 gates, 8 more
    for k, one in enumerate(outputs):
        assert not any(_close(one, other, 1e-5, 1e-4) for other in outputs[k + 1:])


def test_lstm_reference_is_off_limits():
    with pytest.raises(OffLimitsError, match="tfcourse.rnn.lstm_cell"):
        check_lstm_cell(lambda *args: tfcourse.rnn.lstm_cell(*args))


def test_lstm_torch_builtins_are_off_limits():
    def with_module(x, h, c, w_xh, w_hh, b):
        return torch.nn.LSTMCell(w_xh.shape[0], h.shape[1])(x, (h, c))

    with pytest.raises(OffLimitsError, match="torch.nn.LSTMCell"):
        check_lstm_cell(with_module)

    def with_layer(x, h, c, w_xh, w_hh, b):
        out, (h_n, c_n) = torch.nn.LSTM(w_xh.shape[0], h.shape[1], batch_first=True)(x[:, None], (h[None], c[None]))
        return h_n[0], c_n[0]

    with pytest.raises(OffLimitsError, match="torch.nn.LSTM"):
        check_lstm_cell(with_layer)

    def with_function(x, h, c, w_xh, w_hh, b):
        return torch.lstm_cell(x, (h, c), w_xh.T, w_hh.T, b, torch.zeros_like(b))

    with pytest.raises(OffLimitsError, match="torch.lstm_cell"):
        check_lstm_cell(with_function)


def test_lstm_reference_equals_torch():
    """The hand-written reference (which the lesson's solution mirrors) equals nn.LSTMCell."""
    g = torch.Generator().manual_seed(7)
    x, h, c = torch.randn(3, 5, generator=g), torch.randn(3, 4, generator=g), torch.randn(3, 4, generator=g)
    w_xh, w_hh, b = torch.randn(5, 16, generator=g), torch.randn(4, 16, generator=g), torch.randn(16, generator=g)
    for ours, torch_s in zip(tfcourse.rnn.lstm_cell(x, h, c, w_xh, w_hh, b),
                             tfcourse.rnn.torch_lstm_cell(x, h, c, w_xh, w_hh, b)):
        torch.testing.assert_close(ours, torch_s, atol=1e-6, rtol=1e-5)


def test_lstm_stub():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_lstm_cell(stub)


# ----------------------------------------------------------------------------------------------
# Exercise 3: path_length
# ----------------------------------------------------------------------------------------------


def make_path(rnn_plus_one=False, attention_grows=False, attention_self_one=False, conv_k=False, conv_floor=False,
              as_float=False, conv_plus_one=False, conv_fixed_kernel=False):
    def path_length(i, j, layer, kernel_size=3):
        d = j - i
        if layer == "recurrent":
            out = d + 1 if (rnn_plus_one and d) else d
        elif layer == "self-attention":
            out = d if attention_grows else (1 if (d > 0 or attention_self_one) else 0)
        else:
            width = kernel_size if conv_k else (2 if conv_fixed_kernel else kernel_size - 1)
            if conv_plus_one:  # "rounds up" by adding one layer, even to an exact multiple
                out = d // width + 1 if d else 0
            else:
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
    (make_path(conv_plus_one=True), r"rounds up with d // \(k - 1\) \+ 1: when the distance is a multiple"),
    (make_path(conv_fixed_kernel=True), r"ignores kernel_size for the convolution"),
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
# Exercise 4: make_recall_batch
# ----------------------------------------------------------------------------------------------


def make_recall(order="keys_first", distractors="own_range", key_at="start", target="key", extra=0, global_rng=False,
                key_high=0, distractor_high=0, overwrite_first=False, y_column=False):
    def make_recall_batch(batch_size, length, n_keys, n_distractors, generator):
        g = None if global_rng else generator
        low = n_keys if distractors == "own_range" else 0

        def draw_keys():
            return torch.randint(0, n_keys + key_high, (batch_size,), generator=g)

        def draw_distractors():
            return torch.randint(low, n_keys + n_distractors + distractor_high,
                                 (batch_size, length - 1 + extra + overwrite_first), generator=g)

        if order == "keys_first":
            keys, rest = draw_keys(), draw_distractors()
        else:
            rest = draw_distractors()
            keys = draw_keys()
        if overwrite_first:  # `length` distractors, the first replaced by the key
            x = rest.clone()
            x[:, 0] = keys
        else:
            x = torch.cat([keys[:, None], rest], 1) if key_at == "start" else torch.cat([rest, keys[:, None]], 1)
        y = keys if target == "key" else x[:, -1]
        return x, (y[:, None] if y_column else y)

    return make_recall_batch


def test_recall_accepts_a_correct_answer(capfd):
    assert_passes(check_recall_batch, make_recall(), capfd)


@pytest.mark.parametrize(("wrong", "message"), [
    (make_recall(distractors="all"), r"distractors are drawn from all symbols"),
    (make_recall(key_at="end"), r"key at the end"),
    (make_recall(order="distractors_first"), r"drawn in another order"),
    (make_recall(target="last"), r"y is the key, the first token"),
    (make_recall(extra=1), r"the key plus length - 1 distractors"),
    (make_recall(global_rng=True), r"draw every random number with generator=generator"),
    (make_recall(overwrite_first=True), r"length' distractors whose first one is overwritten by the key"),
    (make_recall(key_high=-1), r"keys are drawn from \[0, n_keys - 1\): torch.randint's high is exclusive"),
    (make_recall(distractor_high=-1), r"distractors are drawn from \[n_keys, n_keys \+ n_distractors - 1\)"),
    (make_recall(y_column=True), r"y has shape \(4, 1\), the keys as a column: return them as shape \(batch_size,\)"),
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
