"""The nbgrader plug-ins of tfcourse.course.autograde: stderr never decides a grade, and the
integrity report finds what can change how the checks behave."""

from __future__ import annotations

from pathlib import Path

import nbformat
import pytest
from nbgrader.preprocessors import SaveAutoGrades

from tfcourse.course.autograde import (IntegrityReport, StderrIsNotAnError, autograde_preprocessors,
                                       grading_memory_limit, grading_kernel_arguments, scan_notebook,
                                       scan_source)

ROOT = Path(__file__).resolve().parents[1]


def _graded_cell(outputs, **info):
    cell = nbformat.v4.new_code_cell("check(x)")
    cell.metadata["nbgrader"] = {"grade": True, "solution": False, "grade_id": "x_tests", "points": 1, **info}
    cell.outputs = [nbformat.from_dict(o) for o in outputs]
    return cell


def test_stderr_of_graded_cells_becomes_marked_stdout_and_errors_stay():
    stderr = {"output_type": "stream", "name": "stderr", "text": "a warning\nanother\n"}
    error = {"output_type": "error", "ename": "CheckFailed", "evalue": "wrong", "traceback": []}
    plain = nbformat.v4.new_code_cell("print(1)")
    plain.outputs = [nbformat.from_dict(dict(stderr))]
    nb = nbformat.v4.new_notebook(cells=[_graded_cell([stderr]), _graded_cell([stderr, error]), plain])
    nb, _ = StderrIsNotAnError().preprocess(nb, {})
    first, second, third = nb.cells
    assert first.outputs[0]["name"] == "stdout" and first.outputs[0]["text"] == "[stderr] a warning\n[stderr] another\n"
    assert second.outputs[1]["output_type"] == "error"  # an error still scores 0
    assert third.outputs[0]["name"] == "stderr"  # not graded: left alone


def test_the_plug_ins_run_before_the_scores_are_saved():
    steps = autograde_preprocessors()
    assert steps.index(StderrIsNotAnError) < steps.index(SaveAutoGrades)
    assert steps.index(IntegrityReport) < steps.index(SaveAutoGrades)
    config = (ROOT / "nbgrader_config.py").read_text()
    assert "autograde_preprocessors()" in config and "grading_kernel_arguments()" in config


@pytest.mark.parametrize(("source", "finding"), [
    ("import tfcourse.checks.ffn as c\nc.check_feed_forward = lambda *a: None", "tfcourse.checks.ffn.check_feed_forward"),
    ("from tfcourse.checks import core\ncore.compare = print", "tfcourse.checks.core.compare"),
    ("import torch\ntorch.testing.assert_close = print", "torch.testing.assert_close"),
    ("from torch import nn\nnn.functional.softmax = print", "torch.nn.functional.softmax"),
    ("import sys\nsys.stdout = None", "sys.stdout"),
    ("import sys\nsys.modules['tfcourse.checks.ffn'] = object()", "sys.modules[]"),
    ("import builtins\nbuiltins.isinstance = lambda *a: True", "builtins.isinstance"),
    ("get_ipython().showtraceback = print", "get_ipython().showtraceback"),
    ("import torch\ndel torch.Tensor.__eq__", "deletes `torch.Tensor.__eq__"),
    ("exec('x = 1')", "exec()"),
    ("setattr(obj, 'a', 1)", "setattr()"),
    ("import importlib", "importlib"),
])
def test_the_scan_finds_assignments_into_guarded_modules_and_evasions(source, finding):
    findings = scan_source(source, cell=7)
    assert any(finding in str(f) and str(f).startswith("cell 7, line") for f in findings), findings


@pytest.mark.parametrize("source", [
    "self.weight = nn.Parameter(torch.ones(3))",
    "x = torch.zeros(3)\nx[0] = 1",
    "model.output.weight = model.embed.token.weight",
    "torch.manual_seed(0)",
    "%matplotlib inline\ny = 2",
    "def f(:\n  pass",  # a syntax error is the grader's business, not the report's
])
def test_ordinary_code_is_not_reported(source):
    assert scan_source(source) == []


def test_no_lesson_reports_its_own_complete_solution():
    for path in sorted(ROOT.glob("solutions/[0-9][0-9]_*/[0-9][0-9]_*.ipynb")):
        nb = nbformat.read(path, as_version=4)
        graded = any(c.metadata.get("nbgrader", {}).get("grade") for c in nb.cells)
        if graded:
            assert scan_notebook(nb) == [], f"{path.parent.name}: {[str(f) for f in scan_notebook(nb)]}"


