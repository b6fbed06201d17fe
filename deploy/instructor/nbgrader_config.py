# nbgrader's configuration for instructors only (the hub puts this folder on JUPYTER_CONFIG_PATH
# for them): Formgrader manages the course folder ~/tfcourse, configured by the course's own
# nbgrader_config.py there (the source folder, the autograding steps, the timeouts).
import os

c = get_config()  # noqa: F821 - provided by nbgrader when it loads this file

COURSE = os.path.expanduser(os.environ.get("TFCOURSE_COURSE_DIR", "~/tfcourse"))
if os.path.exists(os.path.join(COURSE, "nbgrader_config.py")):
    load_subconfig(os.path.join(COURSE, "nbgrader_config.py"))  # noqa: F821 - provided by nbgrader
c.CourseDirectory.root = COURSE
