"""nbgrader plug-ins that make autograding fair and tamper-evident, for plain `nbgrader autograde`
(nbgrader_config.py registers them) and `tfcourse grade` (which uses that config) alike.

- `StderrIsNotAnError`: nbgrader scores a graded cell 0 when it has any stderr output. Output
  from a background thread, a late library warning or a progress bar lands in whichever cell runs
  at that moment, so that rule grades at random. This preprocessor turns the stderr of graded
  cells into marked stdout before the grade is computed; errors still score 0.
- `IntegrityReport`: a static scan of the learner's cells for assignments into `tfcourse`, `torch`,
  `builtins`, `sys.modules`, `sys.stdout`/`sys.stderr` or IPython's display hooks, and for the
  usual ways around such a scan (exec, eval, __import__, setattr on a module, importlib). It
  names the cell and the line, in a note at the top of the graded notebook (so the feedback and
  Formgrader show it) and in the notebook's metadata (so `tfcourse grade` prints it). It reports;
  it does not change a score: the instructor decides.
- `MathForOfflineReading` (for `nbgrader generate_feedback`): the report's formulas as MathML,
  which browsers draw themselves, instead of LaTeX that waits for MathJax from a CDN.
- `NoComments` (for `tfcourse grade` only): no "Comments: No response." boxes in a self-graded
  report, where no instructor will write a comment.
- `MarkDemonstrations`, `SkipDemonstrations`, `RestoreDemonstrations` (tfcourse.course.demos): the
  lesson's unchanged demonstrations that no graded cell needs are not run when grading.
- `KeepCheckedOutputs` (for `nbgrader generate_assignment`): the student version keeps the saved
  output of the worked-example cells (tagged `nbval-check-output`), so a learner sees the expected
  result before running; every other output is cleared as nbgrader does.
"""

from __future__ import annotations

import ast
import os
import re
from dataclasses import dataclass
from typing import Any

from nbformat.v4 import new_markdown_cell
from nbgrader.preprocessors import NbGraderPreprocessor

from ..messages import say
from .cjk_font import with_embedded_font
from .demos import MarkDemonstrations, RestoreDemonstrations, SkipDemonstrations
from .mathml import markdown_with_mathml

# Roots whose attributes a learner's cell must not assign to: the package the checks come from,
# the library they compare with, Python's own builtins, and the interpreter's streams and modules.
GUARDED_MODULES = ("tfcourse", "torch", "builtins", "sys", "IPython", "numpy")
# Calls that can do the same without an assignment statement the scan could see.
EVASIONS = {"exec", "eval", "compile", "__import__", "setattr", "delattr", "globals"}
EVASION_MODULES = ("importlib", "ctypes", "gc", "inspect")
REPORT_MARK = "tfcourse-integrity-report"


def _grade_info(cell: Any) -> dict:
    return cell.get("metadata", {}).get("nbgrader", {})


class StderrIsNotAnError(NbGraderPreprocessor):
    """Graded cells' stderr becomes stdout (marked `[stderr]`) before SaveAutoGrades scores them."""

    def preprocess_cell(self, cell: Any, resources: dict, index: int) -> tuple[Any, dict]:
        if cell.cell_type == "code" and _grade_info(cell).get("grade"):
            for output in cell.get("outputs", []):
                if output.get("output_type") == "stream" and output.get("name") == "stderr":
                    output["name"] = "stdout"
                    output["text"] = "".join(f"[stderr] {line}" for line in output["text"].splitlines(True))
        return cell, resources


@dataclass(frozen=True)
class Finding:
    cell: int  # index of the cell in the notebook
    line: int  # line in that cell, from 1
    what: str  # what was found, in words

    def __str__(self) -> str:
        return f"cell {self.cell}, line {self.line}: {self.what}"


def _dotted(node: ast.AST) -> str | None:
    """`a.b.c` for an attribute chain, `a.b[...]` shown as `a.b[]`, a call root as `f()`."""
    parts = []
    while True:
        if isinstance(node, ast.Attribute):
            parts.append(node.attr)
            node = node.value
        elif isinstance(node, ast.Subscript):
            parts.append("[]")
            node = node.value
        elif isinstance(node, ast.Call):
            inner = _dotted(node.func)
            if inner is None:
                return None
            parts.append(f"{inner}()")
            break
        elif isinstance(node, ast.Name):
            parts.append(node.id)
            break
        else:
            return None
    return ".".join(reversed(parts)).replace(".[]", "[]")


