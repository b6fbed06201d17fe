"""The instructor's flow with plain nbgrader commands, as the README documents it: generate the
student version, collect submissions, autograde, generate feedback, export grades, formgrader.

It runs in a copy of the course (nbgrader_config.py + solutions/) so the repository is not written to.
"""

from __future__ import annotations

import csv
import os
import shutil
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from test_grading import complete, student_version

pytestmark = pytest.mark.slow  # runs nbgrader and notebooks: `make test-fast` leaves it out

ROOT = Path(__file__).resolve().parents[1]
LESSON = "04_ffn"


def nbgrader(course: Path, *args: str) -> subprocess.CompletedProcess:
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    result = subprocess.run([sys.executable, "-m", "nbgrader", *args], cwd=course, env=env,
                            capture_output=True, text=True)
    assert result.returncode == 0, f"nbgrader {' '.join(args)} failed:\n{result.stdout}\n{result.stderr}"
    return result


@pytest.fixture
def course(tmp_path) -> Path:
    course = tmp_path / "course"
    course.mkdir()
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / LESSON, course / "solutions" / LESSON)
    return course


def test_generate_collect_autograde_feedback_export(course):
    import nbformat

    nbgrader(course, "generate_assignment", LESSON, "--force")
    released = course / "notebooks" / LESSON / f"{LESSON}.ipynb"
    assert released.exists()
    # "collect": each learner's notebook goes to submitted/<student>/<lesson>/
    for student, nb in (("alice", complete(LESSON)), ("bob", student_version(LESSON))):
        folder = course / "submitted" / student / LESSON
        folder.mkdir(parents=True)
        nbformat.write(nb, folder / f"{LESSON}.ipynb")
    nbgrader(course, "autograde", LESSON, "--create")
    nbgrader(course, "generate_feedback", LESSON)
    for student in ("alice", "bob"):
        assert (course / "feedback" / student / LESSON / f"{LESSON}.html").exists()
    nbgrader(course, "export")
    rows = {row["student_id"]: row for row in csv.DictReader((course / "grades.csv").open())}
    assert float(rows["alice"]["score"]) == float(rows["alice"]["max_score"]) > 0
    assert float(rows["bob"]["score"]) == 0


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def test_formgrader_opens_in_jupyterlab(course):
    port, token = _free_port(), "tfcourse-test"
    env = {**os.environ, "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}", "--ServerApp.open_browser=False", "--allow-root"],
        cwd=course, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        url = f"http://127.0.0.1:{port}/formgrader?token={token}"
        deadline, status, body = time.monotonic() + 90, None, ""
        while time.monotonic() < deadline:
            try:
                with urllib.request.urlopen(url, timeout=5) as response:
                    status, body = response.status, response.read().decode()
                break
            except OSError:
                time.sleep(1)
        assert status == 200, "the formgrader page did not answer"
        assert "formgrader" in body.lower()
    finally:
        server.terminate()
        server.wait(timeout=30)
