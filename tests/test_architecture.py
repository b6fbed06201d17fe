"""The package's three layers stay apart: the model and data + training never import the course
machinery, so they work where Jupyter and nbgrader are not installed."""

from __future__ import annotations

import ast
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "tfcourse"
MACHINERY = ("tfcourse.course", "tfcourse.checks")
COURSE_PACKAGES = ("nbgrader", "nbformat", "nbclient", "nbconvert", "jupyter_client", "jupyter_server",
                   "jupyterlab", "ipykernel", "IPython", "nbval", "pytest")


def _lower_layer_modules() -> list[Path]:
    model = [p for p in PACKAGE.glob("*.py") if p.name not in ("__main__.py",)]  # __main__ is the CLI
    return sorted(model + list((PACKAGE / "data").glob("*.py")) + list((PACKAGE / "training").glob("*.py")))


def _dotted(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def _imported_names(path: Path) -> list[tuple[int, str]]:
    """Every module an import statement in `path` names, made absolute."""
    package = _dotted(path) if path.name == "__init__.py" else _dotted(path).rpartition(".")[0]
    names = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names += [(node.lineno, alias.name) for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - node.level + 1]
                base = ".".join(anchor + ([base] if base else []))
            names.append((node.lineno, base))
            names += [(node.lineno, f"{base}.{alias.name}") for alias in node.names]
    return names


def test_the_lower_layers_are_found():
    names = {_dotted(p) for p in _lower_layer_modules()}
    assert {"tfcourse.attention", "tfcourse.models", "tfcourse.data.shakespeare", "tfcourse.training.loop"} <= names


@pytest.mark.parametrize("path", _lower_layer_modules(), ids=lambda p: _dotted(p))
def test_model_and_data_modules_do_not_import_the_course_machinery(path):
    for line, name in _imported_names(path):
        assert not name.startswith(MACHINERY), f"{_dotted(path)} line {line} imports {name}: course machinery"
        assert name.split(".")[0] not in COURSE_PACKAGES, f"{_dotted(path)} line {line} imports {name}"


@pytest.mark.parametrize("path", sorted((PACKAGE / "checks").glob("*.py")), ids=lambda p: _dotted(p))
def test_the_checks_do_not_import_the_course(path):
    """Layers import one way: the course (grading, assemble) uses the checks, never the reverse."""
    for line, name in _imported_names(path):
        assert not name.startswith("tfcourse.course"), f"{_dotted(path)} line {line} imports {name}"


def test_the_model_trains_without_jupyter_or_nbgrader_installed():
    """Import every model, data and training module, and train two steps, with the course's
    packages made unimportable."""
    modules = [_dotted(p) for p in _lower_layer_modules()]
    script = textwrap.dedent(f"""
        import importlib, sys
        for name in {COURSE_PACKAGES!r}:
            sys.modules[name] = None  # `import name` now raises ImportError
        for module in {modules!r}:
            importlib.import_module(module)
        import torch
        from tfcourse.data import get_batch
        from tfcourse.models import GPT, GPTConfig
        from tfcourse.training import TrainConfig, train
        data = torch.randint(0, 11, (500,))
        model = GPT(GPTConfig.gpt(vocab_size=11, max_len=8, d_model=16, n_heads=2, n_layers=1))
        history = train(model, lambda split, g: get_batch(data, 4, 8, g),
                        TrainConfig(max_steps=2, warmup_steps=0, eval_interval=2, eval_steps=1, device="cpu",
                                    progress=False))
        print("trained", len(history["train_loss"]))
    """)
    result = subprocess.run([sys.executable, "-c", script], cwd=ROOT, capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
    assert "trained 2" in result.stdout


def test_no_reference_code_hides_in_checks():
    """Checks compare with references; they do not define them. A public function in checks/ is a
    check (check_*), an assertion (expect_*), a catalogue of wrong answers (*_mistakes), or a helper
    of core.py (the runner), adapters.py (the seam between the lessons' conventions and the reference's)
    or debugging.py (the debug exercises' planted bugs and their three-stage check)."""
    for path in (PACKAGE / "checks").glob("*.py"):
        if path.name in ("core.py", "adapters.py", "debugging.py", "__init__.py"):
            continue
        for node in ast.parse(path.read_text()).body:
            if isinstance(node, (ast.FunctionDef, ast.ClassDef)) and not node.name.startswith("_"):
                assert node.name.startswith(("check_", "expect_")) or node.name.endswith("_mistakes"), (
                    f"checks/{path.name} defines {node.name}: reference code belongs with the model or data"
                )