def _aliases(tree: ast.AST) -> dict[str, str]:
    """Local names bound to guarded modules or their members: `import torch.nn as tnn` -> tnn: torch.nn."""
    aliases = {}
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            for alias in node.names:
                if alias.asname:  # import torch.nn as tnn -> tnn: torch.nn
                    aliases[alias.asname] = alias.name
                else:  # import torch.nn -> torch: torch
                    root = alias.name.split(".")[0]
                    aliases[root] = root
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            for alias in node.names:
                aliases[alias.asname or alias.name] = f"{node.module}.{alias.name}"
    return {name: target for name, target in aliases.items() if target.split(".")[0] in GUARDED_MODULES}


def _resolved(dotted: str, aliases: dict[str, str]) -> str:
    root, _, rest = dotted.partition(".")
    root_name = root.split("[")[0]
    if root_name in aliases:
        return aliases[root_name] + root[len(root_name):] + (f".{rest}" if rest else "")
    return dotted


def _is_guarded(target: str) -> bool:
    if target.startswith("get_ipython()"):
        return True
    root = target.split(".")[0].split("[")[0]
    return root in GUARDED_MODULES and ("." in target or "[" in target)


def scan_source(source: str, cell: int = 0, aliases: dict[str, str] | None = None) -> list[Finding]:
    """Findings in one cell's source (IPython magics are skipped; a syntax error is not a finding)."""
    lines = [line for line in source.splitlines() if not line.lstrip().startswith(("%", "!"))]
    try:
        tree = ast.parse("\n".join(lines))
    except SyntaxError:
        return []
    aliases = {**(aliases or {}), **_aliases(tree)}
    findings = []
    for node in ast.walk(tree):
        targets: list[ast.AST] = []
        if isinstance(node, (ast.Assign, ast.Delete)):
            targets = node.targets
        elif isinstance(node, (ast.AugAssign, ast.AnnAssign)):
            targets = [node.target]
        for target in targets:
            for element in (target.elts if isinstance(target, ast.Tuple) else [target]):
                name = _dotted(element)
                if name and not isinstance(element, ast.Name):
                    resolved = _resolved(name, aliases)
                    if _is_guarded(resolved):
                        verb = "deletes" if isinstance(node, ast.Delete) else "assigns to"
                        findings.append(Finding(cell, node.lineno, f"{verb} `{resolved}`"))
        if isinstance(node, ast.Call):
            name = _dotted(node.func)
            if name in EVASIONS:
                findings.append(Finding(cell, node.lineno, f"calls `{name}()`, which can change code the scan cannot see"))
        if isinstance(node, (ast.Import, ast.ImportFrom)):
            modules = [a.name for a in node.names] if isinstance(node, ast.Import) else [node.module or ""]
            for module in modules:
                if module.split(".")[0] in EVASION_MODULES:
                    findings.append(Finding(cell, node.lineno, f"imports `{module}`"))
    return sorted(set(findings), key=lambda f: (f.cell, f.line, f.what))


def scan_notebook(nb: Any) -> list[Finding]:
    """Findings in every code cell the learner may have written (not the locked test cells)."""
    findings: list[Finding] = []
    aliases: dict[str, str] = {}
    for index, cell in enumerate(nb.cells):
        if cell.cell_type != "code":
            continue
        info = _grade_info(cell)
        if info.get("locked") or (info.get("grade") and not info.get("solution")):
            try:  # the course's own cells: their imports count, their code is ours
                aliases.update(_aliases(ast.parse(cell.source)))
            except SyntaxError:
                pass
            continue
        findings += scan_source(cell.source, index, aliases)
    return findings


class IntegrityReport(NbGraderPreprocessor):
    """Scan the submission; put the findings at the top of the notebook and in its metadata."""

    def preprocess(self, nb: Any, resources: dict) -> tuple[Any, dict]:
        nb.cells = [c for c in nb.cells if not c.get("metadata", {}).get(REPORT_MARK)]
        findings = scan_notebook(nb)
        nb.metadata.setdefault("tfcourse", {})["integrity"] = [str(f) for f in findings]
        if findings:
            lines = "\n".join(f"- {f}" for f in findings)
            text = (f"**Integrity report** (for the instructor; it changes no score): the submitted cells "
                    f"do things that can change how the checks behave.\n\n{lines}")
            nb.cells.insert(0, new_markdown_cell(text, metadata={REPORT_MARK: True}))
        return nb, resources


