"""`tfcourse autograde LESSON --jobs N`: the same gradebook as serial `nbgrader autograde`, and a
submission that hangs or kills its kernel costs only itself.

Two copies of one generated course get the same submissions; one is graded by `nbgrader autograde`,
the other by `tfcourse autograde --jobs 2`, and the gradebooks' rows (scores, comments, flags,
timestamps; not the row ids) must be equal. The parallel run also gets a submission whose kernel
ignores interrupts and never finishes: it must be stopped by the per-submission timeout while the
others are graded.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import nbformat
import pytest

from test_grading import _meta, complete, student_version, stub
from tfcourse.course.parallel_autograde import gradebook_rows

pytestmark = pytest.mark.slow  # runs nbgrader and notebooks: `make test-fast` leaves it out

ROOT = Path(__file__).resolve().parents[1]
LESSON = "04_ffn"
UNFINISHED = ("collapse_impl", "backward_impl")  # what the partial learner leaves undone
# Seconds one submission may take in the parallel run. The first submission a fresh worker grades also
# pays for the worker's start (nbgrader's configuration, the kernel template's import of torch): 7 s on
# an idle 2-CPU machine against 2.5 s for the next ones, and over 20 s on a loaded one (CI, where 20 s
# once timed out alice's complete notebook), hence the margin.
HANG_AFTER = 45


def _run(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    return subprocess.run([sys.executable, "-m", *args], cwd=course, env=env, capture_output=True, text=True)


def _timed_run(course: Path, *args: str) -> tuple[subprocess.CompletedProcess, float]:
    started = time.monotonic()
    done = _run(course, *args)
    return done, time.monotonic() - started


def _points(lesson: str) -> dict[str, float]:
    """Each exercise's points as the lesson's metadata says: answer cell X_impl -> its test cell X_tests."""
    source = nbformat.read(ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    return {_meta(c)["grade_id"].replace("_tests", "_impl"): float(_meta(c)["points"])
            for c in source.cells if _meta(c).get("grade")}


def _with_cell_prefix(nb, grade_id: str, code: str):
    cell = next(c for c in nb.cells if _meta(c).get("grade_id") == grade_id)
    cell.source = code + "\n" + cell.source
    return nb


def _submissions() -> dict[str, object]:
    partial = complete(LESSON)
    for grade_id in UNFINISHED:
        partial = stub(partial, grade_id, student_version(LESSON))
    return {
        "alice": complete(LESSON),
        "bob": student_version(LESSON),
        "carol": partial,
        # the kernel dies in the middle of the notebook
        "dave": _with_cell_prefix(complete(LESSON), "positions_impl", "import os\nos._exit(1)"),
    }


def _hanging(pid_file: Path):
    """A kernel that ignores the interrupt nbgrader sends at a cell's timeout and never finishes
    (it leaves its process id in `pid_file`, so the test can see that it was stopped)."""
    return _with_cell_prefix(complete(LESSON), "ffn_impl",
                             f"import os, signal, time\nopen({str(pid_file)!r}, 'w').write(str(os.getpid()))\n"
                             "signal.signal(signal.SIGINT, signal.SIG_IGN)\nwhile True:\n    time.sleep(0.5)")


def _submit(course: Path, student: str, nb) -> None:
    folder = course / "submitted" / student / LESSON
    folder.mkdir(parents=True)
    nbformat.write(nb, folder / f"{LESSON}.ipynb")
    (folder / "timestamp.txt").write_text("2030-01-01 12:00:00.000000 UTC")


@pytest.fixture(scope="module")
def generated(tmp_path_factory) -> Path:
    course = tmp_path_factory.mktemp("generated") / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / LESSON, course / "solutions" / LESSON)
    done = _run(course, "nbgrader", "generate_assignment", LESSON, "--force")
    assert done.returncode == 0, done.stderr[-3000:]
    return course


def test_jobs_2_writes_the_gradebook_serial_autograde_writes_and_a_hang_costs_only_itself(generated, tmp_path):
    serial, parallel = tmp_path / "serial", tmp_path / "parallel"
    for course in (serial, parallel):
        shutil.copytree(generated, course, symlinks=True)
        for student, nb in _submissions().items():
            _submit(course, student, nb)
    # ("adam" sorts first: the hang overlaps the grading of the others, as it would in a class)
    pid_file = tmp_path / "hanging-kernel.pid"
    _submit(parallel, "adam", _hanging(pid_file))

    # Both at once (they are two courses): the hang mostly waits, and each run is timed on its own.
    with ThreadPoolExecutor(2) as pool:
        serial_run = pool.submit(_timed_run, serial, "nbgrader", "autograde", LESSON, "--create")
        parallel_run = pool.submit(_timed_run, parallel, "tfcourse.course.cli", "autograde", LESSON,
                                   "--jobs", "2", "--timeout", str(HANG_AFTER))
        (serial_done, serial_seconds), (done, parallel_seconds) = serial_run.result(), parallel_run.result()
    # (nbgrader exits 1 when a submission failed: dave's may)
    assert "alice" in serial_done.stderr, serial_done.stderr[-3000:]
    print(f"serial nbgrader autograde, 4 submissions: {serial_seconds:.1f} s; "
          f"tfcourse autograde --jobs 2, the same + a hanging one: {parallel_seconds:.1f} s\n{done.stdout}")
    assert done.returncode == 1, f"a submission timed out: exit 1\n{done.stdout}\n{done.stderr[-3000:]}"
    assert f"adam: FAILED (timed out after {HANG_AFTER} s)" in done.stdout, done.stdout
    assert "not graded: adam" in done.stdout
    # A failed submission's line names the cause from nbgrader's log, not its pointer back to the log.
    assert re.search(r"^dave: FAILED \(\S*DeadKernelError: Kernel died\)", done.stdout, re.M), done.stdout

    expected = gradebook_rows(f"sqlite:///{serial / 'gradebook.db'}", LESSON)
    got = gradebook_rows(f"sqlite:///{parallel / 'gradebook.db'}", LESSON)
    assert sorted(expected) == ["alice", "bob", "carol", "dave"]
    assert {s: got[s] for s in expected} == expected, done.stdout + done.stderr[-3000:]

    # The scores are the lesson's points: all, none, all but the unfinished exercises.
    points = _points(LESSON)

    def score(student: str) -> float:
        return sum(g["auto_score"] or 0 for nb in got[student]["notebooks"].values() for g in nb["grades"].values())

    assert score("alice") == sum(points.values()) == 17  # (its debug exercise included)
    assert score("bob") == 0
    assert score("carol") == sum(points.values()) - sum(points[g] for g in UNFINISHED)
    # The hanging submission is recorded as nbgrader records one whose grading failed: the
    # submission exists, nothing is scored, and there is no graded notebook.
    assert all(g["auto_score"] is None for nb in got["adam"]["notebooks"].values() for g in nb["grades"].values())
    assert not (parallel / "autograded" / "adam").exists()
    for student in ("alice", "bob", "carol"):
        assert (parallel / "autograded" / student / LESSON / f"{LESSON}.ipynb").exists()
    # The hang is cut at HANG_AFTER: it costs at most about that on top of grading the others, which
    # takes no longer than the serial run (compared with it, not with a fixed time: a loaded machine
    # slows both).
    assert parallel_seconds < serial_seconds + 2 * HANG_AFTER, (parallel_seconds, serial_seconds)
    # No kernel outlives the command, the hanging one included (it ignored SIGINT).
    kernel = int(pid_file.read_text())
    for _ in range(20):  # (it is reaped by init once its worker is gone)
        if not _alive(kernel):
            break
        time.sleep(0.5)
    assert not _alive(kernel), f"the hanging submission's kernel {kernel} is still running"


def _alive(pid: int) -> bool:
    try:
        with open(f"/proc/{pid}/stat") as stat:
            return stat.read().split(")")[-1].split()[0] != "Z"  # a zombie has ended
    except FileNotFoundError:
        return False


def test_without_force_graded_submissions_are_skipped_as_nbgrader_does(generated, tmp_path):
    course = tmp_path / "course"
    shutil.copytree(generated, course, symlinks=True)
    _submit(course, "bob", student_version(LESSON))
    (course / "autograded" / "bob" / LESSON).mkdir(parents=True)  # as if graded before
    done = _run(course, "tfcourse.course.cli", "autograde", LESSON, "--jobs", "2")
    assert done.returncode == 0, done.stderr[-2000:]
    assert "0/0 submissions" in done.stdout
    assert gradebook_rows(f"sqlite:///{course / 'gradebook.db'}", LESSON) == {}


def test_a_lesson_missing_from_the_gradebook_or_a_missing_submission_is_named(generated, tmp_path):
    course = tmp_path / "course"
    shutil.copytree(generated, course, symlinks=True)
    done = _run(course, "tfcourse.course.cli", "autograde", "99_nothing", "--jobs", "2")
    assert done.returncode != 0 and "nbgrader generate_assignment 99_nothing" in done.stderr
    done = _run(course, "tfcourse.course.cli", "autograde", LESSON, "--student", "nobody")
    assert done.returncode != 0 and f"no submission of {LESSON} for nobody" in done.stderr
    assert gradebook_rows(f"sqlite:///{course / 'gradebook.db'}", LESSON) == {}, "nothing was written"
