"""The course machinery around the model: what lessons, graders and authors use.

    lesson.py           the setup cell: seed, device, fast mode, the data-flow map
    notebook_import.py  import_from_notebook: the learner's own classes from an earlier lesson
    plots.py            the lessons' figures (positional encoding, attention heatmaps, loss curves)
    run_solutions.py    run the complete lessons end to end (tfcourse run-solutions)
    grade.py            grade a learner's notebooks with the hidden tests (tfcourse grade)
    bench.py            performance figures (tfcourse bench)
    cli.py              the `tfcourse` command
    autograde.py        nbgrader plug-ins: fair, tamper-evident grading; formulas readable offline
    parallel_autograde.py  a class's submissions graded N at a time (tfcourse autograde --jobs N)
    lab.py              a Jupyter server extension: the lessons open unmodified in JupyterLab
    mathml.py           LaTeX -> MathML for the grading reports
    assemble.py         your_parts(): the learner's own components, checked, built into whole models

The model (tfcourse/<stage>.py) and data + training (tfcourse/data/, tfcourse/training/) never
import from here, so they work without Jupyter or nbgrader installed.
"""

from .lesson import data_flow_map, fast_mode, setup
from .notebook_import import NotebookImportError, import_from_notebook

__all__ = ["setup", "fast_mode", "data_flow_map", "import_from_notebook", "NotebookImportError"]
