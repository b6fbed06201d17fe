"""deploy/: the classroom deployment files are consistent and load.

The Kubernetes part cannot run here; these checks keep it honest: the YAML parses, the Helm values
name the image the Dockerfile builds (tagged with the package's version), the exchange is the
same path and a ReadWriteMany volume everywhere; the one-machine JupyterHub configuration loads
into a real JupyterHub and gives instructors, and only them, Formgrader. (tests/test_jupyterhub.py
runs that configuration for real.)
"""

from __future__ import annotations

import os
import re
import sys
from pathlib import Path
from types import SimpleNamespace

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "deploy"
EXCHANGE = "/srv/nbgrader/exchange"

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover
    import tomli as tomllib


def _values() -> dict:
    return yaml.safe_load((DEPLOY / "z2jh" / "values.yaml").read_text())


def _project() -> dict:
    return tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]


def test_every_yaml_file_parses():
    files = sorted((DEPLOY / "z2jh").glob("*.yaml"))
    assert {f.name for f in files} >= {"values.yaml", "exchange-pvc.yaml"}
    for path in files:
        assert isinstance(yaml.safe_load(path.read_text()), dict), path


def test_the_values_name_the_image_the_dockerfile_builds_with_the_package_version():
    dockerfile = (DEPLOY / "Dockerfile").read_text()
    declared = re.search(r"^#\s*image:\s*(\S+)$", dockerfile, re.M).group(1)
    built = re.search(r"docker build -f deploy/Dockerfile -t (\S+) \.", dockerfile).group(1)
    image = _values()["singleuser"]["image"]
    assert declared == built == f"{image['name']}:{image['tag']}"
    assert image["tag"] == _project()["version"], "the image tag follows the package version"
    # The image installs the project with its course extra, and starts the hub's single-user server.
    assert '[course]"' in dockerfile and "course" in _project()["optional-dependencies"]
    assert "configure.sh" in dockerfile and 'CMD ["jupyterhub-singleuser"]' in dockerfile


def test_the_exchange_is_one_shared_volume_at_one_path():
    values = _values()
    (mount,) = values["singleuser"]["storage"]["extraVolumeMounts"]
    (volume,) = values["singleuser"]["storage"]["extraVolumes"]
    claim = yaml.safe_load((DEPLOY / "z2jh" / "exchange-pvc.yaml").read_text())
    assert mount["mountPath"] == values["singleuser"]["extraEnv"]["TFCOURSE_EXCHANGE"] == EXCHANGE
    assert mount["name"] == volume["name"] and volume["persistentVolumeClaim"]["claimName"] == claim["metadata"]["name"]
    assert claim["spec"]["accessModes"] == ["ReadWriteMany"]
    assert f"TFCOURSE_EXCHANGE={EXCHANGE}" in (DEPLOY / "Dockerfile").read_text()
    assert values["cull"]["enabled"] is True


def test_the_hub_extra_config_compiles():
    for name, code in _values()["hub"]["extraConfig"].items():
        compile(code, f"values.yaml hub.extraConfig.{name}", "exec")


def _installed_hub_state(folder: Path) -> Path:
    """A hub state folder as the install leaves it: tls/hub.crt and tls/hub.key (deploy/certificate.sh;
    their contents are not read when the configuration loads)."""
    (folder / "tls").mkdir(parents=True, exist_ok=True)
    for name in ("hub.crt", "hub.key"):
        (folder / "tls" / name).write_text("placeholder\n")
    return folder


def _node_proxy(folder: Path) -> Path:
    """A stand-in for the Node.js configurable-http-proxy, as `npm install -g` installs it: a script run by node."""
    script = folder / "configurable-http-proxy"
    script.write_text("#!/usr/bin/env node\n")
    script.chmod(0o755)
    return script


