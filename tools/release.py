"""Regenerate the student version: solutions/ -> notebooks/ with nbgrader, without losing anyone's work.

    python tools/release.py            # regenerate every lesson
    python tools/release.py 03_attention

A notebook in notebooks/ that differs from the committed one (a learner's edits, say) is left
alone and reported; `--force` overwrites it after saving a copy next to it (*.ipynb.bak).
"""

from __future__ import annotations

import argparse
import shutil
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
SOURCE, RELEASE = ROOT / "solutions", ROOT / "notebooks"


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
    for target in skipped:
        print(f"left {target.relative_to(ROOT)} alone: it has changes that are not committed "
              "(use --force to overwrite it; a backup copy is kept)")
    return 1 if skipped else 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("lessons", nargs="*", help="lesson folders (default: all)")
    parser.add_argument("--force", action="store_true", help="overwrite locally modified notebooks (after a backup)")
    args = parser.parse_args(argv)
    return release(args.lessons or lessons(), args.force)


if __name__ == "__main__":
    raise SystemExit(main())
