"""JupyterHub (5 or 6) for a tfcourse classroom on one machine: learners and an instructor as
Unix users, the course installed once, nbgrader's exchange shared, Formgrader for the instructor.

Start it as root (the hub switches to each user to start their server):

    jupyterhub -f deploy/jupyterhub_config.py        # or copy this file to /etc/jupyterhub/

deploy/README.md walks through the install. Every path and choice below can be changed with an
environment variable (TFCOURSE_...), so the same file serves a trial and a real class.
"""

import logging
import os
import resource
import shutil
import sys
from urllib.parse import urlsplit

from jupyterhub.spawner import LocalProcessSpawner

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

c.JupyterHub.db_url = f"sqlite:///{STATE}/jupyterhub.sqlite"
c.JupyterHub.cookie_secret_file = f"{STATE}/jupyterhub_cookie_secret"
c.ConfigurableHTTPProxy.pid_file = f"{STATE}/jupyterhub-proxy.pid"
# The proxy (TFCOURSE_PROXY, default: `configurable-http-proxy` on PATH) is the one learners' browsers
# talk to. Serving HTTPS needs the Node.js original (`npm install -g configurable-http-proxy`); its
# Python implementation (`pip install configurable-http-proxy`) needs no Node.js but serves plain
# HTTP only, so it does for a trial on loopback.
PROXY = os.environ.get("TFCOURSE_PROXY", "configurable-http-proxy")
c.ConfigurableHTTPProxy.command = [PROXY]

# --- encrypted logins -----------------------------------------------------------------------------
# The hub serves HTTPS on every interface (TFCOURSE_HUB_URL, default https://:8000) with the
# certificate and key in TFCOURSE_SSL_CERT / TFCOURSE_SSL_KEY: by default the self-signed pair
# `deploy/certificate.sh` makes at install time in STATE/tls; put a certificate browsers trust (Let's
# Encrypt's fullchain.pem and privkey.pem) there, or point the two variables at it. Plain HTTP only on
# loopback (http://127.0.0.1:8000): a trial on one's own machine, or behind a reverse proxy on this
# machine that serves HTTPS itself. Anything else sends every password in clear text, so the hub
# refuses to start.
HUB_URL = os.environ.get("TFCOURSE_HUB_URL", "https://:8000")
SSL_CERT = os.environ.get("TFCOURSE_SSL_CERT", f"{STATE}/tls/hub.crt")
SSL_KEY = os.environ.get("TFCOURSE_SSL_KEY", f"{STATE}/tls/hub.key")
LOOPBACK = {"127.0.0.1", "localhost", "::1"}


def _serve(url: str) -> None:
    parts = urlsplit(url)
    scheme, host = parts.scheme, parts.hostname
    if scheme == "https":
        missing = [path for path in (SSL_CERT, SSL_KEY) if not os.path.isfile(path)]
        if missing:
            sys.exit(f"tfcourse: the hub serves HTTPS ({url}) but {' and '.join(missing)} does not exist: make a "
                     f"self-signed certificate with `sh deploy/certificate.sh {os.path.dirname(SSL_CERT)}`, or set "
                     "TFCOURSE_SSL_CERT and TFCOURSE_SSL_KEY to your certificate and key (deploy/README.md)")
        proxy = shutil.which(PROXY)
        if proxy is not None:
            with open(proxy, "rb") as script:
                shebang = script.readline()
        if proxy is None or b"python" in shebang:
            sys.exit(f"tfcourse: the hub serves HTTPS ({url}), which needs the Node.js configurable-http-proxy; "
                     + (f"{proxy} is the Python one, which serves plain HTTP only. " if proxy else f"{PROXY} is not on PATH. ")
                     + "Install it with `npm install -g configurable-http-proxy`, or set TFCOURSE_PROXY to it.")
        c.JupyterHub.ssl_cert, c.JupyterHub.ssl_key = SSL_CERT, SSL_KEY
    elif scheme == "http" and host in LOOPBACK:
        logging.getLogger("JupyterHub").warning(
            "tfcourse: plain HTTP on %s: only this machine can reach the hub, and nothing is encrypted. "
            "For a class, serve HTTPS (TFCOURSE_HUB_URL=https://:8000, deploy/README.md).", url)
    else:
        sys.exit(f"tfcourse: refusing TFCOURSE_HUB_URL={url}: plain HTTP on an address other machines reach would "
                 "send every learner's password in clear text. Use https://... (the default, https://:8000), or "
                 "bind plain HTTP to 127.0.0.1 behind a reverse proxy that serves HTTPS (deploy/README.md).")
    c.JupyterHub.bind_url = url


_serve(HUB_URL)

