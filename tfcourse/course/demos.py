"""Grading runs what grades: the lesson's demonstrations that no graded cell needs are not run.

A lesson is mostly demonstrations — plots, worked examples, training runs — between its exercises. A
grade depends only on the graded cells (the learner's answers and the test cells) and on the cells
whose names they use (the imports, the setup, a helper the learner wrote). Three nbgrader plug-ins:

- `MarkDemonstrations` (for `nbgrader generate_assignment`) stamps each plain code cell of the student
  version — not an answer, not a test, not locked — with a hash of its source, in its metadata.
- `SkipDemonstrations` (for `nbgrader autograde`, just before Execute) leaves out the cells after the
  first exercise that still hold the source their stamp names (a guess written in place of a
  prediction's `None` aside) and that bind no name read by a cell that runs. A cell the learner wrote
  or changed always runs, and so does every cell it needs.
- `RestoreDemonstrations` (just after Execute) puts the skipped cells back, their output a note that
  they were not run and why.

Grades stay as they were (the catalogue of submissions in the test suite asserts every score); a
submission grades in the time its exercises take, not in the time of the lesson's training runs.
"""

from __future__ import annotations

import ast
import hashlib
import re
import symtable
from dataclasses import dataclass
from typing import Any

from nbformat.v4 import new_output
from nbgrader.preprocessors import NbGraderPreprocessor

from .results import NOT_RUN, not_run_note

STAMP = "demo"  # the key under a cell's metadata["tfcourse"]: {"sha": fingerprint, "guesses": names}
# A prediction: `NAME = None  # your guess ...` on a line of its own; the learner replaces the None.
GUESS = re.compile(r"^(\w+)\s*=\s*None\b.*$", re.M)


def _is_plain_code(cell: Any) -> bool:
    meta = cell.get("metadata", {}).get("nbgrader", {})
    return cell.get("cell_type") == "code" and not (meta.get("grade") or meta.get("solution") or meta.get("locked"))


def fingerprint(source: str, guesses: list[str]) -> str:
    """A hash of the cell's source, the right-hand sides of the prediction lines `NAME = ...` left out."""
    lines = [f"{m[1]} = …" if (m := re.match(r"^(\w+)\s*=", line)) and m[1] in guesses else line
             for line in source.splitlines()]
    return hashlib.sha256("\n".join(lines).encode()).hexdigest()[:16]


def _same_as_stamped(cell: Any) -> bool:
    """Whether the cell still holds the source its stamp was made from (a guess in place of None aside)."""
    stamp = cell.get("metadata", {}).get("tfcourse", {}).get(STAMP)
    return bool(stamp) and fingerprint(cell.get("source", ""), stamp.get("guesses", [])) == stamp.get("sha")


@dataclass(frozen=True)
class CellNames:
    """What one cell does with module-level names."""

    binds: frozenset[str]  # names it assigns, imports, defines
    reads_first: frozenset[str]  # names it reads before binding them itself: earlier cells must have bound them
    reads_later: frozenset[str]  # names its functions and classes read when called: bound by any cell


def cell_names(source: str) -> CellNames | None:
    """The module-level names `source` binds and reads, or None when it is not plain Python (a magic, a
    syntax error, `from m import *`): then nothing is known about it."""
    try:
        tree = ast.parse(source)
        table = symtable.symtable(source, "<cell>", "exec")
    except SyntaxError:
        return None
    bound: set[str] = set()
    reads_first: set[str] = set()
    for statement in tree.body:  # in the order they run
        _walk(statement, bound, reads_first)
    if "*" in bound:
        return None
    reads_later: set[str] = set()
    _globals_read_in_children(table, reads_later, bound)
    return CellNames(frozenset(bound), frozenset(reads_first), frozenset(reads_later))


