"""The classroom on one machine, for real: a JupyterHub run with deploy/jupyterhub_config.py, two
learners and an instructor as Unix users, the whole nbgrader loop with each step run as its user.

- The course is installed once for everyone, the way deploy/README.md installs it (a virtual
  environment configured by deploy/configure.sh); here it is a throw-away environment made from the
  test's own (`install_course`): the users must be able to run it, and the repository's may sit
  where they cannot (an interpreter under root's home, say).
- Throw-away Unix users (useradd; removed at the end, userdel -r) with 0700 homes; nbgrader's
  exchange is a fresh folder with mode 1777.
- The Hub: shared-password authenticator, the deployment's limited LocalProcessSpawner; for the loop,
  a trial hub (plain HTTP on loopback, the Python configurable-http-proxy). Through its REST API the
  test adds the learners, makes their tokens and starts their servers; it reaches each server through
  the proxy (and not another user's).
- The loop: the instructor generates and releases 04_ffn; each learner fetches it, answers it in
  their own server (its contents API: one learner completely, from solutions/, the other all but
  two exercises) and submits; the instructor collects, autogrades and releases feedback; each
  learner fetches their own feedback, and cannot list or read the other's submission.
- Safe by default (a second Hub, as deployed: HTTPS on every interface with the self-signed
  certificate deploy/certificate.sh makes at install time, which the test trusts and nothing else,
  and the Node.js proxy): no login page over plain HTTP at the machine's public address;
  each learner's server and kernels run under the hard limits the hub sets (memory per process,
  processes), visible in their environment and process limits, and the instructor's do not; a
  kernel that allocates past its limit fails in its own cell; a learner whose kernels hold more
  than their limit together loses the largest (the memory guard), with the reason in the hub's log;
  and meanwhile the other learner's server answers and runs a cell.

Creating users needs root: as another user the test is skipped, with that reason.
"""

from __future__ import annotations

import contextlib
import csv
import http.client
import http.cookiejar
import json
import os
import re
import secrets
import shutil
import socket
import ssl
import stat
import subprocess
import sys
import tempfile
import time
import urllib.error
import urllib.parse
import urllib.request
from pathlib import Path

import nbformat
import pytest

from test_grading import _meta, _strip_markers
from test_instructor import free_port, get_when_up

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
LESSON = "04_ffn"
UNFINISHED = ("collapse_impl", "backward_impl")  # what the second learner leaves undone
# The user tools live in sbin, which a minimal PATH (cron, `env -i`, some CI runners) leaves out.
_SBIN_PATH = os.pathsep.join([os.environ.get("PATH", ""), "/usr/local/sbin", "/usr/sbin", "/sbin"])
USERADD, USERDEL, RUNUSER = (shutil.which(tool, path=_SBIN_PATH) for tool in ("useradd", "userdel", "runuser"))

pytestmark = [
    pytest.mark.slow,
    pytest.mark.skipif(not hasattr(os, "geteuid") or os.geteuid() != 0,
                       reason="needs root: it creates throw-away Unix users (useradd) for the learners and "
                              "the instructor, and the Hub starts their servers as them"),
    pytest.mark.skipif(None in (USERADD, USERDEL, RUNUSER),
                       reason="needs useradd, userdel and runuser to create the throw-away users and act as them"),
]


# --- the course, installed once for everyone ------------------------------------------------------

def _others_can_reach(path: Path) -> bool:
    """Whether a user other than the owner can run/read `path`: every folder above it searchable."""
    path = path.resolve()
    return all(p.stat().st_mode & stat.S_IXOTH for p in [path, *path.parents])


def _readable_by_others(folder: Path) -> bool:
    """Whether other users can read `folder` in place: reachable, every folder in it searchable and
    every file readable."""
    if not _others_can_reach(folder):
        return False
    for here, _, files in os.walk(folder):
        if os.stat(here).st_mode & 0o005 != 0o005:
            return False
        for name in files:
            path = os.path.join(here, name)
            if not os.path.islink(path) and not os.stat(path).st_mode & stat.S_IROTH:
                return False
    return True


def _link_or_copy(source: str, target: str) -> None:
    try:
        os.link(source, target)  # the same file, no copy: seconds, not gigabytes
    except OSError:
        shutil.copy2(source, target)


def _mirror(source: Path, target: Path, skip=lambda name: False) -> None:
    """`target` gets `source`'s entries: symbolic links when other users can read `source` in place
    (nothing is copied, nothing is changed there), else hard-linked copies."""
    in_place = _readable_by_others(source)
    target.mkdir(parents=True, exist_ok=True)
    for entry in source.iterdir():
        if skip(entry.name):
            continue
        if in_place:
            (target / entry.name).symlink_to(entry)
        elif entry.is_symlink():
            (target / entry.name).symlink_to(os.readlink(entry))
        elif entry.is_dir():
            shutil.copytree(entry, target / entry.name, symlinks=True, copy_function=_link_or_copy)
        else:
            _link_or_copy(str(entry), str(target / entry.name))