def test_the_report_goes_to_the_top_of_the_notebook_and_its_metadata():
    solution = nbformat.v4.new_code_cell("import sys\nsys.stderr = None")
    solution.metadata["nbgrader"] = {"solution": True, "grade": False, "grade_id": "x_impl"}
    locked = nbformat.v4.new_code_cell("import tfcourse\ntfcourse.x = 1")  # the course's own cell
    locked.metadata["nbgrader"] = {"locked": True, "grade_id": "setup"}
    nb = nbformat.v4.new_notebook(cells=[locked, solution])
    nb, _ = IntegrityReport().preprocess(nb, {})
    assert nb.metadata["tfcourse"]["integrity"] == ["cell 1, line 2: assigns to `sys.stderr`"]
    assert nb.cells[0].cell_type == "markdown" and "Integrity report" in nb.cells[0].source
    nb, _ = IntegrityReport().preprocess(nb, {})  # run again: one report, not two
    assert sum("Integrity report" in c.source for c in nb.cells) == 1


def test_the_grading_kernel_memory_limit_is_configurable(monkeypatch):
    monkeypatch.setenv("TFCOURSE_GRADING_MEMORY_GB", "2")
    assert grading_memory_limit() == 2 * 2**30
    argument, log_level = grading_kernel_arguments()
    assert argument.startswith("--IPKernelApp.exec_lines=") and str(2 * 2**30) in argument
    assert log_level == "--IPKernelApp.log_level=ERROR"


@pytest.mark.parametrize("inherited_gb", [None, 1, 3])
def test_a_grading_kernel_takes_the_lower_of_its_cap_and_an_inherited_hard_limit(monkeypatch, inherited_gb):
    """On the classroom hub a learner's server (and so `tfcourse grade`'s kernels) already runs under a
    hard memory limit, which no process can raise: the grading kernel's start-up lines must then keep
    it, not fail. Run here in a process that starts with that limit, as the hub sets it."""
    import json
    import subprocess
    import sys

    monkeypatch.setenv("TFCOURSE_GRADING_MEMORY_GB", "2")
    (argument, _) = grading_kernel_arguments()
    lines = json.loads(argument.split("=", 1)[1])
    inherit = "" if inherited_gb is None else \
        f"import resource; resource.setrlimit(resource.RLIMIT_DATA, ({inherited_gb * 2**30},) * 2)\n"
    script = inherit + lines[0] + "\nprint(*resource.getrlimit(resource.RLIMIT_DATA))"
    done = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    expected = 2 * 2**30 if inherited_gb is None else min(2, inherited_gb) * 2**30
    assert done.stdout.split() == [str(expected)] * 2



def test_the_course_configuration_loads_without_torch_and_stops_grading_kernels_at_once():
    """nbgrader reads nbgrader_config.py at every command (fetch, submit, list, ...): loading it must
    not import torch (a second of start-up each). A grading kernel has nothing to save, so nbgrader
    stops it at once instead of waiting for it to exit."""
    import subprocess
    import sys
    import textwrap

    script = textwrap.dedent("""
        import sys
        from traitlets.config.loader import PyFileConfigLoader
        config = PyFileConfigLoader("nbgrader_config.py", ".").load_config()
        print(config.Execute.shutdown_kernel, "torch" in sys.modules)
    """)
    done = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert done.returncode == 0, done.stderr
    assert done.stdout.split() == ["immediate", "False"]

# ----------------------------------------------------------------------------------------------
# tfcourse grade: nbgrader in this process, the generated lesson cached by content hash
# ----------------------------------------------------------------------------------------------


def test_the_generated_lesson_is_keyed_by_everything_it_is_made_from(tmp_path):
    import shutil

    from tfcourse.course.grade import _generation_key

    solutions = tmp_path / "solutions"
    shutil.copytree(ROOT / "solutions" / "04_ffn", solutions / "04_ffn")
    config = tmp_path / "nbgrader_config.py"
    shutil.copyfile(ROOT / "nbgrader_config.py", config)
    key = _generation_key("04_ffn", solutions, config)
    assert _generation_key("04_ffn", solutions, config) == key, "the same files give the same key"
    notebook = solutions / "04_ffn" / "04_ffn.ipynb"
    notebook.write_bytes(notebook.read_bytes().replace(b"FeedForward", b"FeedForwardX", 1))
    changed_lesson = _generation_key("04_ffn", solutions, config)
    (solutions / "04_ffn" / "data.txt").write_text("a file beside the notebook")
    added_file = _generation_key("04_ffn", solutions, config)
    config.write_text(config.read_text() + "\nc.Execute.timeout = 60\n")
    changed_config = _generation_key("04_ffn", solutions, config)
    assert len({key, changed_lesson, added_file, changed_config}) == 4


