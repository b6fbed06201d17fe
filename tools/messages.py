"""The package's messages to the learner, read from its source, against their catalogue of translations.

    python tools/messages.py             # list the messages with no Chinese form, or whose form is stale
    python tools/messages.py --add       # add the missing ones to tfcourse/messages_zh.json, untranslated

A message is a string the package shows the learner: what a check raises (CheckFailed, OffLimitsError),
its ✔ line (passed, an Exercise's `success`), a mistake's description (the keys of a `mistakes` dict:
"your output equals <description>"), and every string given to `tfcourse.messages.say`. Each becomes a
template: its fixed text, with {1}, {2} … for the values an f-string puts in (and a literal brace
doubled); an Exercise's `success` fields ({n}, {name}) are numbered the same way.
"""

from __future__ import annotations

import argparse
import ast
import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tfcourse.messages import catalogue_path, load_catalogue  # noqa: E402

MESSAGE_CALLS = {"CheckFailed", "OffLimitsError", "passed", "say"}
SUCCESS_FIELDS = {"success", "hidden_note"}  # an Exercise's ✔ line and its hidden-case note


def _template(node: ast.AST) -> str | None:
    """A string expression (a literal, an f-string, or a sum of them) as a template; None for any other."""
    parts: list[tuple[str, str]] = []

    def walk(n: ast.AST, inside_a_sum: bool = False) -> bool:
        if isinstance(n, ast.Constant) and isinstance(n.value, str):
            parts.append(("text", n.value))
        elif isinstance(n, ast.JoinedStr):
            parts.extend(("text", v.value) if isinstance(v, ast.Constant) else ("value", "") for v in n.values)
        elif isinstance(n, ast.BinOp) and isinstance(n.op, ast.Add):
            return walk(n.left, True) and walk(n.right, True)
        elif inside_a_sum:  # "..." + str(y): a value
            parts.append(("value", ""))
        else:
            return False
        return True

    if not walk(node) or all(kind == "value" for kind, _ in parts):
        return None
    template, count = "", 0
    for kind, text in parts:
        if kind == "text":
            template += text.replace("{", "{{").replace("}", "}}")
        else:
            count += 1
            template += "{%d}" % count
    return template


def _format_template(text: str) -> str:
    """An Exercise's `success` ("... on {n} inputs", a str.format template) numbered like the others."""
    names: list[str] = []

    def number(field: re.Match) -> str:
        if field.group(0) in ("{{", "}}"):
            return field.group(0)
        if field.group(1) not in names:
            names.append(field.group(1))
        return "{%d}" % (names.index(field.group(1)) + 1)

    return re.sub(r"\{\{|\}\}|\{(\w+)(?:[:!][^{}]*)?\}", number, text)  # {n}, and {n:,} with a format spec


def _says_something(template: str) -> bool:
    """Not a value passed on ("{1}") or a bare symbol: at least one word of fixed text."""
    return bool(re.search(r"[A-Za-z]{3}", re.sub(r"\{\d+\}", "", template)))


def _dict_keys(node: ast.AST) -> list[ast.AST]:
    return [key for key in node.keys if key is not None] if isinstance(node, ast.Dict) else []


def _messages_in(tree: ast.AST) -> list[tuple[str, int]]:
    found: list[tuple[ast.AST | str, int]] = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            name = getattr(node.func, "id", None) or getattr(node.func, "attr", None)
            if name in MESSAGE_CALLS and node.args:
                found.append((node.args[0], node.lineno))
            if name == "Exercise" and len(node.args) >= 3:
                found.append((("format", node.args[2]), node.lineno))
            if name == "update" and "mistake" in ast.unparse(node.func) and node.args:  # mistakes.update({...})
                found += [(key, node.lineno) for key in _dict_keys(node.args[0])]
            for keyword in node.keywords:
                if keyword.arg in SUCCESS_FIELDS:
                    found.append((("format", keyword.value), node.lineno))
                if keyword.arg == "mistakes":
                    found += [(key, node.lineno) for key in _dict_keys(keyword.value)]
        elif isinstance(node, (ast.Assign, ast.AnnAssign)):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target]
            for target in targets:
                written = ast.unparse(target)
                if "mistake" in written:
                    found += [(key, node.lineno) for key in _dict_keys(node.value)]
                if isinstance(target, ast.Subscript) and "mistake" in ast.unparse(target.value):
                    found.append((target.slice, node.lineno))
                if written in SUCCESS_FIELDS and node.value is not None:
                    found.append((("format", node.value), node.lineno))
        elif isinstance(node, ast.FunctionDef) and "mistake" in node.name:
            found += [(key, node.lineno) for ret in ast.walk(node) if isinstance(ret, ast.Return)
                      for key in _dict_keys(ret.value)]
    templates = []
    for what, line in found:
        if isinstance(what, tuple):  # a str.format template
            literal = what[1]
            if isinstance(literal, ast.Constant) and isinstance(literal.value, str):
                templates.append((_format_template(literal.value), line))
        elif (template := _template(what)) is not None:
            templates.append((template, line))
    return [(template, line) for template, line in templates if _says_something(template)]


def templates() -> dict[str, str]:
    """Every message template in the package -> where it is first written ("tfcourse/checks/ffn.py:66")."""
    found: dict[str, str] = {}
    for path in sorted((ROOT / "tfcourse").rglob("*.py")):
        for template, line in _messages_in(ast.parse(path.read_text(encoding="utf-8"))):
            found.setdefault(template, f"{path.relative_to(ROOT)}:{line}")
    return found


def _values(template: str) -> set[str]:
    return set(re.findall(r"\{(\d+)\}", template))


def problems(language: str = "zh", files: tuple[str, ...] | None = None) -> list[str]:
    """Messages with no translation (of the package's files named in `files`, all if None), translations
    that lose or invent a value, and translations of messages the package no longer has."""
    entries = {entry["en"]: entry.get(language, "") for entry in load_catalogue(language)}
    found = []
    for template, where in templates().items():
        if files is not None and where.split(":")[0] not in files:
            continue
        if not entries.get(template):
            found.append(f"{where}: no {language} form for {template!r}")
        elif _values(entries[template]) != _values(template):
            found.append(f"{where}: the {language} form of {template!r} shows the values "
                         f"{sorted(_values(entries[template]))}, the English {sorted(_values(template))}")
    known = templates()
    found += [f"{catalogue_path(language).name}: {english!r} is no message of the package any more"
              for english in entries if english not in known]
    return found


def add_missing(language: str = "zh") -> int:
    """Put each message the catalogue lacks into it, untranslated, and drop the ones the package lost."""
    entries = {entry["en"]: entry for entry in load_catalogue(language)}
    known = templates()
    kept = [{"en": english, language: entries.get(english, {}).get(language, "")} for english in known]
    added = sum(english not in entries for english in known)
    catalogue_path(language).write_text(json.dumps({"messages": kept}, ensure_ascii=False, indent=1) + "\n",
                                        encoding="utf-8")
    return added


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--language", default="zh")
    parser.add_argument("--add", action="store_true", help="add the missing messages, untranslated")
    args = parser.parse_args(argv)
    if args.add:
        print(f"added {add_missing(args.language)} messages to {catalogue_path(args.language).name}")
    found = problems(args.language)
    print("\n".join(found) if found else f"every message has a {args.language} form")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main())