def _load_hub_config(monkeypatch, folder: Path, **env):
    """JupyterHub with deploy/jupyterhub_config.py loaded, under exactly `env` (TFCOURSE_...). Unless
    `env` says otherwise, the hub's state folder (in `folder`) holds the installed certificate and the
    proxy (in `folder` too) is Node's."""
    from jupyterhub.app import JupyterHub

    for key in [k for k in os.environ if k.startswith("TFCOURSE_")]:
        monkeypatch.delenv(key)
    folder.mkdir(parents=True, exist_ok=True)
    if "TFCOURSE_HUB_STATE" not in env:
        env["TFCOURSE_HUB_STATE"] = str(_installed_hub_state(folder))
    if "TFCOURSE_PROXY" not in env:
        env["TFCOURSE_PROXY"] = str(_node_proxy(folder))
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    app = JupyterHub()
    app.load_config_file(str(DEPLOY / "jupyterhub_config.py"))
    return app


def test_the_one_machine_hub_configuration_loads_into_jupyterhub(monkeypatch, tmp_path):
    from jupyterhub.auth import PAMAuthenticator
    from jupyterhub.spawner import LocalProcessSpawner

    app = _load_hub_config(monkeypatch, tmp_path)
    config = app.config
    assert app.authenticator_class is PAMAuthenticator or app.authenticator_class == "pam"
    assert issubclass(app.spawner_class, LocalProcessSpawner)
    authenticator = PAMAuthenticator(config=config)
    assert authenticator.admin_users == {"instructor"} and authenticator.allowed_groups == {"tfcourse"}
    spawner = app.spawner_class(config=config, _deprecated_db_session=None)
    assert spawner.cmd == ["/opt/tfcourse/venv/bin/jupyterhub-singleuser"]
    assert spawner.environment["TFCOURSE_EXCHANGE"] == EXCHANGE
    assert spawner.environment["PATH"].startswith("/opt/tfcourse/venv/bin:")
    # The idle culler is a hub service with exactly the scopes it needs.
    (culler,) = [s for s in config.JupyterHub.services if s["name"] == "idle-culler"]
    assert "jupyterhub_idle_culler" in culler["command"] and "--timeout=3600" in culler["command"]
    (role,) = [r for r in config.JupyterHub.load_roles if r["name"] == "idle-culler"]
    assert role["services"] == ["idle-culler"] and "delete:servers" in role["scopes"]


def test_formgrader_is_switched_on_for_instructors_only(monkeypatch, tmp_path):
    app = _load_hub_config(monkeypatch, tmp_path, TFCOURSE_INSTRUCTORS="ada,grace")
    hook = app.config.Spawner.pre_spawn_hook
    shared = app.config.Spawner.environment
    environments = {}
    for name in ("ada", "grace", "learner1"):
        spawner = SimpleNamespace(user=SimpleNamespace(name=name), environment=shared)
        hook(spawner)
        environments[name] = spawner.environment
    assert environments["ada"]["JUPYTER_CONFIG_PATH"] == "/opt/tfcourse/venv/etc/jupyter-instructor"
    assert environments["grace"]["JUPYTER_CONFIG_PATH"] == "/opt/tfcourse/venv/etc/jupyter-instructor"
    assert "JUPYTER_CONFIG_PATH" not in environments["learner1"]
    assert "JUPYTER_CONFIG_PATH" not in shared, "the hook must not change the environment every server shares"


def test_the_trial_authenticator_takes_its_passwords_from_the_environment(monkeypatch, tmp_path):
    from jupyterhub.authenticators.shared import SharedPasswordAuthenticator

    app = _load_hub_config(monkeypatch, tmp_path, TFCOURSE_AUTHENTICATOR="shared-password",
                           TFCOURSE_LEARNER_PASSWORD="learners-password",
                           TFCOURSE_INSTRUCTOR_PASSWORD="an-instructor-password-of-32-chars!")
    authenticator = SharedPasswordAuthenticator(config=app.config)
    assert authenticator.user_password == "learners-password"
    assert authenticator.admin_users == {"instructor"}
    with pytest.raises(KeyError):  # without passwords the trial hub refuses to start
        _load_hub_config(monkeypatch, tmp_path / "no passwords", TFCOURSE_AUTHENTICATOR="shared-password").config.SharedPasswordAuthenticator


