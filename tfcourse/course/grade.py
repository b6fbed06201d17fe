"""`tfcourse grade`: grade your own notebooks with nbgrader, hidden tests included.

For each lesson, a temporary nbgrader course is built: the source from solutions/, a *copy* of
your notebook as the submission. nbgrader autogrades the copy and writes an HTML feedback report;
your files are only ever read. The result is a table of points per exercise with each check's
one-line message.

nbgrader runs in this process (its Python API: one kernel start per notebook, no nbgrader
processes), and the generated lesson (`generate_assignment`: the release and the gradebook's
record of the graded cells) is kept in a cache keyed by the hash of everything it is made from,
so only the first grading of a changed lesson generates it.
"""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import sys
import tempfile
import textwrap
import threading
import warnings
from pathlib import Path

# The result model and the reporter are shared with `tfcourse autograde`; their names stay importable from here.
from .. import messages
from ..messages import set_lesson_language
from .results import (ExerciseGrade, LessonGrade, errors_elsewhere, exercise_titles, print_table,  # noqa: F401
                      record_failure, record_scores)

STUDENT = "me"


class GradingError(RuntimeError):
    """Something went wrong in the grading machinery itself (not in the learner's notebook)."""


def _load_config(course: Path, timeout: int | None):
    """The course's nbgrader_config.py as a traitlets Config (what `nbgrader ...` would read there)."""
    from traitlets.config.loader import PyFileConfigLoader

    config = PyFileConfigLoader("nbgrader_config.py", str(course)).load_config()
    config.CourseDirectory.root = str(course)
    if timeout:
        config.Execute.timeout = timeout
    return config


def _run_app(app_class: type, course: Path, lesson: str, timeout: int | None = None, **settings) -> dict:
    """Run one nbgrader app (GenerateAssignment, Autograde, GenerateFeedback) in this process on the
    temporary course; returns nbgrader's {"success", "error", "log"}."""
    from nbgrader.coursedir import CourseDirectory
    from nbgrader.utils import capture_log

    config = _load_config(course, timeout)  # (it also puts `alembic`, which nbgrader runs, on PATH)
    for section, values in settings.items():
        for key, value in values.items():
            config[section][key] = value
    coursedir = CourseDirectory(config=config, assignment_id=lesson)
    app = app_class(coursedir=coursedir, config=config)
    app.log.setLevel("ERROR")
    app.force = True
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # SQLAlchemy's notes on nbgrader's sessions: not the learner's business
        return capture_log(app)


def _course_config(repo_config: Path) -> str:
    # The repository's nbgrader_config.py; it roots the course in the folder it is in: the temporary one.
    return repo_config.read_text() + '\nc.CourseDirectory.db_url = "sqlite:///gradebook.db"\n'


def _read_grades(course: Path, lesson: str, student: str) -> dict[str, tuple[float, float]]:
    from nbgrader.api import Gradebook

    with Gradebook(f"sqlite:///{course / 'gradebook.db'}") as gradebook:
        submission = gradebook.find_submission(lesson, student)
        return {g.name: (float(g.score), float(g.max_score))
                for notebook in submission.notebooks for g in notebook.grades}


def _unreadable(path: Path) -> str | None:
    try:
        json.loads(path.read_text(encoding="utf-8"))
    except (UnicodeDecodeError, json.JSONDecodeError) as error:
        return f"{path.name} is not a valid notebook (not JSON: {error.msg})"
    return None


def _generation_key(lesson: str, solutions: Path, repo_config: Path) -> str:
    """A hash of everything the generated lesson depends on: the lesson's files, the configuration,
    the package's generate preprocessors, and nbgrader's version."""
    import nbgrader

    from . import autograde

    digest = hashlib.sha256()
    for path in sorted(p for p in (solutions / lesson).rglob("*") if p.is_file()):
        digest.update(path.relative_to(solutions).as_posix().encode() + b"\0" + path.read_bytes())
    for text in (repo_config.read_text(), Path(autograde.__file__).read_text(), nbgrader.__version__):
        digest.update(text.encode())
    return digest.hexdigest()[:24]


