"""Hints teach, they do not hand over the answer: no hint of an exercise holds a line of its solution, and
the code in its hints covers at most a third of the names its solution uses.

An exercise's hints are the `<details>` blocks of the markdown cells from its heading to its answer cell;
their code is what they put in backticks. Lines and names are compared normalised: whitespace and
comments dropped, and every name that could be a local variable (not after a dot, not a keyword
argument, not a module, builtin or the torch API) read as `_`, so renaming variables does not hide a line.
"""

from __future__ import annotations

import ast
import builtins
import io
import re
import textwrap
import tokenize
from pathlib import Path

import nbformat
import pytest

from tfcourse import manifest
from tfcourse.course.grade import SOLUTION_REGION as SOLUTION

ROOT = Path(__file__).resolve().parents[1]
DETAILS = re.compile(r"<details>(.*?)</details>", re.S)
CODE = re.compile(r"```[a-z]*\n(.*?)```|`([^`\n]+)`", re.S)
TOKEN = re.compile(r"[A-Za-z_]\w*|\d+(?:\.\d+)?(?:e-?\d+)?|\*\*|//|[-+*/@%<>=!]=?|\S")
# Names that mean the same thing in every answer: modules, builtins, keywords and constants.
KNOWN = {"torch", "nn", "F", "math", "np", "Tensor", "self", *dir(builtins),
         "if", "else", "for", "in", "return", "and", "or", "not", "is", "lambda", "while", "def", "class", "with",
         "as", "None", "True", "False", "yield", "break", "continue", "pass", "raise", "assert", "del", "from",
         "import", "elif", "try", "except", "finally", "global", "nonlocal"}
SHORTEST_LINE = 6  # tokens: shorter lines (`return out`, `x, y = batch`) say nothing an answer could copy
SHARE = 1 / 3  # of the solution's names, at most, in the code of its hints


def _tokens(code: str) -> list[str]:
    """Tokens with every name that could be a local variable read as `_` (after a dot: an attribute;
    before `=` but not `==`: a keyword argument; KNOWN: the same in every answer)."""
    raw = TOKEN.findall(code)
    out = []
    for i, token in enumerate(raw):
        is_name = re.fullmatch(r"[A-Za-z_]\w*", token) is not None
        attribute = i > 0 and raw[i - 1] == "."
        keyword = i + 1 < len(raw) and raw[i + 1] == "=" and (i == 0 or raw[i - 1] in "(,")
        out.append("_" if is_name and not (attribute or keyword or token in KNOWN) else token)
    return out


def _names(code: str) -> set[str]:
    return {t for t in TOKEN.findall(code) if re.fullmatch(r"[A-Za-z_]\w*", t)} - KNOWN


def _solution_lines(solution: str) -> list[list[str]]:
    """Each line of the solution, as tokens; a `return` or an assignment also by what it computes (a hint
    that shows the right-hand side shows the line)."""
    lines = []
    for line in solution.splitlines():
        tokens = _tokens(line)
        if tokens[:1] == ["return"]:
            tokens = tokens[1:]
        if "=" in tokens and all(t in {"_", ",", ".", "[", "]", "(", ")"} or t.isidentifier()
                                 for t in tokens[:tokens.index("=")]):
            tokens = tokens[tokens.index("=") + 1:]  # what is assigned, not to which name
        meaningful = [t for t in tokens if t != "_" and (t.isidentifier() or t[0].isdigit())]
        if len(tokens) >= SHORTEST_LINE and len(meaningful) >= 2:  # not `_(_, _)`: any call looks like that
            lines.append(tokens)
    return lines


def _given_names(answer_source: str) -> set[str]:
    """The names the stub gives away: the definitions' names and parameters, outside the solution."""
    stub = SOLUTION.sub(lambda region: f"{region.group(1)}pass", answer_source)  # as the learner's stub reads
    try:
        tree = ast.parse(stub)
    except SyntaxError:
        return set()
    given = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.FunctionDef, ast.ClassDef)):
            given.add(node.name)
        if isinstance(node, ast.arg):
            given.add(node.arg)
        if isinstance(node, ast.Attribute):
            given.add(node.attr)
    return given


