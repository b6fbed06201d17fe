"""The project's promises about itself: declared dependencies agree, commands exist, docs are true."""

import re
import subprocess
import sys
from pathlib import Path

if sys.version_info >= (3, 11):
    import tomllib
else:  # Python 3.10
    import tomli as tomllib

import tfcourse
from tfcourse.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _environment_pip_requirements():
    lines = (ROOT / "environment.yml").read_text().splitlines()
    start = lines.index("  - pip:") + 1
    items = [line.strip()[2:] for line in lines[start:] if line.strip().startswith("- ")]
    return [item for item in items if item != "-e ."]


def test_environment_yml_and_pyproject_declare_the_same_dependencies():
    assert sorted(_environment_pip_requirements()) == sorted(_pyproject()["project"]["dependencies"])


def test_torch_requirement_is_an_open_range_users_can_satisfy():
    torch_req = [d for d in _pyproject()["project"]["dependencies"] if d.startswith("torch")]
    assert torch_req and "==" not in torch_req[0] and ">=" in torch_req[0]


def test_version_is_declared_once_and_agrees():
    assert _pyproject()["project"]["version"] == tfcourse.__version__


def test_python_requirement_matches_makefile_check():
    assert _pyproject()["project"]["requires-python"] == ">=3.10"
    assert "sys.version_info < (3, 10)" in (ROOT / "Makefile").read_text()


def test_readme_quick_start_commands_are_make_targets():
    readme = (ROOT / "README.md").read_text()
    makefile = (ROOT / "Makefile").read_text()
    for target in ("lab", "test"):
        assert f"make {target}" in readme
        assert re.search(rf"^{target}:", makefile, re.M), f"README promises `make {target}`"
    assert "make test" in (ROOT / ".ci" / "run").read_text(), ".ci/run must run the README's test command"


def test_make_help_lists_the_targets():
    out = subprocess.run(["make", "-s", "help"], cwd=ROOT, capture_output=True, text=True, check=True).stdout
    for target in ("lab", "test", "grade", "bench", "solutions", "solutions-fast", "student-version"):
        assert target in out


def test_cli_help_and_info(capsys):
    assert cli_main(["info"]) == 0
    assert f"tfcourse {tfcourse.__version__}" in capsys.readouterr().out
    result = subprocess.run([sys.executable, "-m", "tfcourse", "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "bench" in result.stdout and "data" in result.stdout


def test_package_modules_named_in_the_tour_exist():
    for name in re.findall(r"^\s+(\w+)\.py", tfcourse.__doc__, re.M):
        assert (ROOT / "tfcourse" / f"{name}.py").exists(), f"tfcourse/__init__ names {name}.py"