def _generated(lesson: str, solutions: Path, repo_config: Path) -> Path:
    """The cached result of `nbgrader generate_assignment` for the lesson (gradebook.db and the
    release notebook), made on first use. Graders that start at once (a class's workers, the test
    suite's) wait for the one that makes it instead of each making it again."""
    from filelock import FileLock

    from ..cache import cache_dir

    cached = cache_dir() / "grading" / f"{lesson}-{_generation_key(lesson, solutions, repo_config)}"
    if (cached / "gradebook.db").exists():
        return cached
    cached.parent.mkdir(parents=True, exist_ok=True)
    with FileLock(cached.parent / f"{cached.name}.lock"):
        if not (cached / "gradebook.db").exists():  # the grader we waited for may have made it
            _generate(lesson, solutions, repo_config, cached)
    return cached


def _generate(lesson: str, solutions: Path, repo_config: Path, cached: Path) -> None:
    from nbgrader.converters import GenerateAssignment

    with tempfile.TemporaryDirectory(prefix="tfcourse-generate-") as tmp:
        course = Path(tmp)
        (course / "nbgrader_config.py").write_text(_course_config(repo_config))
        shutil.copytree(solutions / lesson, course / "solutions" / lesson)
        done = _run_app(GenerateAssignment, course, lesson)
        if not done["success"]:
            raise GradingError(f"nbgrader generate_assignment {lesson} failed:\n{done.get('error', '')[-2000:]}")
        staged = Path(tempfile.mkdtemp(prefix=f".{lesson}-", dir=cached.parent))
        shutil.copyfile(course / "gradebook.db", staged / "gradebook.db")
        shutil.copytree(course / "notebooks" / lesson, staged / "release")
    try:
        staged.rename(cached)  # atomic: a grader that looks before taking the lock sees all of it or none
    except OSError:  # made meanwhile by a grader that took no lock (an older version's); theirs is the same
        shutil.rmtree(staged, ignore_errors=True)


def _prepare_course(course: Path, lesson: str, solutions: Path, repo_config: Path) -> Path:
    """A temporary nbgrader course holding one lesson's source and its generated gradebook;
    returns the release notebook."""
    source = solutions / lesson / f"{lesson}.ipynb"
    if not source.exists():
        raise GradingError(f"no source notebook {source}: run tfcourse grade from the course folder")
    generated = _generated(lesson, solutions, repo_config)
    (course / "nbgrader_config.py").write_text(_course_config(repo_config))
    shutil.copytree(solutions / lesson, course / "solutions" / lesson)  # autograde copies its other files
    shutil.copyfile(generated / "gradebook.db", course / "gradebook.db")
    return generated / "release" / f"{lesson}.ipynb"


def grade_submissions(lesson: str, notebooks: dict[str, Path | None], solutions: Path, repo_config: Path,
                      report_dir: Path | None = None, timeout: int | None = None) -> dict[str, LessonGrade]:
    """Autograde several submissions of one lesson in one temporary course.

    notebooks maps a student name to their notebook (read, never written; None = missing).
    """
    results: dict[str, LessonGrade] = {}
    from .forked_kernels import warm_up

    warm_up()  # the grading kernels' template imports torch on another CPU while the course is prepared
    with tempfile.TemporaryDirectory(prefix="tfcourse-grade-") as tmp:
        course = Path(tmp)
        release = _prepare_course(course, lesson, solutions, repo_config)
        titles, max_points = exercise_titles(release), _max_points(release)
        runnable = []
        for student, notebook in notebooks.items():
            results[student] = LessonGrade(lesson, notebook)
            if notebook is None or not notebook.exists():
                record_failure(results[student], max_points,
                               f"missing: expected your notebook at notebooks/{lesson}/{lesson}.ipynb", titles)
            elif problem := _unreadable(notebook):
                record_failure(results[student], max_points, problem, titles)
            else:
                submitted = course / "submitted" / student / lesson
                submitted.mkdir(parents=True)
                _copy_submission(notebook, submitted / f"{lesson}.ipynb")
                runnable.append(student)
        if not runnable:
            return results
        from nbgrader.converters import Autograde, GenerateFeedback

        # The report's first-use work runs on this process's idle CPU while the kernel runs the notebook.
        warming = threading.Thread(target=_warm_up_report, daemon=True) if report_dir is not None else None
        if warming:
            warming.start()
        done = _run_app(Autograde, course, lesson, timeout, Autograde={"create_student": True})
        for student in runnable:
            autograded = course / "autograded" / student / lesson / f"{lesson}.ipynb"
            if not autograded.exists():
                record_failure(results[student], max_points, _autograde_failure(done), titles)
                continue
            record_scores(results[student], _read_grades(course, lesson, student), titles, [autograded])
        if warming:
            warming.join()
            from .autograde import NoComments, feedback_preprocessors

            _run_app(GenerateFeedback, course, lesson, HTMLExporter={"template_name": "feedback"},
                     GenerateFeedback={"preprocessors": [*feedback_preprocessors(), NoComments]})
            for student in runnable:
                results[student].feedback = _copy_feedback(course, lesson, student, report_dir)
    return results


