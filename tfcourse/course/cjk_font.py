"""Chinese that reads on a machine without a Chinese font: the bundled Noto Sans CJK SC in web pages.

The ``mplfonts`` package (a dependency of the course) ships Noto Sans CJK SC, which the plots already
use (``tfcourse.course.plots``). A browser does not see that file: with no system CJK font it draws
each Chinese character as a box. This module gives web pages the same font:

- ``lab_stylesheet``: the CSS the server extension (``tfcourse.course.lab``) adds to JupyterLab's
  pages, with the font file served by the extension;
- ``with_embedded_font``: a feedback report with a subset of the font, only the characters it uses,
  embedded in the HTML (a report is read from a file, with no server behind it).

In both, the family comes first in each of the page's font stacks, and ``unicode-range`` limits it
to CJK characters: Latin text keeps the page's own fonts, Chinese always takes this one. (Last in the
stacks, where a fallback would usually go, Chromium drew boxes: after DejaVu Sans, the usual sans-serif
font of a bare Linux machine, it did not look further down the stack for the characters DejaVu lacks,
though it did after DejaVu Serif or Liberation Sans.) The font's licence, the SIL Open Font License,
and its notice are in ``fonts/OFL-NOTICE.txt`` next to this file.
"""

from __future__ import annotations

import base64
import functools
import importlib.util
import io
import re
from pathlib import Path

from .plots import BUNDLED_CJK_FONT  # the file inside the mplfonts package

# The name pages know the font by: not "Noto Sans CJK SC", so that it can never shadow a system
# install of the full font (a page's @font-face replaces a local font of the same name).
FAMILY = "tfcourse Noto Sans CJK SC"

LICENCE_NOTICE = Path(__file__).resolve().parent / "fonts" / "OFL-NOTICE.txt"

# Code points the font is used for: CJK radicals, symbols and punctuation (、。「」), kana and
# bopomofo, the unified ideographs (with extension A and the supplementary planes' extensions),
# compatibility ideographs and forms, and full-width forms (，：！). Nothing Latin.
CJK_RANGES = (
    (0x2E80, 0x33FF),
    (0x3400, 0x4DBF),
    (0x4E00, 0x9FFF),
    (0xF900, 0xFAFF),
    (0xFE30, 0xFE4F),
    (0xFF00, 0xFFEF),
    (0x20000, 0x3134F),
)

# JupyterLab 4's own font stacks (its themes' :root variables); the course's family is put in front
# of each. tests/test_lab.py checks them against the installed JupyterLab's light theme.
JUPYTERLAB_FONT_STACKS = {
    "--jp-ui-font-family": 'system-ui, -apple-system, blinkmacsystemfont, "Segoe UI", helvetica, arial, '
                           'sans-serif, "Apple Color Emoji", "Segoe UI Emoji", "Segoe UI Symbol"',
    "--jp-content-font-family": 'system-ui, -apple-system, blinkmacsystemfont, "Segoe UI", helvetica, arial, '
                                'sans-serif, "Apple Color Emoji", "Segoe UI Emoji", "Segoe UI Symbol"',
    # --jp-code-font-family (editors, outputs) is var(--jp-code-font-family-default) unless the
    # learner picks a code font in the settings; the prompts use the default directly.
    "--jp-code-font-family-default": 'menlo, consolas, "DejaVu Sans Mono", monospace',
}


@functools.cache
def bundled_font() -> Path | None:
    """The font file of the installed ``mplfonts`` package, or ``None`` without it.

    Found without importing the package, whose import sets up matplotlib (nothing a web page needs).
    """
    spec = importlib.util.find_spec("mplfonts")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_CJK_FONT
    return path if path.is_file() else None


# One character class of all the ranges: a feedback report runs to hundreds of thousands of characters,
# and testing each one against the ranges in Python took ~0.5 s a pass.
_CJK = re.compile("[" + "".join(f"\\U{low:08x}-\\U{high:08x}" for low, high in CJK_RANGES) + "]")


def is_cjk(character: str) -> bool:
    return _CJK.fullmatch(character) is not None


def cjk_characters(text: str) -> str:
    """The distinct CJK characters of ``text``, in code point order."""
    return "".join(sorted(set(_CJK.findall(text))))


def unicode_range() -> str:
    """``CJK_RANGES`` as the value of a CSS ``unicode-range``."""
    return ", ".join(f"U+{low:X}-{high:X}" for low, high in CJK_RANGES)


def font_face(source: str) -> str:
    """An @font-face rule for the course's family; ``source`` is the ``src`` descriptor's value.

    ``font-display: block``: while the font loads (the first time JupyterLab opens; then the browser
    has it), Chinese is invisible for up to 3 s rather than boxes; Latin text never waits for it.
    """
    return (f'@font-face {{\n  font-family: "{FAMILY}";\n  src: {source};\n  font-weight: 400;\n'
            f'  font-style: normal;\n  font-display: block;\n  unicode-range: {unicode_range()};\n}}\n')


def lab_stylesheet(font_url: str) -> str:
    """JupyterLab's CSS for the font: the @font-face, and the family in front of JupyterLab's font stacks.

    ``:root:root`` outranks the theme's ``:root``, which JupyterLab loads after this stylesheet; a
    font the learner sets in JupyterLab's settings is an inline style on the page, and wins.
    """
    face = font_face(f'url("{font_url}") format("opentype")')
    stacks = "".join(f'  {variable}: "{FAMILY}", {stack};\n' for variable, stack in JUPYTERLAB_FONT_STACKS.items())
    return ("/* Noto Sans CJK SC from the mplfonts package, SIL Open Font License 1.1: see the course's\n"
            "   tfcourse/course/fonts/OFL-NOTICE.txt. Only for CJK characters (unicode-range). */\n"
            f"{face}:root:root {{\n{stacks}}}\n")