def test_the_course_wide_nbgrader_configuration_names_the_course_and_the_exchange(monkeypatch):
    from traitlets.config.loader import PyFileConfigLoader

    monkeypatch.delenv("TFCOURSE_EXCHANGE", raising=False)
    config = PyFileConfigLoader("nbgrader_config.py", str(DEPLOY)).load_config()
    assert config.CourseDirectory.course_id == "tfcourse" and config.Exchange.root == EXCHANGE
    monkeypatch.setenv("TFCOURSE_EXCHANGE", "/elsewhere")
    assert PyFileConfigLoader("nbgrader_config.py", str(DEPLOY)).load_config().Exchange.root == "/elsewhere"


def test_the_extensions_switched_by_name_exist_in_nbgrader():
    """configure.sh and the instructor's page_config name nbgrader's JupyterLab plugins by id: a
    renamed plugin would silently leave Formgrader on for everyone."""
    import json

    import nbgrader

    ids = set(json.loads((DEPLOY / "instructor" / "labconfig" / "page_config.json").read_text())["disabledExtensions"])
    script = (DEPLOY / "configure.sh").read_text()
    assert ids == set(re.findall(r"--level=sys_prefix (\S+)", script))
    bundled = Path(sys.prefix) / "share" / "jupyter" / "labextensions" / "@jupyter" / "nbgrader" / "static"
    code = "".join(p.read_text(errors="ignore") for p in bundled.glob("*.js"))
    for plugin in ids:
        assert f'"{plugin}"' in code, f"{plugin} is not a plugin of nbgrader {nbgrader.__version__}"
    server = json.loads((DEPLOY / "instructor" / "jupyter_server_config.d" / "tfcourse-instructor.json").read_text())
    (module,) = server["ServerApp"]["jpserver_extensions"]
    assert module in script
    __import__(module)


# --- safe by default: HTTPS, and per-learner limits ------------------------------------------------

def test_the_hub_serves_https_on_every_interface_with_the_installed_certificate(monkeypatch, tmp_path):
    app = _load_hub_config(monkeypatch, tmp_path)
    assert app.bind_url == "https://:8000"
    assert (app.ssl_cert, app.ssl_key) == (str(tmp_path / "tls" / "hub.crt"), str(tmp_path / "tls" / "hub.key"))


@pytest.mark.parametrize("missing", ["hub.crt", "hub.key"])
def test_without_its_certificate_the_hub_refuses_to_start_and_says_how_to_make_one(monkeypatch, tmp_path, missing):
    (_installed_hub_state(tmp_path) / "tls" / missing).unlink()
    with pytest.raises(SystemExit) as stopped:
        _load_hub_config(monkeypatch, tmp_path, TFCOURSE_HUB_STATE=str(tmp_path))
    message = str(stopped.value)
    assert str(tmp_path / "tls" / missing) in message and "sh deploy/certificate.sh" in message
    assert "TFCOURSE_SSL_CERT" in message


def test_a_given_certificate_is_used_in_place_of_the_self_signed_one(monkeypatch, tmp_path):
    (tmp_path / "live").mkdir()
    for name in ("fullchain.pem", "privkey.pem"):
        (tmp_path / "live" / name).write_text("placeholder\n")
    app = _load_hub_config(monkeypatch, tmp_path / "state", TFCOURSE_SSL_CERT=str(tmp_path / "live" / "fullchain.pem"),
                           TFCOURSE_SSL_KEY=str(tmp_path / "live" / "privkey.pem"),
                           TFCOURSE_HUB_URL="https://hub.example.org:443")
    assert (app.ssl_cert, app.ssl_key) == (str(tmp_path / "live" / "fullchain.pem"), str(tmp_path / "live" / "privkey.pem"))
    assert app.bind_url == "https://hub.example.org:443"


@pytest.mark.parametrize("proxy", ["python", "absent"])
def test_https_needs_the_node_proxy_and_the_hub_says_so(monkeypatch, tmp_path, proxy):
    if proxy == "python":
        script = tmp_path / "configurable-http-proxy"
        script.write_text(f"#!{sys.executable}\nfrom configurable_http_proxy.cli import main\n")
        script.chmod(0o755)
    else:
        script = tmp_path / "no-such-proxy"
    with pytest.raises(SystemExit) as stopped:
        _load_hub_config(monkeypatch, tmp_path, TFCOURSE_PROXY=str(script))
    message = str(stopped.value)
    assert "npm install -g configurable-http-proxy" in message
    assert ("the Python one" in message) == (proxy == "python")


