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
from tfcourse.course.cli import main as cli_main

ROOT = Path(__file__).resolve().parents[1]


def _pyproject():
    return tomllib.loads((ROOT / "pyproject.toml").read_text())


def _environment_pip_requirements() -> dict[str, list[str]]:
    """environment.yml's pip list, grouped by its `# core:` / `# course:` / `# test` comments."""
    lines = (ROOT / "environment.yml").read_text().splitlines()
    groups: dict[str, list[str]] = {}
    current = None
    for line in lines[lines.index("  - pip:") + 1:]:
        item = line.strip()
        if item.startswith("# "):
            current = item[2:].split(":")[0].strip()
        elif item.startswith("- ") and item != "- -e .":
            groups.setdefault(current, []).append(item[2:])
    return groups


def test_environment_yml_and_pyproject_declare_the_same_dependencies():
    project = _pyproject()["project"]
    groups = _environment_pip_requirements()
    assert sorted(groups.pop("core")) == sorted(project["dependencies"])
    extras = project["optional-dependencies"]
    assert set(groups) == set(extras), "environment.yml lists the extras of pyproject.toml, one comment each"
    for extra, requirements in extras.items():
        assert sorted(groups[extra]) == sorted(requirements), f"extra [{extra}] differs"


def test_the_model_needs_no_course_or_test_package():
    core = " ".join(_pyproject()["project"]["dependencies"])
    for package in ("jupyterlab", "nbgrader", "nbclient", "nbformat", "pytest", "nbval"):
        assert package not in core, f"{package} is for the course or the tests: put it in an extra"


def test_make_installs_every_extra():
    makefile = (ROOT / "Makefile").read_text()
    extras = ",".join(_pyproject()["project"]["optional-dependencies"])
    assert f'pip install -e ".[{extras}]"' in makefile


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


def test_package_modules_named_in_the_tours_exist():
    import tfcourse.course
    import tfcourse.data
    import tfcourse.training

    for package in (tfcourse, tfcourse.course, tfcourse.data, tfcourse.training):
        folder = Path(package.__file__).parent
        named = re.findall(r"^\s+(\w+)\.py", package.__doc__, re.M)
        assert named, f"{package.__name__}'s docstring lists its modules"
        for name in named:
            assert (folder / f"{name}.py").exists(), f"{package.__name__} names {name}.py"
