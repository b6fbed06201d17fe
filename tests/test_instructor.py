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
    shutil.copytree(ROOT / "assignments", course / "assignments")  # its nbgrader_config.py
    shutil.copytree(ROOT / "solutions" / LESSON, course / "solutions" / LESSON)
    return course


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def get_when_up(url: str, timeout: float = 90, context=None) -> tuple[int | None, str]:
    """GET `url`, waiting for the server to come up (`context`: the ssl.SSLContext an https:// URL needs)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=30, context=context) as response:
                return response.status, response.read().decode()
        except OSError:
            time.sleep(1)
    return None, ""


def test_formgrader_and_assignment_list_work_in_jupyterlab_started_directly(course):
    """The server as a learner or instructor may start it: the venv's jupyter, not activated (no
    alembic on PATH), in the course folder. Formgrader creates its gradebook (nbgrader runs alembic);
    the Assignment List finds the course's exchange and lists the released lesson."""
    import json

    port, token = free_port(), "tfcourse-test"
    venv_bin = str(Path(sys.executable).parent)
    path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep) if p != venv_bin)
    server = subprocess.Popen(
        [sys.executable, "-m", "jupyter", "lab", "--no-browser", f"--port={port}", "--ip=127.0.0.1",
         f"--IdentityProvider.token={token}", "--ServerApp.open_browser=False", "--allow-root"],
        cwd=course, env={**os.environ, "PATH": path}, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    base = f"http://127.0.0.1:{port}"
    try:
        status, body = get_when_up(f"{base}/formgrader?token={token}")
        assert status == 200 and "formgrader" in body.lower(), "the formgrader page did not answer"
        status, body = get_when_up(f"{base}/formgrader/api/assignments?token={token}")
        assert status == 200 and isinstance(json.loads(body), list), body[:500]
        assert (course / "gradebook.db").exists(), "formgrader made its gradebook (alembic ran)"
        nbgrader(course, "generate_assignment", LESSON, "--force")
        nbgrader(course, "release_assignment", LESSON, "--force")
        status, body = get_when_up(f"{base}/assignments?course_id=tfcourse&token={token}")
        listing = json.loads(body)
        assert status == 200 and listing["success"], listing
        assert [a["assignment_id"] for a in listing["value"]] == [LESSON]
        status, body = get_when_up(f"{base}/courses?token={token}")
        assert json.loads(body) == {"success": True, "value": ["tfcourse"]}
    finally:
        server.terminate()
        server.wait(timeout=30)


def test_one_machine_release_fetch_submit_collect_autograde_feedback_export(course):
    """The README's one-machine walk-through: the exchange is the course's exchange/ folder, the
    learner's copy goes to assignments/. A second learner's untouched stubs are put where collect puts a
    submission (submitted/<student>/<lesson>/), so that one autograde grades both."""
    import nbformat

    nbgrader(course, "generate_assignment", LESSON, "--force")
    assert (course / "notebooks" / LESSON / f"{LESSON}.ipynb").exists()
    nbgrader(course, "release_assignment", LESSON, "--force")
    nbgrader(course, "fetch_assignment", LESSON)  # as the learner
    fetched = course / "assignments" / LESSON / f"{LESSON}.ipynb"
    assert fetched.exists() and (course / "exchange" / "tfcourse" / "outbound" / LESSON).is_dir()
    nbformat.write(complete(LESSON), fetched)  # the learner's work
    nbgrader(course, "submit", LESSON)
    nbgrader(course, "collect", LESSON)  # as the instructor again
    (learner,) = [p.name for p in (course / "submitted").iterdir()]
    bob = course / "submitted" / "bob" / LESSON
    bob.mkdir(parents=True)
    nbformat.write(student_version(LESSON), bob / f"{LESSON}.ipynb")
    (bob / "timestamp.txt").write_text("2030-01-01 12:00:00.000000 UTC")  # as collect leaves it
    nbgrader(course, "autograde", LESSON, "--create")
    nbgrader(course, "generate_feedback", LESSON)
    reports = {student: (course / "feedback" / student / LESSON / f"{LESSON}.html").read_text()
               for student in (learner, "bob")}
    for report in reports.values():
        body = report.split("<body", 1)[1]  # (the head holds MathJax's configuration, which names "$$")
        assert "<math" in body and "$$" not in body  # formulas as MathML: readable offline
    assert "No response." in reports["bob"]  # the instructor's feedback keeps nbgrader's comment on the stubs
    # (bob's copy came from elsewhere, so only the exchange's learner gets feedback through it)
    nbgrader(course, "release_feedback", LESSON, "--student", learner)
    nbgrader(course, "fetch_feedback", LESSON)  # as the learner
    (report,) = (course / "assignments" / LESSON / "feedback").rglob(f"{LESSON}.html")
    assert "Score" in report.read_text() or "score" in report.read_text()
    nbgrader(course, "export")
    rows = {row["student_id"]: row for row in csv.DictReader((course / "grades.csv").open())}
    assert sorted(rows) == sorted([learner, "bob"])
    assert float(rows[learner]["score"]) == float(rows[learner]["max_score"]) > 0
    assert float(rows["bob"]["score"]) == 0
