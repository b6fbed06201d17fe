"""jupyter-config/site-packages/tfcourse_lazy_iri.py: rfc3987_syntax is loaded when an IRI is first
checked, not when nbformat is imported, and jsonschema's answers are the same as with the real module.

If jsonschema stops importing rfc3987_syntax, the first test fails: then the stand-in is no longer
needed and can go (with its .pth, the Makefile's and configure.sh's lines installing it).
"""

from __future__ import annotations

import json
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
STAND_IN = ROOT / "jupyter-config" / "site-packages" / "tfcourse_lazy_iri.py"
PARSERS = "rfc3987_syntax.syntax_helpers"  # the submodule whose import builds the parsers

# (value, format): valid and invalid IRIs and IRI references, Chinese ones among them
CASES = [("http://example.com/ü", "iri"), ("https://例子.测试/路径?q=今天天气真好", "iri"), ("not an iri", "iri"),
         ("http://exa mple.com", "iri"), ("mailto:learner@example.org", "iri"), ("http://[::1]:80/", "iri"),
         ("/relative/路径", "iri-reference"), ("a b", "iri-reference"), ("", "iri-reference"),
         ("#fragment", "iri-reference")]

CHECK = f"""
import json, sys
import jsonschema
import inspect
import nbformat  # what Jupyter and nbgrader import first
inspect.getmodule(sys._getframe(), "not/a/loaded/file.py")  # asks every module for its __file__ (as torch does)
built_at_import = {PARSERS!r} in sys.modules
checker = jsonschema.Draft7Validator.FORMAT_CHECKER
answers = [checker.conforms(value, format) for value, format in {CASES!r}]
from rfc3987_syntax import parse  # a name the stand-in does not define: the real module's
print(json.dumps({{"built_at_import": built_at_import, "built_after": {PARSERS!r} in sys.modules,
                  "answers": answers, "parse": parse.__module__}}))
"""

WITH_STAND_IN = f"""
import importlib.util, sys
if "tfcourse_lazy_iri" not in sys.modules:  # (an environment that `make` installed has it already)
    spec = importlib.util.spec_from_file_location("tfcourse_lazy_iri", {str(STAND_IN)!r})
    spec.loader.exec_module(importlib.util.module_from_spec(spec))
"""

WITHOUT_STAND_IN = """
import sys
for name in [name for name in sys.modules if name.startswith("rfc3987_syntax")]:
    del sys.modules[name]
"""


def _run(prologue: str) -> dict:
    done = subprocess.run([sys.executable, "-c", prologue + CHECK], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr[-3000:]
    return json.loads(done.stdout)


def test_the_parsers_are_built_on_first_use_and_answer_as_without_the_stand_in():
    lazy, eager = _run(WITH_STAND_IN), _run(WITHOUT_STAND_IN)
    assert eager["built_at_import"], "jsonschema no longer imports rfc3987_syntax: the stand-in can go"
    assert not lazy["built_at_import"], "importing nbformat, or asking each module for its __file__, built the parsers"
    assert lazy["built_after"], "checking an IRI did not load the real module"
    assert lazy["answers"] == eager["answers"]
    assert True in eager["answers"] and False in eager["answers"]  # (the formats really are checked)
    assert lazy["parse"] == eager["parse"] == PARSERS


def test_make_installs_the_stand_in_as_it_is_in_the_repository():
    """The Makefile copies it into .venv: the copy there must not drift from this one."""
    if Path(sys.prefix).resolve() != (ROOT / ".venv").resolve():
        pytest.skip("not run from the environment `make` sets up (.venv)")
    installed = Path(sysconfig.get_paths()["purelib"])
    for name in ("tfcourse_lazy_iri.py", "tfcourse_lazy_iri.pth"):
        assert (installed / name).read_bytes() == (STAND_IN.parent / name).read_bytes(), \
            f"{installed / name} differs from jupyter-config/site-packages/{name}: run make again"
