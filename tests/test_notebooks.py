"""The lessons as notebooks: their nbgrader metadata is valid, the student version is in sync, and
the reference code in them cannot drift from the package. (nbval runs them; tests/test_grading.py
proves that their stubs fail.)"""

from __future__ import annotations

import ast
import importlib
import inspect
import os
import re
import subprocess
import sys
import textwrap
from pathlib import Path

import nbformat
import pytest

from tfcourse.course.run_solutions import lesson_notebooks
from tools.release import generate

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = lesson_notebooks(ROOT / "solutions")
LESSONS = [path.parent.name for path in SOLUTIONS]
GRADED = [p.parent.name for p in SOLUTIONS
          if any(c.metadata.get("nbgrader", {}).get("grade") for c in nbformat.read(p, as_version=4).cells)]


@pytest.fixture(scope="module")
def student_versions(tmp_path_factory) -> Path:
    release = tmp_path_factory.mktemp("release")
    generate("*", release)  # every lesson in one nbgrader run
    return release


def test_there_are_lessons():
    assert len(LESSONS) >= 11 and len(GRADED) >= 10


# Running the solutions is nbval's job: `pytest` collects solutions/*.ipynb (pyproject.toml) and runs
# each cell as a test, so a failure names the lesson and the cell; cells tagged nbval-check-output
# must also reproduce their saved output. That every graded test cell fails on the stubs is proven by
# grading each untouched student version (tests/test_grading.py).


@pytest.mark.parametrize("path", SOLUTIONS, ids=LESSONS)
def test_source_metadata_is_valid_for_nbgrader(path):
    """What `nbgrader validate` checks besides running the notebook (nbval runs it): the nbgrader
    metadata of every cell is well formed."""
    from nbgrader.nbgraderformat import MetadataValidator

    MetadataValidator().validate_nb(nbformat.read(path, as_version=4))


@pytest.mark.slow
@pytest.mark.parametrize("lesson", LESSONS)
def test_notebooks_folder_equals_a_fresh_generate_assignment(lesson, student_versions):
    committed = ROOT / "notebooks" / lesson / f"{lesson}.ipynb"
    assert committed.exists(), f"notebooks/{lesson} is missing: run `make student-version`"
    fresh = nbformat.read(student_versions / lesson / f"{lesson}.ipynb", as_version=4)
    ours = nbformat.read(committed, as_version=4)
    assert len(ours.cells) == len(fresh.cells), f"{lesson}: run `make student-version`"
    for i, (a, b) in enumerate(zip(ours.cells, fresh.cells)):
        assert (a.cell_type, a.source, a.metadata) == (b.cell_type, b.source, b.metadata), (
            f"notebooks/{lesson} cell {i} differs from solutions/: run `make student-version`"
        )
        assert a.get("outputs") == b.get("outputs"), f"notebooks/{lesson} cell {i}: outputs differ from solutions/"
    assert ours.metadata == fresh.metadata


CHECKED = "nbval-check-output"


def test_the_worked_examples_keep_their_outputs_and_no_student_notebook_shows_the_learners_results():
    """The cells tagged for nbval keep their output in solutions/; in notebooks/ only those that call the
    package alone (an output of the learner's functions, there before they wrote them, would look like
    their result). No other cell has an output."""
    from tfcourse.course.autograde import learner_names, uses_learner_code

    checked = {"solutions": 0, "notebooks": 0}
    for folder in checked:
        for lesson in LESSONS:
            nb = nbformat.read(ROOT / folder / lesson / f"{lesson}.ipynb", as_version=4)
            for i, cell in enumerate(c for c in nb.cells if c.cell_type == "code"):
                tagged = CHECKED in cell.metadata.get("tags", [])
                learners = uses_learner_code(cell.source, learner_names(lesson))
                kept = tagged and not (folder == "notebooks" and learners)
                assert bool(cell.outputs) == kept, f"{folder}/{lesson} code cell {i}: " + (
                    "tagged nbval-check-output but has no saved output (tools/save_checked_outputs.py)" if kept
                    else "the output of the learner's code in a student notebook" if tagged
                    else "an output is saved in an unchecked cell")
                checked[folder] += kept
    assert checked["solutions"] >= 15 and checked["notebooks"] >= 8, f"the worked examples checked: {checked}"