def _warm_up_report() -> bool:
    """Render a two-cell notebook as the feedback report is rendered: what nbconvert, Pygments and the
    MathML converter do once per process (loading templates, lexers and styles) is then done when the
    real report is made. A failure here costs nothing (the report does the same work itself): it
    returns False, which a test watches for."""
    from nbconvert.preprocessors import CSSHTMLHeaderPreprocessor
    from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook, new_output
    from nbgrader.converters import GenerateFeedback
    from traitlets.config import Config

    from .autograde import feedback_exporter
    from .mathml import markdown_with_mathml

    try:
        # The exporter as nbgrader's GenerateFeedback configures it (its template and where it looks).
        config = Config({"GenerateFeedback": {"exporter_class": feedback_exporter()}})
        app = GenerateFeedback(config=config)
        exporter = app.exporter_class(parent=app, config=app.config)
        exporter.register_preprocessor(CSSHTMLHeaderPreprocessor(enabled=True))
        output = new_output("error", ename="ValueError", evalue="x", traceback=["\x1b[31mValueError\x1b[0m: x"])
        notebook = new_notebook(cells=[new_markdown_cell(markdown_with_mathml("$\\frac{QK^T}{\\sqrt{d_k}}$")),
                                       new_code_cell("print('今天天气真好')", outputs=[output])])
        exporter.from_notebook_node(notebook, {"nbgrader": {"notebook": "warm-up", "score": 0, "max_score": 1,
                                                                "late_penalty": 0}})
    except Exception:  # noqa: BLE001 - see the docstring
        return False
    return True


def grade_lesson(lesson: str, notebook: Path | None, solutions: Path, report_dir: Path,
                 repo_config: Path, timeout: int | None = None) -> LessonGrade:
    """Autograde one learner's notebook for one lesson, with an HTML feedback report."""
    return grade_submissions(lesson, {STUDENT: notebook}, solutions, repo_config, report_dir, timeout)[STUDENT]


def _copy_submission(notebook: Path, target: Path) -> None:
    """Copy the learner's notebook for grading. The copy always runs on the course's Python kernel,
    whatever kernel the learner's file names; the learner's file itself is never written."""
    nb = json.loads(notebook.read_text(encoding="utf-8"))
    nb.setdefault("metadata", {})["kernelspec"] = {
        "display_name": "Python 3 (ipykernel)", "language": "python", "name": "python3"}
    nb["cells"] = _without_duplicate_grade_cells(nb.get("cells", []))
    target.write_text(json.dumps(nb), encoding="utf-8")


def _without_duplicate_grade_cells(cells: list[dict]) -> list[dict]:
    """A copied exercise or test cell repeats its grade id, and nbgrader refuses the whole notebook.
    Grade the first cell of each id; later copies become plain cells (they still run)."""
    seen = set()
    for cell in cells:
        grade_id = cell.get("metadata", {}).get("nbgrader", {}).get("grade_id")
        if grade_id in seen:
            del cell["metadata"]["nbgrader"]
        elif grade_id:
            seen.add(grade_id)
    return cells


