"""Run lesson notebooks end to end: `tfcourse run-solutions` and the test suite use this.

Notebooks are executed into an output folder; the sources are never written to.
"""

from __future__ import annotations

import os
import time
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import nbformat
from nbclient import NotebookClient
from nbclient.exceptions import CellExecutionError, CellTimeoutError, DeadKernelError

from .forked_kernels import StartsKernelAgain

LESSON_GLOB = "[0-9][0-9]_*/[0-9][0-9]_*.ipynb"


def lesson_notebooks(folder: str | Path, only: list[str] | None = None) -> list[Path]:
    """The lesson notebooks under `folder` (e.g. solutions/), in lesson order.

    only: lesson names or numbers ("03", "03_attention") to keep.
    """
    paths = sorted(Path(folder).glob(LESSON_GLOB))
    if only:
        paths = [p for p in paths if any(p.parent.name == o or p.parent.name.startswith(f"{o}_") for o in only)]
    return paths


RUN_MARK = "tfcourse_executed_copy"


def _written_by_us(path: Path) -> bool:
    try:
        return bool(nbformat.read(path, as_version=4).metadata.get(RUN_MARK))
    except Exception:  # noqa: BLE001 - unreadable: certainly not ours
        return False


@dataclass
class RunResult:
    notebook: Path
    output: Path
    seconds: float
    error: str | None  # None when every cell ran

    @property
    def ok(self) -> bool:
        return self.error is None


@contextmanager
def _environment(fast: bool) -> Iterator[None]:
    saved = os.environ.get("TFCOURSE_FAST")
    os.environ["TFCOURSE_FAST"] = "1" if fast else "0"
    os.environ.setdefault("MPLBACKEND", "Agg")
    try:
        yield
    finally:
        if saved is None:
            os.environ.pop("TFCOURSE_FAST", None)
        else:
            os.environ["TFCOURSE_FAST"] = saved


def _first_line_of_error(error: Exception) -> str:
    text = str(error).strip().splitlines()
    return text[-1] if text else type(error).__name__


class _Client(StartsKernelAgain, NotebookClient):
    """nbclient's client, its kernel started again if it dies as it starts (its port taken meanwhile)."""


def run_notebook(path: Path, output: Path, fast: bool = True, timeout: int = 600) -> RunResult:
    """Execute `path` in its own folder; write the executed copy to `output` (never over `path`)."""
    if output.resolve() == path.resolve():
        raise ValueError(f"refusing to overwrite the source notebook {path}")
    if output.exists() and not _written_by_us(output):
        raise ValueError(f"refusing to overwrite {output}: it was not written by run-solutions "
                         "(choose another --out folder)")
    nb = nbformat.read(path, as_version=4)
    client = _Client(nb, timeout=timeout, kernel_name="python3", resources={"metadata": {"path": str(path.parent)}})
    started = time.perf_counter()
    error = None
    with _environment(fast):
        try:
            client.execute()
        except (CellExecutionError, CellTimeoutError, DeadKernelError) as exc:
            error = _first_line_of_error(exc)
    output.parent.mkdir(parents=True, exist_ok=True)
    nb.metadata[RUN_MARK] = True  # lets a later run replace this copy, and nothing else
    nbformat.write(nb, output)
    return RunResult(path, output, time.perf_counter() - started, error)


def run_solutions(source: Path, out: Path, fast: bool, only: list[str] | None = None,
                  timeout: int = 600, progress: bool = True) -> list[RunResult]:
    """Run every solution notebook under `source`, writing executed copies under `out`."""
    from tqdm.auto import tqdm

    notebooks = lesson_notebooks(source, only)
    if not notebooks:
        raise FileNotFoundError(f"no lesson notebooks ({LESSON_GLOB}) under {source}")
    results = []
    bar = tqdm(notebooks, desc="solutions", unit="notebook", disable=not progress)
    for path in bar:
        bar.set_postfix_str(path.parent.name)
        result = run_notebook(path, out / path.relative_to(source), fast, timeout)
        status = "ok    " if result.ok else "FAILED"
        bar.write(f"{status} {result.seconds:6.1f} s  {path.relative_to(source)}"
                  + ("" if result.ok else f"\n       {result.error}"))
        results.append(result)
    return results
