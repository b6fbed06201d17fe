"""What grading found, and how it is shown: one result model and one reporter for `tfcourse grade`
(a learner's own notebooks) and `tfcourse autograde` (a class's submissions).

- `ExerciseGrade`: one graded cell's points, its one-line message and the exercise's title;
- `LessonGrade`: one submission of one lesson (whose, how long it took, why it could not be
  graded), its exercises, the integrity report's findings and the errors outside the exercises;
- `record_scores` / `record_failure` fill one in, from the scores and the autograded notebook's
  cells, or all zero with the reason;
- the reporter: `print_table` (what `tfcourse grade` prints), `print_submission` and
  `print_class_summary` (what `tfcourse autograde` prints as it goes and at the end).

Neither nbgrader nor torch is imported here: the results are plain data, so the reporter is
tested without grading anything.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from pathlib import Path

from .. import manifest
from ..messages import LANGUAGES, say

# The output of a demonstration that grading left out (tfcourse.course.demos.SkipDemonstrations).
NOT_RUN = "[not run when grading: no graded cell needs it; run the notebook to see its output]\n"


def not_run_note(language: str) -> str:
    """NOT_RUN in the notebook's language."""
    return say("[not run when grading: no graded cell needs it; run the notebook to see its output]", language) + "\n"


@dataclass
class ExerciseGrade:
    grade_id: str
    score: float
    max_score: float
    message: str
    title: str = ""  # "Exercise 2 — count_pairs", as the notebook's heading names it

    @property
    def passed(self) -> bool:
        return self.score >= self.max_score


@dataclass
class LessonGrade:
    lesson: str
    notebook: Path | None  # what was graded: the learner's notebook (autograde: the submission's folder)
    exercises: list[ExerciseGrade] = field(default_factory=list)
    problem: str | None = None  # why the notebook could not be graded at all (missing, not JSON, timed out, ...)
    feedback: Path | None = None
    integrity: list[str] = field(default_factory=list)  # the integrity report's findings (cell, line, what)
    elsewhere: list[str] = field(default_factory=list)  # errors in cells that are not exercises ("cell 12: ...")
    depending: list[str] = field(default_factory=list)  # cells that failed for an exercise not yet passing
    not_run: int = 0  # demonstrations left out of the graded copy: no graded cell needs them (course/demos.py)
    student: str = ""  # whose submission, in a class (autograde); "" for your own (grade)
    seconds: float | None = None  # how long grading it took, where that was timed

    @property
    def score(self) -> float:
        return sum(e.score for e in self.exercises)

    @property
    def max_score(self) -> float:
        return sum(e.max_score for e in self.exercises)

    @property
    def ok(self) -> bool:
        """Graded (whatever the score), as opposed to a submission nbgrader could not grade."""
        return self.problem is None


# ----------------------------------------------------------------------------------------------
# Filling one in
# ----------------------------------------------------------------------------------------------


def record_scores(result: LessonGrade, scores: dict[str, tuple[float, float]], titles: dict[str, str],
                  autograded: list[Path]) -> LessonGrade:
    """A graded submission: each exercise's (score, max score) from the gradebook, and from the
    autograded notebooks each graded cell's message, the integrity report and the other errors."""
    messages: dict[str, str] = {}
    not_passing = {grade_id for grade_id, (score, most) in scores.items() if score < most}
    for notebook in autograded:
        messages.update(cell_messages(notebook))
        result.integrity += integrity_findings(notebook)
        elsewhere, depending = errors_elsewhere(notebook, not_passing, result.lesson)
        result.elsewhere += elsewhere
        result.depending += depending
        notes = {not_run_note(language) for language in LANGUAGES}
        result.not_run += sum(any(note in "".join(o.get("text", "")) for o in cell.get("outputs", []) for note in notes)
                              for cell in _cells(notebook) if cell.get("cell_type") == "code")
    result.exercises = _exercises(scores, titles, messages)
    return result


def record_failure(result: LessonGrade, max_points: dict[str, float], problem: str,
                   titles: dict[str, str]) -> LessonGrade:
    """A submission that could not be graded: every exercise 0 points, the reason as its message,
    so that the total still shows what it was out of."""
    result.problem = problem
    scores = {grade_id: (0.0, most) for grade_id, most in max_points.items()}
    result.exercises = _exercises(scores, titles, dict.fromkeys(max_points, problem))
    return result