CHECKED_OUTPUT_TAG = "nbval-check-output"


def learner_names(lesson: str) -> set[str]:
    """The names a lesson's exercises define: what the learner writes (from the manifest)."""
    from .. import manifest

    return {name for e in manifest.exercises() if e.lesson == lesson for name in e.defines}


def uses_learner_code(source: str, names: set[str]) -> bool:
    """Whether a cell reads one of `names` (so its output would be the solution's, not the learner's)."""
    try:
        tree = ast.parse(source)
    except SyntaxError:
        return True  # not plain Python (a magic, say): keep nothing that might be
    return any(isinstance(node, ast.Name) and node.id in names for node in ast.walk(tree))


def keeps_its_output(cell: Any, lesson: str) -> bool:
    """A worked example's output stays in the student version (tagged `nbval-check-output`), unless the cell
    runs the learner's code: before they wrote it, an output there would look like their result."""
    return (CHECKED_OUTPUT_TAG in cell.metadata.get("tags", [])
            and not uses_learner_code(cell.source, learner_names(lesson)))


class KeepCheckedOutputs(NbGraderPreprocessor):
    """nbgrader's ClearOutput, except for the worked examples that call only the package (`keeps_its_output`)."""

    def preprocess_cell(self, cell: Any, resources: dict, index: int) -> tuple[Any, dict]:
        lesson = resources.get("unique_key") or resources.get("nbgrader", {}).get("notebook", "")
        if cell.cell_type == "code" and not keeps_its_output(cell, lesson):
            cell.outputs = []
            cell.execution_count = None
            cell.metadata.pop("collapsed", None)
            cell.metadata.pop("scrolled", None)
        return cell, resources


class MathForOfflineReading(NbGraderPreprocessor):
    """Markdown cells' $…$ formulas become MathML before the feedback report is written."""

    def preprocess_cell(self, cell: Any, resources: dict, index: int) -> tuple[Any, dict]:
        if cell.cell_type == "markdown":
            cell.source = markdown_with_mathml(cell.source)
        return cell, resources


class NoComments(NbGraderPreprocessor):
    """Drops the graders' comments (nbgrader's automatic "No response." included) from the report."""

    def preprocess_cell(self, cell: Any, resources: dict, index: int) -> tuple[Any, dict]:
        _grade_info(cell).pop("comment", None)
        return cell, resources


def _feedback_words(language: str) -> list[tuple[str, str]]:
    """The words nbgrader's feedback template writes around a notebook, and their form in `language`."""
    words = {"(Score: ": say("(Score: ", language), "Score: ": say("Score: ", language),
             "Test cell": say("Test cell", language), "Coding free-response": say("Coding free-response", language),
             "Written response": say("Written response", language), "Task": say("Task", language),
             "Late submission penalty": say("Late submission penalty", language), "(Top)": say("(Top)", language),
             "Grade cell: ": say("Grade cell: ", language), "Comments:": say("Comments:", language)}
    return [(english, translated) for english, translated in words.items() if translated != english]


def localized_feedback(html: str, language: str) -> str:
    """nbgrader's feedback report with its own words (Score, Test cell, …) in the notebook's language."""
    for english, translated in _feedback_words(language):
        html = re.sub(rf"(?<=[>\s(]){re.escape(english)}" if not english.startswith("(") else re.escape(english),
                      translated, html)
    return html


def feedback_exporter() -> type:
    """nbgrader's feedback exporter, speaking the notebook's language (the Chinese edition's says "zh").

    A report with Chinese in it carries the font for it (the characters it uses, cut from the bundled
    Noto Sans CJK SC): the report is a file read anywhere, often where no Chinese font is installed.
    """
    from nbconvert import HTMLExporter

    class FeedbackExporter(HTMLExporter):
        def from_notebook_node(self, nb: Any, resources: dict | None = None, **kw: Any) -> tuple[str, dict]:
            html, resources = super().from_notebook_node(nb, resources, **kw)
            language = nb.metadata.get("tfcourse", {}).get("language", "en")
            html = localized_feedback(html, language) if language != "en" else html
            return with_embedded_font(html), resources

    return FeedbackExporter


