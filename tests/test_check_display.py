"""In a notebook, a failed check shows as its one-line message (plus the learner's own frames when
their code raised), never as a traceback through the checker; other errors keep their traceback."""

from __future__ import annotations

import re

import pytest
from nbclient import NotebookClient
from nbformat.v4 import new_code_cell, new_notebook

pytestmark = pytest.mark.slow  # starts a kernel

ANSI = re.compile(r"\x1b\[[0-9;]*m")

SETUP = "from tfcourse.course import setup\ndevice = setup()"
WRONG_ATTENTION = '''
import math, torch
def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    weights = torch.softmax(q @ k.transpose(-2, -1), dim=-1)  # no 1/sqrt(d_k)
    return weights @ v, weights
'''
CRASHING_ATTENTION = '''
def scaled_dot_product_attention(q, k, v, mask=None, dropout_p=0.0):
    scores = q @ k.transpose(-2, -1)
    return scores[99], None  # IndexError
'''
CHECK = "from tfcourse.checks.attention import check_scaled_dot_product_attention\n" \
        "check_scaled_dot_product_attention(scaled_dot_product_attention)"


def _execute(*sources: str) -> list:
    nb = new_notebook(cells=[new_code_cell(s) for s in sources])
    NotebookClient(nb, timeout=120, kernel_name="python3", allow_errors=True).execute()
    return nb.cells


def _run(*sources: str) -> list[dict]:
    return [output for cell in _execute(*sources) for output in cell.outputs if output.output_type == "error"]


@pytest.fixture(scope="module")
def errors() -> list[dict]:
    return _run(SETUP, WRONG_ATTENTION, CHECK, CRASHING_ATTENTION, CHECK, "undefined_name + 1")


def test_a_failed_check_is_one_plain_line(errors):
    wrong = errors[0]
    text = [ANSI.sub("", line) for line in wrong["traceback"]]
    assert wrong["ename"] == "CheckFailed", "still an error output: nbgrader gives the cell 0 points"
    assert len(text) == 1 and text[0].startswith("✘ "), text
    assert "without the 1/√d_k scaling" in text[0] and "*" not in text[0] and "`" not in text[0]
    assert "checks/" not in text[0] and "Traceback" not in text[0]


def test_the_learners_own_frame_is_shown_when_their_code_raised(errors):
    crash = "".join(ANSI.sub("", line) for line in errors[1]["traceback"])
    assert crash.startswith("✘ ") and "your code raised IndexError" in crash
    assert "Where your code raised it" in crash and "return scores[99], None" in crash
    assert "tfcourse/checks" not in crash and "core.py" not in crash, crash


def test_other_errors_keep_their_traceback(errors):
    name_error = errors[2]
    assert name_error["ename"] == "NameError"
    assert len(name_error["traceback"]) > 1 and "undefined_name" in "".join(name_error["traceback"])


def test_a_learners_own_exception_handler_cannot_hide_a_failed_check():
    swallow = "get_ipython().set_custom_exc((Exception,), lambda *args, **kwargs: None)"
    (error,) = _run(SETUP, WRONG_ATTENTION, swallow, CHECK)
    assert error["ename"] == "CheckFailed"


def test_a_demo_cell_that_needs_an_unfinished_exercise_says_which_and_draws_nothing():
    stub = "def split_heads(x, n_heads):\n    # YOUR CODE HERE\n    raise NotImplementedError()"
    demo = ("import matplotlib.pyplot as plt\nfig, axes = plt.subplots(1, 2)\n"
            "axes[0].plot(split_heads([1, 2], 2))")
    module_level = "raise NotImplementedError('not a learner function')"
    cells = _execute(SETUP, "%matplotlib inline", stub, demo, module_level)
    (error,) = cells[3].outputs
    (line,) = [ANSI.sub("", text) for text in error["traceback"]]
    assert line.startswith("✘ finish the exercise 'split_heads' first"), line
    assert not any(o.output_type == "display_data" for o in cells[3].outputs), "no half-drawn figure"
    other = cells[4].outputs[0]
    assert other["ename"] == "NotImplementedError" and len(other["traceback"]) > 1, "a real error keeps its traceback"


def test_a_failing_cell_that_uses_an_exercise_not_passing_names_it(tmp_path, monkeypatch):
    """The kernel's reading: the running cell uses `mha`, which an earlier cell built with the learner's
    MultiHeadAttention; while that exercise's check has not passed, the cell's error is the exercise's."""
    from types import SimpleNamespace

    from tfcourse.checks import core

    (tmp_path / "03_attention").mkdir()
    monkeypatch.chdir(tmp_path / "03_attention")
    history = ["", "class MultiHeadAttention:\n    pass", "mha = MultiHeadAttention(32, 4)", "out = mha(x)"]
    shell = SimpleNamespace(user_ns={"In": history})
    saved = dict(core.CHECKED)  # (the module is read-only to notebooks: its dict is changed in place)
    core.CHECKED.clear()
    try:
        _judge_the_history(core, shell, history, tmp_path, monkeypatch)
    finally:
        core.CHECKED.clear()
        core.CHECKED.update(saved)


def _judge_the_history(core, shell, history, tmp_path, monkeypatch):
    from types import SimpleNamespace

    helpers = ["Exercise 2 — scaled_dot_product_attention", "Exercise 5 — split_heads and merge_heads"]
    # MultiHeadAttention builds on SDPA and split/merge heads: the cell runs all three
    assert core.exercises_not_passing(shell) == [*helpers, "Exercise 6 — MultiHeadAttention"]  # never checked
    core.CHECKED.update(scaled_dot_product_attention=True, split_heads=True, merge_heads=True)
    core.CHECKED["MultiHeadAttention"] = False
    assert core.exercises_not_passing(shell) == ["Exercise 6 — MultiHeadAttention"]  # its check failed
    core.CHECKED["MultiHeadAttention"] = True
    assert core.exercises_not_passing(shell) == []  # it passes: the error is the cell's own
    core.CHECKED["merge_heads"] = False  # MHA passed with the reference helpers in place; the cell runs yours
    assert core.exercises_not_passing(shell) == ["Exercise 5 — split_heads and merge_heads"]
    core.CHECKED["merge_heads"] = True
    shell.user_ns["In"] = [*history[:3], "from tfcourse.checks.attention import check_multi_head_attention"]
    core.CHECKED["MultiHeadAttention"] = False
    assert core.exercises_not_passing(shell) == []  # a test cell speaks for itself
    monkeypatch.chdir(tmp_path)
    assert core.exercises_not_passing(SimpleNamespace(user_ns={"In": history})) == []  # not in a lesson's folder
