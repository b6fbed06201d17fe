"""Regenerate what is made from the solutions: the student version (solutions/ -> notebooks/ with
nbgrader, without losing anyone's work), the lesson manifest (tfcourse/manifest.json) and the
README's lesson table (its "graded exercises" column).

    python tools/release.py            # regenerate every lesson
    python tools/release.py 03_attention

A notebook in notebooks/ that differs from the committed one (a learner's edits, say) is left
alone and reported; `--force` overwrites it after saving a copy next to it (*.ipynb.bak).
The manifest and the README's table are always rebuilt from every lesson.
"""

from __future__ import annotations

import argparse
import re
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE, RELEASE = ROOT / "solutions", ROOT / "notebooks"
README = ROOT / "README.md"
sys.path.insert(0, str(ROOT))  # run as a script from a checkout: the tfcourse next to it

from tfcourse import manifest  # noqa: E402  (pure Python: no torch, no nbgrader)

TABLE_ROW = re.compile(r"^\| (\d\d) (.*) \| ([^|]*) \|$")


def lessons() -> list[str]:
    return sorted(p.name for p in SOURCE.iterdir() if p.is_dir() and p.name[:2].isdigit())


def generate(lesson: str, release_dir: Path) -> Path:
    """Run `nbgrader generate_assignment` for one lesson into release_dir; returns the lesson folder.

    `lesson` may be a pattern: "*" makes every lesson in one nbgrader run (one start-up, not one each)."""
    command = [sys.executable, "-m", "nbgrader", "generate_assignment", lesson, "--no-db", "--force",
               f"--CourseDirectory.release_directory={release_dir}", "--log-level=WARN"]
    subprocess.run(command, cwd=ROOT, check=True)
    return release_dir / lesson


def _locally_modified(path: Path) -> bool:
    """True when git says the file differs from the committed version (or is untracked)."""
    status = subprocess.run(["git", "status", "--porcelain", "--", str(path)], cwd=ROOT,
                            capture_output=True, text=True, check=True).stdout
    return bool(status.strip())


def release(names: list[str], force: bool) -> int:
    skipped = []
    with tempfile.TemporaryDirectory() as tmp:
        for lesson in names:
            fresh = generate(lesson, Path(tmp))
            for new in sorted(fresh.rglob("*.ipynb")):
                target = RELEASE / lesson / new.relative_to(fresh)
                if target.exists() and _locally_modified(target):
                    if not force:
                        skipped.append(target)
                        continue
                    backup = target.with_suffix(f".ipynb.bak-{time.strftime('%Y%m%d-%H%M%S')}")
                    shutil.copy2(target, backup)
                    print(f"saved your version as {backup.relative_to(ROOT)}")
                target.parent.mkdir(parents=True, exist_ok=True)
                shutil.copyfile(new, target)
                print(f"wrote {target.relative_to(ROOT)}")
            # The lesson's other files (its drawn figures): generated, never a learner's work.
            for new in sorted(p for p in fresh.rglob("*") if p.is_file() and p.suffix != ".ipynb"):
                target = RELEASE / lesson / new.relative_to(fresh)
                target.parent.mkdir(parents=True, exist_ok=True)
                if not target.exists() or target.read_bytes() != new.read_bytes():
                    shutil.copyfile(new, target)
                    print(f"wrote {target.relative_to(ROOT)}")
    for target in skipped:
        print(f"left {target.relative_to(ROOT)} alone: it has changes that are not committed "
              "(use --force to overwrite it; a backup copy is kept)")
    return 1 if skipped else 0


def lesson_table(readme: str, data: dict) -> str:
    """The README with its lesson table's last column ("graded exercises") set from the manifest."""
    counts = {entry["folder"][:2]: len(entry["exercises"]) for entry in data["lessons"]}

    def row(line: str) -> str:
        found = TABLE_ROW.match(line)
        if not found or found.group(1) not in counts:
            return line
        count = counts[found.group(1)]
        return f"| {found.group(1)} {found.group(2)} | {count if count else '—'} |"

    return "\n".join(row(line) for line in readme.split("\n"))


def write_generated() -> None:
    """The manifest and the README's lesson table, from every solution notebook."""
    data = manifest.build(SOURCE)
    for path, text in ((manifest.MANIFEST, manifest.dumps(data)), (README, lesson_table(README.read_text("utf-8"), data))):
        if path.read_text("utf-8") != text:
            path.write_text(text, encoding="utf-8")
            print(f"wrote {path.relative_to(ROOT)}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", help="lesson folders (default: all)")
    parser.add_argument("--force", action="store_true", help="overwrite locally modified notebooks (after a backup)")
    args = parser.parse_args(argv)
    status = release(args.lessons or lessons(), args.force)
    write_generated()
    return status


if __name__ == "__main__":
    raise SystemExit(main())
