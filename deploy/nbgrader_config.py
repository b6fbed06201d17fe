# nbgrader's configuration for everyone on the hub: the course and its exchange. Install it as
# <course venv>/etc/jupyter/nbgrader_config.py (or /etc/jupyter/nbgrader_config.py): nbgrader reads
# it in every learner's server (Assignment List) and for every `nbgrader fetch_assignment`/`submit`.
# The instructor's own course folder (~/tfcourse, with the course's nbgrader_config.py) adds the
# rest: the source folder, the autograding steps, the timeouts.
import os

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

c.CourseDirectory.course_id = os.environ.get("TFCOURSE_COURSE_ID", "tfcourse")
# The hub sets TFCOURSE_EXCHANGE for every server (deploy/jupyterhub_config.py); the default is
# the one-machine layout of deploy/README.md.
c.Exchange.root = os.environ.get("TFCOURSE_EXCHANGE", "/srv/nbgrader/exchange")
