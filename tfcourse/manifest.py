"""The course's lessons and their exercises, as data: one manifest that grading, `your_parts()`, the
checks' messages, the tests and the README's lesson table all read.

    from tfcourse import manifest
    lesson = manifest.lesson("04_ffn")
    [e.title for e in lesson.exercises]     # ['Exercise 1 — FeedForward', ...]
    manifest.exercise_defining("05_blocks", "LayerNorm").label   # 'Exercise 1 (LayerNorm)'

The manifest is *built* from the solution notebooks, which stay the one place an exercise is
written: its heading gives the number and name, the answer cell (grade id `X_impl`) the names it
defines, the test cell (`X_tests`) the points and the check it calls; an answer cell's
`tfcourse.supplies` metadata names the component it gives the later lessons (see
`tfcourse.course.assemble`). `python tools/release.py` writes `tfcourse/manifest.json` with the
student notebooks; a test fails when the file and the solutions differ.

This module needs neither torch nor nbgrader: the grading configuration and the checks read it.
"""

from __future__ import annotations

import ast
import functools
import json
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

MANIFEST = Path(__file__).with_name("manifest.json")
EXERCISE_HEADING = re.compile(r"^#+\s*(?:Exercise|练习)\s*(\d+)\b(.*)$")  # the English heading, or the Chinese edition's
CHECK_CALL = re.compile(r"from tfcourse\.checks\.(\w+) import[^\n]*\n(?:.*\n)*?\s*(check_\w+)\(([^()]*)\)")


@dataclass(frozen=True)
class Exercise:
    """One graded exercise: an answer cell and the test cell that grades it."""

    lesson: str  # the lesson folder, e.g. "04_ffn"
    number: int  # as the lesson's heading numbers it
    name: str  # the heading's name in plain text, e.g. "FeedForward"
    answer_id: str  # the answer cell's grade id, e.g. "ffn_impl"
    grade_id: str  # the test cell's grade id, e.g. "ffn_tests"
    points: float
    check: str  # "module.function" in tfcourse.checks, e.g. "ffn.check_feed_forward"
    arguments: tuple[str, ...]  # what the test cell hands the check: the classes or functions the learner writes
    defines: tuple[str, ...]  # the names the answer cell defines
    builds_on: tuple[str, ...]  # names it uses that earlier exercises of the lesson define
    supplies: str | None = None  # the component it gives later lessons (assemble's table), if any
    reference: str | None = None  # the tfcourse object used in its place when the learner's is not ready

    @property
    def argument(self) -> str:
        """The (first) class or function the check is handed, e.g. "FeedForward"."""
        return self.arguments[0]

    @property
    def title(self) -> str:
        """How a grading report names it: 'Exercise 1 — FeedForward'."""
        return f"Exercise {self.number} — {self.name}"

    @property
    def label(self) -> str:
        """How a message names it: 'Exercise 1 (FeedForward)', 'Exercise 5 (split_heads and merge_heads)':
        the heading's name where it names what the learner writes, else that name."""
        return f"Exercise {self.number} ({self.name if self.argument in self.name else self.argument})"


@dataclass(frozen=True)
class Lesson:
    folder: str  # e.g. "04_ffn"
    title: str  # the notebook's first heading
    exercises: tuple[Exercise, ...]

    @property
    def points(self) -> float:
        return sum(e.points for e in self.exercises)


# ----------------------------------------------------------------------------------------------
# Reading the manifest
# ----------------------------------------------------------------------------------------------

@functools.cache
def lessons() -> tuple[Lesson, ...]:
    """Every lesson, in order (lessons without exercises included)."""
    return tuple(_lesson_from(data) for data in json.loads(MANIFEST.read_text(encoding="utf-8"))["lessons"])


def lesson(folder: str) -> Lesson:
    for found in lessons():
        if found.folder == folder:
            return found
    raise KeyError(f"no lesson {folder!r} in the manifest; lessons: {[x.folder for x in lessons()]}")


def exercises() -> tuple[Exercise, ...]:
    return tuple(e for found in lessons() for e in found.exercises)


def exercise_checked_by(check: str) -> Exercise:
    """The exercise whose test cell calls `check` ("module.function" in tfcourse.checks)."""
    for found in exercises():
        if found.check == check:
            return found
    raise KeyError(f"no exercise is graded by {check!r}")