@pytest.mark.slow
def test_the_generated_lesson_is_made_once_then_reused(tmp_path, monkeypatch):
    import json

    from nbgrader.converters import GenerateAssignment

    from tfcourse.course import grade

    monkeypatch.setenv("TFCOURSE_CACHE_DIR", str(tmp_path / "cache"))
    generated = []
    run_app = grade._run_app

    def counting(app_class, *args, **kwargs):
        generated.append(app_class is GenerateAssignment)
        return run_app(app_class, *args, **kwargs)

    monkeypatch.setattr(grade, "_run_app", counting)
    first = grade._generated("04_ffn", ROOT / "solutions", ROOT / "nbgrader_config.py")
    again = grade._generated("04_ffn", ROOT / "solutions", ROOT / "nbgrader_config.py")
    assert first == again and generated == [True], "generated on first use only"
    assert first.parent == tmp_path / "cache" / "grading" and (first / "gradebook.db").exists()
    release = json.loads((first / "release" / "04_ffn.ipynb").read_text())
    assert any("raise NotImplementedError()" in "".join(c["source"]) for c in release["cells"])
    assert not list(first.parent.glob(".04_ffn-*")), "no half-written copy is left behind"


def test_graders_that_start_at_once_generate_the_lesson_once(tmp_path, monkeypatch):
    """Three graders ask for the same lesson while none is cached: one generates it, the others wait for it."""
    import threading
    import time

    from tfcourse.course import grade

    monkeypatch.setenv("TFCOURSE_CACHE_DIR", str(tmp_path / "cache"))
    generated, generate = [], grade._generate

    def slow(*args):
        generated.append(args[0])
        time.sleep(1)  # long enough for the others to arrive while it runs
        generate(*args)

    monkeypatch.setattr(grade, "_generate", slow)
    found = []
    graders = [threading.Thread(target=lambda: found.append(
        grade._generated("00_big_picture", ROOT / "solutions", ROOT / "nbgrader_config.py"))) for _ in range(3)]
    for grader in graders:
        grader.start()
    for grader in graders:
        grader.join()
    assert generated == ["00_big_picture"] and len(found) == 3 and len(set(found)) == 1
    assert (found[0] / "gradebook.db").exists()


def test_every_exercise_has_the_number_and_name_its_notebook_shows():
    from tfcourse.course.grade import _max_points, exercise_titles, graded_lessons

    for lesson in graded_lessons(ROOT / "solutions"):
        notebook = ROOT / "notebooks" / lesson / f"{lesson}.ipynb"
        titles = exercise_titles(notebook)
        assert set(titles) == set(_max_points(notebook)), f"{lesson}: a graded cell without an exercise heading"
        numbers = [int(title.split()[1]) for title in titles.values()]
        assert numbers == sorted(numbers) and numbers[0] == 1, (lesson, titles)
        for title in titles.values():
            assert title.startswith("Exercise ") and " — " in title and not set(title) & set("`★$\\"), title
    assert exercise_titles(ROOT / "notebooks" / "08_training" / "08_training.ipynb")["adamw_step_tests"] == \
        "Exercise 2 — adamw_step"


def test_errors_outside_the_exercises_are_listed(tmp_path, capsys):
    import json

    from tfcourse.course.grade import ExerciseGrade, LessonGrade, errors_elsewhere, print_table

    def error(ename, evalue):
        return {"output_type": "error", "ename": ename, "evalue": evalue, "traceback": []}

    graded = {"nbgrader": {"grade": True, "grade_id": "x_tests", "points": 1}}
    cells = [
        {"cell_type": "code", "metadata": {}, "outputs": [error("DatasetUnavailableError", "no copy\nof the data")]},
        {"cell_type": "code", "metadata": graded, "outputs": [error("CheckFailed", "wrong")]},  # an exercise's own
        {"cell_type": "code", "metadata": {}, "outputs": [error("NotImplementedError", "")]},  # counted in its row
        {"cell_type": "markdown", "metadata": {}, "source": "text"},
    ]
    autograded = tmp_path / "lesson.ipynb"
    autograded.write_text(json.dumps({"cells": cells}))
    found, depending = errors_elsewhere(autograded)
    assert found == ["code cell 0: DatasetUnavailableError: no copy of the data"] and depending == []
    result = LessonGrade("99_demo", autograded, [ExerciseGrade("x_tests", 0, 1, "✘ wrong", "Exercise 1 — x")],
                         elsewhere=found)
    print_table([result])
    table = capsys.readouterr().out
    assert "Exercise 1 — x" in table and "x_tests" not in table
    assert "outside the exercises, 1 cell(s) failed" in table and "DatasetUnavailableError" in table


