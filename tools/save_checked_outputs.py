"""Save the outputs of the worked-example cells into solutions/ (after a deliberate change).

Cells tagged `nbval-check-output` keep their output in the solution notebook; `pytest` (nbval)
fails when a run no longer reproduces it, and the student version shows it. After changing such a
cell on purpose, refresh the saved outputs and regenerate the student version:

    python tools/save_checked_outputs.py 05_blocks     # runs the lesson in fast mode
    python tools/release.py --force 05_blocks

Only the tagged cells' outputs are written; every other cell of the source stays output-free.
"""

from __future__ import annotations

import argparse
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tfcourse.course.run_solutions import lesson_notebooks, run_notebook  # noqa: E402

TAG = "nbval-check-output"


def is_checked(cell) -> bool:
    return cell.cell_type == "code" and TAG in cell.metadata.get("tags", [])


def save(lesson_path: Path) -> int:
    source = nbformat.read(lesson_path, as_version=4)
    if not any(is_checked(cell) for cell in source.cells):
        return 0
    with tempfile.TemporaryDirectory() as tmp:
        result = run_notebook(lesson_path, Path(tmp) / lesson_path.name, fast=True)
        if not result.ok:
            raise SystemExit(f"{lesson_path.parent.name} failed: {result.error}")
        executed = nbformat.read(result.output, as_version=4)
    saved = 0
    for cell, ran in zip(source.cells, executed.cells):
        if is_checked(cell):
            cell.outputs = [output for output in ran.outputs if output.output_type != "error"]
            # Its number in a run from the top: nbval ignores the saved output of a never-run cell.
            cell.execution_count = ran.execution_count
            saved += 1
    nbformat.write(source, lesson_path)
    return saved


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", help="lesson folders, e.g. 05_blocks (default: every lesson)")
    args = parser.parse_args(argv)
    for path in lesson_notebooks(ROOT / "solutions", args.lessons or None):
        print(f"{path.parent.name}: saved the output of {save(path)} checked cells")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