def feedback_preprocessors() -> list[type]:
    """nbgrader's generate_feedback steps, then the formulas as MathML."""
    from nbgrader.converters import GenerateFeedback

    return [*GenerateFeedback.class_traits()["preprocessors"].default(), MathForOfflineReading]


class PlantBugs(NbGraderPreprocessor):
    """A debug exercise's answer cell starts from its planted bug (tfcourse.checks.debugging), not a stub."""

    def preprocess_cell(self, cell: Any, resources: dict, index: int) -> tuple[Any, dict]:
        grade_id = cell.metadata.get("nbgrader", {}).get("grade_id")
        if cell.cell_type == "code" and grade_id:
            from ..checks.debugging import planted_bugs  # (torch: only when a student version is made)

            bug = planted_bugs().get(grade_id)
            if bug is not None:
                cell.source = bug.source
        return cell, resources


def generate_preprocessors() -> list[type]:
    """nbgrader's generate_assignment steps, with KeepCheckedOutputs in place of ClearOutput and PlantBugs
    right after ClearSolutions (which puts the stubs in)."""
    from nbgrader.converters import GenerateAssignment
    from nbgrader.preprocessors import ClearOutput, ClearSolutions

    steps = [KeepCheckedOutputs if step is ClearOutput else step
             for step in GenerateAssignment.class_traits()["preprocessors"].default()]
    position = steps.index(ClearSolutions) + 1
    return [*steps[:position], PlantBugs, MarkDemonstrations, *steps[position:]]


def autograde_preprocessors() -> list[type]:
    """nbgrader's own autograde steps: Execute between SkipDemonstrations and RestoreDemonstrations (the
    lesson's unchanged demonstrations that no graded cell needs are not run), and StderrIsNotAnError and
    IntegrityReport just before SaveAutoGrades (which computes the scores). Execute is nbgrader's, its
    kernels forked from a process that has imported torch once (course/forked_kernels.py)."""
    from nbgrader.converters import Autograde
    from nbgrader.preprocessors import Execute, SaveAutoGrades

    from .forked_kernels import ForkedExecute

    steps = list(Autograde.class_traits()["autograde_preprocessors"].default())
    run = steps.index(Execute)
    steps[run:run + 1] = [SkipDemonstrations, ForkedExecute, RestoreDemonstrations]
    position = steps.index(SaveAutoGrades)
    return [*steps[:position], StderrIsNotAnError, IntegrityReport, *steps[position:]]


def grading_memory_limit() -> int:
    """Bytes a grading kernel may allocate: $TFCOURSE_GRADING_MEMORY_GB (default 8 GiB)."""
    return int(float(os.environ.get("TFCOURSE_GRADING_MEMORY_GB", "8")) * 2**30)


def grading_kernel_arguments() -> list[str]:
    """Kernel command-line arguments for grading: the kernel's data segment (heap and big
    allocations) is capped at `grading_memory_limit()`, so an allocation past it fails in that cell
    with a MemoryError-like error instead of exhausting the machine; and broken output streams are
    restored after every cell (`keep_streams_working`), so a cell that closes sys.stdout costs only
    what it breaks. The other cells still run. The kernel logs errors only (not its start-up warnings).
    Where the kernel already runs under a lower hard limit (a learner's server on the classroom hub,
    deploy/jupyterhub_config.py), it keeps that one: a process may lower its limits, never raise them."""
    limit = grading_memory_limit()
    lines = ["import resource; _hard = resource.getrlimit(resource.RLIMIT_DATA)[1]; "
             f"_cap = {limit} if _hard == resource.RLIM_INFINITY else min({limit}, _hard); "
             "resource.setrlimit(resource.RLIMIT_DATA, (_cap, _cap)); del _hard, _cap",
             "import tfcourse.checks.core as _streams; _streams.keep_streams_working(); del _streams"]
    return [f"--IPKernelApp.exec_lines={lines!r}".replace("'", '"'), "--IPKernelApp.log_level=ERROR"]


__all__ = ["autograde_preprocessors", "generate_preprocessors", "KeepCheckedOutputs", "StderrIsNotAnError", "IntegrityReport", "scan_source", "scan_notebook", "Finding",
           "grading_memory_limit", "grading_kernel_arguments"]
