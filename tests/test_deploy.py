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


def _load_hub_config(monkeypatch, **env):
    from jupyterhub.app import JupyterHub

    for key in [k for k in os.environ if k.startswith("TFCOURSE_")]:
        monkeypatch.delenv(key)
    for key, value in env.items():
        monkeypatch.setenv(key, value)
    app = JupyterHub()
    app.load_config_file(str(DEPLOY / "jupyterhub_config.py"))
    return app


def test_the_one_machine_hub_configuration_loads_into_jupyterhub(monkeypatch):
    from jupyterhub.auth import PAMAuthenticator
    from jupyterhub.spawner import LocalProcessSpawner

    app = _load_hub_config(monkeypatch)
    config = app.config
    assert app.authenticator_class is PAMAuthenticator or app.authenticator_class == "pam"
    assert app.spawner_class is LocalProcessSpawner or app.spawner_class == "localprocess"
    authenticator = PAMAuthenticator(config=config)
    assert authenticator.admin_users == {"instructor"} and authenticator.allowed_groups == {"tfcourse"}
    spawner = LocalProcessSpawner(config=config, _deprecated_db_session=None)
    assert spawner.cmd == ["/opt/tfcourse/venv/bin/jupyterhub-singleuser"]
    assert spawner.environment["TFCOURSE_EXCHANGE"] == EXCHANGE
    assert spawner.environment["PATH"].startswith("/opt/tfcourse/venv/bin:")
    # The idle culler is a hub service with exactly the scopes it needs.
    (culler,) = [s for s in config.JupyterHub.services if s["name"] == "idle-culler"]
    assert "jupyterhub_idle_culler" in culler["command"] and "--timeout=3600" in culler["command"]
    (role,) = [r for r in config.JupyterHub.load_roles if r["name"] == "idle-culler"]
    assert role["services"] == ["idle-culler"] and "delete:servers" in role["scopes"]


def test_formgrader_is_switched_on_for_instructors_only(monkeypatch):
    app = _load_hub_config(monkeypatch, TFCOURSE_INSTRUCTORS="ada,grace")
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


def test_the_trial_authenticator_takes_its_passwords_from_the_environment(monkeypatch):
    from jupyterhub.authenticators.shared import SharedPasswordAuthenticator

    app = _load_hub_config(monkeypatch, TFCOURSE_AUTHENTICATOR="shared-password",
                           TFCOURSE_LEARNER_PASSWORD="learners-password",
                           TFCOURSE_INSTRUCTOR_PASSWORD="an-instructor-password-of-32-chars!")
    authenticator = SharedPasswordAuthenticator(config=app.config)
    assert authenticator.user_password == "learners-password"
    assert authenticator.admin_users == {"instructor"}
    with pytest.raises(KeyError):  # without passwords the trial hub refuses to start
        _load_hub_config(monkeypatch, TFCOURSE_AUTHENTICATOR="shared-password").config.SharedPasswordAuthenticator


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
