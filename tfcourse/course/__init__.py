"""The course machinery around the model: what lessons, graders and authors use.

    lesson.py           the setup cell: seed, device, fast mode, the data-flow map
    notebook_import.py  import_from_notebook: the learner's own classes from an earlier lesson
    plots.py            the lessons' figures (positional encoding, attention heatmaps, loss curves)
    run_solutions.py    run the complete lessons end to end (tfcourse run-solutions)
    grade.py            grade a learner's notebooks with the hidden tests (tfcourse grade)
    results.py          one result model and reporter for `tfcourse grade` and `tfcourse autograde`
    bench.py            performance figures (tfcourse bench)
    cli.py              the `tfcourse` command
    autograde.py        nbgrader plug-ins: fair, tamper-evident grading; formulas readable offline
    demos.py            nbgrader plug-ins: the demonstrations no graded cell needs are not run when grading
    parallel_autograde.py  a class's submissions graded N at a time (tfcourse autograde --jobs N)
    forked_kernels.py   grading kernels forked from one process that has imported torch once
    lab.py              a Jupyter server extension: the lessons open unmodified in JupyterLab
    mathml.py           LaTeX -> MathML for the grading reports
    assemble.py         your_parts(): the learner's own components, checked, built into whole models

The model (tfcourse/<stage>.py) and data + training (tfcourse/data/, tfcourse/training/) never
import from here, so they work without Jupyter or nbgrader installed.
"""

from importlib import import_module

# What a lesson imports from here, and the module each lives in. They are loaded on first use, so
# that nbgrader, which reads nbgrader_config.py (and through it course.autograde) at every command,
# does not import torch for a `fetch_assignment` or a `submit`.
_EXPORTS = {
    "setup": "lesson",
    "fast_mode": "lesson",
    "lesson_language": "lesson",
    "data_flow_map": "lesson",
    "import_from_notebook": "notebook_import",
    "NotebookImportError": "notebook_import",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    value = getattr(import_module(f".{_EXPORTS[name]}", __name__), name)
    globals()[name] = value  # later lookups skip this function
    return value


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
