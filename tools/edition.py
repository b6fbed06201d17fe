"""The Chinese edition (中文版), made from the English lessons and their translations: one source.

    python tools/edition.py            # make zh/solutions and zh/notebooks for every translated lesson
    python tools/edition.py --check    # list the missing and stale translations (a test does the same)

The README is translated the same way, one section (from a `## ` heading to the next) at a time:
translations/<language>/README.json gives README.<language>.md.

translations/zh/<lesson>.json holds, for every markdown cell of solutions/<lesson>/<lesson>.ipynb (by its
cell id), the Chinese text and a hash of the English text it translates: when the English changes, the
translation is stale until it is updated along with its hash. A lesson's code cells are the English
ones; the one that calls setup() also says the lesson's language. zh/ is a course folder of its own
(zh/nbgrader_config.py), so plain nbgrader runs a Chinese class, and `tfcourse grade` grades a Chinese
notebook against zh/solutions.
"""

from __future__ import annotations

import argparse
import copy
import hashlib
import json
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import nbformat

ROOT = Path(__file__).resolve().parents[1]
TRANSLATIONS = ROOT / "translations"
SETUP_CALL = re.compile(r"\bsetup\(seed=(\d+)\)")


def text_hash(text: str) -> str:
    """What a translation records of the English text it translates."""
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:16]


def translation_path(lesson: str, language: str) -> Path:
    return TRANSLATIONS / language / f"{lesson}.json"


def translated_lessons(language: str) -> list[str]:
    return sorted(p.stem for p in (TRANSLATIONS / language).glob("[0-9][0-9]_*.json"))


def load_translation(lesson: str, language: str) -> dict[str, dict[str, str]]:
    """cell id -> {"english": hash of the English text, "text": the translation}."""
    return json.loads(translation_path(lesson, language).read_text(encoding="utf-8"))["cells"]


def english_lesson(lesson: str) -> nbformat.NotebookNode:
    return nbformat.read(ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)


def problems(lesson: str, language: str) -> list[str]:
    """Every markdown cell of the English lesson without a translation, or whose translation is older than
    its English text, and every translation of a cell the lesson no longer has."""
    cells, found = load_translation(lesson, language), []
    english = {cell.id: cell.source for cell in english_lesson(lesson).cells if cell.cell_type == "markdown"}
    for cell_id, text in english.items():
        if cell_id not in cells:
            found.append(f"{lesson}: markdown cell {cell_id} has no {language} translation: {text[:60]!r}")
        elif cells[cell_id]["english"] != text_hash(text):
            found.append(f"{lesson}: the {language} translation of cell {cell_id} is stale (its English changed): "
                         f"{text[:60]!r}")
    found += [f"{lesson}: translation of cell {cell_id}, which the lesson no longer has" for cell_id in cells
              if cell_id not in english]
    return found


def glossary(language: str) -> list[dict]:
    """The edition's terms (translations/<language>/glossary.json), longest English term first."""
    terms = json.loads((TRANSLATIONS / language / "glossary.json").read_text(encoding="utf-8"))["terms"]
    return sorted(terms, key=lambda term: -len(term["en"]))


def _term_pattern(english: str) -> re.Pattern:
    """A term as prose writes it: any case, its plural, with a space, a hyphen or nothing between its words
    ("warm-up", "warm up", "warmup")."""
    words = [re.escape(word) for word in re.split(r"[\s-]+", english)]
    last = words[-1]
    plural = last[:-1] + "(?:y|ies)" if last.endswith("y") else last + "(?:s|es)?"
    return re.compile(r"\b" + r"[\s-]*".join(words[:-1] + [plural]) + r"\b", re.IGNORECASE)


def _prose(markdown: str) -> str:
    """Markdown without what is not translated: code blocks, code spans, math, HTML tags, link targets."""
    for pattern in (r"```.*?```", r"\$\$.*?\$\$", r"`[^`]*`", r"\$[^$]*\$", r"<[^>]+>", r"\]\([^)]*\)"):
        markdown = re.sub(pattern, " ", markdown, flags=re.S)
    return markdown


def term_problems(english: str, translated: str, terms: list[dict]) -> list[str]:
    """Where the English uses a glossary term and the translation lacks its Chinese term, and every form the
    glossary says to avoid. A longer term is matched first and hides the shorter ones inside it
    ("rotary position embedding" is not also an "embedding")."""
    prose, found = _prose(english), []
    for term in terms:
        pattern = _term_pattern(term["en"])
        if term.get("check", True) and pattern.search(prose):
            prose = pattern.sub(" ", prose)
            if not any(form in translated for form in [term["zh"], *term.get("also", [])]):
                found.append(f"uses {term['en']!r} but not {term['zh']!r}")
        found += [f"says {form!r} where the glossary has {term['zh']!r} ({term['en']})"
                  for form in term.get("avoid", []) if form in translated]
    return found