def _exercises(scores: dict[str, tuple[float, float]], titles: dict[str, str],
               messages: dict[str, str]) -> list[ExerciseGrade]:
    return [ExerciseGrade(grade_id, score, most, messages.get(grade_id, ""), titles.get(grade_id, grade_id))
            for grade_id, (score, most) in scores.items()]


def lesson_titles(lesson: str) -> dict[str, str]:
    """Grade id -> "Exercise N — name" from the lesson manifest; {} for an assignment that is not
    one of the course's lessons (its rows then show grade ids)."""
    if lesson not in {known.folder for known in manifest.lessons()}:
        return {}
    return {e.grade_id: e.title for e in manifest.lesson(lesson).exercises}


def exercise_titles(notebook: Path) -> dict[str, str]:
    """Each graded cell's grade id -> "Exercise N — name": the lesson manifest's titles for a course
    lesson, else read from the notebook's exercise headings (the last one above each graded cell)."""
    titles = lesson_titles(notebook.parent.name)
    if titles:
        return titles
    return {grade_id: f"Exercise {number} — {name}"  # (the reporter says it in the learner's language)
            for grade_id, (number, name) in manifest.exercise_headings(_cells(notebook)).items()}


# ----------------------------------------------------------------------------------------------
# What the autograded notebook says
# ----------------------------------------------------------------------------------------------


def _cells(notebook: Path) -> list[dict]:
    return json.loads(notebook.read_text(encoding="utf-8"))["cells"]


def cell_message(cell: dict) -> str:
    """One line from a graded cell's outputs: the error's last line, else the check's ✔ line."""
    for output in cell.get("outputs", []):
        if output.get("output_type") == "error":
            if output.get("ename") == "NotImplementedError":
                return "not implemented yet"
            text = " ".join(line.strip() for line in output.get("evalue", "").splitlines() if line.strip())
            return f"{output.get('ename', 'Error')}: {text}"[:300]
    lines = [line for output in cell.get("outputs", []) if output.get("output_type") == "stream"
             for line in "".join(output.get("text", "")).splitlines() if line.strip()]
    return lines[-1][:200] if lines else ""


def cell_messages(autograded: Path) -> dict[str, str]:
    """Grade id -> the one-line message of each graded cell of an autograded notebook."""
    return {c["metadata"]["nbgrader"]["grade_id"]: cell_message(c)
            for c in _cells(autograded) if c.get("metadata", {}).get("nbgrader", {}).get("grade")}


def errors_elsewhere(autograded: Path, not_passing: set[str] | None = None,
                     lesson: str | None = None) -> tuple[list[str], list[str]]:
    """Errors in the graded copy outside the exercises: cells that are neither an answer nor a test.
    Returns (the cells that failed on their own — the data cell offline, a demo that crashed —, the
    cells that failed because they use an exercise in `not_passing`: "code cell 27 depends on Exercise
    5 — MultiHeadAttention"). Unfinished exercises (NotImplementedError) are already counted in their rows."""
    cells = _cells(autograded)
    lesson = lesson or autograded.parent.name
    titles = lesson_titles(lesson)
    dependencies = manifest.exercise_dependencies(
        ["".join(c.get("source", "")) if c.get("cell_type") == "code" else "" for c in cells], lesson,
        [bool(c.get("metadata", {}).get("nbgrader", {}).get("grade_id")) for c in cells])
    found, depending = [], []
    for index, cell in enumerate(cells):
        if cell.get("cell_type") != "code" or cell.get("metadata", {}).get("nbgrader", {}).get("grade_id"):
            continue
        for output in cell.get("outputs", []):
            if output.get("output_type") != "error":
                continue
            blocked = sorted(dependencies[index] & (not_passing or set()))
            if blocked:
                names = " and ".join(titles.get(grade_id, grade_id) for grade_id in blocked)
                depending.append(f"code cell {index} depends on {names}")
            elif output.get("ename") != "NotImplementedError":
                value = " ".join(output.get("evalue", "").split())
                found.append(f"code cell {index}: {output.get('ename', 'Error')}: {value}"[:200])
    return found, depending