@pytest.mark.slow
def test_nbval_fails_when_a_worked_example_changes(tmp_path):
    """The lesson 05 worked example, x + F(x) = (5, -1): its saved output is checked, so a change fails."""
    source = nbformat.read(ROOT / "solutions" / "05_blocks" / "05_blocks.ipynb", as_version=4)
    index = next(i for i, c in enumerate(source.cells) if CHECKED in c.metadata.get("tags", []))  # (nbval counts code cells only)
    source.cells = source.cells[: index + 1]  # the setup and the worked example: a short run
    stream = source.cells[index].outputs[0]
    assert "x + F(x) = [5.0, -1.0]" in stream.text

    def nbval(name: str) -> subprocess.CompletedProcess:
        path = tmp_path / name
        nbformat.write(source, path)
        return subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-o", "addopts=",
                               "--nbval-lax", "--nbval-current-env", str(path)],
                              cwd=ROOT, capture_output=True, text=True, timeout=300)

    unchanged = nbval("unchanged.ipynb")
    assert unchanged.returncode == 0, unchanged.stdout[-3000:]
    stream.text = stream.text.replace("[5.0, -1.0]", "[5.0, -2.0]")
    changed = nbval("changed.ipynb")
    assert changed.returncode != 0 and "Cell outputs differ" in changed.stdout, changed.stdout[-3000:]
    assert "-2.0" in changed.stdout and "-1.0" in changed.stdout  # the report shows what was expected and got


# ------------------------------------------------------------------------------------------
# Structure: points, exercises, hidden tests
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("path", SOLUTIONS, ids=LESSONS)
def test_lesson_structure(path):
    nb = nbformat.read(path, as_version=4)
    cells = [(c, c.metadata.get("nbgrader", {})) for c in nb.cells]
    solutions = [c for c, m in cells if m.get("solution")]
    test_cells = [c for c, m in cells if m.get("grade") and not m.get("solution")]
    if not test_cells and not solutions:
        return  # an ungraded overview lesson
    assert 3 <= len(solutions) <= 7, f"{path.parent.name}: {len(solutions)} exercises, expected 3-7 (a debug exercise included)"
    for cell, meta in cells:
        if meta.get("grade"):
            assert meta.get("points", 0) > 0, f"graded cell {meta['grade_id']} has no points"
    for cell in solutions:
        assert "### BEGIN SOLUTION" in cell.source and "### END SOLUTION" in cell.source
    for cell in test_cells:
        assert "### BEGIN HIDDEN TESTS" in cell.source, f"{cell.metadata['nbgrader']['grade_id']}: no hidden tests"
    for cell in nb.cells:
        if cell.cell_type == "markdown":
            assert "### BEGIN" not in cell.source
    ids = [m["grade_id"] for _, m in cells if m]
    assert len(ids) == len(set(ids)), "duplicate grade ids"


# ------------------------------------------------------------------------------------------
# One source of truth: solution regions that mirror package code must equal it
# ------------------------------------------------------------------------------------------


def _is_validation_call(node: ast.stmt) -> bool:
    """`expect_tensor(...)`, `_check_mask(...)`: input checks the package adds and learners need not."""
    if not (isinstance(node, ast.Expr) and isinstance(node.value, ast.Call)):
        return False
    func = node.value.func
    name = func.id if isinstance(func, ast.Name) else getattr(func, "attr", "")
    return name.startswith(("expect_", "_check"))


class _Normalise(ast.NodeTransformer):
    """Drop docstrings, type annotations and validation calls: what remains is the algorithm."""

    def _body(self, body):
        if body and isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant) \
                and isinstance(body[0].value.value, str):
            body = body[1:]
        return [stmt for stmt in body if not _is_validation_call(stmt)] or [ast.Pass()]

    def generic_visit(self, node):
        node = super().generic_visit(node)
        if isinstance(getattr(node, "body", None), list):
            node.body = self._body(node.body)
        for field in ("orelse", "finalbody"):
            statements = getattr(node, field, None)
            if isinstance(statements, list) and statements:  # (an `a if c else b` has an expression here)
                setattr(node, field, [s for s in statements if not _is_validation_call(s)] or [ast.Pass()])
        if isinstance(node, ast.arg):
            node.annotation = None
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            node.returns = None
        if isinstance(node, ast.AnnAssign) and node.value is None:
            return None  # a bare annotation such as `x: int` carries no behaviour
        return node


def normalised_ast(source: str, name: str) -> str:
    tree = ast.parse(textwrap.dedent(source))
    matches = [n for n in tree.body if isinstance(n, (ast.FunctionDef, ast.ClassDef)) and n.name == name]
    assert matches, f"no top-level def/class named {name}"
    return ast.dump(_Normalise().visit(matches[-1]), annotate_fields=False)


def _mirrors():
    for path in SOLUTIONS:
        for index, cell in enumerate(nbformat.read(path, as_version=4).cells):
            for dotted in cell.metadata.get("tfcourse", {}).get("mirrors", []):
                yield pytest.param(path, index, dotted, id=f"{path.parent.name}:{dotted}")


def _solution_source(cell_source: str) -> str:
    return re.sub(r"^\s*### (BEGIN|END) SOLUTION\s*$", "", cell_source, flags=re.M)


