"""`tfcourse autograde LESSON --jobs N`: `nbgrader autograde` for a whole class, N submissions at a time.

`nbgrader autograde` grades one submission after another, and each one spends most of its time in
its own kernel: on a machine with several cores most of them wait. Here N worker processes grade
at the same time, each submission in its own kernel, and the result is the same gradebook that
serial `nbgrader autograde` would write:

- each worker is a Python process that loads the course's nbgrader configuration exactly as
  `nbgrader autograde` does (run in the course folder), then grades the submissions it is handed
  one at a time with nbgrader's own `Autograde` converter, into its *own* temporary course: a
  snapshot of the gradebook, a copy of the lesson's source and of the submission. nbgrader's
  gradebook is SQLite, which is safe with one writer, so no worker writes the real one;
- after each submission the worker reads back the rows nbgrader wrote for it (per grade cell the
  auto score and whether it needs manual grading, per answer cell the auto comment, per notebook
  the late penalty, the submission's timestamp) and sends them to the parent, which alone writes
  them into the real gradebook, in the way nbgrader's autograde does (`update_or_create_student`,
  `update_or_create_submission`, then the scores), and moves the graded notebook into
  `autograded/<student>/<lesson>/`;
- a submission that runs past `--timeout` seconds (a kernel that ignores interrupts, say) has its
  worker and its kernel killed, and a fresh worker takes the next one; a kernel that dies
  (`os._exit(1)` in a cell) fails in its own worker. Either way only that submission is affected:
  it is recorded as serial nbgrader records a submission whose grading failed (the student and the
  submission exist, with no scores; no graded notebook), listed at the end, and the command exits 1.

Kernels get `OMP_NUM_THREADS` = cores / N (unless it is set), so N kernels do not fight over the
cores that one serial kernel would use alone.

Each submission's result is a `tfcourse.course.results.LessonGrade`, the model `tfcourse grade` uses:
per exercise the points from the gradebook rows, the title from the lesson manifest and the check's
one-line message from the graded notebook. One line is printed per submission as it is graded;
`--exercises` adds its rows as `tfcourse grade` prints them.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import selectors
import shutil
import signal
import sqlite3
import subprocess
import sys
import tempfile
import time
import warnings
from collections.abc import Callable
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from .results import (LessonGrade, lesson_titles, print_class_summary, print_submission, record_failure,
                      record_scores)

RESULT_MARK = "@@tfcourse-autograde "  # prefix of the one line per submission a worker writes to stdout


# --- configuration: what `nbgrader autograde` run in the course folder would read ---------------

def load_nbgrader_config(course: Path, lesson: str, argv: tuple[str, ...] = ()):
    """The merged traitlets config that `nbgrader autograde LESSON ARGV...` would use in `course`:
    the nbgrader_config.py files on Jupyter's config path and in the course folder, then `argv`."""
    from nbgrader.apps.autogradeapp import AutogradeApp

    cwd = os.getcwd()
    os.chdir(course)
    try:
        app = AutogradeApp()
        app.initialize([lesson, *argv])
        return app.config
    finally:
        os.chdir(cwd)


def _coursedir(config, lesson: str, student: str = "*"):
    from nbgrader.coursedir import CourseDirectory

    return CourseDirectory(config=config, assignment_id=lesson, student_id=student)


def _sqlite_path(db_url: str) -> Path:
    if not db_url.startswith("sqlite:///"):
        raise SystemExit(f"tfcourse autograde: the gradebook must be SQLite (db_url {db_url!r}); "
                         "with another database run `nbgrader autograde --student X` per student instead")
    return Path(db_url[len("sqlite:///"):])


# --- the rows autograding writes, read and written with nbgrader's API ---------------------------