def glossary_problems(lesson: str, language: str) -> list[str]:
    """term_problems for every translated markdown cell of a lesson."""
    cells, terms = load_translation(lesson, language), glossary(language)
    return [f"{lesson}: cell {cell.id} {problem}" for cell in english_lesson(lesson).cells
            if cell.cell_type == "markdown" and cell.id in cells
            for problem in term_problems(cell.source, cells[cell.id]["text"], terms)]


def readme_sections(text: str) -> dict[str, str]:
    """The README cut at its `## ` headings (not at lines in code blocks), each section keyed by its heading
    in lower case, dashed ("quick-start"); the part above the first heading is "top"."""
    sections, key, fenced = {"top": []}, "top", False
    for line in text.splitlines(keepends=True):
        fenced ^= line.startswith("```")
        if not fenced and line.startswith("## "):
            key = re.sub(r"[^\w]+", "-", line[3:].strip().lower()).strip("-")
            if key in sections:
                raise ValueError(f"README: two sections are called {line.strip()!r}")
            sections[key] = []
        sections[key].append(line)
    return {key: "".join(lines) for key, lines in sections.items()}


def readme_problems(language: str) -> list[str]:
    """As problems(), for the README's sections."""
    path = translation_path("README", language)
    if not path.exists():
        return [f"README.md has no {language} translation ({path.relative_to(ROOT)})"]
    cells = json.loads(path.read_text(encoding="utf-8"))["sections"]
    english = readme_sections((ROOT / "README.md").read_text(encoding="utf-8"))
    found = [f"README: section {key!r} has no {language} translation" for key in english if key not in cells]
    found += [f"README: the {language} translation of section {key!r} is stale (its English changed)"
              for key, text in english.items() if key in cells and cells[key]["english"] != text_hash(text)]
    found += [f"README: translation of section {key!r}, which the README no longer has" for key in cells
              if key not in english]
    return found


def translated_readme(language: str) -> str:
    """README.<language>.md: the translated sections in the English README's order."""
    cells = json.loads(translation_path("README", language).read_text(encoding="utf-8"))["sections"]
    english = readme_sections((ROOT / "README.md").read_text(encoding="utf-8"))
    return "".join(cells[key]["text"] for key in english)


def translated_notebook(lesson: str, language: str) -> nbformat.NotebookNode:
    """The English solution notebook with its markdown in `language` and its setup() call saying so."""
    notebook = copy.deepcopy(english_lesson(lesson))
    cells = load_translation(lesson, language)
    calls = 0
    for cell in notebook.cells:
        if cell.cell_type == "markdown":
            cell.source = cells[cell.id]["text"]
        elif cell.cell_type == "code" and SETUP_CALL.search(cell.source):
            cell.source, n = SETUP_CALL.subn(rf'setup(seed=\1, language="{language}")', cell.source)
            calls += n
    if calls != 1:
        raise ValueError(f"{lesson}: expected one setup(seed=N) call to give the language to, found {calls}")
    notebook.metadata.setdefault("tfcourse", {})["language"] = language
    return notebook


def write_edition(language: str, out: Path) -> list[Path]:
    """out/solutions/<lesson> (the translated notebook and the lesson's other files) and out/notebooks/<lesson>
    (the student version, by nbgrader in the edition's course) for every translated lesson."""
    written = []
    for lesson in translated_lessons(language):
        folder = out / "solutions" / lesson
        if folder.exists():
            shutil.rmtree(folder)
        shutil.copytree(ROOT / "solutions" / lesson, folder, ignore=shutil.ignore_patterns("*.ipynb"))
        nbformat.write(translated_notebook(lesson, language), folder / f"{lesson}.ipynb")
        written.append(folder / f"{lesson}.ipynb")
    with tempfile.TemporaryDirectory() as tmp:
        subprocess.run([sys.executable, "-m", "nbgrader", "generate_assignment", "*", "--no-db", "--force",
                        f"--CourseDirectory.root={out}", f"--CourseDirectory.release_directory={tmp}",
                        "--log-level=WARN"], cwd=out, check=True)
        for lesson in translated_lessons(language):
            target = out / "notebooks" / lesson
            if target.exists():
                shutil.rmtree(target)
            shutil.copytree(Path(tmp) / lesson, target)
            written.append(target / f"{lesson}.ipynb")
    return written


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--language", default="zh")
    parser.add_argument("--check", action="store_true", help="only list missing and stale translations")
    args = parser.parse_args(argv)
    found = [problem for lesson in translated_lessons(args.language) for problem in problems(lesson, args.language)]
    found += readme_problems(args.language)
    for problem in found:
        print(problem)
    if found or args.check:
        return 1 if found else 0
    for path in write_edition(args.language, ROOT / args.language):
        print(f"wrote {path.relative_to(ROOT)}")
    readme = ROOT / f"README.{args.language}.md"
    readme.write_text(translated_readme(args.language), encoding="utf-8")
    print(f"wrote {readme.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
