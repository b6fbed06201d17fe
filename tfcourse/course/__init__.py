"""The course machinery around the model: what lessons, graders and authors use.

    lesson.py           the setup cell: seed, device, fast mode, the data-flow map
    notebook_import.py  import_from_notebook: the learner's own classes from an earlier lesson
    plots.py            the lessons' figures (positional encoding, attention heatmaps, loss curves)
    run_solutions.py    run the complete lessons end to end (tfcourse run-solutions)
    grade.py            grade a learner's notebooks with the hidden tests (tfcourse grade)
    bench.py            performance figures (tfcourse bench)
    cli.py              the `tfcourse` command

The model (tfcourse/<stage>.py) and data + training (tfcourse/data/, tfcourse/training/) never
import from here, so they work without Jupyter or nbgrader installed.
"""

from .lesson import data_flow_map, fast_mode, setup
from .notebook_import import NotebookImportError, import_from_notebook

__all__ = ["setup", "fast_mode", "data_flow_map", "import_from_notebook", "NotebookImportError"]