def submission_rows(gradebook, lesson: str, student: str) -> dict:
    """What `nbgrader autograde` wrote for one submission, as plain data."""
    submission = gradebook.find_submission(lesson, student)
    return {
        "timestamp": submission.timestamp.isoformat() if submission.timestamp else None,
        "notebooks": {
            notebook.name: {
                "late_submission_penalty": notebook.late_submission_penalty,
                "grades": {g.name: {"auto_score": g.auto_score, "manual_score": g.manual_score,
                                    "extra_credit": g.extra_credit, "needs_manual_grade": g.needs_manual_grade}
                           for g in notebook.grades},
                "comments": {c.name: {"auto_comment": c.auto_comment, "manual_comment": c.manual_comment}
                             for c in notebook.comments},
            } for notebook in submission.notebooks},
    }


def gradebook_rows(db_url: str, lesson: str) -> dict[str, dict]:
    """Every student's submission of `lesson` in a gradebook: {student: submission_rows}. Two
    gradebooks graded the same way compare equal (row ids differ; they are not part of it)."""
    from nbgrader.api import Gradebook, MissingEntry

    rows = {}
    with Gradebook(db_url) as gradebook:
        for student in gradebook.students:
            try:
                rows[student.id] = submission_rows(gradebook, lesson, student.id)
            except MissingEntry:
                continue
    return rows


def merge_submission(gradebook, lesson: str, student: str, timestamp, rows: dict | None) -> None:
    """Write one submission's result into the real gradebook the way nbgrader's autograde does:
    the student and the submission first (`Autograde.init_assignment`), then what SaveAutoGrades
    and AssignLatePenalties set. `rows` None: grading failed, so like nbgrader the submission is
    left without scores."""
    gradebook.update_or_create_student(student)
    if timestamp:
        gradebook.update_or_create_submission(lesson, student, timestamp=timestamp)
    else:
        gradebook.update_or_create_submission(lesson, student)
    if rows is None:
        return
    for name, notebook in rows["notebooks"].items():
        target = gradebook.find_submission_notebook(name, lesson, student)
        target.late_submission_penalty = notebook["late_submission_penalty"]
        for grade in target.grades:
            if grade.name in notebook["grades"]:
                grade.auto_score = notebook["grades"][grade.name]["auto_score"]
                grade.needs_manual_grade = notebook["grades"][grade.name]["needs_manual_grade"]
        for comment in target.comments:
            if comment.name in notebook["comments"]:
                comment.auto_comment = notebook["comments"][comment.name]["auto_comment"]
    gradebook.db.commit()


# --- the worker: one process, one temporary course, submissions one at a time --------------------

def _worker(course: Path, lesson: str, workdir: Path, snapshot: Path, extra: list[str]) -> int:
    """Read student ids on stdin; grade each into `workdir` (its own course); answer one line each."""
    import logging

    from nbgrader.api import Gradebook
    from nbgrader.apps import NbGraderAPI

    db_url = f"sqlite:///{workdir / 'gradebook.db'}"
    config = load_nbgrader_config(course, lesson, (f"--CourseDirectory.root={workdir}",
                                                   f"--CourseDirectory.db_url={db_url}", *extra))
    shutil.copyfile(snapshot, workdir / "gradebook.db")
    real = _coursedir(load_nbgrader_config(course, lesson, tuple(extra)), lesson)
    mine = _coursedir(config, lesson)
    source = Path(real.format_path(real.source_directory, ".", lesson))
    if source.is_dir():  # autograde copies the lesson's other files (data, helpers) from the source
        shutil.copytree(source, Path(mine.format_path(mine.source_directory, ".", lesson)))
    api = NbGraderAPI(config=config)
    api.log.setLevel(logging.ERROR)
    for line in sys.stdin:
        student = line.strip()
        if not student:
            continue
        submitted = Path(mine.format_path(mine.submitted_directory, student, lesson))
        shutil.rmtree(submitted.parent, ignore_errors=True)
        shutil.copytree(real.format_path(real.submitted_directory, student, lesson), submitted)
        started = time.monotonic()
        outcome = api.autograde(lesson, student, force=True, create=True)
        answer = {"student": student, "success": bool(outcome["success"]), "seconds": time.monotonic() - started,
                  "output": mine.format_path(mine.autograded_directory, student, lesson)}
        if outcome["success"]:
            with Gradebook(db_url) as gradebook:
                answer["rows"] = submission_rows(gradebook, lesson, student)
        else:
            # The log first: it holds the cause (a kernel that died, a cell that timed out); the traceback
            # after it only points back at the log.
            answer["error"] = "\n".join(filter(None, (outcome.get("log"), outcome.get("error"))))[-6000:]
        print(RESULT_MARK + json.dumps(answer), flush=True)
    return 0