def _files(folder: Path) -> dict[str, bytes]:
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def install_course(root: Path) -> tuple[Path, dict[str, str]]:
    """A course environment under `root` that the users can run, made from the running virtual
    environment: its packages (read in place when others can read them, else hard-linked copies),
    the course package copied in, its own bin/ (scripts pointing at it), etc/ and pyvenv.cfg. When
    other users cannot reach the interpreter (a Python under root's home), its installation is
    copied too, without its tests and its own site-packages. Returns the environment's folder and
    the variables its programs need. The original environment is never written to."""
    if sys.prefix == sys.base_prefix:
        pytest.fail("run the tests from a virtual environment (`make test`): the classroom test copies it")
    interpreter, extra_env = Path(sys.executable).resolve(), {}
    stdlib = f"python{sys.version_info[0]}.{sys.version_info[1]}"
    if not _others_can_reach(interpreter):
        base = Path(sys.base_prefix).resolve()

        def unneeded(folder: str, names: list[str]) -> set[str]:
            return {"test", "site-packages", "idlelib", "tkinter", "turtledemo"} & set(names) \
                if Path(folder) == base / "lib" / stdlib else set()

        shutil.copytree(base, root / "python", symlinks=True, copy_function=_link_or_copy, ignore=unneeded)
        interpreter = root / "python" / interpreter.relative_to(base)
        if (root / "python" / "lib").is_dir():  # a shared libpython, found by its old (unreachable) path otherwise
            extra_env["LD_LIBRARY_PATH"] = str(root / "python" / "lib")
    venv, source = root / "venv", Path(sys.prefix)
    site = next(Path(p) for p in sys.path if p.endswith("site-packages") and Path(p).is_relative_to(source))
    site_rel = site.relative_to(source)
    # (the course package is copied in below: it is installed editable here, pointing into the repository)
    _mirror(site, venv / site_rel, skip=lambda name: name.startswith("__editable__") or name == "tfcourse")
    if (source / "lib64").is_symlink():
        (venv / "lib64").symlink_to(os.readlink(source / "lib64"))
    _mirror(source / "share", venv / "share")
    shutil.copytree(source / "etc", venv / "etc")  # a real copy: configure.sh writes into it
    shutil.copytree(ROOT / "tfcourse", venv / site_rel / "tfcourse", ignore=shutil.ignore_patterns("__pycache__"))
    # compiled once here, as an install does: the users cannot write __pycache__ folders into it
    subprocess.run([sys.executable, "-m", "compileall", "-q", str(venv / site_rel / "tfcourse")], check=True)
    (venv / "bin").mkdir()
    old_shebang = f"#!{source}/bin/".encode()
    for entry in (source / "bin").iterdir():
        target = venv / "bin" / entry.name
        if entry.name.startswith("python"):
            target.symlink_to(interpreter)
        elif entry.is_symlink() or not entry.is_file():
            continue
        else:
            data = entry.read_bytes()
            if data.startswith(old_shebang):
                data = f"#!{venv}/bin/".encode() + data[len(old_shebang):]
            target.write_bytes(data)
            target.chmod(entry.stat().st_mode)
    version = ".".join(map(str, sys.version_info[:3]))
    (venv / "pyvenv.cfg").write_text(f"home = {interpreter.parent}\ninclude-system-site-packages = false\n"
                                     f"version = {version}\n")
    before = _files(source / "etc")
    done = subprocess.run(["sh", str(DEPLOY / "configure.sh"), str(venv)], capture_output=True, text=True,
                          env={**os.environ, **extra_env})
    assert done.returncode == 0, f"deploy/configure.sh failed:\n{done.stdout}\n{done.stderr}"
    # configure.sh configures the environment it is given, never the one on PATH (here: the tests').
    assert _files(source / "etc") == before, "deploy/configure.sh changed another environment's configuration"
    assert (venv / "etc" / "jupyter" / "labconfig" / "page_config.json").exists()
    return venv, extra_env


# --- throw-away users ------------------------------------------------------------------------------

def _kill_processes_of(user: str) -> None:
    import psutil

    for process in psutil.process_iter(["username"]):
        if process.info["username"] == user:
            try:
                process.kill()
            except psutil.Error:
                pass