@pytest.mark.parametrize(("path", "index", "dotted"), list(_mirrors()))
def test_solution_region_equals_the_package(path, index, dotted):
    module_name, _, name = dotted.rpartition(".")
    package_obj = getattr(importlib.import_module(module_name), name)
    cell = nbformat.read(path, as_version=4).cells[index]
    ours = normalised_ast(_solution_source(cell.source), name)
    theirs = normalised_ast(inspect.getsource(package_obj), name)
    assert ours == theirs, f"{path.parent.name}: the solution's {name} has drifted from {dotted}"


def test_drift_check_ignores_only_docstrings_comments_annotations_and_validation():
    package = 'def f(x: int) -> int:\n    """Doc."""\n    expect_tensor(x, "x")\n    return x + 1  # why\n'
    assert normalised_ast("def f(x):\n    return x + 1\n", "f") == normalised_ast(package, "f")
    assert normalised_ast("def f(x):\n    return x + 2\n", "f") != normalised_ast(package, "f")
    conditional = "def g(x):\n    return 1 if x else 2\n"
    assert normalised_ast(conditional, "g") != normalised_ast(conditional.replace("1 if", "3 if"), "g")


def _package_objects() -> dict[str, list]:
    """Every function and class the model, data and training modules define, by name."""
    import pkgutil
    import types

    import tfcourse
    objects: dict[str, list] = {}
    for info in pkgutil.walk_packages(tfcourse.__path__, "tfcourse."):
        if info.name.startswith(("tfcourse.checks", "tfcourse.course")) or info.name.endswith("__main__"):
            continue
        module = importlib.import_module(info.name)
        for name, value in vars(module).items():
            if isinstance(value, (types.FunctionType, type)) and getattr(value, "__module__", "") == module.__name__:
                objects.setdefault(name, []).append(value)
    return objects


@pytest.mark.parametrize("path", SOLUTIONS, ids=LESSONS)
def test_no_answer_reads_as_a_copy_of_the_reference(path):
    """The guard refuses a copy of the reference recognised by its docstring and code: an answer
    written in a lesson's stub (whose docstring the learner keeps) must never be taken for one."""
    from tfcourse.checks.core import _is_copy

    objects = _package_objects()
    for cell in nbformat.read(path, as_version=4).cells:
        if not cell.metadata.get("nbgrader", {}).get("solution"):
            continue
        source = _solution_source(cell.source)
        for node in ast.parse(source).body:
            if not (isinstance(node, (ast.FunctionDef, ast.ClassDef)) and node.name in objects):
                continue
            for reference in objects[node.name]:
                namespace = dict(vars(sys.modules[reference.__module__]))
                exec(compile("from __future__ import annotations\n" + source, "answer", "exec"), namespace)  # noqa: S102
                assert not _is_copy(namespace[node.name], reference), (
                    f"{path.parent.name}: the stub of {node.name} keeps {reference.__module__}.{node.name}'s "
                    "docstring, so a learner's answer would be taken for a copy: give the lesson its own docstring")


@pytest.mark.slow
def test_a_lesson_whose_table_does_not_list_the_parts_it_uses_fails(tmp_path):
    """The solutions run with the parts trace on (conftest.py): a notebook that shows one part in its table
    and hands its code another fails after its last cell, naming both; one that shows what it uses passes."""
    setup = "from tfcourse.course.assemble import reference_parts\nparts = reference_parts()\n"
    lessons = {"01_honest": setup + 'display(parts.only("LayerNorm"))\nnorm = parts.norm()',
               "02_misleading": setup + 'display(parts.only("LayerNorm"))\nattention = parts.attention()',
               "03_next": "x = 1"}  # runs after the failure: it must start clean
    for name, source in lessons.items():
        (tmp_path / name).mkdir()
        nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]),
                       tmp_path / name / f"{name}.ipynb")
    environment = {k: v for k, v in os.environ.items() if k != "TFCOURSE_TRACE_PARTS"}  # its own trace
    run = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "-p", "conftest", "-o",
                          "addopts=", "-rE", "--nbval-lax", "--nbval-current-env", str(tmp_path)],
                         cwd=ROOT, capture_output=True, text=True, timeout=300, env=environment)
    assert re.search(r"\b3 passed\b.*\b1 error\b", run.stdout), run.stdout[-3000:]
    assert "02_misleading: its tables of your parts do not list what it uses" in run.stdout, run.stdout[-3000:]
    assert "used but not shown ['multi-head attention']" in run.stdout
    summary = run.stdout.split("short test summary")[-1]
    assert "01_honest" not in summary and "03_next" not in summary


def test_lesson_00s_course_map_lists_every_lesson_of_the_manifest():
    from tfcourse import manifest

    source = "\n".join(c.source for c in nbformat.read(ROOT / "solutions" / "00_big_picture" / "00_big_picture.ipynb",
                                                        as_version=4).cells)
    course_map = source[source.index("## 10. The course map"):source.index("### What came after 2017")]
    listed = re.findall(r"^\| (\d\d) \|", course_map, flags=re.M)
    assert listed == [lesson.folder[:2] for lesson in manifest.lessons()], listed
