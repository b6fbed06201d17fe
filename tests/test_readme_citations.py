"""Every README section the code cites exists: a docstring or a lesson that says (README, "Some
section") points at a heading of README.md, so a renamed or never-written section fails here.

Scanned: every .py file under tfcourse/ and tools/, and every cell of every solution notebook. The
forms of citation recognised (the first is the one the code uses):

    (README, "Weight initialisation")      README.md, "Section"       README's "Section"
    (see README: Weight initialisation)   (README: Section)          README.md#weight-initialisation

Another project's README ("nanoGPT's README, ...") and another file's (deploy/README.md) are not
this README, and README's "graded exercises" column names a column, not a section.
"""

from __future__ import annotations

import json
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

_QUOTED = r"(?:\"([^\"\n]+)\"|“([^”\n]+)”|'([^'\n]+)')"  # "Section", “Section” or 'Section'
_CITATIONS = [
    re.compile(r"README(?:\.md)?,\s+" + _QUOTED),  # README, "Section"
    re.compile(r"README(?:\.md)?['’]s\s+" + _QUOTED + r"(?!\s+(?:column|table|row|cell|file|link)s?\b)"),
    re.compile(r"\((?:see\s+(?:the\s+)?)?README(?:\.md)?:\s*([^)\n]+)\)"),  # (see README: Section)
    re.compile(r"README\.md#([\w-]+)"),  # an anchor: the heading's GitHub slug
]


def _someone_elses(text: str, start: int) -> bool:
    """README at `start` is another project's ("nanoGPT's README") or another folder's (deploy/README.md)."""
    before = text[max(0, start - 40):start]
    if before.endswith(("/", "\\")):
        return True
    owner = re.search(r"(\w+)['’]s\s+$", before)
    return owner is not None


def find_citations(text: str) -> list[str]:
    """The README sections `text` cites, in order (an anchor as its slug, prefixed with #)."""
    found: list[tuple[int, str]] = []
    for number, pattern in enumerate(_CITATIONS):
        for match in pattern.finditer(text):
            if _someone_elses(text, match.start()):
                continue
            section = " ".join(next(group for group in match.groups() if group is not None).split())
            found.append((match.start(), "#" + section if number == 3 else section))
    return [section for _, section in sorted(found)]


def _normalised(heading: str) -> str:
    return " ".join(heading.replace("`", "").split()).casefold()


def _slug(heading: str) -> str:
    """GitHub's anchor for a heading: lower case, punctuation dropped, spaces as hyphens."""
    return re.sub(r"[^\w\- ]", "", heading.replace("`", "").strip().lower()).replace(" ", "-")


def readme_headings(markdown: str) -> set[str]:
    """The headings of `markdown`, without their #s, case-folded (lines in fenced code blocks are not headings)."""
    headings, fenced = set(), False
    for line in markdown.splitlines():
        if line.lstrip().startswith(("```", "~~~")):
            fenced = not fenced
        elif not fenced and re.match(r"#{1,6}\s", line):
            heading = line.lstrip("#").strip()
            headings.add(_normalised(heading))
            headings.add("#" + _slug(heading))
    return headings


def missing_sections(sources: dict[str, str], markdown: str) -> list[str]:
    """'where: "section"' for each citation in `sources` (name -> text) of a section `markdown` lacks."""
    headings = readme_headings(markdown)
    return [f'{where}: "{section}"' for where, text in sources.items() for section in find_citations(text)
            if _normalised(section) not in headings and section not in headings]


def scanned_sources() -> dict[str, str]:
    """Each .py file under tfcourse/ and tools/, and each solution notebook cell: 'path[:cell N]' -> text."""
    sources = {}
    for folder in ("tfcourse", "tools"):
        for path in sorted((ROOT / folder).rglob("*.py")):
            sources[str(path.relative_to(ROOT))] = path.read_text(encoding="utf-8")
    for path in sorted((ROOT / "solutions").rglob("*.ipynb")):
        if ".ipynb_checkpoints" in path.parts:
            continue
        for index, cell in enumerate(json.loads(path.read_text(encoding="utf-8"))["cells"]):
            source = cell["source"]
            sources[f"{path.relative_to(ROOT)}:cell {index}"] = "".join(source) if isinstance(source, list) else source
    return sources


def test_every_cited_readme_section_exists():
    readme = (ROOT / "README.md").read_text(encoding="utf-8")
    sources = scanned_sources()
    assert any(path.endswith(".ipynb:cell 0") for path in sources), "no solution notebook was scanned"
    assert missing_sections(sources, readme) == [], "cited README sections that README.md has no heading for"


def test_the_scan_sees_the_citations_the_code_makes():
    """The scan is not vacuous: models.py's citation of the weight-initialisation figures is found."""
    cited = {section for text in scanned_sources().values() for section in find_citations(text)}
    assert "Weight initialisation" in cited


def test_the_scanner_finds_each_form_of_citation():
    text = '''
    at 1.79 (README, "Weight initialisation").
    the README's "Quick start" says how; README.md, 'The lessons' lists them
    (see README: Running the complete solutions) and (README: For contributors)
    a link: README.md#what-is-where
    '''
    assert find_citations(text) == ["Weight initialisation", "Quick start", "The lessons",
                                    "Running the complete solutions", "For contributors", "#what-is-where"]


def test_the_scanner_leaves_other_readmes_and_non_sections_alone():
    text = '''
    # nanoGPT's README, "I only have a macbook": the same recipe.
    the way deploy/README.md, "Install" does; (see deploy/README.md: one machine)
    the README's "graded exercises" column; the README's lesson table; `make test` (see the README)
    '''
    assert find_citations(text) == []


def test_a_made_up_citation_fails():
    readme = "# Title\n\n## Quick start\n\n```bash\n# Not a heading\n```\n\n### Weight `initialisation`\n"
    sources = {
        "real.py": 'see (README, "quick START") and README\'s "Weight initialisation"; README.md#quick-start',
        "made_up.py": 'the figures are in (README, "Made-up section")',
        "in_code.py": "(see README: Not a heading)",
        "bad_anchor.py": "README.md#no-such-anchor",
    }
    assert missing_sections(sources, readme) == ['made_up.py: "Made-up section"', 'in_code.py: "Not a heading"',
                                                 'bad_anchor.py: "#no-such-anchor"']


def test_headings_ignore_hashes_case_and_code_blocks():
    headings = readme_headings("# One\n## Two  words\n###### `Six`\n```\n# comment\n```\n#hashtag\n")
    assert {"one", "two words", "six"} <= headings and "comment" not in headings and "hashtag" not in headings
