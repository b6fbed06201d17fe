# nbgrader configuration: run nbgrader from the repository root.
#   solutions/<lesson>/<lesson>.ipynb   the source (complete lessons with solutions and hidden tests)
#   notebooks/<lesson>/<lesson>.ipynb   the release (student version), made by `nbgrader generate_assignment`
import os
import sys

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

# The folder of this file, so nbgrader works from here whatever the current directory.
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
c.CourseDirectory.course_id = "tfcourse"

# One machine: the exchange (release -> fetch -> submit -> collect -> feedback) lives in the course
# folder, and a learner's fetched lessons in assignments/ (which has a nbgrader_config.py that loads
# this one: nbgrader reads the configuration there too); git ignores both. A JupyterHub classroom
# points TFCOURSE_EXCHANGE at its shared exchange instead.
c.Exchange.root = os.environ.get("TFCOURSE_EXCHANGE", os.path.join(c.CourseDirectory.root, "exchange"))
c.Exchange.assignment_dir = os.path.join(c.CourseDirectory.root, "assignments")
c.Exchange.cache = os.path.join(c.Exchange.assignment_dir, ".submitted")  # the learner's record of submissions
if not os.path.isdir(c.Exchange.root):  # the Assignment List reports an error until it exists
    os.makedirs(c.Exchange.root)
    os.chmod(c.Exchange.root, 0o777)  # what nbgrader wants of an exchange: everyone may submit

# nbgrader runs `alembic` as a program when it creates a gradebook: this environment's programs come
# first on PATH, also when Jupyter was started without activating it (.venv/bin/jupyter lab).
_bin = os.path.dirname(sys.executable)
if _bin not in os.environ.get("PATH", "").split(os.pathsep):
    os.environ["PATH"] = _bin + os.pathsep + os.environ.get("PATH", "")

# The stub a learner sees in place of each solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Lessons run with TFCOURSE_FAST semantics under nbgrader (NBGRADER_EXECUTION is set), so the
# longest cell is a short training run; 120 s per cell leaves room on a slow machine.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True
# A grading kernel has nothing to save: stop it at once when the notebook is done (a graceful
# shutdown waits about a second per submission for the kernel to exit by itself).
c.Execute.shutdown_kernel = "immediate"

# Fair, tamper-evident autograding (tfcourse/course/autograde.py): stderr never decides a grade,
# an integrity report lists assignments into tfcourse/torch/sys/builtins, and each grading kernel
# may allocate at most $TFCOURSE_GRADING_MEMORY_GB (default 8) GiB, and keeps its output streams working.
from tfcourse.course.autograde import (autograde_preprocessors, feedback_exporter, feedback_preprocessors,  # noqa: E402
                                       generate_preprocessors, grading_kernel_arguments)

c.Autograde.autograde_preprocessors = autograde_preprocessors()
# The student version keeps the output of the worked examples (cells tagged nbval-check-output).
c.GenerateAssignment.preprocessors = generate_preprocessors()
# The feedback's formulas as MathML, which browsers draw without MathJax from a CDN: readable offline.
c.GenerateFeedback.preprocessors = feedback_preprocessors()
c.GenerateFeedback.exporter_class = feedback_exporter()  # its words in the notebook's language
c.Execute.extra_arguments = ["--HistoryManager.hist_file=:memory:", *grading_kernel_arguments()]