class Classroom:
    def __init__(self, root: Path, venv: Path, env: dict[str, str], exchange: Path):
        self.root, self.venv, self.extra_env, self.exchange = root, venv, env, exchange
        tag = secrets.token_hex(3)
        self.alice, self.bob, self.teacher = f"tfc{tag}alice", f"tfc{tag}bob", f"tfc{tag}teach"
        self.users: list[str] = []

    def add_user(self, name: str) -> None:
        done = subprocess.run([USERADD, "--create-home", "--base-dir", str(self.root / "home"),
                               "--shell", "/bin/sh", name], capture_output=True, text=True)
        assert done.returncode == 0, f"useradd {name}: {done.stderr}"
        self.users.append(name)
        self.home(name).chmod(0o700)  # (deploy/README.md: HOME_MODE 0700 in /etc/login.defs)

    def remove_users(self) -> None:
        for name in self.users:
            _kill_processes_of(name)
            subprocess.run([USERDEL, "--remove", name], capture_output=True)

    def home(self, name: str) -> Path:
        return self.root / "home" / name

    def run_as(self, user: str, *command: str, cwd: Path | None = None, check: bool = True) -> subprocess.CompletedProcess:
        """`command` as `user` (runuser), with the environment the Hub gives their server."""
        env = {"HOME": str(self.home(user)), "USER": user, "LOGNAME": user, "SHELL": "/bin/sh",
               "PATH": f"{self.venv}/bin:/usr/bin:/bin", "TFCOURSE_EXCHANGE": str(self.exchange),
               "TFCOURSE_FAST": "1", "MPLBACKEND": "Agg", **self.extra_env}
        done = subprocess.run([RUNUSER, "-u", user, "--", "env", "-i", *(f"{k}={v}" for k, v in env.items()),
                               *command], cwd=cwd or self.home(user), capture_output=True, text=True, timeout=300)
        if check:
            assert done.returncode == 0, f"{user}: {' '.join(command)} failed:\n{done.stdout}\n{done.stderr[-3000:]}"
        return done

    def nbgrader(self, user: str, *args: str, cwd: Path | None = None) -> subprocess.CompletedProcess:
        return self.run_as(user, f"{self.venv}/bin/python", "-m", "nbgrader", *args, cwd=cwd)


# --- the Hub ---------------------------------------------------------------------------------------

class Hub:
    def __init__(self, url: str, token: str, certificate: Path | None, log: Path):
        self.url, self.token, self.log, self.certificate = url, token, log, certificate
        # Over HTTPS the hub's own self-signed certificate, and nothing else, is trusted; its names are checked.
        self.tls = ssl.create_default_context(cafile=str(certificate)) if certificate else None

    def request(self, method: str, path: str, token: str | None = None, body=None) -> tuple[int, object]:
        data = None if body is None else json.dumps(body).encode()
        request = urllib.request.Request(self.url + path, data=data, method=method,
                                         headers={"Authorization": f"token {token or self.token}"})
        try:
            with urllib.request.urlopen(request, timeout=60, context=self.tls) as response:
                status, text = response.status, response.read().decode()
        except urllib.error.HTTPError as error:
            status, text = error.code, error.read().decode(errors="replace")
        try:
            return status, json.loads(text) if text else None
        except json.JSONDecodeError:
            return status, text

    def login(self, user: str, password: str) -> tuple[int, http.cookiejar.CookieJar]:
        """The login form, as a browser posts it: the status of the answer (302 = logged in) and the
        cookies it set."""
        jar = http.cookiejar.CookieJar()

        class NoRedirect(urllib.request.HTTPRedirectHandler):
            def redirect_request(self, *args, **kwargs):
                return None

        opener = urllib.request.build_opener(urllib.request.HTTPCookieProcessor(jar), NoRedirect,
                                             urllib.request.HTTPSHandler(context=self.tls))
        page = opener.open(self.url + "/hub/login", timeout=30).read().decode()
        xsrf = re.search(r'name="_xsrf"\s+value="([^"]+)"', page)
        form = {"username": user, "password": password, **({"_xsrf": xsrf.group(1)} if xsrf else {})}
        try:
            with opener.open(self.url + "/hub/login", data=urllib.parse.urlencode(form).encode(), timeout=30) as answer:
                return answer.status, jar
        except urllib.error.HTTPError as error:
            return error.code, jar

    def wait_until_up(self, process: subprocess.Popen, timeout: float = 90) -> None:
        deadline = time.monotonic() + timeout
        while process.poll() is None and time.monotonic() < deadline:
            if get_when_up(f"{self.url}/hub/api", timeout=2, context=self.tls)[0] == 200:
                return
        raise AssertionError("the Hub did not come up:\n" + self.log.read_text()[-5000:])


@pytest.fixture
def classroom():
    root = Path(tempfile.mkdtemp(prefix="tfcourse-classroom-"))
    root.chmod(0o755)  # the users must reach the course and the exchange inside it
    (root / "home").mkdir(mode=0o755)
    exchange = root / "srv" / "nbgrader" / "exchange"
    exchange.mkdir(parents=True)
    exchange.chmod(0o1777 | stat.S_ISVTX)  # nbgrader's exchange: everyone writes, the sticky bit protects
    for folder in (root / "srv", root / "srv" / "nbgrader"):
        folder.chmod(0o755)
    room = None
    try:
        venv, env = install_course(root)
        room = Classroom(root, venv, env, exchange)
        for user in (room.alice, room.bob, room.teacher):
            room.add_user(user)
        yield room
    finally:
        if room:
            room.remove_users()
        subprocess.run(["rm", "-rf", "--one-file-system", str(root)])  # (much faster than shutil.rmtree)