@pytest.mark.parametrize("url", ["http://:8000", "http://0.0.0.0:8000", "http://192.168.1.20:8000",
                                 "http://hub.example.org", "ftp://127.0.0.1:8000"])
def test_plain_http_where_others_can_reach_the_hub_is_refused(monkeypatch, tmp_path, url):
    with pytest.raises(SystemExit) as stopped:
        _load_hub_config(monkeypatch, tmp_path, TFCOURSE_HUB_URL=url)
    assert "clear text" in str(stopped.value) and url in str(stopped.value)


@pytest.mark.parametrize("url", ["http://127.0.0.1:8000", "http://localhost:8000", "http://[::1]:8000"])
def test_plain_http_on_loopback_is_a_trial_and_the_log_says_so(monkeypatch, capfd, tmp_path, url):
    app = _load_hub_config(monkeypatch, tmp_path, TFCOURSE_HUB_URL=url, TFCOURSE_PROXY="configurable-http-proxy")
    assert app.bind_url.rstrip("/") == url and not app.ssl_cert
    log = capfd.readouterr().err  # (the hub's log: tests/test_jupyterhub.py reads it in a running hub)
    assert f"plain HTTP on {url}: only this machine can reach the hub, and nothing is encrypted" in log, log


def _spawner(app, name: str):
    spawner = app.spawner_class(config=app.config, _deprecated_db_session=None, user=SimpleNamespace(name=name))
    app.config.Spawner.pre_spawn_hook(spawner)
    return spawner


def test_learners_get_hard_limits_and_their_environment_says_so(monkeypatch, tmp_path):
    import resource

    app = _load_hub_config(monkeypatch, tmp_path, TFCOURSE_INSTRUCTORS="ada")
    learner, instructor = _spawner(app, "learner1"), _spawner(app, "ada")
    # The defaults: 3.5 GiB each (16 learners on a 64 GiB machine, 8 GiB left), 512 processes, 2 CPUs.
    assert dict(learner.process_limits()) == {resource.RLIMIT_DATA: int(3.5 * 2**30), resource.RLIMIT_NPROC: 512}
    assert 16 * 3.5 + 8 <= 64
    assert learner.mem_limit == int(3.5 * 2**30) and learner.cpu_limit == 2
    assert {learner.environment[k] for k in ("OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS")} == {"2"}
    # Instructors grade whole classes: no limits (grading kernels are capped by tfcourse autograde).
    assert instructor.process_limits() == [] and instructor.mem_limit is None and instructor.cpu_limit is None
    assert "OMP_NUM_THREADS" not in instructor.environment
    # The memory guard watches every learner's processes together, instructors exempt.
    (guard,) = [s for s in app.config.JupyterHub.services if s["name"] == "memory-guard"]
    assert guard["command"][1:] == ["-m", "tfcourse.course.memory_guard", "--limit-gb=3.5", "--exempt=ada"]
    assert guard["command"][0] == "/opt/tfcourse/venv/bin/python"


def test_the_limits_are_configurable_and_zero_turns_memory_limits_off(monkeypatch, tmp_path):
    import resource

    app = _load_hub_config(monkeypatch, tmp_path, TFCOURSE_LEARNER_MEMORY_GB="6", TFCOURSE_LEARNER_CPUS="4",
                           TFCOURSE_LEARNER_PROCESSES="1000")
    learner = _spawner(app, "learner1")
    assert dict(learner.process_limits()) == {resource.RLIMIT_DATA: 6 * 2**30, resource.RLIMIT_NPROC: 1000}
    assert learner.environment["OMP_NUM_THREADS"] == "4" and learner.cpu_limit == 4
    off = _load_hub_config(monkeypatch, tmp_path / "off", TFCOURSE_LEARNER_MEMORY_GB="0")
    assert dict(_spawner(off, "learner1").process_limits()) == {resource.RLIMIT_NPROC: 512}
    assert "memory-guard" not in {s["name"] for s in off.config.JupyterHub.services}