def exercise_defining(folder: str, name: str) -> Exercise | None:
    """The exercise of lesson `folder` whose answer cell defines `name`, if any."""
    return next((e for e in lesson(folder).exercises if name in e.defines), None)


def _lesson_from(data: dict[str, Any]) -> Lesson:
    return Lesson(data["folder"], data["title"], tuple(
        Exercise(**{**e, **{key: tuple(e[key]) for key in ("arguments", "defines", "builds_on")}})
        for e in data["exercises"]))


# ----------------------------------------------------------------------------------------------
# Building it from the solution notebooks
# ----------------------------------------------------------------------------------------------

def heading_name(rest: str) -> str:
    """'★★ — `cross_entropy(logits, targets)` (15 min)' -> 'cross_entropy': an exercise heading's
    name in plain text, without stars, time, Markdown or a signature's arguments."""
    rest = re.sub(r"`(\w+)\([^`]*\)`", r"\1", rest)  # `get_batch(data, ...)` -> get_batch
    rest = re.sub(r"\((?:≈\s*)?\d+\s*min\)", "", rest).replace("★", "").replace("`", "")
    rest = re.sub(r"\\operatorname\{(\w+)\}", r"\1", rest).replace("$", "")
    rest = re.sub(r"\s*\\cdot\s*", "·", rest)
    return rest.strip(" —–-:").strip()


def exercise_headings(cells: list[dict]) -> dict[str, tuple[int, str]]:
    """Each graded cell's grade id -> (number, name), from the last exercise heading above it."""
    found, heading = {}, None
    for cell in cells:
        if cell.get("cell_type") == "markdown":
            for line in _source(cell).splitlines():
                if match := EXERCISE_HEADING.match(line.strip()):
                    heading = (int(match.group(1)), heading_name(match.group(2)))
        nbgrader = cell.get("metadata", {}).get("nbgrader", {})
        if nbgrader.get("grade") and heading:
            found[nbgrader["grade_id"]] = heading
    return found


def _source(cell: dict) -> str:
    source = cell.get("source", "")
    return "".join(source) if isinstance(source, list) else source


def _without_hidden_and_markers(source: str) -> str:
    return re.sub(r"^[ \t]*### (BEGIN|END) (SOLUTION|HIDDEN TESTS)[ \t]*$", "", source, flags=re.M)


def _defined_and_used(source: str) -> tuple[list[str], set[str]]:
    """The top-level names an answer cell defines (in order) and every name it reads."""
    tree = ast.parse(_without_hidden_and_markers(source))
    defined = [node.name for node in tree.body if isinstance(node, (ast.FunctionDef, ast.ClassDef))]
    defined += [target.id for node in tree.body if isinstance(node, ast.Assign)
                for target in node.targets if isinstance(target, ast.Name)]
    used = {node.id for node in ast.walk(tree) if isinstance(node, ast.Name) and isinstance(node.ctx, ast.Load)}
    return defined, used