def _walk(node: ast.AST, bound: set[str], reads_first: set[str]) -> None:
    """Visit `node` in evaluation order: a name read before this cell bound it is read from earlier cells."""
    if isinstance(node, ast.Name):
        if isinstance(node.ctx, ast.Load):
            if node.id not in bound:
                reads_first.add(node.id)
        else:
            bound.add(node.id)
    elif isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        for part in [*node.decorator_list, *getattr(node, "bases", []), *getattr(node, "keywords", [])]:
            _walk(part, bound, reads_first)
        if not isinstance(node, ast.ClassDef):
            for default in [*node.args.defaults, *node.args.kw_defaults]:
                if default is not None:
                    _walk(default, bound, reads_first)
        bound.add(node.name)  # the body runs when called: symtable's child scopes hold its reads
    elif isinstance(node, ast.Lambda):
        for default in [*node.args.defaults, *node.args.kw_defaults]:
            if default is not None:
                _walk(default, bound, reads_first)
    elif isinstance(node, (ast.ListComp, ast.SetComp, ast.GeneratorExp, ast.DictComp)):
        _walk(node.generators[0].iter, bound, reads_first)  # the rest is the comprehension's own scope
    elif isinstance(node, (ast.Import, ast.ImportFrom)):
        bound.update((alias.asname or alias.name).split(".")[0] for alias in node.names)
    elif isinstance(node, (ast.Assign, ast.AugAssign, ast.AnnAssign, ast.NamedExpr)):
        if isinstance(node, ast.AugAssign):
            _walk(ast.Name(node.target.id, ast.Load()) if isinstance(node.target, ast.Name) else node.target,
                  bound, reads_first)
        if node.value is not None:
            _walk(node.value, bound, reads_first)  # the value first, then the targets
        for target in getattr(node, "targets", None) or [node.target]:
            _walk(target, bound, reads_first)
    elif isinstance(node, (ast.For, ast.AsyncFor)):
        _walk(node.iter, bound, reads_first)
        for part in [node.target, *node.body, *node.orelse]:
            _walk(part, bound, reads_first)
    else:
        for child in ast.iter_child_nodes(node):
            _walk(child, bound, reads_first)


def _globals_read_in_children(table: symtable.SymbolTable, reads_later: set[str], bound: set[str]) -> None:
    for child in table.get_children():
        for symbol in child.get_symbols():
            if symbol.is_global():  # a module-level name (a free one belongs to an enclosing function)
                if symbol.is_referenced():
                    reads_later.add(symbol.get_name())
                if symbol.is_declared_global() and symbol.is_assigned():
                    bound.add(symbol.get_name())
        _globals_read_in_children(child, reads_later, bound)


class MarkDemonstrations(NbGraderPreprocessor):
    """Stamps the student version's plain code cells with the fingerprint of their source."""

    def preprocess_cell(self, cell: Any, resources: dict, index: int) -> tuple[Any, dict]:
        if _is_plain_code(cell):
            guesses = sorted(set(GUESS.findall(cell.source)))
            cell.metadata.setdefault("tfcourse", {})[STAMP] = {"sha": fingerprint(cell.source, guesses),
                                                              "guesses": guesses}
        return cell, resources


def cells_to_skip(cells: list[Any]) -> set[int]:
    """Indices of the unchanged demonstrations that no cell that runs needs, directly or through others."""
    code = [i for i, cell in enumerate(cells) if cell.get("cell_type") == "code"]
    names = {i: cell_names(cells[i].get("source", "")) for i in code}
    # The preamble (the imports, setup(), the data) runs whatever it binds: setup() also installs the
    # one-line display of a failed check, which the grades' messages are read from.
    first_exercise = next((i for i in code if cells[i].get("metadata", {}).get("nbgrader", {}).get("solution")),
                          len(cells))
    skipped = {i for i in code if i > first_exercise and _is_plain_code(cells[i]) and _same_as_stamped(cells[i])
               and names[i] is not None}
    if any(names[i] is None for i in code if i not in skipped):
        return set()  # a cell that runs reads we know not what: run everything
    changed = True
    while changed:  # a cell that runs keeps every skipped cell that binds what it reads, and so on
        changed = False
        for i in sorted(skipped):
            if any(names[i].binds & (names[j].reads_later | (names[j].reads_first if j > i else frozenset()))
                   for j in code if j not in skipped):
                skipped.discard(i)
                changed = True
    return skipped


class SkipDemonstrations(NbGraderPreprocessor):
    """Before Execute: the unchanged demonstrations that no graded cell needs become raw cells for a moment,
    which Execute passes over."""

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        for index in cells_to_skip(nb.cells):
            cell = nb.cells[index]
            cell.cell_type = "raw"
            cell.pop("outputs", None)
            cell.pop("execution_count", None)
            cell.metadata.setdefault("tfcourse", {})["skipped"] = True
        return nb, resources


class RestoreDemonstrations(NbGraderPreprocessor):
    """After Execute: the skipped cells are code cells again, with a note that they were not run as output."""

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        language = nb.metadata.get("tfcourse", {}).get("language", "en")  # the Chinese edition's says "zh"
        for cell in nb.cells:
            if cell.get("metadata", {}).get("tfcourse", {}).pop("skipped", False):
                cell.cell_type = "code"
                cell.execution_count = None
                cell.outputs = [new_output("stream", name="stdout", text=not_run_note(language))]
        return nb, resources


__all__ = ["MarkDemonstrations", "SkipDemonstrations", "RestoreDemonstrations", "cells_to_skip",
           "cell_names", "CellNames", "fingerprint", "NOT_RUN"]
