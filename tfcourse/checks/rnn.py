"""Checks for lesson 10, why Transformers replaced RNNs: the recurrence written as a loop, one
step of an LSTM cell, path lengths between distant tokens, and the data of the long-range recall task.

The references: `tfcourse.rnn.rnn_forward`, `tfcourse.rnn.torch_lstm_cell` (torch's nn.LSTMCell with
the given weights), `tfcourse.rnn.path_length` and `tfcourse.data.recall.recall_batch`.
"""

from __future__ import annotations

import functools
import itertools
import math
from collections.abc import Callable

import torch
from torch import Tensor

from ..data.recall import recall_batch as reference_recall_batch
from ..messages import say
from ..rnn import path_length as reference_path_length
from ..rnn import rnn_forward as reference_rnn_forward
from ..rnn import torch_lstm_cell as reference_lstm_cell
from .core import Case, CheckFailed, Exercise, _close, call_learner, compare, isolated, run, seeded

RNN_OFF_LIMITS = ["tfcourse.rnn.rnn_forward", "torch.nn.RNN", "torch.nn.RNNCell",
                  "torch.rnn_tanh", "torch.rnn_tanh_cell"]
RNN_FORWARD = Exercise("RNN forward pass", RNN_OFF_LIMITS, "rnn_forward equals torch's nn.RNN on {n} inputs")
LSTM_OFF_LIMITS = ["tfcourse.rnn.lstm_cell", "tfcourse.rnn.torch_lstm_cell", "torch.nn.LSTM", "torch.nn.LSTMCell",
                   "torch.lstm", "torch.lstm_cell"]
LSTM_CELL = Exercise("LSTM cell", LSTM_OFF_LIMITS, "lstm_cell equals torch's nn.LSTMCell on {n} inputs")
PATH_OFF_LIMITS = ["tfcourse.rnn.path_length"]
PATH_LENGTH = Exercise("path length", PATH_OFF_LIMITS, "path_length answers all {n} questions")
RECALL_OFF_LIMITS = ["tfcourse.data.recall.recall_batch"]
RECALL_BATCH = Exercise("recall batch", RECALL_OFF_LIMITS, "make_recall_batch matches the reference on {n} batches")
LAYERS = ("recurrent", "self-attention", "convolution")


# ----------------------------------------------------------------------------------------------
# Exercise 1: the recurrence
# ----------------------------------------------------------------------------------------------


def _loop(x: Tensor, w_xh: Tensor, w_hh: Tensor, b: Tensor, h: Tensor, *, recur: bool = True, act=torch.tanh,
          store_before: bool = False, transpose: bool = False, previous_input: bool = False,
          bias: bool = True) -> Tensor:
    states = []
    w = w_hh.T if transpose else w_hh
    for t in range(x.shape[1]):
        x_t = x[:, t - 1] if previous_input else x[:, t]  # x[:, t - 1]: step 0 reads x[:, -1], the last input
        new = act(x_t @ w_xh + (h @ w if recur else 0) + (b if bias else 0))
        states.append(h if store_before else new)
        h = new
    return torch.stack(states, dim=1)


def _expect_states(actual: object, expected: Tensor) -> None:
    """The shapes learners return instead of every state (B, T, H), each named."""
    if not isinstance(actual, Tensor):
        return
    batch, length, d_hidden = expected.shape
    want = f"shape (B, T, H) = {(batch, length, d_hidden)}"
    if actual.shape == (batch, d_hidden) and length > 1:
        raise CheckFailed(f"rnn_forward returned only one state {tuple(actual.shape)}: return every state, {want}")
    if actual.shape == (batch, length + 1, d_hidden):
        raise CheckFailed(f"rnn_forward returned T + 1 states {tuple(actual.shape)}: the initial state is not "
                          f"one of them, return h_1 … h_T, {want}")
    if actual.shape == (batch, length - 1, d_hidden):
        raise CheckFailed(f"rnn_forward returned T - 1 states {tuple(actual.shape)}: the loop must visit every "
                          f"step, for t in range(T), {want}")
    if actual.shape == (length, batch, d_hidden) and batch != length \
            and _close(actual.detach(), expected.transpose(0, 1), 1e-5, 1e-4):
        raise CheckFailed(f"rnn_forward returned the states stacked along dim 0, (T, B, H) = "
                          f"{tuple(actual.shape)}: stack them along dim=1, (B, T, H)")