# --- the parent ---------------------------------------------------------------------------------

Outcome = LessonGrade  # one submission's result, as `tfcourse grade` has it (the student and the time set)


@dataclass
class _Worker:
    process: subprocess.Popen
    workdir: Path
    student: str | None = None
    deadline: float = 0.0
    started: float = 0.0
    buffer: bytes = b""  # what it wrote after its last complete line


def _kill(process: subprocess.Popen) -> None:
    """The worker and every process under it (its kernel runs in a session of its own)."""
    try:
        import psutil

        children = psutil.Process(process.pid).children(recursive=True)
    except Exception:  # psutil missing or the worker already gone: the kernel exits with its parent
        children = []
    for victim in children:
        try:
            victim.kill()
        except Exception:
            pass
    try:
        os.killpg(process.pid, signal.SIGKILL)
    except (ProcessLookupError, PermissionError):
        pass
    process.wait()


def gradebook_max_points(gradebook, lesson: str) -> dict[str, dict[str, float]]:
    """Each notebook of `lesson` -> each graded cell's grade id -> its points, as the gradebook has them."""
    return {notebook.name: {cell.name: float(cell.max_score) for cell in [*notebook.grade_cells, *notebook.task_cells]}
            for notebook in gradebook.find_assignment(lesson).notebooks}


def exercise_scores(rows: dict, maxima: dict[str, dict[str, float]]) -> dict[str, tuple[float, float]]:
    """Grade id -> (score, max score) of one graded submission, from its gradebook rows: the manual
    score where a grader gave one, else the auto score."""
    scores = {}
    for name, cells in maxima.items():
        grades = rows["notebooks"].get(name, {}).get("grades", {})
        for grade_id, most in cells.items():
            grade = grades.get(grade_id, {})
            manual, auto = grade.get("manual_score"), grade.get("auto_score")
            scores[grade_id] = (manual if manual is not None else (auto or 0.0), most)
    return scores


def submissions(coursedir, lesson: str) -> list[str]:
    """Students with a submission of `lesson` in the submitted folder, sorted."""
    root = Path(coursedir.format_path(coursedir.submitted_directory, ".", ".")).resolve()
    return sorted(p.parent.name for p in root.glob(f"*/{lesson}") if p.is_dir())