# --- who may log in -----------------------------------------------------------------------------
# - "pam" (the default): the machine's Unix accounts and passwords. Learners are the members of
#   the Unix group TFCOURSE_LEARNERS_GROUP; instructors are listed by name. Use it for a real class
#   on one machine (served over HTTPS: above).
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
# (LimitedLocalProcessSpawner, below: the same, with limits for every learner's server and its kernels.)
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


# --- per-learner limits ---------------------------------------------------------------------------
# The defaults fit 16 learners on a 64 GiB machine, 8 GiB left for the system, the hub and the
# instructor: (64 - 8) / 16 = 3.5 GiB each. Set before each server becomes its user, as hard
# limits: the learner cannot raise them, and every kernel and program they start inherits them.
# - memory, TFCOURSE_LEARNER_MEMORY_GB (default 3.5; 0 = no limit), twice over:
#   each process's data (RLIMIT_DATA: heap and anonymous mappings, the limit grading kernels use):
#   an allocation past it fails in that cell (MemoryError; PyTorch: "can't allocate memory"); and all
#   of a learner's processes together, watched by the memory guard below (a hub service): a learner
#   over it loses their largest kernel ("the kernel died"), and the hub's log says why.
# - processes and threads, TFCOURSE_LEARNER_PROCESSES (default 512; RLIMIT_NPROC): no fork bomb.
# - CPU, TFCOURSE_LEARNER_CPUS (default 2): the size of PyTorch's and the BLAS libraries' thread
#   pools. Without cgroups there is no hard CPU cap on one machine (RLIMIT_CPU would kill a long
#   training run); the scheduler shares the CPUs among the learners' threads. For hard caps, see
#   deploy/README.md (systemd).
# Instructors have none of these: they autograde whole classes (each grading kernel is capped by
# `tfcourse autograde` itself). The limits are in each server's environment (MEM_LIMIT, in bytes,
# and CPU_LIMIT, JupyterHub's names) and in its process limits (/proc/PID/limits).
LEARNER_MEMORY = int(float(os.environ.get("TFCOURSE_LEARNER_MEMORY_GB", "3.5")) * 2**30)
LEARNER_PROCESSES = int(os.environ.get("TFCOURSE_LEARNER_PROCESSES", "512"))
LEARNER_CPUS = int(os.environ.get("TFCOURSE_LEARNER_CPUS", "2"))
THREAD_POOLS = ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")


class LimitedLocalProcessSpawner(LocalProcessSpawner):
    """LocalProcessSpawner whose learners' servers start with hard process limits."""

    def process_limits(self) -> list[tuple[int, int]]:
        if self.user.name in INSTRUCTORS:
            return []
        limits = [(resource.RLIMIT_NPROC, LEARNER_PROCESSES)] if LEARNER_PROCESSES > 0 else []
        return limits + ([(resource.RLIMIT_DATA, LEARNER_MEMORY)] if LEARNER_MEMORY > 0 else [])

    def make_preexec_fn(self, name):
        become_user, limits = super().make_preexec_fn(name), self.process_limits()

        def preexec():  # in the new process, as root: hard limits first, then the user
            for which, value in limits:
                resource.setrlimit(which, (value, value))
            become_user()

        return preexec

    async def start(self):
        if self.process_limits():
            self.log.info("%s's server starts limited to %.2f GiB of memory, %d processes and threads, "
                          "%d CPU threads per pool", self.user.name, LEARNER_MEMORY / 2**30, LEARNER_PROCESSES,
                          LEARNER_CPUS)
        return await super().start()


c.JupyterHub.spawner_class = LimitedLocalProcessSpawner


def _per_user(spawner):
    """Instructors get Formgrader (nbgrader's "one course, one instructor" setup): their server reads
    INSTRUCTOR_CONFIG before the course-wide configuration, which leaves Formgrader off. Learners get
    their limits in their environment."""
    if spawner.user.name in INSTRUCTORS:
        spawner.environment = {**spawner.environment, "JUPYTER_CONFIG_PATH": INSTRUCTOR_CONFIG}
        spawner.mem_limit = spawner.cpu_limit = None
    else:
        spawner.environment = {**spawner.environment, **{pool: str(LEARNER_CPUS) for pool in THREAD_POOLS}}
        spawner.mem_limit = LEARNER_MEMORY or None
        spawner.cpu_limit = float(LEARNER_CPUS)


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
# The memory guard (tfcourse/course/memory_guard.py): every 2 s, each learner's processes together.
if LEARNER_MEMORY > 0:
    c.JupyterHub.services.append(
        {"name": "memory-guard",
         "command": [f"{PREFIX}/bin/python", "-m", "tfcourse.course.memory_guard",
                     f"--limit-gb={LEARNER_MEMORY / 2**30}", f"--exempt={','.join(sorted(INSTRUCTORS))}"]})
c.JupyterHub.load_roles = [
    {"name": "idle-culler",
     "scopes": ["list:users", "read:users:activity", "read:servers", "delete:servers"],
     "services": ["idle-culler"]},
]
