"""Debug exercises: the learner starts from a plausible implementation with one planted mistake — one the
exercise's check knows by name — and must find and fix it.

    BUG = PlantedBug("03_attention", "attention_debug_impl", "colleagues_attention", source='''def ...''',
                     mistake="the mask applied after softmax", coarse_hint="add up each row of the weights ...")
    check_attention_debug = debug_exercise(check_scaled_dot_product_attention, BUG)

The planted code lives here, once: `nbgrader generate_assignment` writes it into the student version in
place of the answer (`tfcourse.course.autograde.PlantBugs`, matched by the answer cell's grade id), and the
check recognises it. The check says, in a lesson's kernel:

1. while the function is still the planted code: only that the bug is still there (no diagnosis);
2. at the first failing run after an edit: the coarse hint;
3. at every later failing run: the full diagnosis of the exercise's own check.

In grading (nbgrader's kernel, or the hidden run) it always gives the full diagnosis.
"""

from __future__ import annotations

import ast
import inspect
import os
import textwrap
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .core import CheckFailed


@dataclass(frozen=True)
class PlantedBug:
    lesson: str  # the lesson folder
    answer_id: str  # the grade id of the debug exercise's answer cell
    name: str  # the function the cell defines (a function: IPython keeps no source of a notebook's classes)
    source: str  # the cell the student version starts from: the code with its one mistake
    mistake: str  # words of the diagnosis the exercise's check gives for it (the tests look for them)
    coarse_hint: str  # where to look, without naming the mistake


PLANTED: dict[str, PlantedBug] = {}  # answer cell grade id -> its bug, filled as the check modules load
_failed_after_edit: dict[str, int] = {}  # answer cell grade id -> failing runs since the code was edited


def _normalised(source: str, name: str) -> str | None:
    """The definition of `name` in `source`, without docstrings and comments, as an AST dump."""
    try:
        tree = ast.parse(textwrap.dedent(source))
    except SyntaxError:
        return None
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name == name:
            for inner in ast.walk(node):
                body = getattr(inner, "body", None)
                if (isinstance(inner, (ast.FunctionDef, ast.ClassDef)) and body and isinstance(body[0], ast.Expr)
                        and isinstance(body[0].value, ast.Constant) and isinstance(body[0].value.value, str)):
                    inner.body = body[1:] or [ast.Pass()]
            return ast.dump(node, annotate_fields=False)
    return None


def still_planted(learner: Any, bug: PlantedBug) -> bool:
    """Whether `learner` is still the planted code (comments, docstrings and spacing aside)."""
    try:
        source = inspect.getsource(learner)
    except (OSError, TypeError):  # defined where its source cannot be read: it was written, not given
        return False
    return _normalised(source, bug.name) == _normalised(bug.source, bug.name)


def grading() -> bool:
    """Whether this runs in nbgrader's grading kernel: graded feedback always gives the full diagnosis."""
    return bool(os.environ.get("NBGRADER_EXECUTION"))


def debug_exercise(check: Callable[..., None], bug: PlantedBug) -> Callable[..., None]:
    """The check of a debug exercise: `check` (the exercise's own check, which knows the mistake) with the
    three stages above. Registers `bug` for the student version."""
    PLANTED[bug.answer_id] = bug

    def check_debug(learner: Any, hidden: bool = False) -> None:
        full = hidden or grading()
        if not full and still_planted(learner, bug):
            raise CheckFailed(f"{bug.name}: the planted bug is still there — this is the code you were given. Read "
                              "it against the symptom described above, find the one mistake and fix it.")
        try:
            check(learner, hidden)
        except CheckFailed as failure:
            if full:
                raise
            _failed_after_edit[bug.answer_id] = _failed_after_edit.get(bug.answer_id, 0) + 1
            if _failed_after_edit[bug.answer_id] == 1:
                raise CheckFailed(f"{bug.name}: not fixed yet. Hint: {bug.coarse_hint} (run this cell again for "
                                  "the full diagnosis)") from None
            raise failure
        _failed_after_edit.pop(bug.answer_id, None)

    check_debug.__name__ = f"{check.__name__}_debug"
    check_debug.__doc__ = f"Debug exercise {bug.answer_id}: {check.__name__} on the learner's fix of a planted bug."
    return check_debug


def planted_bugs() -> dict[str, PlantedBug]:
    """Every debug exercise's bug, by its answer cell's grade id (the check modules that define them loaded)."""
    from . import attention, blocks, embeddings, ffn, models, training, translation  # noqa: F401 - they register

    return dict(PLANTED)


__all__ = ["PlantedBug", "debug_exercise", "still_planted", "grading", "planted_bugs", "PLANTED"]