def test_a_demo_that_fails_for_an_unfinished_exercise_is_said_to_depend_on_it(tmp_path, capsys):
    """Lesson 03: a demo builds `mha` from the learner's MultiHeadAttention, and a later cell reads `mha`; both
    fail while exercise 6 fails, and are reported as depending on it, not as failures outside the exercises."""
    import json

    from tfcourse.course.grade import ExerciseGrade, LessonGrade, errors_elsewhere, print_table

    def code(source, *, error=None, grade_id=None):
        metadata = {"nbgrader": {"grade": True, "grade_id": grade_id, "points": 3}} if grade_id else {}
        outputs = [{"output_type": "error", "ename": error, "evalue": "boom", "traceback": []}] if error else []
        return {"cell_type": "code", "metadata": metadata, "source": source, "outputs": outputs}

    cells = [code("x = torch.randn(1, 4, 32)"),
             code("mha = MultiHeadAttention(32, 4)\nout = mha(x)", error="RuntimeError"),
             code("weights = mha.last_weights", error="NameError"),
             code("print(undefined_thing)", error="NameError")]  # nothing to do with an exercise
    autograded = tmp_path / "03_attention.ipynb"
    autograded.write_text(json.dumps({"cells": cells}))
    found, depending = errors_elsewhere(autograded, {"mha_tests"}, "03_attention")
    assert depending == ["code cell 1 depends on Exercise 6 — MultiHeadAttention",
                         "code cell 2 depends on Exercise 6 — MultiHeadAttention"]
    assert found == ["code cell 3: NameError: boom"]
    assert errors_elsewhere(autograded, set(), "03_attention")[1] == []  # the exercise passes: their own failures
    result = LessonGrade("03_attention", autograded, [ExerciseGrade("mha_tests", 0, 3, "✘", "Exercise 6 — x")],
                         elsewhere=found, depending=depending)
    print_table([result])
    assert "2 later cell(s) use an exercise that does not pass yet" in capsys.readouterr().out


def test_a_demo_that_fails_through_a_composites_earlier_part_depends_on_that_part(tmp_path):
    """Lesson 01: train_bpe passes with the reference merge_word in place, but a demo calling it runs the
    learner's merge_word, which fails its own check: the demo depends on Exercise 3, not on nothing."""
    import json

    from tfcourse.course.grade import errors_elsewhere

    demo = {"cell_type": "code", "metadata": {}, "source": "merges = train_bpe(words, 10)",
            "outputs": [{"output_type": "error", "ename": "AssertionError", "evalue": "boom", "traceback": []}]}
    autograded = tmp_path / "01_tokenization.ipynb"
    autograded.write_text(json.dumps({"cells": [demo]}))
    found, depending = errors_elsewhere(autograded, {"merge_word_tests"}, "01_tokenization")
    assert (found, depending) == ([], ["code cell 0 depends on Exercise 3 — merge_word"])
    found, depending = errors_elsewhere(autograded, {"train_bpe_tests", "merge_word_tests"}, "01_tokenization")
    assert depending == ["code cell 0 depends on Exercise 3 — merge_word and Exercise 4 — train_bpe"]
    assert errors_elsewhere(autograded, {"bpe_decode_tests"}, "01_tokenization") == (["code cell 0: AssertionError: boom"], [])


@pytest.mark.slow
def test_the_self_graded_report_reads_offline_and_has_no_comment_boxes(tmp_path):
    from tfcourse.course.grade import grade_lesson

    lesson = "04_ffn"
    result = grade_lesson(lesson, ROOT / "notebooks" / lesson / f"{lesson}.ipynb", ROOT / "solutions",
                          tmp_path, ROOT / "nbgrader_config.py")
    report = result.feedback.read_text()
    body = report.split("<body", 1)[1]  # (the head holds MathJax's configuration, which names "$$")
    assert body.count("<math") > 10 and "$$" not in body
    assert "No response." not in report and "Comments:" not in report


def test_the_reports_warm_up_renders_as_the_report_does():
    """tfcourse grade renders a small notebook like the report while the kernel runs (so that the report's
    first-use work is done by then); a change in nbgrader's template that breaks it must not go unseen."""
    from tfcourse.course import grade

    assert grade._warm_up_report()
