"""Draw every lesson figure (tfcourse/course/figures/) into the lesson folders that show it:
solutions/NN_topic/figures/ and notebooks/NN_topic/figures/ (the student version shows the same
files), and set the alt text of each image in the solution notebooks to its figure's description.
Figures no lesson shows any more are removed from those folders. Then `python tools/release.py`
makes the student notebooks from the solutions.

    python tools/figures.py

tests/test_figures.py fails when a committed file differs from what this writes.
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # run as a script from a checkout: the tfcourse next to it

from tfcourse.course.figures import figures, lesson_files  # noqa: E402  (no torch needed to draw)

IMAGE = re.compile(r"!\[[^\]]*\]\(figures/([^)\s]+)\)")


def set_alt_texts(notebook: Path) -> bool:
    """Give every `![...](figures/NAME.svg)` in the notebook's Markdown its figure's description;
    True when the file changed. (The JSON is edited as text-preserving data: only those sources.)"""
    lesson = notebook.parent.name
    alt = {f"{f.name}.svg": f.alt for f in figures() if lesson in f.lessons}
    raw = notebook.read_text(encoding="utf-8")
    nb = json.loads(raw)
    for cell in nb["cells"]:
        if cell["cell_type"] == "markdown":
            source = "".join(cell["source"])
            fixed = IMAGE.sub(lambda m: f"![{alt.get(m.group(1), '')}](figures/{m.group(1)})", source)
            cell["source"] = fixed.splitlines(keepends=True)
    text = json.dumps(nb, indent=1, ensure_ascii=False) + "\n"
    if text != raw:
        notebook.write_text(text, encoding="utf-8")
    return text != raw


def main() -> int:
    for notebook in sorted((ROOT / "solutions").glob("[0-9][0-9]_*/*.ipynb")):
        if set_alt_texts(notebook):
            print(f"set the alt texts of {notebook.relative_to(ROOT)}")
    for folder in ("solutions", "notebooks"):
        for lesson_dir in sorted(p for p in (ROOT / folder).iterdir() if p.is_dir() and p.name[:2].isdigit()):
            wanted = lesson_files(lesson_dir.name)
            figures = lesson_dir / "figures"
            for stale in sorted(figures.glob("*.svg")) if figures.is_dir() else []:
                if stale.name not in wanted:
                    stale.unlink()
                    print(f"removed {stale.relative_to(ROOT)}")
            for name, text in wanted.items():
                path = figures / name
                if not path.exists() or path.read_text(encoding="utf-8") != text:
                    path.parent.mkdir(parents=True, exist_ok=True)
                    path.write_text(text, encoding="utf-8")
                    print(f"wrote {path.relative_to(ROOT)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
