"""JupyterHub (5 or 6) for a tfcourse classroom on one machine: learners and an instructor as
Unix users, the course installed once, nbgrader's exchange shared, Formgrader for the instructor.

Start it as root (the hub switches to each user to start their server):

    jupyterhub -f deploy/jupyterhub_config.py        # or copy this file to /etc/jupyterhub/

deploy/README.md walks through the install. Every path and choice below can be changed with an
environment variable (TFCOURSE_...), so the same file serves a trial and a real class.
"""

import os
import sys

c = get_config()  # noqa: F821 - provided by JupyterHub when it loads this file

# --- where things are -------------------------------------------------------------------------
# The course, installed once for everyone: a virtual environment with `pip install ".[course]"`
# and `jupyterhub`; every learner's server and kernel runs its Python.
PREFIX = os.environ.get("TFCOURSE_PREFIX", "/opt/tfcourse/venv")
# nbgrader's exchange: release -> fetch, submit -> collect, feedback. World-writable with the
# sticky bit (mode 1777), as nbgrader requires; nbgrader's own permissions inside keep learners
# from listing each other's submissions.
EXCHANGE = os.environ.get("TFCOURSE_EXCHANGE", "/srv/nbgrader/exchange")
COURSE_ID = os.environ.get("TFCOURSE_COURSE_ID", "tfcourse")
# The hub's own state (its database, cookie secret): readable by root only.
STATE = os.environ.get("TFCOURSE_HUB_STATE", "/srv/jupyterhub")
INSTRUCTORS = {name for name in os.environ.get("TFCOURSE_INSTRUCTORS", "instructor").split(",") if name}
# The Jupyter configuration only instructors get (deploy/instructor/, installed next to the venv's
# own etc/jupyter): it turns Formgrader on and points it at the instructor's ~/tfcourse.
INSTRUCTOR_CONFIG = os.environ.get("TFCOURSE_INSTRUCTOR_CONFIG", f"{PREFIX}/etc/jupyter-instructor")

c.JupyterHub.bind_url = os.environ.get("TFCOURSE_HUB_URL", "http://:8000")
c.JupyterHub.db_url = f"sqlite:///{STATE}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{STATE}/jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.pid_file = f"{STATE}/jupyterhub-proxy.pid"
# The proxy is the `configurable-http-proxy` command: the Node.js original (npm) or its Python
# implementation (`pip install configurable-http-proxy`), which needs no Node.js.

# --- who may log in -----------------------------------------------------------------------------
# - "pam" (the default): the machine's Unix accounts and passwords. Learners are the members of
#   the Unix group TFCOURSE_LEARNERS_GROUP; instructors are listed by name. Use it for a real class
#   on one machine (with HTTPS in front: a reverse proxy, or c.JupyterHub.ssl_cert/ssl_key).
# - OAuth ("github", "generic-oauth" for an LMS or university login, from the `oauthenticator`
#   package): no passwords on this machine. With LocalProcessSpawner every login must still be a
#   Unix account; oauthenticator's Local... classes with create_system_users=True make them.
# - "shared-password" (JupyterHub >= 5.3): one password for all learners and another for the
#   instructors (at least 32 characters), for a trial or a workshop; the Unix accounts must exist. JupyterHub's "dummy"
#   authenticator lets anyone in with any password: never on a reachable machine.
AUTHENTICATOR = os.environ.get("TFCOURSE_AUTHENTICATOR", "pam")
c.JupyterHub.authenticator_class = AUTHENTICATOR
c.Authenticator.admin_users = INSTRUCTORS  # instructors may add learners on the hub's admin page
c.Authenticator.allowed_users = set(INSTRUCTORS)
c.Authenticator.allow_existing_users = True  # and users added there (or through the REST API) may log in
if AUTHENTICATOR == "pam":
    c.LocalAuthenticator.allowed_groups = {os.environ.get("TFCOURSE_LEARNERS_GROUP", "tfcourse")}
elif AUTHENTICATOR == "shared-password":
    c.SharedPasswordAuthenticator.user_password = os.environ["TFCOURSE_LEARNER_PASSWORD"]
    c.SharedPasswordAuthenticator.admin_password = os.environ["TFCOURSE_INSTRUCTOR_PASSWORD"]

# --- each user's server ---------------------------------------------------------------------------
# LocalProcessSpawner (JupyterHub's default): each server runs as its user, in their home, so
# nbgrader's exchange permissions and the homes' own (mode 0700) keep learners' work apart.
c.JupyterHub.spawner_class = "localprocess"
c.Spawner.cmd = [f"{PREFIX}/bin/jupyterhub-singleuser"]
c.Spawner.default_url = "/lab"
c.Spawner.notebook_dir = "~"
c.Spawner.environment = {
    "PATH": f"{PREFIX}/bin:/usr/local/bin:/usr/bin:/bin",  # the course's Python, nbgrader, alembic
    "TFCOURSE_EXCHANGE": EXCHANGE,  # read by the nbgrader configurations (deploy/nbgrader_config.py)
    "TFCOURSE_COURSE_ID": COURSE_ID,
}
c.Spawner.start_timeout = 120  # a first start on a busy machine imports a lot
c.Spawner.http_timeout = 120


def _per_user(spawner):
    """Instructors get Formgrader (nbgrader's "one course, one instructor" setup): their server reads
    INSTRUCTOR_CONFIG before the course-wide configuration, which leaves Formgrader off."""
    if spawner.user.name in INSTRUCTORS:
        spawner.environment = {**spawner.environment, "JUPYTER_CONFIG_PATH": INSTRUCTOR_CONFIG}


c.Spawner.pre_spawn_hook = _per_user

# --- idle servers are stopped ---------------------------------------------------------------------
# jupyterhub-idle-culler (`pip install jupyterhub-idle-culler` next to the hub) runs as a hub
# service and stops servers idle for TFCOURSE_IDLE_TIMEOUT seconds: a class leaves forty kernels
# holding memory otherwise. Work is saved on disk; the next login starts the server again.
IDLE_TIMEOUT = int(os.environ.get("TFCOURSE_IDLE_TIMEOUT", "3600"))
c.JupyterHub.services = [
    {"name": "idle-culler",
     "command": [sys.executable, "-m", "jupyterhub_idle_culler", f"--timeout={IDLE_TIMEOUT}", "--cull-every=300"]},
]
c.JupyterHub.load_roles = [
    {"name": "idle-culler",
     "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
     "services": ["idle-culler"]},
]