def autograde(course: Path, lesson: str, jobs: int = 2, timeout: float = 600, force: bool = False,
              students: list[str] | None = None, extra: tuple[str, ...] = (),
              report: Callable[[LessonGrade], None] = print_submission) -> list[LessonGrade]:
    """Grade every submission of `lesson` (or `students`) in `course` with `jobs` workers; the real
    gradebook gets the same rows as serial `nbgrader autograde`. Returns one result per student, with
    its exercises; `report` is handed each as soon as it is graded."""
    from nbgrader.api import Gradebook, MissingEntry

    course = course.resolve()
    config = load_nbgrader_config(course, lesson, extra)
    coursedir = _coursedir(config, lesson)
    db_url = coursedir.db_url
    database = _sqlite_path(db_url)
    with Gradebook(db_url, coursedir.course_id) as gradebook:
        try:
            maxima = gradebook_max_points(gradebook, lesson)
        except MissingEntry:
            raise SystemExit(f"tfcourse autograde: no lesson {lesson!r} in the gradebook; "
                             f"run `nbgrader generate_assignment {lesson}` first") from None
    todo = students or submissions(coursedir, lesson)
    missing = [s for s in todo if not Path(coursedir.format_path(coursedir.submitted_directory, s, lesson)).is_dir()]
    if missing:
        raise SystemExit(f"tfcourse autograde: no submission of {lesson} for {', '.join(missing)} "
                         f"in {coursedir.submitted_directory}/")
    if not force:  # as nbgrader autograde: an already graded submission is skipped without --force
        todo = [s for s in todo if not Path(coursedir.format_path(coursedir.autograded_directory, s, lesson)).exists()]
    titles = lesson_titles(lesson)
    outcomes: list[LessonGrade] = []
    if not todo:
        return outcomes
    jobs = max(1, min(jobs, len(todo)))
    env = dict(os.environ)
    env.setdefault("OMP_NUM_THREADS", str(max(1, (os.cpu_count() or 1) // jobs)))
    with tempfile.TemporaryDirectory(prefix="tfcourse-autograde-") as tmp:
        tmp = Path(tmp)
        snapshot = tmp / "gradebook-snapshot.db"
        source = sqlite3.connect(database)
        with sqlite3.connect(snapshot) as copy:  # a consistent copy, even while Formgrader has it open
            source.backup(copy)
        source.close()
        selector = selectors.DefaultSelector()
        workers: list[_Worker] = []
        counter = 0

        def start_worker() -> _Worker:
            nonlocal counter
            counter += 1
            workdir = tmp / f"worker-{counter}"
            workdir.mkdir()
            process = subprocess.Popen(
                [sys.executable, "-m", "tfcourse.course.parallel_autograde", "--worker", lesson,
                 "--course", str(course), "--workdir", str(workdir), "--snapshot", str(snapshot), *extra],
                cwd=course, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                stderr=(workdir / "worker.log").open("wb"), start_new_session=True)
            worker = _Worker(process, workdir)
            selector.register(process.stdout, selectors.EVENT_READ, worker)
            workers.append(worker)
            return worker

        def retire(worker: _Worker) -> None:
            selector.unregister(worker.process.stdout)
            workers.remove(worker)
            _kill(worker.process)

        def finish(student: str, seconds: float, rows: dict | None, output: str | None, problem: str | None) -> None:
            submitted = Path(coursedir.format_path(coursedir.submitted_directory, student, lesson))
            timestamp = coursedir.get_existing_timestamp(str(submitted))
            dest = Path(coursedir.format_path(coursedir.autograded_directory, student, lesson))
            if dest.exists():  # (--force, or a failed run: nbgrader removes a failed submission's output too)
                shutil.rmtree(dest)
            if rows is not None and output:
                dest.parent.mkdir(parents=True, exist_ok=True)
                shutil.move(output, dest)
            with Gradebook(db_url, coursedir.course_id) as gradebook, warnings.catch_warnings():
                warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's own session use
                merge_submission(gradebook, lesson, student, timestamp, rows)  # (the one writer of the real gradebook)
            result = LessonGrade(lesson, submitted, student=student, seconds=seconds)
            if rows is None:
                every_cell = {grade_id: most for cells in maxima.values() for grade_id, most in cells.items()}
                record_failure(result, every_cell, problem, titles)
            else:  # (the messages, integrity findings and other errors: from the graded notebooks just moved)
                graded = [dest / f"{name}.ipynb" for name in rows["notebooks"]]
                record_scores(result, exercise_scores(rows, maxima), titles, [p for p in graded if p.exists()])
            outcomes.append(result)
            report(result)

        def hand_out(worker: _Worker) -> None:
            worker.student = queue.pop(0)
            worker.started = time.monotonic()
            worker.deadline = worker.started + timeout
            worker.process.stdin.write((worker.student + "\n").encode())
            worker.process.stdin.flush()

        queue = list(todo)
        try:
            for _ in range(jobs):
                hand_out(start_worker())
            while any(w.student for w in workers):
                busy = [w for w in workers if w.student]
                wait = max(0.0, min(w.deadline for w in busy) - time.monotonic())
                for key, _ in selector.select(timeout=wait):
                    worker: _Worker = key.data
                    chunk = os.read(worker.process.stdout.fileno(), 65536)
                    if not chunk:  # the worker itself died: only its submission is lost
                        student, seconds = worker.student, time.monotonic() - worker.started
                        log = (worker.workdir / "worker.log").read_text(errors="replace")[-500:]
                        retire(worker)
                        finish(student, seconds, None, None, f"the grading process died: {log.strip()[-200:]}")
                        if queue:
                            hand_out(start_worker())
                        continue
                    worker.buffer += chunk
                    *lines, worker.buffer = worker.buffer.split(b"\n")
                    for line in lines:
                        text = line.decode(errors="replace")
                        if RESULT_MARK not in text:  # (anything else a library printed)
                            continue
                        answer = json.loads(text.split(RESULT_MARK, 1)[1])
                        problem = None if answer["success"] else _last_error(answer.get("error", ""))
                        finish(answer["student"], answer["seconds"], answer.get("rows"), answer.get("output"), problem)
                        worker.student = None
                        if queue:
                            hand_out(worker)
                now = time.monotonic()
                for worker in [w for w in workers if w.student and w.deadline <= now]:
                    student = worker.student
                    retire(worker)
                    finish(student, now - worker.started, None, None, f"timed out after {timeout:g} s")
                    if queue:
                        hand_out(start_worker())
        finally:
            for worker in list(workers):
                worker.process.stdin.close()
                try:
                    worker.process.wait(timeout=30)
                except subprocess.TimeoutExpired:
                    pass
                selector.unregister(worker.process.stdout)
                _kill(worker.process)
                worker.process.stdout.close()
            selector.close()
    return sorted(outcomes, key=lambda o: o.student)


# nbgrader's own last line after a failed conversion says only where to look: the cause is above it.
_POINTER = "Please see the the above traceback"


def _last_error(text: str) -> str:
    """The line that says why a submission failed: the last error line of the worker's log, not
    nbgrader's closing pointer to it (the instructor sees this line, not the log)."""
    lines = [line.strip() for line in text.splitlines() if line.strip()]
    causes = [line for line in lines if _POINTER not in line and re.match(r"^[\w.]*(Error|Exception|Exit)\b", line)]
    return (causes or lines or ["nbgrader reported a failure"])[-1][:200]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="tfcourse autograde",
        description="nbgrader autograde for every submission of a lesson, N at a time, each in its own "
                    "kernel; writes the same gradebook as serial `nbgrader autograde`. Run it in the course folder.")
    parser.add_argument("lesson", help="the lesson (nbgrader assignment), e.g. 04_ffn")
    parser.add_argument("--jobs", "-j", type=int, default=os.cpu_count() or 1,
                        help="submissions graded at the same time (default: the number of cores)")
    parser.add_argument("--timeout", type=float, default=600,
                        help="seconds one submission may take in all before it is stopped (default: 600); "
                             "each cell's own limit is nbgrader's c.Execute.timeout")
    parser.add_argument("--force", action="store_true", help="grade again submissions already graded")
    parser.add_argument("--student", action="append", dest="students", help="only this student (repeatable)")
    parser.add_argument("--course", type=Path, default=Path("."), help="the course folder (default: .)")
    parser.add_argument("--exercises", action="store_true",
                        help="under each submission's line, its points per exercise as `tfcourse grade` prints them")
    # the worker's own arguments (one process per worker, started by the command above)
    parser.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    parser.add_argument("--workdir", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--snapshot", type=Path, help=argparse.SUPPRESS)
    args, extra = parser.parse_known_args(argv)
    if extra and not all(e.startswith("--") and "=" in e for e in extra):
        parser.error(f"unrecognized arguments: {' '.join(extra)} (nbgrader options go as --Section.name=value)")
    if args.worker:
        return _worker(args.course.resolve(), args.lesson, args.workdir, args.snapshot, extra)
    started = time.monotonic()
    outcomes = autograde(args.course, args.lesson, jobs=args.jobs, timeout=args.timeout, force=args.force,
                         students=args.students, extra=tuple(extra),
                         report=partial(print_submission, exercises=args.exercises))
    print_class_summary(outcomes, args.lesson, args.jobs, time.monotonic() - started)
    return 0 if all(o.ok for o in outcomes) else 1


if __name__ == "__main__":
    raise SystemExit(main())
