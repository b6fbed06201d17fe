"""Serial `nbgrader autograde` against `tfcourse autograde --jobs N`, on one class of submissions.

    python tools/bench_autograde.py                     # 40 submissions of 04_ffn, --jobs 2
    python tools/bench_autograde.py --lesson 03_attention --submissions 20 --jobs 4

It builds a temporary course (the lesson's source, `nbgrader generate_assignment`), makes the
submissions from the lesson itself — every fourth untouched, every fourth with two exercises left
undone, the rest complete (the solutions' answers) —, grades one copy with `nbgrader autograde`
and another with `tfcourse autograde --jobs N`, one after the other, and prints both times, their
ratio, and whether the two gradebooks hold the same rows. Nothing in the repository is written.
"""

from __future__ import annotations

import argparse
import os
import re
import resource
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _answers(lesson: str) -> dict[str, str]:
    import nbformat

    source = nbformat.read(ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    return {_meta(c)["grade_id"]: re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n", "", c.source, flags=re.M)
            for c in source.cells if _meta(c).get("solution")}


def make_submissions(course: Path, lesson: str, count: int) -> dict[str, int]:
    """`count` submissions under course/submitted/; returns each one's number of answered exercises."""
    import nbformat

    release = nbformat.read(course / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)
    answers = _answers(lesson)
    answered = {}
    for index in range(count):
        nb = nbformat.from_dict(release)  # a fresh copy
        kind = index % 4
        todo = list(answers) if kind in (1, 2) else list(answers)[:-2] if kind == 3 else []
        for cell in nb.cells:
            if _meta(cell).get("solution") and _meta(cell)["grade_id"] in todo:
                cell.source = answers[_meta(cell)["grade_id"]]
        student = f"learner{index:03d}"
        folder = course / "submitted" / student / lesson
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{lesson}.ipynb")
        answered[student] = len(todo)
    return answered


def _cpu_seconds() -> float:
    """CPU time of this process's finished children, their kernels included (each was waited for)."""
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    return usage.ru_utime + usage.ru_stime


def _run(course: Path, *args: str) -> tuple[float, float, subprocess.CompletedProcess]:
    """Run `python -m ARGS` in `course`: (wall seconds, CPU seconds, the result)."""
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    env.setdefault("TFCOURSE_FAST", "1")
    started, cpu = time.monotonic(), _cpu_seconds()
    done = subprocess.run([sys.executable, "-m", *args], cwd=course, env=env, capture_output=True, text=True)
    return time.monotonic() - started, _cpu_seconds() - cpu, done


def main(argv: list[str] | None = None) -> int:
    from tfcourse.course.parallel_autograde import gradebook_rows

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--lesson", default="04_ffn")
    parser.add_argument("--submissions", type=int, default=40)
    parser.add_argument("--jobs", type=int, default=2)
    args = parser.parse_args(argv)
    with tempfile.TemporaryDirectory(prefix="tfcourse-bench-autograde-") as tmp:
        base = Path(tmp) / "course"
        base.mkdir()
        shutil.copy(ROOT / "nbgrader_config.py", base)
        shutil.copytree(ROOT / "solutions" / args.lesson, base / "solutions" / args.lesson)
        _, _, done = _run(base, "nbgrader", "generate_assignment", args.lesson, "--force")
        if done.returncode:
            print(done.stderr[-3000:], file=sys.stderr)
            return 2
        answered = make_submissions(base, args.lesson, args.submissions)
        serial, parallel = Path(tmp) / "serial", Path(tmp) / "parallel"
        shutil.copytree(base, serial)
        shutil.copytree(base, parallel)
        print(f"{args.submissions} submissions of {args.lesson} "
              f"({sum(1 for n in answered.values() if n == 0)} untouched, "
              f"{sum(1 for n in answered.values() if 0 < n < max(answered.values()))} partial, "
              f"{sum(1 for n in answered.values() if n == max(answered.values()))} complete); "
              f"{os.cpu_count()} cores; load average before: {os.getloadavg()[0]:.1f}", flush=True)
        # Wall time is the figure; CPU time (all processes, kernels included) says how many cores
        # each run had on average: on a machine others use too, that is what limits the ratio.
        serial_s, serial_cpu, done = _run(serial, "nbgrader", "autograde", args.lesson, "--create")
        print(f"serial   nbgrader autograde {args.lesson}: {serial_s:7.1f} s  "
              f"(CPU {serial_cpu:.0f} s = {serial_cpu / serial_s:.2f} cores; exit {done.returncode})", flush=True)
        parallel_s, parallel_cpu, done = _run(parallel, "tfcourse.course.cli", "autograde", args.lesson,
                                              "--jobs", str(args.jobs))
        print(f"parallel tfcourse autograde {args.lesson} --jobs {args.jobs}: {parallel_s:7.1f} s  "
              f"(CPU {parallel_cpu:.0f} s = {parallel_cpu / parallel_s:.2f} cores; exit {done.returncode})", flush=True)
        if done.returncode:
            print(done.stdout[-2000:], done.stderr[-2000:], file=sys.stderr)
        expected = gradebook_rows(f"sqlite:///{serial / 'gradebook.db'}", args.lesson)
        got = gradebook_rows(f"sqlite:///{parallel / 'gradebook.db'}", args.lesson)
        same = expected == got and len(got) == args.submissions
        print(f"speed-up: {serial_s / parallel_s:.2f}x   gradebooks identical: {'yes' if same else 'NO'}   "
              f"load average after: {os.getloadavg()[0]:.1f}")
    return 0 if same else 1


if __name__ == "__main__":
    raise SystemExit(main())
