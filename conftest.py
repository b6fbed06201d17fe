"""Shared by tests/ and the solution notebooks that pytest runs with nbval (hence at the root)."""

import json
import os
import shutil
import tempfile
from collections import defaultdict
from pathlib import Path

import pytest
import torch

# Notebooks that the tests execute (the solutions under nbval, submissions under nbgrader) run in
# fast mode: their kernels inherit this environment.
os.environ.setdefault("TFCOURSE_FAST", "1")
os.environ.setdefault("MPLBACKEND", "Agg")
# ...and note which of "your parts" each lesson shows in its tables and which its code uses (see
# tfcourse.course.assemble.TRACE): when a notebook's last cell has run, the two must be the same.
# (A process that finds the variable set uses that folder and leaves it to its maker to remove.)
_TRACE_MADE_HERE = None if "TFCOURSE_TRACE_PARTS" in os.environ else tempfile.mkdtemp(prefix="tfcourse-parts-")
PARTS_TRACE = Path(os.environ.setdefault("TFCOURSE_TRACE_PARTS", _TRACE_MADE_HERE or ""))

# Figures the tests record (as user properties, so they also reach the main process under
# pytest-xdist), printed at the end of the session.
NOTEBOOK_SECONDS: dict[str, float] = defaultdict(float)
CATALOGUE: list[tuple[str, str, str]] = []


@pytest.fixture
def one_thread():
    """Run a test on one CPU thread.

    Multi-threaded CPU kernels may split a sum differently from one run to the next, which moves
    results in the last bit. Exact-resume tests compare bit for bit, so they need one thread; the
    tiny models in the tests are also fastest on one.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def _is_notebook(item: pytest.Item) -> bool:
    return str(item.fspath).endswith(".ipynb")


def pytest_collection_modifyitems(config, items):
    """Solution notebooks' cells are slow tests. Slow items go first, so that no worker is left
    with a long one at the end. (Under pytest-xdist, `--dist loadfile` keeps a notebook's cells on
    one worker, in order: they share one kernel.)"""
    for item in items:
        if _is_notebook(item):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: item.get_closest_marker("slow") is None)  # (a stable sort)


def _parts_trace(item: pytest.Item) -> Path:
    return PARTS_TRACE / f"{Path(str(item.fspath)).parent.name}.jsonl"  # the kernel runs in the lesson's folder


_notebook_running: list[str] = []  # the notebook whose cells this process runs now


def pytest_runtest_setup(item):
    """A notebook's first cell: its trace of parts starts empty."""
    if _is_notebook(item) and _notebook_running != [str(item.fspath)]:
        _notebook_running[:] = [str(item.fspath)]
        _parts_trace(item).unlink(missing_ok=True)


@pytest.hookimpl(wrapper=True)
def pytest_runtest_teardown(item, nextitem):
    """After a notebook's last cell: the parts its tables showed are the parts its code was handed. (Judged
    once the teardown is done, so that a failure here leaves the next item a clean start.)"""
    result = yield
    if not _is_notebook(item) or (nextitem is not None and nextitem.fspath == item.fspath):
        return result
    trace = _parts_trace(item)
    if not trace.exists():
        return result
    events = [json.loads(line) for line in trace.read_text(encoding="utf-8").splitlines()]
    shown = {e["part"] for e in events if e["event"] == "shown"}
    used = {e["part"] for e in events if e["event"] == "used"}
    if shown != used:
        raise AssertionError(f"{trace.stem}: its tables of your parts do not list what it uses: shown but not used "
                             f"{sorted(shown - used)}; used but not shown {sorted(used - shown)}")
    return result


def pytest_sessionfinish(session):
    if _TRACE_MADE_HERE is not None:  # the folder this process made (its workers, if any, are done by now)
        shutil.rmtree(_TRACE_MADE_HERE, ignore_errors=True)


def pytest_runtest_logreport(report):
    """Collect the figures: each notebook's run time (its cells under nbval), the catalogue rows."""
    if report.nodeid.split("::")[0].endswith(".ipynb"):
        NOTEBOOK_SECONDS[report.nodeid.split("::")[0].split("/")[-2]] += report.duration
    for name, value in report.user_properties:
        if name == "catalogue" and report.when == "call":
            CATALOGUE.append(tuple(value))


def pytest_terminal_summary(terminalreporter):
    if NOTEBOOK_SECONDS:
        terminalreporter.section("solution notebooks (nbval, fast mode)")
        for lesson, seconds in sorted(NOTEBOOK_SECONDS.items()):
            terminalreporter.write_line(f"{seconds:7.1f} s  {lesson}")
        terminalreporter.write_line(f"{sum(NOTEBOOK_SECONDS.values()):7.1f} s  total")
    if CATALOGUE:
        terminalreporter.section("autograder catalogue: points per exercise")
        for case, lesson, points in sorted(CATALOGUE, key=lambda row: row[1]):
            terminalreporter.write_line(f"{case:<48} {lesson:<21} {points}")
