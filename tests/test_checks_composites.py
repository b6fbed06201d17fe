"""Composite exercises are graded on their own: a correct composite built on a wrong earlier helper
passes, and its line names the earlier exercise to fix — once, and only the ones that fail.

Each learner here is a lesson's own solution code, imported as a later lesson imports it
(`import_from_notebook`: its imports and definition cells in one module), with one earlier answer
replaced by a realistic mistake."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest

from tfcourse import manifest
from tfcourse.checks.attention import check_multi_head_attention
from tfcourse.checks.core import CheckFailed
from tfcourse.checks.models import check_cross_entropy
from tfcourse.checks.tokenization import check_bpe_encode, check_train_bpe
from tfcourse.course import import_from_notebook

ROOT = Path(__file__).resolve().parents[1]


def _answer_cell(nb, grade_id: str):
    return next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)


@pytest.fixture
def learner(tmp_path):
    """`learner(lesson, name, grade_id, change)`: `name` from the lesson's solutions, with the answer
    cell `grade_id` rewritten by `change(source) -> source`."""

    def take(lesson: str, name: str, grade_id: str, change) -> object:
        nb = nbformat.read(ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
        cell = _answer_cell(nb, grade_id)
        cell.source = change(cell.source)
        path = tmp_path / f"{lesson}.ipynb"
        nbformat.write(nb, path)
        return import_from_notebook(path, name)

    return take


def edited(old: str, new: str):
    def change(source: str) -> str:
        assert old in source, f"the answer cell no longer contains {old!r}"
        return source.replace(old, new)

    return change


def judged(check, learner, capfd) -> str:
    capfd.readouterr()  # what importing printed
    check(learner, hidden=True)
    out, err = capfd.readouterr()
    assert err == "" and out.startswith("✔ ") and out.count("\n") == 1, out
    return out


MERGE_WITHOUT_TRANSPOSE = ("x = x.transpose(1, 2)  # (B, T, n_heads, d_head)", "pass")
SDPA_WITHOUT_SCALE = ("/ math.sqrt(d_k)", "")


@pytest.mark.parametrize("grade_id, edit, fix", [
    ("heads_impl", MERGE_WITHOUT_TRANSPOSE, "Exercise 5 (split_heads and merge_heads)"),
    ("sdpa_impl", SDPA_WITHOUT_SCALE, "Exercise 2 (scaled_dot_product_attention)"),
])
def test_multi_head_attention_on_a_wrong_helper_passes_and_names_it(grade_id, edit, fix, learner, capfd):
    mha = learner("03_attention", "MultiHeadAttention", grade_id, edited(*edit))
    out = judged(check_multi_head_attention, mha, capfd)
    assert f"fix {fix} first" in out and out.count("Exercise") == 1, out


def test_train_bpe_on_a_wrong_merge_word_passes_and_names_it(learner, capfd):
    train_bpe = learner("01_tokenization", "train_bpe", "merge_word_impl", edited("i += 2", "i += 1"))
    out = judged(check_train_bpe, train_bpe, capfd)
    assert "fix Exercise 3 (merge_word) first" in out and "count_pairs" not in out, out


def test_cross_entropy_on_a_naive_log_softmax_passes_and_names_it(learner, capfd):
    """A log_softmax without the max shift overflows on large logits: cross_entropy itself is right."""
    def naive(source: str) -> str:
        return re.sub(r"### BEGIN SOLUTION\n.*?### END SOLUTION",
                      "### BEGIN SOLUTION\n    return logits - logits.exp().sum(dim=dim, keepdim=True).log()\n"
                      "    ### END SOLUTION", source, flags=re.S)

    cross_entropy = learner("06_models", "cross_entropy", "log_softmax_impl", naive)
    out = judged(check_cross_entropy, cross_entropy, capfd)
    assert "fix Exercise 1 (a stable log_softmax) first" in out, out


def test_a_wrong_composite_on_right_helpers_keeps_its_own_message(learner):
    bpe_encode = learner("01_tokenization", "bpe_encode", "bpe_encode_impl",
                         edited("merge_word", "(lambda word, pair, new: word)"))
    with pytest.raises(CheckFailed) as failure:
        check_bpe_encode(bpe_encode, hidden=False)
    assert "Exercise" not in str(failure.value)


def test_every_composite_in_the_manifest_has_its_parts_declared():
    """An exercise whose answer calls earlier answers by name (the manifest's builds_on) is judged
    with their references in place: its check is declared with @composite naming each of them."""
    import importlib

    for exercise in manifest.exercises():
        if not exercise.builds_on:
            continue
        module, _, name = exercise.check.rpartition(".")
        check = getattr(importlib.import_module(f"tfcourse.checks.{module}"), name)
        parts = getattr(check, "composite_parts", None)
        assert parts is not None, f"{exercise.check} builds on {exercise.builds_on} but is not a @composite"
        assert set(exercise.builds_on) <= set(parts), (exercise.check, exercise.builds_on, sorted(parts))
