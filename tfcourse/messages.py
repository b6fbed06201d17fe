"""What the package says to the learner, in the learner's language.

The English messages are written where they are raised, as ever; their other languages live in one
catalogue per language (`messages_zh.json` beside this file), as templates: the English message with
each value it shows as {1}, {2} … (in the order the English shows them) and a literal brace doubled,
and its translation, which may put the values in any order:

    {"en": "{1}: your output equals {2}", "zh": "{1}：你的输出等于{2}"}

`say(message)` gives the message in the lesson's language: the first template whose English matches it
all, with each value itself translated when the catalogue has it (a mistake's description inside
"your output equals …"). A message with no form in the language stays English (a test lists those:
`python tools/messages.py`).

The language is the lesson's: its setup cell says it (`setup(seed, language="zh")`, so it works under
nbgrader, where a kernel cannot read its notebook), and $TFCOURSE_LANGUAGE overrides it.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import re
from collections.abc import Iterator
from pathlib import Path

LANGUAGES = ("en", "zh")  # "en": the source; "zh": the Chinese edition, made from it
_lesson_language = ["en"]  # what the lesson's setup cell said
_forced: list[str] = []  # languages set by in_language(), the innermost last
_FIELD = re.compile(r"\{\{|\}\}|\{(\d+)\}")  # a doubled brace, or a value's place


def lesson_language() -> str:
    """The language this kernel speaks to the learner: $TFCOURSE_LANGUAGE if set, else the lesson's own
    (inside `in_language`, that one's)."""
    if _forced:
        return _forced[-1]
    chosen = os.environ.get("TFCOURSE_LANGUAGE") or _lesson_language[0]
    return chosen if chosen in LANGUAGES else "en"


@contextlib.contextmanager
def in_language(language: str) -> Iterator[None]:
    """Speak `language` inside the block, whatever the lesson's: the package reads a check's English
    lines (a composite's ✔ line) before it says them in the learner's language."""
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")
    _forced.append(language)
    try:
        yield
    finally:
        _forced.pop()


def set_lesson_language(language: str) -> None:
    if language not in LANGUAGES:
        raise ValueError(f"language must be one of {LANGUAGES}, got {language!r}")
    _lesson_language[0] = language


def plain_text(message: str) -> str:
    """The message without Markdown: *emphasis* loses its asterisks and `code` becomes 'code'
    (a traceback shows text as it is). A lone * (2 * d) stays."""
    # Latin letters and digits only: a Chinese character right before or after the asterisks is still
    # text around *emphasis* (Python counts 汉字 as \w, as word characters).
    message = re.sub(r"(?<![A-Za-z0-9_*])\*(?=\S)([^*\n]*?\S)\*(?![A-Za-z0-9_*])", r"\1", message)
    return re.sub(r"`([^`\n]+)`", r"'\1'", message)


def catalogue_path(language: str) -> Path:
    return Path(__file__).with_name(f"messages_{language}.json")


def load_catalogue(language: str) -> list[dict[str, str]]:
    """The language's templates, [{"en": ..., language: ...}, ...] (an untranslated one has "")."""
    path = catalogue_path(language)
    return json.loads(path.read_text(encoding="utf-8"))["messages"] if path.exists() else []


class Catalogue:
    """Templates compiled for matching: exact phrases in a dict, the rest as patterns, the one with the
    most fixed text first (so "expected shape {2}" wins over a looser template that also matches)."""

    def __init__(self, entries: list[dict[str, str]], language: str) -> None:
        self.exact: dict[str, str] = {}
        self.patterns: list[tuple[re.Pattern, str]] = []
        for entry in entries:
            translated = entry.get(language, "")
            if not translated:
                continue
            english = plain_text(entry["en"])
            if not re.search(r"\{\d+\}", english):
                self.exact[english.replace("{{", "{").replace("}}", "}")] = translated
            else:
                self.patterns.append((template_pattern(english), translated))
        self.patterns.sort(key=lambda item: -len(_FIELD.sub("", item[0].pattern)))

    def translate(self, message: str) -> str:
        if message in self.exact:
            return plain_text(self.exact[message].replace("{{", "{").replace("}}", "}"))
        for pattern, translated in self.patterns:
            match = pattern.fullmatch(message)
            if match:
                values = {int(name[1:]): self.translate(value) for name, value in match.groupdict().items()}
                return plain_text(fill(translated, values))
        return message


def template_pattern(english: str) -> re.Pattern:
    """"{1}: expected shape {2}" -> a regex whose groups v1, v2 catch the values."""
    parts, seen, end = [], set(), 0
    for field in _FIELD.finditer(english):
        parts.append(re.escape(english[end:field.start()]))
        if field.group(1) is None:
            parts.append(re.escape(field.group(0)[0]))
        elif field.group(1) in seen:  # the same value shown twice
            parts.append(f"(?P=v{field.group(1)})")
        else:
            seen.add(field.group(1))
            parts.append(f"(?P<v{field.group(1)}>.+?)")
        end = field.end()
    parts.append(re.escape(english[end:]))
    return re.compile("".join(parts), re.S)


def fill(template: str, values: dict[int, str]) -> str:
    """A translated template with its values put back (and its doubled braces single)."""
    return _FIELD.sub(lambda f: f.group(0)[0] if f.group(1) is None else values[int(f.group(1))], template)


@functools.lru_cache(maxsize=None)
def catalogue(language: str) -> Catalogue:
    return Catalogue(load_catalogue(language), language)


def say(message: str, language: str | None = None) -> str:
    """`message` (an English message, Markdown or plain) in the learner's language, as plain text there."""
    language = language or lesson_language()
    if language == "en":
        return message
    return catalogue(language).translate(plain_text(message))