def _max_points(release_notebook: Path) -> dict[str, float]:
    cells = json.loads(release_notebook.read_text())["cells"]
    return {c["metadata"]["nbgrader"]["grade_id"]: float(c["metadata"]["nbgrader"].get("points", 0))
            for c in cells if c.get("metadata", {}).get("nbgrader", {}).get("grade")}


def _autograde_failure(done: dict) -> str:
    text = done.get("log", "") + done.get("error", "")
    for hint in ("kernel", "Kernel", "cell_type", "grade_id", "checksum"):
        for line in text.splitlines():
            if hint in line and ("ERROR" in line or "Error" in line):
                return f"nbgrader could not grade it: {line.strip()[:200]}"
    return "nbgrader could not grade it (see `nbgrader autograde` output)"


def _copy_feedback(course: Path, lesson: str, student: str, report_dir: Path) -> Path | None:
    html = course / "feedback" / student / lesson / f"{lesson}.html"
    if not html.exists():
        return None
    report_dir.mkdir(parents=True, exist_ok=True)
    target = report_dir / (f"{lesson}.html" if student == STUDENT else f"{lesson}-{student}.html")
    shutil.copyfile(html, target)
    return target


# ----------------------------------------------------------------------------------------------
# The command
# ----------------------------------------------------------------------------------------------


def graded_lessons(solutions: Path) -> list[str]:
    """Lessons whose source has graded cells (the overview lesson has none)."""
    lessons = []
    for path in sorted(solutions.glob("[0-9][0-9]_*/[0-9][0-9]_*.ipynb")):
        if path.stem == path.parent.name and _max_points(path):
            lessons.append(path.parent.name)
    return lessons


def lesson_of(path: Path, lessons: list[str]) -> str:
    """Which lesson a notebook belongs to: its folder, else the NN_ prefix of its name."""
    for candidate in (path.parent.name, path.stem):
        for lesson in lessons:
            if candidate == lesson or candidate.startswith(lesson[:3]):
                return lesson
    raise GradingError(f"cannot tell which lesson {path} belongs to; expected it under notebooks/NN_topic/")


def find_notebook(folder: Path, lesson: str) -> Path | None:
    """notebooks/NN_topic/NN_topic.ipynb, or the only other notebook in that folder (a renamed copy)."""
    expected = folder / f"{lesson}.ipynb"
    if expected.exists():
        return expected
    others = sorted(p for p in folder.glob("*.ipynb") if not p.name.startswith("."))
    return others[0] if len(others) == 1 else None


# An answer's solution region: (its indentation, its body).
SOLUTION_REGION = re.compile(r"^([ \t]*)### BEGIN SOLUTION[ \t]*\n(.*?)^[ \t]*### END SOLUTION[ \t]*$", re.S | re.M)
STUB = "# YOUR CODE HERE\nraise NotImplementedError()"  # nbgrader_config.py's ClearSolutions.code_stub


def _as_given(answer_source: str, grade_id: str, planted: dict[str, str]) -> str:
    """An answer cell as the student version gives it: each solution region replaced by the stub (as
    nbgrader's ClearSolutions does), or the planted code of a debug exercise."""
    if grade_id in planted:
        return planted[grade_id]
    return SOLUTION_REGION.sub(lambda region: textwrap.indent(STUB, region.group(1)), answer_source)


def _answers(notebook: Path) -> dict[str, str]:
    cells = json.loads(notebook.read_text(encoding="utf-8"))["cells"]
    return {c["metadata"]["nbgrader"]["grade_id"]: "".join(c["source"]) if isinstance(c["source"], list) else c["source"]
            for c in cells if c.get("metadata", {}).get("nbgrader", {}).get("solution") and c["cell_type"] == "code"}


def is_started(notebook: Path | None, lesson: str, solutions: Path, planted: dict[str, str]) -> bool:
    """Whether the learner has changed an exercise cell of the lesson (a missing notebook: not started)."""
    if notebook is None:
        return False
    try:
        mine = _answers(notebook)
    except (OSError, ValueError, KeyError):
        return True  # unreadable: grading says why
    given = {grade_id: _as_given(source, grade_id, planted)
             for grade_id, source in _answers(solutions / lesson / f"{lesson}.ipynb").items()}
    return any(" ".join(mine.get(grade_id, "").split()) != " ".join(source.split()) for grade_id, source in given.items())


