# The Chinese edition's nbgrader course (中文版): the English course's configuration, its own folders.
#   zh/solutions/<lesson>/<lesson>.ipynb   the source, made by `python tools/edition.py` from the English
#   zh/notebooks/<lesson>/<lesson>.ipynb   the release (student version), made the same way
# Run nbgrader from this folder to teach a Chinese class: generate → release → autograde → feedback.
import os

_here = os.path.dirname(os.path.abspath(__file__))
load_subconfig(os.path.join(_here, os.pardir, "nbgrader_config.py"))  # noqa: F821 - given by nbgrader
c = get_config()  # noqa: F821
c.CourseDirectory.root = _here
c.CourseDirectory.course_id = "tfcourse-zh"
# The lessons keep their English folder names (their grade ids are the same), so a learner's fetched
# Chinese lessons live apart from the English ones.
c.Exchange.assignment_dir = os.path.join(_here, "assignments")
c.Exchange.cache = os.path.join(c.Exchange.assignment_dir, ".submitted")
