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
# Under pytest-xdist there are more workers than CPUs (the Makefile's TEST_JOBS): a worker's own torch
# work runs on one thread, so the workers do not fight over the CPUs (the models in the tests are tiny).
if "PYTEST_XDIST_WORKER" in os.environ:
    torch.set_num_threads(1)
# ...and note which of "your parts" each lesson shows in its tables and which its code uses (see
# tfcourse.course.assemble.TRACE): when a notebook's last cell has run, the two must be the same.
# (A process that finds the variable set uses that folder and leaves it to its maker to remove.)
_TRACE_MADE_HERE = None if "TFCOURSE_TRACE_PARTS" in os.environ else tempfile.mkdtemp(prefix="tfcourse-parts-")
PARTS_TRACE = Path(os.environ.setdefault("TFCOURSE_TRACE_PARTS", _TRACE_MADE_HERE or ""))

# Figures the tests record (as user properties, so they also reach the main process under
# pytest-xdist), printed at the end of the session.
NOTEBOOK_SECONDS: dict[str, float] = defaultdict(float)
TEST_SECONDS: list[float] = [0.0]  # every test's setup, call and teardown, summed over the workers
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


# Files whose tests are long and independent of each other: under pytest-xdist's `--dist loadfile` each of
# their tests may go to any worker (CourseScheduling). Every other file keeps its tests on one worker: a
# notebook's cells share one kernel, and a module's tests may share its fixtures.
SPREAD = ("tests/test_grading", "tests/test_instructor.py")
# About how long the longest work units take on a 2-CPU machine under `make test` (seconds, summed over a
# unit's tests; `make test` prints the slowest 20). They start first, longest first, so that no worker is
# left alone with one at the end. A guess that is wrong costs time, never a result.
LONGEST = {
    "tests/test_jupyterhub.py": 125, "tests/test_browser.py": 85, "tests/test_checks_parallel.py": 80,
    "tests/test_distributed.py": 65, "tests/test_edition.py": 55, "solutions/09_translation": 46,
    "tests/test_forked_kernels.py": 55, "tests/test_parallel_autograde.py": 60,
    "tests/test_instructor.py::test_one_machine": 35, "solutions/13_data_parallel": 35,
    "tests/test_grading_ffn.py": 33, "solutions/08_training": 33, "tests/test_grading.py::": 32,
    "tests/test_notebooks.py": 31, "tests/test_autograde.py": 28, "tests/test_grading_parallel.py": 25,
    "tests/test_dependent_cells.py": 22, "tests/test_grading_modern.py": 20, "tests/test_translation.py": 19,
    "tests/test_bench.py": 14, "tests/test_instructor.py::": 14, "tests/test_grading_later.py": 11,
}


def work_unit(nodeid: str) -> str:
    """The tests one worker runs together: a test of a SPREAD file alone, any other test with its file."""
    path = nodeid.split("::")[0]
    return nodeid if path.startswith(SPREAD) else path


def _expected_seconds(nodeid: str) -> float:
    unit = work_unit(nodeid)
    return max((seconds for prefix, seconds in LONGEST.items() if unit.startswith(prefix)), default=0.0)


def pytest_collection_modifyitems(config, items):
    """Solution notebooks' cells are slow tests. Slow items go first, the longest work units of them first,
    so that no worker is left with a long one at the end (xdist hands out the units in this order)."""
    for item in items:
        if _is_notebook(item):
            item.add_marker(pytest.mark.slow)
    items.sort(key=lambda item: (item.get_closest_marker("slow") is None, -_expected_seconds(item.nodeid)))


@pytest.hookimpl(optionalhook=True)  # a run without xdist (`-p no:xdist`) does not know the hook
def pytest_xdist_make_scheduler(config, log):
    """`--dist loadfile`, with the tests of the SPREAD files handed out one by one (work_unit)."""
    if config.getoption("dist") != "loadfile":
        return None
    from xdist.scheduler import LoadScopeScheduling

    # xdist would hand out the work units with the most tests first: a catalogue shard (one test, 30 s)
    # would then start last and finish alone. Keep the order pytest_collection_modifyitems gave them.
    config.option.loadscopereorder = False

    class CourseScheduling(LoadScopeScheduling):
        def _split_scope(self, nodeid: str) -> str:
            return work_unit(nodeid)

    return CourseScheduling(config, log)


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
    TEST_SECONDS[0] += report.duration
    if report.nodeid.split("::")[0].endswith(".ipynb"):
        NOTEBOOK_SECONDS[report.nodeid.split("::")[0].split("/")[-2]] += report.duration
    for name, value in report.user_properties:
        if name == "catalogue" and report.when == "call":
            CATALOGUE.append(tuple(value))


def pytest_terminal_summary(terminalreporter):
    terminalreporter.write_line(f"test time summed over the workers: {TEST_SECONDS[0]:.0f} s")
    if NOTEBOOK_SECONDS:
        terminalreporter.section("solution notebooks (nbval, fast mode)")
        for lesson, seconds in sorted(NOTEBOOK_SECONDS.items()):
            terminalreporter.write_line(f"{seconds:7.1f} s  {lesson}")
        terminalreporter.write_line(f"{sum(NOTEBOOK_SECONDS.values()):7.1f} s  total")
    if CATALOGUE:
        terminalreporter.section("autograder catalogue: points per exercise")
        for case, lesson, points in sorted(CATALOGUE, key=lambda row: row[1]):
            terminalreporter.write_line(f"{case:<48} {lesson:<21} {points}")