def _read_and_written(source: str) -> tuple[set[str], set[str]]:
    """(the names a cell reads, the names it assigns or defines); a cell that is not Python reads nothing."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return set(), set()
    read, written = set(), set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Name):
            (read if isinstance(node.ctx, ast.Load) else written).add(node.id)
        elif isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            written.add(node.name)
    return read, written


def exercise_dependencies(sources: list[str], folder: str, exercise_cells: list[bool] | None = None) -> list[set[str]]:
    """For each cell of a lesson (its code, in running order), the exercises (their test cells' grade ids)
    whose results it uses: directly (it calls what an answer defines, and so what that answer builds on) or
    through a name an earlier such cell assigned (`mha = MultiHeadAttention(...)`, then `mha(x)`).
    `exercise_cells[i]`: cell i is an answer or a test cell (it assigns nothing the analysis follows);
    default: the cells that import a check."""
    defined: dict[str, set[str]] = {}
    if folder in {known.folder for known in lessons()}:
        for e in lesson(folder).exercises:
            # A composite's names run the earlier answers it builds on too (train_bpe calls merge_word):
            # a cell that fails through one of those depends on that exercise as well.
            behind = {e.grade_id}.union(*(defined.get(name, set()) for name in e.builds_on))
            for name in e.defines:
                defined.setdefault(name, set()).update(behind)
    origin = {name: set(grade_ids) for name, grade_ids in defined.items()}  # a name -> the exercises behind it
    flags = exercise_cells if exercise_cells is not None else ["tfcourse.checks" in s for s in sources]
    dependencies = []
    for source, is_exercise in zip(sources, flags):
        read, written = _read_and_written(source)
        uses = set().union(*(origin.get(name, set()) for name in read))
        if not is_exercise:
            for name in written - set(defined):  # (an answer's own names keep their exercise)
                origin[name] = uses
        dependencies.append(uses)
    return dependencies


def build_lesson(folder: str, notebook: dict[str, Any]) -> dict[str, Any]:
    """One lesson's manifest entry from its solution notebook (as JSON)."""
    cells = notebook["cells"]
    headings = exercise_headings(cells)
    title = next((line.lstrip("#").strip() for cell in cells if cell.get("cell_type") == "markdown"
                  for line in _source(cell).splitlines() if line.startswith("# ")), folder)
    exercises_found: list[dict[str, Any]] = []
    answer: dict[str, Any] | None = None
    for cell in cells:
        meta = cell.get("metadata", {})
        nbgrader = meta.get("nbgrader", {})
        if nbgrader.get("solution"):
            answer = {"cell": cell, "grade_id": nbgrader["grade_id"], "meta": meta.get("tfcourse", {})}
        elif nbgrader.get("grade"):
            if answer is None:
                raise ValueError(f"{folder}: graded cell {nbgrader['grade_id']} has no answer cell above it")
            exercises_found.append(_exercise(folder, answer, cell, headings, exercises_found))
            answer = None
    return {"folder": folder, "title": title, "exercises": exercises_found}


def _exercise(folder: str, answer: dict[str, Any], test_cell: dict[str, Any], headings: dict[str, tuple[int, str]],
              earlier: list[dict[str, Any]]) -> dict[str, Any]:
    grade_id = test_cell["metadata"]["nbgrader"]["grade_id"]
    call = CHECK_CALL.search(_source(test_cell))
    if call is None:
        raise ValueError(f"{folder}: test cell {grade_id} does not call a check from tfcourse.checks")
    if grade_id not in headings:
        raise ValueError(f"{folder}: no '### Exercise N' heading above test cell {grade_id}")
    defined, used = _defined_and_used(_source(answer["cell"]))
    defined_earlier = [name for e in earlier for name in e["defines"]]
    supplies = answer["meta"].get("supplies", {})
    number, name = headings[grade_id]
    return {
        "lesson": folder, "number": number, "name": name,
        "answer_id": answer["grade_id"], "grade_id": grade_id,
        "points": test_cell["metadata"]["nbgrader"]["points"],
        "check": f"{call.group(1)}.{call.group(2)}",
        "arguments": [a.strip() for a in call.group(3).split(",") if a.strip().isidentifier()],
        "defines": defined, "builds_on": [n for n in defined_earlier if n in used and n not in defined],
        "supplies": supplies.get("part"), "reference": supplies.get("reference"),
    }


def build(solutions: Path) -> dict[str, Any]:
    """The whole manifest from a folder of solution notebooks (solutions/NN_topic/NN_topic.ipynb)."""
    folders = sorted(p.name for p in solutions.iterdir() if p.is_dir() and p.name[:2].isdigit())
    return {"lessons": [build_lesson(folder, json.loads((solutions / folder / f"{folder}.ipynb").read_text("utf-8")))
                        for folder in folders]}


def dumps(data: dict[str, Any]) -> str:
    """The manifest file's text: one exercise a line, so that a diff shows what changed."""
    lines = ['{"lessons": [']
    for i, entry in enumerate(data["lessons"]):
        head = json.dumps({"folder": entry["folder"], "title": entry["title"]}, ensure_ascii=False)[:-1]
        exercises_text = ",\n".join("   " + json.dumps(e, ensure_ascii=False) for e in entry["exercises"])
        body = f', "exercises": [\n{exercises_text}\n  ]}}' if entry["exercises"] else ', "exercises": []}'
        lines.append(" " + head + body + ("," if i < len(data["lessons"]) - 1 else ""))
    lines.append("]}")
    return "\n".join(lines) + "\n"


__all__ = ["Exercise", "Lesson", "lessons", "lesson", "exercises", "exercise_checked_by", "exercise_defining",
           "build", "build_lesson", "dumps", "heading_name", "exercise_headings", "MANIFEST"]