LEARNER_MEMORY_GB = 1.0  # the learners' limit in these tests (the deployment's default: 3.5)


def _node_proxy() -> str | None:
    """The Node.js configurable-http-proxy on the system's PATH (the one that serves HTTPS; the Python
    implementation in the tests' environment does not)."""
    system_path = os.pathsep.join(p for p in os.environ["PATH"].split(os.pathsep)
                                  if Path(p).resolve() != Path(sys.executable).parent.resolve())
    found = shutil.which("configurable-http-proxy", path=system_path)
    return found if found and b"node" in Path(found).read_bytes()[:100] else None


def _gone(pid: int, within: float = 10.0) -> bool:
    """Whether process `pid` ends within `within` seconds. A killed process stays a zombie until its
    parent (here the learner's server) reaps it: that counts as gone."""
    import psutil

    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        try:
            if psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
                return True
        except psutil.NoSuchProcess:
            return True
        time.sleep(0.1)
    return False


def _kill_with_descendants(process: subprocess.Popen) -> None:
    """Stop a process and everything it started, at once. The Hub's proxy and services each run in a
    session of their own, so a signal to the Hub's process group misses them (they outlived the test
    that way), and a graceful stop of the Hub under load took 20 s."""
    import psutil

    try:
        family = [psutil.Process(process.pid), *psutil.Process(process.pid).children(recursive=True)]
    except psutil.NoSuchProcess:
        family = []
    for member in family:
        with contextlib.suppress(psutil.NoSuchProcess):
            member.kill()
    psutil.wait_procs(family, timeout=10)
    process.wait()


