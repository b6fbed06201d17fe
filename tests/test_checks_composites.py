"""Composite exercises are graded on their own: a correct composite built on a wrong earlier helper
passes, and its line names the earlier exercise to fix — once, and only the ones that fail.

Each learner here is a lesson's own solution code, run as a notebook runs it (the setup cell, then
the answer cells in one namespace), with one earlier answer replaced by a realistic mistake."""

from __future__ import annotations

import ast
import json
import re
import sys
import types
from pathlib import Path

import pytest

from tfcourse import manifest
from tfcourse.checks.attention import check_multi_head_attention
from tfcourse.checks.core import CheckFailed
from tfcourse.checks.models import check_cross_entropy
from tfcourse.checks.tokenization import check_bpe_encode, check_train_bpe

ROOT = Path(__file__).resolve().parents[1]


def _cells(lesson: str) -> dict[str, str]:
    """The lesson's code cells that are not tests, by grade id (or position)."""
    cells = json.loads((ROOT / "solutions" / lesson / f"{lesson}.ipynb").read_text(encoding="utf-8"))["cells"]
    found = {}
    for index, cell in enumerate(cells):
        nbgrader = cell.get("metadata", {}).get("nbgrader", {})
        if cell["cell_type"] == "code" and not nbgrader.get("grade"):
            found[nbgrader.get("grade_id", f"cell {index}")] = "".join(cell["source"])
    return found


@pytest.fixture
def notebook_namespace(monkeypatch, capfd):
    """Runs a lesson's imports and its answer cells in one module's namespace, as a kernel runs them
    in __main__; `replaced` gives another source for some answer cells (by grade id)."""

    def run(lesson: str, replaced: dict[str, str]) -> dict:
        module = types.ModuleType(f"learner_{lesson}")
        monkeypatch.setitem(sys.modules, module.__name__, module)
        cells = _cells(lesson)
        imports = [node for source in cells.values() for node in ast.parse(source).body
                   if isinstance(node, (ast.Import, ast.ImportFrom))]  # what the lesson's cells import
        exec(compile(ast.Module(imports, type_ignores=[]), f"<{lesson} imports>", "exec"), vars(module))
        for grade_id, source in cells.items():
            if grade_id.endswith("_impl"):
                exec(compile(replaced.get(grade_id, source), f"<{lesson} {grade_id}>", "exec"), vars(module))
        return vars(module)

    return run


def edited(lesson: str, grade_id: str, old: str, new: str) -> dict[str, str]:
    source = _cells(lesson)[grade_id]
    assert old in source, f"{grade_id} no longer contains {old!r}"
    return {grade_id: source.replace(old, new)}


def judged(check, learner, capfd) -> str:
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
def test_multi_head_attention_on_a_wrong_helper_passes_and_names_it(grade_id, edit, fix, notebook_namespace, capfd):
    namespace = notebook_namespace("03_attention", edited("03_attention", grade_id, *edit))
    out = judged(check_multi_head_attention, namespace["MultiHeadAttention"], capfd)
    assert f"fix {fix} first" in out and out.count("Exercise") == 1, out


def test_train_bpe_on_a_wrong_merge_word_passes_and_names_it(notebook_namespace, capfd):
    wrong = edited("01_tokenization", "merge_word_impl", "i += 2", "i += 1")
    namespace = notebook_namespace("01_tokenization", wrong)
    out = judged(check_train_bpe, namespace["train_bpe"], capfd)
    assert "fix Exercise 3 (merge_word) first" in out and "count_pairs" not in out, out


def test_cross_entropy_on_a_naive_log_softmax_passes_and_names_it(notebook_namespace, capfd):
    """A log_softmax without the max shift overflows on large logits: cross_entropy itself is right."""
    source = _cells("06_models")["log_softmax_impl"]
    naive = re.sub(r"### BEGIN SOLUTION\n.*?### END SOLUTION",
                   "### BEGIN SOLUTION\n    return logits - logits.exp().sum(dim=dim, keepdim=True).log()\n"
                   "    ### END SOLUTION", source, flags=re.S)
    namespace = notebook_namespace("06_models", {"log_softmax_impl": naive})
    out = judged(check_cross_entropy, namespace["cross_entropy"], capfd)
    assert "fix Exercise 1 (a stable log_softmax) first" in out, out


def test_a_wrong_composite_on_right_helpers_keeps_its_own_message(notebook_namespace):
    wrong = edited("01_tokenization", "bpe_encode_impl", "merge_word", "(lambda word, pair, new: word)")
    namespace = notebook_namespace("01_tokenization", wrong)
    with pytest.raises(CheckFailed) as failure:
        check_bpe_encode(namespace["bpe_encode"], hidden=False)
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