def _planted_sources() -> dict[str, str]:
    from ..checks.debugging import planted_bugs

    return {grade_id: bug.source for grade_id, bug in planted_bugs().items()}


def _started_only(todo: list[tuple[str, Path | None]], solutions: Path) -> list[tuple[str, Path | None]]:
    """The lessons with an exercise changed; one line for each of the others, and how to grade them all."""
    planted = _planted_sources()
    started = [(lesson, notebook) for lesson, notebook in todo if is_started(notebook, lesson, solutions, planted)]
    for lesson, notebook in todo:
        if (lesson, notebook) not in started:
            print(f"  {lesson}: not started (no exercise changed yet), not graded")
    print(f"grading the {len(started)} lesson(s) you have started; `tfcourse grade --all` grades every lesson")
    return started


def _language_of(notebook: Path | None) -> str:
    """The edition a notebook is from (its metadata says, as tools/edition.py writes it): "en" or "zh"."""
    try:
        return json.loads(notebook.read_text(encoding="utf-8"))["metadata"]["tfcourse"]["language"]
    except (AttributeError, OSError, ValueError, KeyError, TypeError):
        return "en"


def main(argv: list[str] | None = None) -> int:
    import argparse

    from tqdm.auto import tqdm

    parser = argparse.ArgumentParser(prog="tfcourse grade", description=__doc__.splitlines()[0])
    parser.add_argument("notebooks", nargs="*", type=Path,
                        help="notebooks to grade (default: the lessons in notebooks/ you have started)")
    parser.add_argument("--all", action="store_true", help="grade every lesson in notebooks/, started or not")
    parser.add_argument("--course", type=Path, default=Path("."), help="the course folder (default: .)")
    parser.add_argument("--edition", choices=["en", "zh"], default=None,
                        help="the edition of the lessons in notebooks/ to grade: zh grades zh/notebooks against "
                             "zh/solutions (default: en; a notebook named on the command line says its own)")
    parser.add_argument("--report-dir", type=Path, default=Path("grades"),
                        help="where HTML feedback reports go (default: grades/)")
    parser.add_argument("--timeout", type=int, default=None, help="seconds allowed per cell (default: nbgrader_config.py)")
    args = parser.parse_args(argv)
    # Both editions grade by the course's one configuration; the Chinese lessons' source is zh/solutions.
    config = args.course / "nbgrader_config.py"
    edition = args.course / "zh" if args.edition == "zh" else args.course
    solutions = edition / "solutions"
    try:
        lessons = graded_lessons(solutions)
        if not lessons or not config.exists():
            raise GradingError(f"no graded lessons under {solutions} (or no {config}): run from the course folder")
        if args.notebooks:
            todo = [(lesson_of(p, lessons), p) for p in args.notebooks]
        else:
            todo = [(lesson, find_notebook(edition / "notebooks" / lesson, lesson)) for lesson in lessons]
            if not args.all:
                todo = _started_only(todo, solutions)
        # The table speaks the learner's language: Chinese for the Chinese edition's notebooks.
        languages = {_language_of(notebook) for _, notebook in todo if notebook is not None}
        table_language = "zh" if args.edition == "zh" or languages == {"zh"} else "en"
        results = []
        for lesson, notebook in tqdm(todo, desc="grading", unit="lesson"):
            source = args.course / "zh" / "solutions" if _language_of(notebook) == "zh" else args.course / "solutions"
            results.append(grade_lesson(lesson, notebook, source, args.report_dir, config, args.timeout))
    except GradingError as error:
        print(f"tfcourse grade: {error}", file=sys.stderr)
        return 2
    spoken = messages._lesson_language[0]
    set_lesson_language(table_language)
    try:
        print_table(results)
    finally:
        set_lesson_language(spoken)  # (main may run inside a longer process: a test, a notebook)
    return 0