def integrity_findings(autograded: Path) -> list[str]:
    """The integrity report that nbgrader_config.py's IntegrityReport left in the notebook's metadata."""
    notebook = json.loads(autograded.read_text(encoding="utf-8"))
    return notebook.get("metadata", {}).get("tfcourse", {}).get("integrity", [])


# ----------------------------------------------------------------------------------------------
# The reporter
# ----------------------------------------------------------------------------------------------


def points(result: LessonGrade) -> str:
    return say(f"{result.score:g} / {result.max_score:g} points")


def detail_lines(result: LessonGrade) -> list[str]:
    """One submission's rows under its heading: an exercise a line, then what went wrong elsewhere."""
    titles = [_title(e.title) if e.title else e.grade_id for e in result.exercises]
    width = max((_width(title) for title in titles), default=0)
    lines = [f"  {title}{' ' * (width - _width(title))} {e.score:>4g} / {e.max_score:<4g} "
             f"{say('pass') if e.passed else say('FAIL')}  {e.message}" for title, e in zip(titles, result.exercises)]
    if result.depending:
        lines.append("  " + say(f"{len(result.depending)} later cell(s) use an exercise that does not pass yet and "
                                f"could not run (they will once it does): {result.depending[0]}"))
    if result.not_run:
        lines.append("  " + say(f"{result.not_run} demonstration cell(s) were not run: no graded cell needs them "
                                "(run the notebook to see them)"))
    if result.elsewhere:
        lines.append("  " + say(f"outside the exercises, {len(result.elsewhere)} cell(s) failed in the graded copy "
                                f"(see the feedback report): {result.elsewhere[0]}"))
    lines += ["  " + say(f"integrity: {finding}") for finding in result.integrity]
    if result.feedback:
        lines.append("  " + say(f"feedback report: {result.feedback}"))
    return lines


def _title(title: str) -> str:
    """"Exercise 3 — FeedForward" in the learner's language."""
    match = re.fullmatch(r"Exercise (\d+) — (.*)", title, flags=re.S)
    return say(f"Exercise {match[1]} — {match[2]}") if match else title


def _width(text: str) -> int:
    """Columns `text` takes in a terminal: a Chinese character takes two."""
    return sum(2 if "\u2e80" <= ch <= "\u9fff" or "\uff00" <= ch <= "\uffef" else 1 for ch in text)


def print_table(results: list[LessonGrade]) -> None:
    """`tfcourse grade`'s report: each lesson's points, an exercise a row, and the total."""
    for result in results:
        print(f"\n{result.lesson}: {points(result)}" + (f"   ({say(result.problem)})" if result.problem else ""))
        for line in detail_lines(result):
            print(line)
    total, maximum = sum(r.score for r in results), sum(r.max_score for r in results)
    print("\n" + say(f"total: {total:g} / {maximum:g} points"))


def submission_line(result: LessonGrade) -> str:
    """'alice: 15 / 15 points  [5.2 s]', or 'adam: FAILED (timed out after 30 s)  [30.0 s]'."""
    outcome = points(result) if result.ok else f"FAILED ({result.problem})"
    return f"{result.student}: {outcome}  [{result.seconds or 0:.1f} s]"


def print_submission(result: LessonGrade, exercises: bool = False) -> None:
    """`tfcourse autograde`'s line as each submission is graded; with `exercises`, its rows as
    `tfcourse grade` prints them underneath."""
    print(submission_line(result), flush=True)  # (flushed: a class takes minutes, the lines show progress)
    if exercises:
        for line in detail_lines(result):
            print(line)


def print_class_summary(results: list[LessonGrade], lesson: str, jobs: int, seconds: float) -> None:
    """`tfcourse autograde`'s last lines: how many were graded, and how to retry each that was not."""
    failed = [r for r in results if not r.ok]
    print(f"{len(results) - len(failed)}/{len(results)} submissions of {lesson} graded with "
          f"{jobs} job(s) in {seconds:.1f} s")
    for result in failed:
        print(f"  not graded: {result.student}: {result.problem} "
              f"(`nbgrader autograde {lesson} --student {result.student} --force` to retry)")