@isolated
def check_rnn_forward(learner_fn, hidden: bool = False) -> None:
    """rnn_forward(x, w_xh, w_hh, b, h0=None) -> every hidden state (B, T, H)."""
    sizes = [(2, 5, 3, 4, False), (1, 1, 2, 3, False)]  # (B, T, D, H, pass h0)
    if hidden:
        sizes += [(3, 6, 4, 5, True), (1, 9, 3, 3, True), (2, 2, 5, 2, False)]
    cases = []
    for seed, (batch, length, d_in, d_hidden, with_h0) in enumerate(sizes):
        g = seeded(seed)
        x = torch.randn(batch, length, d_in, generator=g)
        w_xh = torch.randn(d_in, d_hidden, generator=g) / math.sqrt(d_in)
        w_hh = torch.randn(d_hidden, d_hidden, generator=g) / math.sqrt(d_hidden)
        b = torch.randn(d_hidden, generator=g) * 0.5
        h0 = torch.randn(batch, d_hidden, generator=g) if with_h0 else None
        start = h0 if h0 is not None else torch.zeros(batch, d_hidden)
        loop = functools.partial(_loop, x, w_xh, w_hh, b, start)
        expected = reference_rnn_forward(x, w_xh, w_hh, b, h0)
        mistakes = {
            "each state computed from x_t alone: without h_{t-1} W_hh the steps are independent — fast, "
            "but there is no memory and no recurrence": loop(recur=False),
            "the recurrence *without* tanh": loop(act=lambda v: v),
            "the states shifted by one step (position t holds h_{t-1}): store h_t after computing it":
                loop(store_before=True),
            "the recurrence with W_hh transposed: the formula is h_{t-1} W_hh, a row vector times the matrix":
                loop(transpose=True),
            "the sequence read backwards: step t = 0, 1, …, T - 1 in order":
                _loop(x.flip(1), w_xh, w_hh, b, start).flip(1),
            "the recurrence reading the *previous* step's input (x[:, t - 1], so step 0 reads the last one): "
            "step t reads x[:, t]": loop(previous_input=True),
            "the recurrence without the bias b: h_t = tanh(x_t W_xh + h_{t-1} W_hh + b)": loop(bias=False),
            "the last state h_T at every position: the list holds one tensor changed in place each step — "
            "make a new one each step, h = torch.tanh(...), not h[:] = or h.copy_(...)":
                expected[:, -1:].expand(batch, length, d_hidden),
        }
        if h0 is not None:
            mistakes["the recurrence started from zeros: start from h0 when it is given"] = \
                _loop(x, w_xh, w_hh, b, torch.zeros(batch, d_hidden))
        cases.append(Case(
            "rnn_forward(x, w_xh, w_hh, b" + (", h0)" if h0 is not None else ")"),
            (x, w_xh, w_hh, b) + ((h0,) if h0 is not None else ()), expected=expected, mistakes=mistakes,
            label=f"states for x {tuple(x.shape)}, H={d_hidden}" + (" with h0" if with_h0 else ""),
            inspect=functools.partial(_expect_states, expected=expected), unchanged_what="rnn_forward"))
    run(RNN_FORWARD, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 2: one step of an LSTM cell
# ----------------------------------------------------------------------------------------------



def _lstm_step(x: Tensor, h: Tensor, c: Tensor, w_xh: Tensor, w_hh: Tensor, b: Tensor, *, order: str = "ifgo",
               tanh_gate: str = "", sigmoid_candidate: bool = False, forget_on_input: bool = False,
               no_input_gate: bool = False, tanh_on_cell: bool = True, old_cell_for_h: bool = False,
               recur: bool = True, bias: bool = True, gates_from_c: bool = False,
               forget_h: bool = False) -> tuple[Tensor, Tensor]:
    """One LSTM step with one usual mistake switched on. `order`: which gate each chunk is read as."""
    state = c if gates_from_c else h
    chunks = dict(zip(order, (x @ w_xh + (state @ w_hh if recur else 0) + (b if bias else 0)).chunk(4, dim=-1)))
    i, f, o = (torch.tanh(chunks[k]) if k == tanh_gate else torch.sigmoid(chunks[k]) for k in "ifo")
    g = torch.sigmoid(chunks["g"]) if sigmoid_candidate else torch.tanh(chunks["g"])
    kept = h if forget_h else c  # what the forget gate scales
    if forget_on_input:
        c_next = i * kept + f * g
    else:
        c_next = f * kept + (g if no_input_gate else i * g)
    cell = c if old_cell_for_h else c_next
    return o * (torch.tanh(cell) if tanh_on_cell else cell), c_next


def _lstm_mistakes(x: Tensor, h: Tensor, c: Tensor, w_xh: Tensor, w_hh: Tensor, b: Tensor) -> dict[str, Tensor]:
    """The h' that each usual mistake gives (a mistake in c' shows in h' = o * tanh(c') too)."""
    def step(**mistake: object) -> Tensor:
        return _lstm_step(x, h, c, w_xh, w_hh, b, **mistake)[0]

    mistakes = {
        "the cell with the forget gate applied to the new input (c' = i * c + f * g): f scales the *old* cell c, i the "
        "candidate g": step(forget_on_input=True),
    }
    for order in itertools.permutations("ifgo"):
        if order not in (tuple("ifgo"), tuple("figo")):  # (f, i, g, o) is the mistake above
            mistakes[f"the cell with its four chunks read as ({', '.join(order)}): PyTorch's order is i, f, g, o"] = \
                step(order="".join(order))
    gates = {"i": say("the input gate i"), "f": say("the forget gate f"), "o": say("the output gate o")}
    for gate, name in gates.items():
        mistakes[f"the cell with tanh instead of the sigmoid on {name}: a gate is a fraction between 0 and 1"] = \
            step(tanh_gate=gate)
    mistakes.update({
        "the cell with a sigmoid on the candidate g: g takes tanh, so that it can also lower the cell":
            step(sigmoid_candidate=True),
        "the cell without tanh on c' for the output: h' = o * tanh(c')": step(tanh_on_cell=False),
        "h' computed from the old cell c: update the cell first, then h' = o * tanh(c')": step(old_cell_for_h=True),
        "the cell without the input gate (c' = f * c + g): the candidate is scaled by i": step(no_input_gate=True),
        "the cell without the recurrent term h @ w_hh: the gates read the previous h too": step(recur=False),
        "the cell without the bias b: every gate's pre-activation is x @ w_xh + h @ w_hh + b": step(bias=False),
        "the cell with its gates computed from c @ w_hh: the recurrent term reads the hidden state h, not the cell c":
            step(gates_from_c=True),
        "the cell with the forget gate applied to h (c' = f * h + i * g): f scales the old *cell* c":
            step(forget_h=True),
    })
    return mistakes


@isolated
def check_lstm_cell(learner_fn, hidden: bool = False) -> None:
    """lstm_cell(x, h, c, w_xh, w_hh, b) -> (h', c'), gates in PyTorch's order i, f, g, o."""
    sizes = [(2, 3, 4), (1, 2, 3)] + ([(3, 5, 2), (1, 4, 6), (4, 1, 1)] if hidden else [])  # (B, D, H)
    run(LSTM_CELL, learner_fn, [_lstm_case(100 + seed, *size) for seed, size in enumerate(sizes)], hidden)


def _lstm_case(seed: int, batch: int, d_in: int, d_hidden: int) -> Case:
    g = seeded(seed)
    x = torch.randn(batch, d_in, generator=g)
    h = torch.randn(batch, d_hidden, generator=g)
    c = 2 * torch.randn(batch, d_hidden, generator=g)  # larger than h, so that the two cannot be confused
    w_xh = torch.randn(d_in, 4 * d_hidden, generator=g) / math.sqrt(d_in)
    w_hh = torch.randn(d_hidden, 4 * d_hidden, generator=g) / math.sqrt(d_hidden)
    inputs = (x, h, c, w_xh, w_hh, torch.randn(4 * d_hidden, generator=g))
    (expected_h, expected_c), h_mistakes = reference_lstm_cell(*inputs), _lstm_mistakes(*inputs)
    what = f"lstm_cell with x {tuple(x.shape)}, H={d_hidden}"

    def expect_pair(result: object) -> None:
        """The pair (h', c'), in that order, each equal to the reference. h' is judged first: every usual
        mistake shows in it, and its mistakes are the ones named."""
        if not (isinstance(result, (tuple, list)) and len(result) == 2):
            raise CheckFailed(f"{what} must return the pair (h', c'), got {type(result).__name__}")
        h_next, c_next = result
        if all(isinstance(t, Tensor) and t.shape == expected_h.shape for t in result) and \
                _close(h_next.detach(), expected_c, 1e-5, 1e-4) and _close(c_next.detach(), expected_h, 1e-5, 1e-4):
            raise CheckFailed(f"{what} returned (c', h'): return (h', c') in that order, as nn.LSTMCell does")
        compare(h_next, expected_h, f"{what}: h'", h_mistakes)
        compare(c_next, expected_c, f"{what}: c'", {
            "the old cell c: return the updated cell c' = f * c + i * g": c,
            "tanh(c'): the cell itself is returned, tanh(c') only goes into h'": torch.tanh(expected_c)})

    return Case("lstm_cell(x, h, c, w_xh, w_hh, b)", inputs, unchanged_what="lstm_cell", inspect=expect_pair)


# ----------------------------------------------------------------------------------------------
# Exercise 3: path lengths
# ----------------------------------------------------------------------------------------------


def _path_mistakes(i: int, j: int, layer: str, k: int) -> dict[str, int]:
    """What each usual mistake returns for one question (only the rule of one layer changes)."""
    d, right = j - i, reference_path_length(i, j, layer, k)
    rules = {
        "counts tokens instead of steps for the RNN (token 1 reaches token 100 in 99 steps, not 100)":
            ("recurrent", d + 1 if d else 0),
        "grows with the distance for self-attention: attention joins every pair directly, in one step":
            ("self-attention", d),
        "gives 1 step for self-attention even when i == j: a token is already where it is (0 steps)":
            ("self-attention", 1),
        "widens a convolution's window by k per layer: a layer of kernel k widens it by k - 1":
            ("convolution", math.ceil(d / k)),
        "rounds the number of convolution layers down: a window that is short by one position needs "
        "one more layer (round up)": ("convolution", d // (k - 1)),
        "rounds up with d // (k - 1) + 1: when the distance is a multiple of k - 1 that is one layer too "
        "many (math.ceil(d / (k - 1)))": ("convolution", d // (k - 1) + 1 if d else 0),
        "ignores kernel_size for the convolution (a kernel of 3 whatever it is): each layer widens the "
        "window by kernel_size - 1": ("convolution", math.ceil(d / 2)),
    }
    return {name: (value if rule_layer == layer else right) for name, (rule_layer, value) in rules.items()}


@isolated
def check_path_length(learner_fn, hidden: bool = False) -> None:
    """path_length(i, j, layer, kernel_size=3) for every layer type on a grid of positions."""
    questions = [(1, 100, layer, 3) for layer in LAYERS] + [(4, 4, layer, 3) for layer in LAYERS]
    questions += [(0, d, layer, 3) for d in (1, 2, 5, 10) for layer in LAYERS]
    if hidden:
        questions += [(7, 7 + d, "convolution", k) for d in (1, 3, 4, 9, 31) for k in (2, 3, 5)]
        questions += [(3, 3 + d, layer, 5) for d in (0, 1, 8, 1000) for layer in LAYERS]
    expected = [reference_path_length(*question) for question in questions]
    tables: dict[str, list[int]] = {}  # each usual mistake's answers to all the questions
    for question in questions:
        for name, value in _path_mistakes(*question).items():
            tables.setdefault(name, []).append(value)
    calls = [f"path_length({i}, {j}, {layer!r}, kernel_size={k})" for i, j, layer, k in questions]
    answers: list[int] = []  # filled by the cases, judged together once every question is answered

    def keep_int(answer: object, what: str) -> None:
        if isinstance(answer, bool) or not isinstance(answer, int):
            raise CheckFailed(f"{what} must return an int, got {answer!r} ({type(answer).__name__}); "
                              "math.ceil gives an int")
        answers.append(answer)

    def judge_answers() -> None:
        """The whole table at once: a usual mistake changes one layer's rule, so it shows in the table
        (one answer alone may equal the right one). Else the first question answered wrong."""
        if answers == expected:
            return
        for name, table in tables.items():
            if answers == table:
                raise CheckFailed(f"your path_length {name}")
        n = next(n for n, (a, e) in enumerate(zip(answers, expected)) if a != e)
        raise CheckFailed(f"{calls[n]} returned {answers[n]}, expected {expected[n]}")

    cases = [Case(what, question[:3], {"kernel_size": question[3]}, after=functools.partial(keep_int, what=what))
             for what, question in zip(calls, questions)]
    run(PATH_LENGTH, learner_fn, cases, hidden, then=judge_answers)


# ----------------------------------------------------------------------------------------------
# Exercise 4: the recall task's data
# ----------------------------------------------------------------------------------------------


@isolated
def check_recall_batch(learner_fn, hidden: bool = False) -> None:
    """make_recall_batch(batch_size, length, n_keys, n_distractors, generator) -> (x (B, length), y (B,))."""
    sizes = [(4, 10, 8, 16), (1, 2, 3, 5)]
    if hidden:
        sizes += [(6, 1, 4, 4), (3, 50, 2, 30), (5, 7, 10, 1)]  # the first: a sequence that is only the key
    run(RECALL_BATCH, learner_fn, [_recall_case(1000 + seed, *size) for seed, size in enumerate(sizes)], hidden)


def _recall_case(seed: int, batch: int, length: int, n_keys: int, n_distractors: int) -> Case:
    gen = functools.partial(seeded, seed)  # a fresh generator, seeded alike, for every draw
    x_ref, y_ref = reference_recall_batch(batch, length, n_keys, n_distractors, gen())
    symbols = n_keys + n_distractors

    def drawn(key_high: int, low: int, high: int) -> Tensor:  # keys in [0, key_high), then the rest in [low, high)
        g = gen()
        keys = torch.randint(0, key_high, (batch,), generator=g)
        return torch.cat([keys[:, None], torch.randint(low, high, (batch, length - 1), generator=g)], dim=1)

    g = gen()
    swapped_d = torch.randint(n_keys, symbols, (batch, length - 1), generator=g)
    swapped_k = torch.randint(0, n_keys, (batch,), generator=g)
    x_mistakes = {  # the x that each usual mistake draws from the same seeded generator
        "a batch whose distractors are drawn from *all* symbols: draw them from "
        "[n_keys, n_keys + n_distractors) so that the key is the only key in the sequence": drawn(n_keys, 0, symbols),
        "a batch with the key at the *end*: put it first, as far as possible from where the model answers":
            torch.cat([x_ref[:, 1:], y_ref[:, None]], dim=1),
        "a batch drawn in another order: draw the keys first, then the distractors":
            torch.cat([swapped_k[:, None], swapped_d], dim=1),
    }
    g = gen()
    keys = torch.randint(0, n_keys, (batch,), generator=g)
    overwritten = torch.randint(n_keys, symbols, (batch, length), generator=g)
    overwritten[:, 0] = keys
    x_mistakes["a batch of `length` distractors whose first one is overwritten by the key: draw "
               "(batch_size, length - 1) distractors and put the key in front"] = overwritten
    if n_keys > 1:  # torch.randint's upper end is exclusive: "- 1" leaves a symbol out
        x_mistakes["a batch whose keys are drawn from [0, n_keys - 1): torch.randint's high is exclusive, "
                   "so torch.randint(0, n_keys, ...) already includes n_keys - 1"] = drawn(n_keys - 1, n_keys, symbols)
    if n_distractors > 1:
        x_mistakes["a batch whose distractors are drawn from [n_keys, n_keys + n_distractors - 1): torch.randint's "
                   "high is exclusive, so use n_keys + n_distractors"] = drawn(n_keys, n_keys, symbols - 1)
    y_mistakes = {"the last token of x: y is the key, the *first* token": x_ref[:, -1]} if length > 1 else {}
    what = f"make_recall_batch({batch}, length={length}, n_keys={n_keys}, n_distractors={n_distractors})"

    def call_twice(learner_fn: Callable) -> tuple:
        """Each call with a fresh generator seeded alike: the batch must come from the generator alone."""
        sizes = (batch, length, n_keys, n_distractors)
        return call_learner(what, learner_fn, *sizes, gen()), call_learner(what, learner_fn, *sizes, gen())

    def expect_batch(results: tuple) -> None:
        """The pair (x, y) of the first call, x drawn again alike by the second."""
        result, again = results
        if not (isinstance(result, tuple) and len(result) == 2):
            raise CheckFailed(f"{what} must return a pair (x, y), got {type(result).__name__}")
        x, y = result
        if isinstance(x, Tensor) and x.shape != x_ref.shape:
            raise CheckFailed(f"{what}: x should have shape {tuple(x_ref.shape)} — the key plus length - 1 "
                              f"distractors — got {tuple(x.shape)}")
        if isinstance(x, Tensor) and not torch.equal(x, again[0]):
            raise CheckFailed(f"{what}: two calls with equally seeded generators gave different batches: draw "
                              f"every random number with generator=generator")
        compare(x, x_ref, f"{what}: x", x_mistakes, atol=0, rtol=0)
        if isinstance(y, Tensor) and y.shape == (batch, 1):
            raise CheckFailed(f"{what}: y has shape {tuple(y.shape)}, the keys as a column: return them as "
                              f"shape (batch_size,) = {tuple(y_ref.shape)}")
        compare(y, y_ref, f"{what}: y", y_mistakes, atol=0, rtol=0)

    return Case(what, call=call_twice, inspect=expect_batch)
