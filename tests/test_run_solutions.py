"""`tfcourse run-solutions`: executed copies go to the output folder; nothing else is overwritten."""

from pathlib import Path

import nbformat
import pytest

from tfcourse.course.cli import main
from tfcourse.course.run_solutions import run_notebook

pytestmark = pytest.mark.slow  # runs notebooks: `make test-fast` leaves it out


def _lesson(folder: Path, name: str, source: str) -> Path:
    path = folder / name / f"{name}.ipynb"
    path.parent.mkdir(parents=True)
    nbformat.write(nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell(source)]), path)
    return path


def test_runs_every_lesson_reports_and_fails_on_error(tmp_path, capsys):
    source = tmp_path / "solutions"
    _lesson(source, "01_ok", "x = 1 + 1\nprint(x)")
    _lesson(source, "02_broken", "raise ValueError('boom')")
    out = tmp_path / "out"
    assert main(["run-solutions", "--fast", "--source", str(source), "--out", str(out)]) == 1
    printed = capsys.readouterr().out
    assert "1/2 notebooks ran" in printed
    executed = nbformat.read(out / "01_ok" / "01_ok.ipynb", as_version=4)
    assert executed.cells[0].outputs[0]["text"] == "2\n"
    assert main(["run-solutions", "01", "--fast", "--source", str(source), "--out", str(out)]) == 0  # replaces its copy


def test_never_overwrites_a_notebook_it_did_not_write(tmp_path):
    source = _lesson(tmp_path / "solutions", "01_ok", "1")
    learner = _lesson(tmp_path / "notebooks", "01_ok", "my work")
    before = learner.read_bytes()
    with pytest.raises(ValueError, match="not written by run-solutions"):
        run_notebook(source, learner)
    with pytest.raises(ValueError, match="source notebook"):
        run_notebook(source, source)
    assert learner.read_bytes() == before