def _running_hub(room: Classroom, secure: bool):
    """A Hub with deploy/jupyterhub_config.py. `secure`: its defaults, HTTPS on every interface with
    the certificate deploy/certificate.sh makes at install time, and the Node.js proxy; otherwise a
    trial on one's own machine: plain HTTP on loopback, and the Python proxy."""
    state = room.root / "hub"
    state.mkdir(mode=0o700)
    port, token = free_port(), secrets.token_hex(32)
    if secure:
        made = subprocess.run(["sh", str(DEPLOY / "certificate.sh"), str(state / "tls")], capture_output=True, text=True)
        assert made.returncode == 0 and (state / "tls" / "hub.key").stat().st_mode & 0o077 == 0, made
        proxy, url, hub_url = _node_proxy(), f"https://:{port}", f"https://127.0.0.1:{port}"
    else:
        proxy = str(Path(sys.executable).parent / "configurable-http-proxy")
        url = hub_url = f"http://127.0.0.1:{port}"
    # (the Hub wants an admin password of at least 32 characters)
    room.learner_password, room.teacher_password = secrets.token_hex(8), secrets.token_hex(20)
    config = state / "jupyterhub_config.py"
    config.write_text(f"""
import importlib.util
c = get_config()
load_subconfig({str(DEPLOY / 'jupyterhub_config.py')!r})  # the deployment's configuration, then what a test changes
# jupyterhub-idle-culler is a dependency of a deployment, not of the tests: without it, no culler.
if importlib.util.find_spec("jupyterhub_idle_culler") is None:
    c.JupyterHub.services = [s for s in c.JupyterHub.services if s["name"] != "idle-culler"]
    c.JupyterHub.load_roles = [r for r in c.JupyterHub.load_roles if r["name"] != "idle-culler"]
c.JupyterHub.services.append({{"name": "classroom-test", "api_token": {token!r}}})
c.JupyterHub.load_roles.append({{"name": "classroom-test", "services": ["classroom-test"],
    "scopes": ["admin:users", "admin:servers", "tokens", "access:servers", "list:users", "read:users"]}})
c.JupyterHub.hub_bind_url = "http://127.0.0.1:{free_port()}"
c.ConfigurableHTTPProxy.api_url = "http://127.0.0.1:{free_port()}"
c.Spawner.environment.update({{"TFCOURSE_FAST": "1", "MPLBACKEND": "Agg", **{room.extra_env!r}}})
""")
    # TFCOURSE_HUB_URL: the default's scheme and interfaces (https://:8000), on a free port.
    env = {**os.environ, "TFCOURSE_PREFIX": str(room.venv), "TFCOURSE_EXCHANGE": str(room.exchange),
           "TFCOURSE_HUB_STATE": str(state), "TFCOURSE_INSTRUCTORS": room.teacher,
           "TFCOURSE_AUTHENTICATOR": "shared-password", "TFCOURSE_LEARNER_PASSWORD": room.learner_password,
           "TFCOURSE_INSTRUCTOR_PASSWORD": room.teacher_password, "TFCOURSE_HUB_URL": url,
           "TFCOURSE_PROXY": proxy, "TFCOURSE_LEARNER_MEMORY_GB": str(LEARNER_MEMORY_GB),
           "PATH": str(Path(sys.executable).parent) + os.pathsep + os.environ["PATH"]}
    log = (state / "hub.log").open("w")
    process = subprocess.Popen([sys.executable, "-m", "jupyterhub", "-f", str(config)], cwd=state, env=env,
                               stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    the_hub = Hub(hub_url, token, state / "tls" / "hub.crt" if secure else None, state / "hub.log")
    the_hub.port = port
    try:
        the_hub.wait_until_up(process)
        yield the_hub
    finally:
        for user in room.users:  # the servers and kernels, at once (a graceful stop takes 10 s or more each)
            _kill_processes_of(user)
        _kill_with_descendants(process)  # the Hub, its proxy and its services
        log.close()


@pytest.fixture
def hub(classroom):
    """A trial hub: plain HTTP on loopback (only this machine can reach it)."""
    yield from _running_hub(classroom, secure=False)


@pytest.fixture
def secure_hub(classroom):
    """The hub as deployed by default: HTTPS on every interface."""
    if _node_proxy() is None:
        pytest.skip("HTTPS needs the Node.js configurable-http-proxy (`npm install -g configurable-http-proxy`), "
                    "which this machine does not have; .ci/run installs it")
    yield from _running_hub(classroom, secure=True)


# --- the loop --------------------------------------------------------------------------------------

def _answers() -> dict[str, str]:
    source = nbformat.read(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    return {_meta(c)["grade_id"]: _strip_markers(c.source) for c in source.cells if _meta(c).get("solution")}


def _points() -> dict[str, float]:
    """Each answer cell's points, from its test cell's metadata (X_impl -> X_tests)."""
    source = nbformat.read(ROOT / "solutions" / LESSON / f"{LESSON}.ipynb", as_version=4)
    return {_meta(c)["grade_id"].replace("_tests", "_impl"): float(_meta(c)["points"])
            for c in source.cells if _meta(c).get("grade")}


def _wait_until_ready(hub: Hub, user: str, timeout: float = 150) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        status, model = hub.request("GET", f"/hub/api/users/{user}")
        server = (model or {}).get("servers", {}).get("", {}) if status == 200 else {}
        if server.get("ready"):
            return
        time.sleep(1)
    raise AssertionError(f"{user}'s server did not start in {timeout:.0f} s")


def test_two_learners_and_an_instructor_through_a_real_jupyterhub(classroom, hub):
    room, started = classroom, time.monotonic()
    alice, bob, teacher = room.alice, room.bob, room.teacher
    learners = (alice, bob)
    # A trial hub (plain HTTP, loopback only): allowed, with a warning in the hub's log.
    assert f"plain HTTP on {hub.url}: only this machine can reach the hub" in hub.log.read_text()

    # The instructor is a hub admin from the configuration; the learners are added through the API.
    status, created = hub.request("POST", "/hub/api/users", body={"usernames": list(learners)})
    assert status == 201, created
    status, users = hub.request("GET", "/hub/api/users")
    assert {u["name"]: u["admin"] for u in users} == {alice: False, bob: False, teacher: True}
    # The shared-password authenticator: the learners' password, the instructor's own.
    assert hub.login(alice, room.learner_password)[0] == 302
    assert hub.login(alice, "not-the-password")[0] == 403
    assert hub.login(teacher, room.teacher_password)[0] == 302

    tokens = {}
    for user in (*learners, teacher):
        status, model = hub.request("POST", f"/hub/api/users/{user}/tokens", body={"note": "classroom test"})
        assert status == 201, model
        tokens[user] = model["token"]
        status, _ = hub.request("POST", f"/hub/api/users/{user}/server")
        assert status in (201, 202), _
    for user in tokens:
        _wait_until_ready(hub, user)

    def phase(what: str) -> None:
        print(f"[{time.monotonic() - started:5.1f} s] {what}")

    def server(user: str, method: str, path: str, token_of: str | None = None, body=None):
        return hub.request(method, f"/user/{user}/{path}", token=tokens[token_of or user], body=body)

    phase("servers ready")
    # Each server answers its own user through the proxy, and runs as that user in their home.
    for user in tokens:
        status, model = server(user, "GET", "api/status")
        assert status == 200, model
    status, _ = server(alice, "GET", "api/contents", token_of=bob)
    assert status == 403, "a learner's token opened another learner's server"
    # Formgrader in the instructor's server only.
    status, listing = server(teacher, "GET", "formgrader/api/assignments")
    assert status == 200 and isinstance(listing, list), listing
    for learner in learners:
        assert server(learner, "GET", "formgrader/api/assignments")[0] == 404
    # ... and its JupyterLab menu: the page configuration disables nbgrader's Formgrader and
    # Create Assignment plugins for learners (deploy/configure.sh), not for the instructor.
    for user in tokens:
        status, page = server(user, "GET", "lab")
        config = json.loads(re.search(r'<script id="jupyter-config-data" type="application/json">(.*?)</script>',
                                      page, re.S).group(1))
        disabled = config["disabledExtensions"]  # a list, or {plugin: disabled?}
        disabled = {k for k, v in disabled.items() if v} if isinstance(disabled, dict) else set(disabled)
        hidden = {"@jupyter/nbgrader:formgrader", "@jupyter/nbgrader:create-assignment"} & disabled
        assert status == 200 and hidden == (set() if user == teacher else {"@jupyter/nbgrader:formgrader",
                                                                            "@jupyter/nbgrader:create-assignment"}), (user, hidden)

    # The instructor: the course folder ~/tfcourse (the course's configuration and the lesson's
    # source), then generate and release, as the instructor.
    course = room.home(teacher) / "tfcourse"
    (course / "solutions").mkdir(parents=True)
    shutil.copy(ROOT / "nbgrader_config.py", course)
    shutil.copytree(ROOT / "solutions" / LESSON, course / "solutions" / LESSON)
    subprocess.run(["chown", "-R", f"{teacher}:", str(course)], check=True)
    room.nbgrader(teacher, "generate_assignment", LESSON, "--force", cwd=course)
    room.nbgrader(teacher, "release_assignment", LESSON, "--force", cwd=course)

    phase("released")
    # Each learner's Assignment List (their server, the course-wide nbgrader configuration) shows it.
    for learner in learners:
        status, listing = server(learner, "GET", "assignments?course_id=tfcourse")
        assert status == 200 and listing["success"], listing
        assert [(a["assignment_id"], a["status"]) for a in listing["value"]] == [(LESSON, "released")]

    # Fetch, answer in the learner's own server, submit: each as that learner.
    answers, unfinished = _answers(), {alice: (), bob: UNFINISHED}
    for learner in learners:
        room.nbgrader(learner, "fetch_assignment", LESSON)
        status, model = server(learner, "GET", f"api/contents/{LESSON}/{LESSON}.ipynb")
        assert status == 200, model
        # The lesson's drawn figures came with it, where its Markdown looks for them.
        assert server(learner, "GET", f"api/contents/{LESSON}/figures/map.svg?content=0")[0] == 200
        nb = nbformat.from_dict(model["content"])
        for cell in nb.cells:
            grade_id = _meta(cell).get("grade_id")
            if _meta(cell).get("solution") and grade_id not in unfinished[learner]:
                cell.source = answers[grade_id]
        status, saved = server(learner, "PUT", f"api/contents/{LESSON}/{LESSON}.ipynb",
                               body={"type": "notebook", "format": "json", "content": nb})
        assert status == 200, saved
        room.nbgrader(learner, "submit", LESSON)
    assert (room.home(alice) / LESSON / f"{LESSON}.ipynb").stat().st_uid == room_uid(alice)

    # A learner cannot find the other's submission: nbgrader's exchange lets learners write into
    # `inbound` but not list it, and each submission's folder name ends in a random part that
    # cannot be guessed (nbgrader leaves the files themselves world-readable: the instructor, another
    # user, collects them). Homes are private: the other's working copy cannot be read.
    inbound = room.exchange / "tfcourse" / "inbound"
    (alice_submission,) = inbound.glob(f"{alice}+{LESSON}+*/{LESSON}.ipynb")
    listing = room.run_as(bob, "ls", str(inbound), check=False)
    assert listing.returncode != 0 and "Permission denied" in listing.stderr, listing
    assert len(alice_submission.parent.name.rsplit("+", 1)[1]) >= 12  # the random part
    private = room.run_as(bob, "cat", str(room.home(alice) / LESSON / f"{LESSON}.ipynb"), check=False)
    assert private.returncode != 0 and "Permission denied" in private.stderr, private
    # ... and the exchange's outbound copy is the released lesson (its notebook and drawn figures),
    # not anyone's answers.
    outbound = room.exchange / "tfcourse" / "outbound" / LESSON
    assert room.run_as(bob, "ls", str(outbound)).stdout.split() == [f"{LESSON}.ipynb", "figures"]

    phase("submitted")
    # The instructor collects, autogrades (all submissions at once: tfcourse autograde), releases feedback.
    room.nbgrader(teacher, "collect", LESSON, cwd=course)
    room.run_as(teacher, f"{room.venv}/bin/tfcourse", "autograde", LESSON, "--jobs", "2", cwd=course)
    room.nbgrader(teacher, "generate_feedback", LESSON, cwd=course)
    room.nbgrader(teacher, "release_feedback", LESSON, cwd=course)
    room.nbgrader(teacher, "export", cwd=course)
    with (course / "grades.csv").open() as table:
        rows = {row["student_id"]: row for row in csv.DictReader(table)}
    score = {learner: float(rows[learner]["score"]) for learner in learners}
    points = _points()
    assert score[alice] == sum(points.values()) == 17  # (its debug exercise included)
    assert score[bob] == sum(points.values()) - sum(points[g] for g in UNFINISHED)

    phase("graded")
    # Each learner fetches their own feedback, with their own score in it.
    for learner in learners:
        room.nbgrader(learner, "fetch_feedback", LESSON)
        (report,) = (room.home(learner) / LESSON / "feedback").rglob(f"{LESSON}.html")
        found = re.search(r"Score:\s*([\d.]+)\s*/\s*([\d.]+)", report.read_text())
        assert found and (float(found.group(1)), float(found.group(2))) == (score[learner], sum(points.values())), found
        assert report.stat().st_uid == room_uid(learner)
    print(f"classroom loop: {time.monotonic() - started:.0f} s after the Hub was up")


def room_uid(user: str) -> int:
    import pwd

    return pwd.getpwnam(user).pw_uid


# --- safe by default: HTTPS only, and no learner can starve another ---------------------------------

def _public_address() -> str:
    """This machine's first address other than loopback (what learners on its network type); loopback
    only on a machine without one (the hub listens on every interface, so it is the same socket)."""
    import psutil

    for addresses in psutil.net_if_addrs().values():
        for address in addresses:
            if address.family == socket.AF_INET and not address.address.startswith("127."):
                return address.address
    return "127.0.0.1"


def _plain_http(url: str) -> str:
    """What a browser that types http:// gets: the page, or the error that ended the request."""
    try:
        with urllib.request.urlopen(url, timeout=15) as response:
            return response.read().decode(errors="replace")
    except urllib.error.HTTPError as error:
        return error.read().decode(errors="replace")
    except (OSError, http.client.HTTPException) as error:
        return f"{type(error).__name__}: {error}"


async def _execute(url: str, token: str, tls: ssl.SSLContext, code: str, timeout: float) -> tuple[str, str]:
    """Run `code` in a kernel through its websocket, as JupyterLab does: (the reply's status, the
    cell's output, errors as "Name: value")."""
    import asyncio

    from tornado.httpclient import HTTPRequest
    from tornado.websocket import websocket_connect

    connection = await websocket_connect(HTTPRequest(url, headers={"Authorization": f"token {token}"},
                                                     ssl_options=tls))
    msg_id = secrets.token_hex(8)
    await connection.write_message(json.dumps({
        "header": {"msg_id": msg_id, "msg_type": "execute_request", "username": "classroom-test",
                   "session": secrets.token_hex(8), "version": "5.3", "date": ""},
        "parent_header": {}, "metadata": {}, "channel": "shell", "buffers": [],
        "content": {"code": code, "silent": False, "store_history": False, "user_expressions": {},
                    "allow_stdin": False, "stop_on_error": True}}))
    output, status, idle = [], None, False
    try:
        while status is None or not idle:  # the reply (shell) and the end of its output (iopub)
            text = await asyncio.wait_for(connection.read_message(), timeout)
            if text is None:
                raise ConnectionError(f"the kernel's websocket closed while running {code!r}")
            message = json.loads(text)
            if message.get("parent_header", {}).get("msg_id") != msg_id:
                continue
            kind, content = message["msg_type"], message["content"]
            if kind == "stream":
                output.append(content["text"])
            elif kind == "execute_result":
                output.append(content["data"]["text/plain"])
            elif kind == "error":
                output.append(f"{content['ename']}: {content['evalue']}")
            elif kind == "execute_reply":
                status = content["status"]
            elif kind == "status" and content["execution_state"] == "idle":
                idle = True
    finally:
        connection.close()
    return status, "".join(output)


class Kernel:
    """A kernel in a user's server, started and run through the hub's proxy as JupyterLab does."""

    def __init__(self, hub: Hub, user: str, token: str):
        self.hub, self.user, self.token = hub, user, token
        status, model = hub.request("POST", f"/user/{user}/api/kernels", token=token, body={"name": "python3"})
        assert status == 201, model
        self.id = model["id"]
        self.pid = int(self.run("import os; print(os.getpid())")[1])

    def run(self, code: str, timeout: float = 90) -> tuple[str, str]:
        import asyncio

        url = self.hub.url.replace("https://", "wss://") + f"/user/{self.user}/api/kernels/{self.id}/channels"
        return asyncio.run(_execute(url, self.token, self.hub.tls, code, timeout))


def _limits(process) -> dict[str, tuple[str, str]]:
    """A process's limits as the system shows them (/proc/PID/limits): {name: (soft, hard)}."""
    rows = Path(f"/proc/{process.pid}/limits").read_text().splitlines()[1:]
    return {row[:26].strip(): tuple(row[26:].split()[:2]) for row in rows}


def _server_process(user: str):
    import psutil

    from tfcourse.course.memory_guard import is_server

    (server,) = [p for p in psutil.process_iter(["username"]) if p.info["username"] == user and is_server(p)]
    return server


def test_the_hub_is_https_only_and_no_learner_can_starve_another(classroom, secure_hub):
    hub = secure_hub
    room, limit = classroom, int(LEARNER_MEMORY_GB * 2**30)
    alice, bob, teacher = room.alice, room.bob, room.teacher

    # Encrypted: the hub answers over HTTPS with the installed certificate, at its public address
    # too, and its login cookies are for HTTPS only. Plain HTTP there gets no login page.
    public = _public_address()
    assert Hub(f"https://{public}:{hub.port}", hub.token, hub.certificate, hub.log) \
        .request("GET", "/hub/api")[0] == 200
    status, page = hub.request("GET", "/hub/login")
    assert status == 200 and 'name="password"' in page
    plain = _plain_http(f"http://{public}:{hub.port}/hub/login")
    assert 'name="password"' not in plain and "<form" not in plain, plain[:500]
    status, created = hub.request("POST", "/hub/api/users", body={"usernames": [alice, bob]})
    assert status == 201, created
    status, cookies = hub.login(alice, room.learner_password)
    logins = {cookie.name: cookie.secure for cookie in cookies if cookie.name.startswith("jupyterhub-")}
    assert status == 302 and logins and all(logins.values()), logins  # (a browser never sends them over HTTP)
    print(f"plain HTTP at {public}:{hub.port} got: {plain[:120]!r}")

    tokens = {}
    for user in (alice, bob, teacher):
        status, model = hub.request("POST", f"/hub/api/users/{user}/tokens", body={"note": "limits test"})
        assert status == 201, model
        tokens[user] = model["token"]
        assert hub.request("POST", f"/hub/api/users/{user}/server")[0] in (201, 202)
    for user in tokens:
        _wait_until_ready(hub, user)

    # The limits, as each server runs: hard process limits and the environment, for the learners only.
    for learner in (alice, bob):
        server = _server_process(learner)
        limits = _limits(server)
        assert limits["Max data size"] == (str(limit), str(limit)), limits
        assert limits["Max processes"] == ("512", "512"), limits
        environment = server.environ()
        assert environment["MEM_LIMIT"] == str(limit) and environment["OMP_NUM_THREADS"] == "2", environment
        assert f"{learner}'s server starts limited to {LEARNER_MEMORY_GB:.2f} GiB" in hub.log.read_text()
    instructor = _server_process(teacher)
    assert _limits(instructor)["Max data size"] == ("unlimited", "unlimited")
    assert "MEM_LIMIT" not in instructor.environ()

    # A kernel inherits them; one that allocates past its limit fails in that cell, and goes on.
    first = Kernel(hub, alice, tokens[alice])
    status, output = first.run("import os, resource; print(resource.getrlimit(resource.RLIMIT_DATA), os.environ['CPU_LIMIT'])")
    assert (status, output.strip()) == ("ok", f"({limit}, {limit}) 2.0")
    status, output = first.run(f"too_much = b'1' * {limit}")
    assert status == "error" and output.startswith("MemoryError"), output
    assert first.run("print(6 * 7)") == ("ok", "42\n")

    # Two kernels that each fit, but not together: the memory guard stops the larger and says so.
    second = Kernel(hub, alice, tokens[alice])
    share = int(0.55 * limit)
    for kernel in (first, second):
        status, output = kernel.run(f"held = b'1' * {share}; print(len(held))")
        assert (status, output) == ("ok", f"{share}\n"), output
    deadline, stopped = time.monotonic() + 30, None
    while stopped is None and time.monotonic() < deadline:
        stopped = re.search(rf"memory-guard\] {alice} holds [\d.]+ GiB in \d+ processes, over the learner limit of "
                            rf"{LEARNER_MEMORY_GB:.2f} GiB: stopped their largest, pid (\d+)", hub.log.read_text())
        time.sleep(1)
    assert stopped, "the memory guard did not act:\n" + hub.log.read_text()[-3000:]
    print(stopped.group(0))
    assert int(stopped.group(1)) in (first.pid, second.pid)
    assert _gone(int(stopped.group(1))), "the process the guard says it stopped still runs"
    survivor = second if int(stopped.group(1)) == first.pid else first
    assert survivor.run("print(len(held))") == ("ok", f"{share}\n")

    # Meanwhile the other learner noticed nothing: their server answers and runs a cell.
    status, model = hub.request("GET", f"/user/{bob}/api/status", token=tokens[bob])
    assert status == 200, model
    assert Kernel(hub, bob, tokens[bob]).run("print(sum(range(10)))") == ("ok", "45\n")
    assert _server_process(alice).is_running()  # alice lost one kernel, not her server