def _contains(haystack: list[str], needle: list[str]) -> bool:
    return any(haystack[i:i + len(needle)] == needle for i in range(len(haystack) - len(needle) + 1))


def _exercise_cells(exercise: manifest.Exercise) -> tuple[str, str]:
    """(the hints of the exercise, the source of its answer cell)."""
    notebook = nbformat.read(ROOT / "solutions" / exercise.lesson / f"{exercise.lesson}.ipynb", as_version=4)
    answer = next(i for i, c in enumerate(notebook.cells)
                  if c.metadata.get("nbgrader", {}).get("grade_id") == exercise.answer_id)
    start = max(i for i, c in enumerate(notebook.cells[:answer]) if c.cell_type == "markdown"
                and any(manifest.EXERCISE_HEADING.match(line) for line in c.source.splitlines()))
    hints = "\n".join(block for c in notebook.cells[start:answer] if c.cell_type == "markdown"
                      for block in DETAILS.findall(c.source))
    return hints, notebook.cells[answer].source


def _without_comments(code: str) -> str:
    """`code` without its comments and strings (docstrings included): what an answer computes with."""
    kept = []
    try:
        for token in tokenize.generate_tokens(io.StringIO(textwrap.dedent(code)).readline):
            if token.type in (tokenize.COMMENT, tokenize.STRING):
                continue
            kept.append(token.string if token.type != tokenize.NEWLINE else "\n")
    except (tokenize.TokenError, IndentationError, SyntaxError):
        return "\n".join(line.split("#", 1)[0] for line in code.splitlines())
    return " ".join(kept).replace(" \n ", "\n")


def hint_problems(hints: str, answer_source: str) -> list[str]:
    """What in `hints` gives away the solution in `answer_source`: [] when nothing does."""
    solution = _without_comments("\n".join(body for _, body in SOLUTION.findall(answer_source)))
    fragments = [block or inline for block, inline in CODE.findall(hints)]
    problems = []
    hint_tokens = [_tokens(fragment) for fragment in fragments]
    for line in _solution_lines(solution):
        if any(_contains(tokens, line) for tokens in hint_tokens):
            problems.append(f"a hint holds what a line of the solution computes: {' '.join(line)!r}")
    wanted = _names(solution) - _given_names(answer_source)
    shown = set().union(*(_names(fragment) for fragment in fragments)) & wanted if fragments else set()
    if wanted and len(shown) > SHARE * len(wanted):
        problems.append(f"the hints' code names {len(shown)} of the {len(wanted)} names the solution uses "
                        f"({', '.join(sorted(shown))}): at most a third")
    return problems


def test_the_rule_finds_a_solution_line_and_a_giveaway_of_names():
    answer = ("def causal_mask(t_q, t_k=None, device=None):\n    ### BEGIN SOLUTION\n    if t_k is None:\n"
              "        t_k = t_q\n    return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)\n"
              "    ### END SOLUTION\n")
    copied = "<summary>Hint</summary>\n\n`torch.ones(n, m, dtype=torch.bool, device=device).tril(diagonal=m - n)`"
    assert any("holds what a line of the solution computes" in p for p in hint_problems(copied, answer))
    names = "`torch.ones(2, 4, dtype=torch.bool)` and `t.tril(diagonal=d)`"
    assert any("at most a third" in p for p in hint_problems(names, answer))
    pointer = "Look up `torch.tril`: it keeps a triangle, and one of its arguments shifts it."
    assert hint_problems(pointer, answer) == []


@pytest.mark.parametrize("exercise", manifest.exercises(), ids=lambda e: f"{e.lesson}:{e.answer_id}")
def test_no_hint_hands_over_the_answer(exercise):
    hints, answer = _exercise_cells(exercise)
    problems = hint_problems(hints, answer)
    assert not problems, f"{exercise.lesson}, {exercise.title}: " + "; ".join(problems)
