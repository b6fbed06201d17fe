"""`import_from_notebook`: bring the learner's own classes and functions from an earlier lesson's
notebook into a later one, without running the notebook's other cells."""

from __future__ import annotations

import ast
import json
import os
import sys
import types
from collections.abc import Sequence
from pathlib import Path
from typing import Any

class NotebookImportError(ImportError):
    """A name could not be taken from a lesson notebook: it is missing or still an exercise stub."""


_DEFINITIONS = (ast.Import, ast.ImportFrom, ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)
# What a "simple constant" may be built from: literals, names of other constants, arithmetic.
_CONSTANT_PARTS = (ast.Constant, ast.Name, ast.Load, ast.UnaryOp, ast.BinOp, ast.unaryop, ast.operator,
                   ast.Tuple, ast.List, ast.Set, ast.Dict)


def _is_simple_constant(node: ast.AST) -> bool:
    return all(isinstance(part, _CONSTANT_PARTS) for part in ast.walk(node))


def _is_definition(statement: ast.stmt) -> bool:
    """An import, a def, a class, a docstring, or `NAME = <constant expression>`."""
    if isinstance(statement, _DEFINITIONS):
        return True
    if isinstance(statement, ast.Expr):
        return isinstance(statement.value, ast.Constant) and isinstance(statement.value.value, str)
    if isinstance(statement, ast.Assign):
        targets_ok = all(isinstance(t, ast.Name) or (isinstance(t, ast.Tuple) and
                         all(isinstance(e, ast.Name) for e in t.elts)) for t in statement.targets)
        return targets_ok and _is_simple_constant(statement.value)
    if isinstance(statement, ast.AnnAssign):
        return (isinstance(statement.target, ast.Name) and statement.value is not None
                and _is_simple_constant(statement.value))
    return False


def definition_cells(nb: Any) -> list[tuple[int, str]]:
    """(index, source) of the code cells whose top-level statements are all definitions.

    Cells that run things (tests, training, plots) are skipped, and so are cells that are not
    plain Python (IPython magics such as `%matplotlib`).
    """
    cells = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or not cell.source.strip():
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        if tree.body and all(_is_definition(statement) for statement in tree.body):
            cells.append((index, cell.source))
    return cells


def _raises_not_implemented(node: ast.AST) -> bool:
    """True when a def/class still holds nbgrader's stub `raise NotImplementedError()`."""
    for part in ast.walk(node):
        if isinstance(part, ast.Raise) and part.exc is not None:
            exc = part.exc.func if isinstance(part.exc, ast.Call) else part.exc
            if isinstance(exc, ast.Name) and exc.id == "NotImplementedError":
                return True
    return False


def _unfinished(name: str, definitions: dict[str, ast.AST]) -> tuple[str, ...] | None:
    """The chain of notebook definitions from `name` to one that is still a stub, or None."""
    seen: set[str] = set()

    def visit(current: str, chain: tuple[str, ...]) -> tuple[str, ...] | None:
        if current in seen or current not in definitions:
            return None
        seen.add(current)
        node = definitions[current]
        if _raises_not_implemented(node):
            return chain
        used = {part.id for part in ast.walk(node) if isinstance(part, ast.Name)}
        for other in sorted(used - {current}):
            found = visit(other, chain + (other,))
            if found:
                return found
        return None

    return visit(name, (name,))


def import_statements(nb: Any, skip: Sequence[int] = ()) -> list[tuple[int, str]]:
    """(index, source) of the top-level import statements of the code cells not in `skip`.

    A setup cell often mixes imports with calls (`device = setup(seed=0)`); the classes defined
    later need its imports, not its calls.
    """
    found = []
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code" or index in skip:
            continue
        try:
            tree = ast.parse(cell.source)
        except SyntaxError:
            continue
        imports = [node for node in tree.body if isinstance(node, (ast.Import, ast.ImportFrom))]
        if imports:
            found.append((index, "\n".join(ast.unparse(node) for node in imports)))
    return found


def _read_notebook(path: Path) -> Any:
    """The notebook's cells as objects with .cell_type and .source (a string). Plain JSON: nbformat's
    validator imports jsonschema, seconds of start-up for every lesson that imports another."""
    try:
        data = json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        raise NotebookImportError(f"{path} is not a valid notebook: {error}") from error
    cells = [types.SimpleNamespace(cell_type=cell.get("cell_type"),
                                   source="".join(cell.get("source", "")))  # a list of lines, or a string
             for cell in data.get("cells", [])]
    return types.SimpleNamespace(cells=cells)


def import_from_notebook(path: str | os.PathLike[str], names: str | Sequence[str]) -> Any:
    """Take classes and functions you wrote in a lesson notebook, to use them in another.

    Reads the notebook at `path` and runs only its *definition cells* (code cells made of
    imports, defs, classes and simple constants such as `D_MODEL = 64`) in a fresh module, in
    notebook order, plus the import statements of the other cells (a setup cell's imports);
    test cells, plots and training are skipped. Returns the object named `names` (a string), or
    a tuple of objects in the order given (a list of names).

    Raises NotebookImportError, naming the notebook, when a name is not defined there or when it
    (or a definition of that notebook it uses) still raises NotImplementedError: finish that
    exercise first.
    """
    single = isinstance(names, str)
    wanted = [names] if single else list(names)
    path = Path(path)
    if not path.is_file():
        raise FileNotFoundError(f"no notebook at {path} (looked from {Path.cwd()})")
    nb = _read_notebook(path)
    cells = definition_cells(nb)

    definitions: dict[str, ast.AST] = {}
    for _, source in cells:
        for statement in ast.parse(source).body:
            if isinstance(statement, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
                definitions[statement.name] = statement  # a later cell redefines: it wins
    for name in wanted:
        if name not in definitions:
            raise NotebookImportError(f"`{name}` is not defined in {path}: finish that exercise first")
        chain = _unfinished(name, definitions)
        if chain:
            how = f"`{name}`" if len(chain) == 1 else f"`{name}` uses {' -> '.join(f'`{c}`' for c in chain[1:])}, which"
            raise NotebookImportError(f"{how} still raises NotImplementedError in {path}: "
                                      "finish that exercise first")

    # A real module, so that classes defined there have a __module__ that can be found.
    module_name = "_notebook_" + "".join(ch if ch.isalnum() else "_" for ch in path.stem)
    module = types.ModuleType(module_name, f"definitions from {path}")
    module.__file__ = str(path)
    sys.modules[module_name] = module
    to_run = sorted(cells + import_statements(nb, skip=[index for index, _ in cells]))
    for index, source in to_run:
        code = compile(source, f"{path} (cell {index})", "exec")
        try:
            exec(code, module.__dict__)  # noqa: S102 - the learner's own notebook
        except Exception as error:
            raise NotebookImportError(f"cell {index} of {path} failed: {type(error).__name__}: {error}") from error
    found = tuple(getattr(module, name) for name in wanted)
    return found[0] if single else found
