# nbgrader configuration: run nbgrader from the repository root.
#   solutions/<lesson>/<lesson>.ipynb   the source (complete lessons with solutions and hidden tests)
#   notebooks/<lesson>/<lesson>.ipynb   the release (student version), made by `nbgrader generate_assignment`
import os

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

# The folder of this file, so nbgrader works from here whatever the current directory.
c.CourseDirectory.root = os.path.dirname(os.path.abspath(__file__))
c.CourseDirectory.source_directory = "solutions"
c.CourseDirectory.release_directory = "notebooks"
c.CourseDirectory.submitted_directory = "submitted"
c.CourseDirectory.autograded_directory = "autograded"
c.CourseDirectory.feedback_directory = "feedback"
c.CourseDirectory.course_id = "tfcourse"

# The stub a learner sees in place of each solution.
c.ClearSolutions.code_stub = {"python": "# YOUR CODE HERE\nraise NotImplementedError()"}

# Lessons run with TFCOURSE_FAST semantics under nbgrader (NBGRADER_EXECUTION is set), so the
# longest cell is a short training run; 120 s per cell leaves room on a slow machine.
c.Execute.timeout = 120
c.Execute.interrupt_on_timeout = True

# Fair, tamper-evident autograding (tfcourse/course/autograde.py): stderr never decides a grade,
# an integrity report lists assignments into tfcourse/torch/sys/builtins, and each grading kernel
# may allocate at most $TFCOURSE_GRADING_MEMORY_GB (default 8) GiB, and keeps its output streams working.
from tfcourse.course.autograde import autograde_preprocessors, generate_preprocessors, grading_kernel_arguments  # noqa: E402

c.Autograde.autograde_preprocessors = autograde_preprocessors()
# The student version keeps the output of the worked examples (cells tagged nbval-check-output).
c.GenerateAssignment.preprocessors = generate_preprocessors()
c.Execute.extra_arguments = ["--HistoryManager.hist_file=:memory:", *grading_kernel_arguments()]
