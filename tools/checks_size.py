"""What the checks' lines are made of: the figures behind the checks' line budget.

    python tools/checks_size.py                  # every module of tfcourse/checks, then the total
    python tools/checks_size.py tfcourse/ffn.py  # any Python files

Each line falls in one kind, the first that fits:

    blank      nothing but whitespace
    comment    a line that starts with #
    docstring  part of a module's, class's or function's docstring
    message    a line that is mostly text shown to the learner: 60 % or more of its characters are
               string literals (a mistake's description, a CheckFailed message, a ✔ line, a planted
               bug's source)
    code       everything else
"""

from __future__ import annotations

import argparse
import ast
import io
import sys
import tokenize
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
KINDS = ("blank", "comment", "docstring", "message", "code")
MESSAGE_SHARE = 0.6  # of a line's characters (leading and trailing spaces left out)
# The tokens a string literal is made of: one STRING token, or (Python 3.12+) an f-string's pieces.
STRING_TOKENS = {tokenize.STRING} | {getattr(tokenize, name) for name in
                                     ("FSTRING_START", "FSTRING_MIDDLE", "FSTRING_END") if hasattr(tokenize, name)}


def _docstring_lines(tree: ast.Module) -> set[int]:
    """The 0-based numbers of the lines that docstrings take."""
    lines: set[int] = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) \
                and ast.get_docstring(node, clean=False) is not None:
            first = node.body[0]
            lines.update(range(first.lineno - 1, first.end_lineno))
    return lines


def _string_characters(source: str, lines: list[str]) -> list[int]:
    """For each line, how many of its (stripped) characters belong to string literals."""
    counts = [0] * len(lines)
    for token in tokenize.generate_tokens(io.StringIO(source).readline):
        if token.type not in STRING_TOKENS:
            continue
        (start_row, start_col), (end_row, end_col) = token.start, token.end
        if start_row == end_row:
            counts[start_row - 1] += end_col - start_col
        else:  # a literal over several lines: each line it spans is all text
            for row in range(start_row, end_row + 1):
                counts[row - 1] += len(lines[row - 1].strip())
    return counts


def line_kinds(source: str) -> list[str]:
    """The kind of each line of `source` (see the module's docstring)."""
    lines = source.splitlines()
    docstrings = _docstring_lines(ast.parse(source))
    strings = _string_characters(source, lines)
    kinds = []
    for number, line in enumerate(lines):
        text = line.strip()
        if not text:
            kinds.append("blank")
        elif text.startswith("#"):
            kinds.append("comment")
        elif number in docstrings:
            kinds.append("docstring")
        elif strings[number] >= MESSAGE_SHARE * len(text):
            kinds.append("message")
        else:
            kinds.append("code")
    return kinds


def table(paths: list[Path]) -> str:
    """One row per file, its lines by kind, then the total."""
    header = f"{'file':<34}{'lines':>7}" + "".join(f"{kind:>11}" for kind in KINDS)
    rows, total = [header], dict.fromkeys(KINDS, 0)
    for path in paths:
        kinds = line_kinds(path.read_text(encoding="utf-8"))
        counts = {kind: kinds.count(kind) for kind in KINDS}
        for kind in KINDS:
            total[kind] += counts[kind]
        name = str(path.relative_to(ROOT)) if path.is_relative_to(ROOT) else str(path)
        rows.append(f"{name:<34}{len(kinds):>7}" + "".join(f"{counts[kind]:>11}" for kind in KINDS))
    rows.append(f"{'total':<34}{sum(total.values()):>7}" + "".join(f"{total[kind]:>11}" for kind in KINDS))
    return "\n".join(rows)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("files", nargs="*", type=Path, help="Python files (default: every module of tfcourse/checks)")
    args = parser.parse_args(argv)
    paths = [path.resolve() for path in args.files] or sorted((ROOT / "tfcourse" / "checks").glob("*.py"))
    print(table(paths))
    return 0


if __name__ == "__main__":
    sys.exit(main())