def woff2_available() -> bool:
    """fontTools writes WOFF2 (the smallest) only with the ``brotli`` package; WOFF needs only zlib."""
    return importlib.util.find_spec("brotli") is not None


def subset_font(characters: str, path: Path) -> tuple[bytes, str]:
    """The font at ``path`` cut down to ``characters``: the file's bytes and its format (woff2 or woff).

    Without OpenType layout features (horizontal Chinese needs none: each character is one glyph of
    the cmap), which halves the size; the name records, the copyright and licence among them, stay.
    """
    from fontTools import subset
    from fontTools.ttLib import TTFont

    options = subset.Options(layout_features=[], name_IDs=["*"], flavor="woff2" if woff2_available() else "woff")
    font = TTFont(path, recalcBBoxes=False)  # recomputing the bounding boxes would double the time
    subsetter = subset.Subsetter(options)
    subsetter.populate(unicodes=[ord(c) for c in characters])
    subsetter.subset(font)
    buffer = io.BytesIO()
    subset.save_font(font, buffer, options)
    return buffer.getvalue(), options.flavor


_STYLE = re.compile(r"<style[^>]*>(.*?)</style>", re.DOTALL | re.IGNORECASE)
_COMMENT = re.compile(r"/\*.*?\*/", re.DOTALL)
# A font-family declaration, not a custom property such as --jp-code-font-family.
_FONT_FAMILY = re.compile(r"(?<![-\w])font-family\s*:\s*([^;}]+)")
_HEAD_END = re.compile(r"</head\s*>", re.IGNORECASE)
_NOT_A_STACK = {"inherit", "initial", "unset", "revert", "revert-layer"}


def _top_level_rules(css: str) -> list[tuple[str, str]]:
    """The (prelude, block) pairs of a stylesheet's top-level rules; an @media's block holds rules."""
    rules, depth, start, block_start = [], 0, 0, 0
    for index, character in enumerate(css):
        if character == "{":
            if depth == 0:
                prelude, block_start = css[start:index].strip(), index + 1
            depth += 1
        elif character == "}" and depth:
            depth -= 1
            if depth == 0:
                rules.append((prelude, css[block_start:index]))
                start = index + 1
    return rules


def font_stack_rules(css: str) -> str:
    """For each top-level rule of ``css`` that names a font stack, the same selector with the course's
    family in front of that stack: placed after ``css``, it adds the family and changes nothing else.
    At-rules (@font-face, @media ...) are left as they are."""
    rules = []
    for selector, block in _top_level_rules(_COMMENT.sub("", css)):
        if selector.startswith("@"):
            continue
        for stack in _FONT_FAMILY.findall(block):
            stack, important = stack.replace("!important", "").strip(), "!important" in stack
            if stack.lower() not in _NOT_A_STACK:
                rules.append(f'{selector} {{ font-family: "{FAMILY}", {stack}{" !important" if important else ""}; }}')
    return "\n".join(rules)


def embedded_font_style(html: str, path: Path, characters: str) -> str:
    """A ``<style>`` with the font at ``path`` cut to ``characters`` (the CJK characters of ``html``),
    as a data URL, and the family put in front of the page's font stacks."""
    data, flavor = cached_subset(characters, path)
    url = f"data:font/{flavor};base64,{base64.b64encode(data).decode('ascii')}"
    face = font_face(f'url({url}) format("{flavor}")')
    stacks = font_stack_rules("\n".join(_STYLE.findall(html)))
    return ("<style>\n/* Noto Sans CJK SC (SIL Open Font License 1.1), the characters of this page only. */\n"
            f"{face}{stacks}\n</style>\n")


def cached_subset(characters: str, path: Path) -> tuple[bytes, str]:
    """subset_font, kept in the course's cache: a learner grading a lesson again gets the same
    characters, and cutting the font takes about half a second. The key covers the characters, the
    font file and the fontTools that cut it; an unwritable cache only means cutting it each time."""
    import hashlib
    import os

    import fontTools

    from ..cache import cache_dir

    stat = path.stat()
    key = hashlib.sha256("\0".join([characters, str(path), str(stat.st_size), str(stat.st_mtime_ns),
                                     fontTools.version, str(woff2_available())]).encode()).hexdigest()[:24]
    folder = cache_dir() / "font-subsets"
    for flavor in ("woff2", "woff"):
        if (folder / f"{key}.{flavor}").is_file():
            return (folder / f"{key}.{flavor}").read_bytes(), flavor
    data, flavor = subset_font(characters, path)
    try:
        folder.mkdir(parents=True, exist_ok=True)
        partial = folder / f".{key}.{flavor}.{os.getpid()}"
        partial.write_bytes(data)
        partial.replace(folder / f"{key}.{flavor}")  # atomic: another grader sees all of it or none
    except OSError:
        pass
    return data, flavor


def with_embedded_font(html: str) -> str:
    """``html`` (a page with a ``</head>``) that draws its Chinese without a system font; unchanged if
    it has no CJK character, or if the font is not installed (then it needs a system font, as before)."""
    path, characters = bundled_font(), cjk_characters(html)
    if path is None or not characters:
        return html
    head_end = _HEAD_END.search(html)
    if head_end is None:
        raise ValueError("with_embedded_font needs an HTML page with a </head> to put the font's <style> in")
    return html[:head_end.start()] + embedded_font_style(html, path, characters) + html[head_end.start():]
