"""The README's benchmark figures are the measured ones: each figure its "Benchmarks" table quotes
equals, as rounded there, the value in benchmarks/latest.json (the file `make bench` writes), and
the line above the table names the run, date and machine of that file. The bench itself is not run
here (it takes minutes): after `make bench`, `python -m tfcourse.course.bench --table
benchmarks/latest.json` prints the table to paste into the README."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tfcourse.course import bench

ROOT = Path(__file__).resolve().parents[1]
LATEST = ROOT / "benchmarks" / "latest.json"
HEADER = "| benchmark | target on a 2-core CPU | measured |"
MACHINE_LINE = re.compile(r"Measured by `([^`]+)` on (\d{4}-\d\d-\d\d) in (\d+) s: (\d+) CPUs \((.*?)\), "
                          r"torch (\S+), (\d+) threads\.")
NUMBER = re.compile(r"\d[\d,]*(?:\.\d+)?")


def _time_to_loss(r: dict) -> list:
    if r["step"] is None:  # "never below 1.88: best val 1.912 in 95.0 s"
        return [r["target"], r["val_loss"], r["seconds"]]
    return [r["seconds"], r["val_loss"], r["target"], r["step"]]  # "61.2 s (val 1.879 < 1.88 at step 1,400)"


# Each row of the table, by the start of its first cell: the benchmark's key in the file's results, and
# the figures of its target cell and of its measured cell, in the order the cells quote them.
ROWS = {
    "BPE training": ("bpe", lambda t: [t["bpe_ratio"]],
                     lambda r: [r["ratio"], r["seconds"], r["rust_seconds"]] if "ratio" in r else [r["seconds"]]),
    "the same on its first": ("bpe", lambda t: [t["bpe_small_seconds"]], lambda r: [r["small_seconds"]]),
    "encoding Tiny Shakespeare": ("encode", lambda t: [t["encode_ratio"]],
                                  lambda r: ([r["ratio"], r["mb_per_sec"], r["tiktoken_mb_per_sec"]] if "ratio" in r
                                             else [r["mb_per_sec"]]) + [r["first_call_seconds"]]),
    "GPT training throughput": ("train", lambda t: [t["tokens_per_sec"]],
                                lambda r: [r["tfcourse"]["tokens_per_sec"], r["rounds"], r["tfcourse"]["steps"]]),
    "the same, against": ("train", lambda t: [t["ratio"]], lambda r: [r["ratio"], r["plain"]["tokens_per_sec"]]),
    "wall time until": ("target", lambda t: [t["seconds_to_loss"]], _time_to_loss),
    "generating 500 tokens": ("kv", lambda t: [t["kv_speedup"]],
                              lambda r: [r["speedup"], r["with_cache"], r["without_cache"]]),
    "the first exercise check": ("check", lambda t: [t["first_check_seconds"]], lambda r: [r["first"], r["second"]]),
    "`tfcourse grade` of lesson": ("grade", lambda t: [t["grade_ratio"]], lambda r: [r["ratio"], r["grade"], r["nbgrader"]]),
}


def benchmarks_section(readme: str) -> str:
    """The README's "### Benchmarks" section, up to the next heading of any level."""
    match = re.search(r"^### Benchmarks\n(.*?)(?=^#{1,6} )", readme + "\n# end", re.M | re.S)
    assert match, 'README.md has no "### Benchmarks" section'
    return match.group(1)


def table_rows(text: str) -> list[list[str]]:
    """The cells of each row of the table that starts with HEADER in `text`."""
    lines = text.splitlines()
    assert HEADER in lines, f"no table headed {HEADER!r}"
    rows = []
    for line in lines[lines.index(HEADER) + 2:]:
        if not line.startswith("|"):
            break
        rows.append([cell.strip() for cell in line.strip().strip("|").split("|")])
    return rows


def _agrees(quoted: str, value: float) -> bool:
    """`value` rounded as `quoted` is (as many decimals) reads the same."""
    decimals = len(quoted.split(".")[1]) if "." in quoted else 0
    return f"{value:.{decimals}f}" == quoted.replace(",", "")


def disagreements(text: str, report: dict) -> list[str]:
    """Where `text` (a README section) quotes a figure, or the run's machine line, other than `report` has."""
    problems = []
    machine = MACHINE_LINE.search(text)
    if machine is None:
        problems.append("no 'Measured by `COMMAND` on DATE in S s: N CPUs (CPU), torch VERSION, T threads.' line")
    else:
        m = report["machine"]
        expected = (report["command"], report["date"][:10], f"{report['seconds']:.0f}", str(m["cpu_count"]),
                    m["cpu"], m["torch"], str(m["torch_threads"]))
        for name, quoted, value in zip(("command", "date", "seconds", "CPUs", "CPU", "torch", "threads"),
                                       machine.groups(), expected):
            if quoted != value:
                problems.append(f"the machine line's {name} is {quoted!r}, the file's {value!r}")
    seen = set()
    for cells in table_rows(text):
        label, target_cell, measured_cell = cells
        kind = next((start for start in ROWS if label.startswith(start)), None)
        if kind is None:
            problems.append(f"a row the test does not know: {label!r}")
            continue
        key, targets, measured = ROWS[kind]
        seen.add(key)
        if key not in report["results"]:
            problems.append(f"{kind!r}: the file has no {key!r} figures (run `make bench`)")
            continue
        figures = measured(report["results"][key])
        for cell, values in ((target_cell, targets(report["targets"])), (measured_cell, figures)):
            quoted = NUMBER.findall(cell)
            if len(quoted) != len(values) or not all(_agrees(q, v) for q, v in zip(quoted, values)):
                problems.append(f"{kind!r}: the README says {cell!r}, the file {values}")
    for key in sorted(set(report["results"]) - seen):
        problems.append(f"the file's {key!r} figures are not in the README's table")
    return problems


@pytest.fixture(scope="module")
def latest() -> dict:
    assert LATEST.is_file(), "benchmarks/latest.json is missing: run `make bench`"
    return json.loads(LATEST.read_text(encoding="utf-8"))


def test_the_readme_quotes_the_measured_figures(latest):
    section = benchmarks_section((ROOT / "README.md").read_text(encoding="utf-8"))
    assert disagreements(section, latest) == [], (
        "README.md's benchmark figures differ from benchmarks/latest.json: paste the output of "
        "`python -m tfcourse.course.bench --table benchmarks/latest.json`")


def test_the_file_describes_its_run(latest):
    assert set(latest) >= {"command", "date", "seconds", "machine", "options", "targets", "results"}
    assert {"cpu_count", "cpu", "torch", "torch_threads", "python", "platform"} <= set(latest["machine"])
    assert latest["targets"] == bench.TARGETS, "the targets changed since the file was written: run `make bench`"
    assert set(latest["results"]) == set(bench.BENCHMARKS) & set(latest["options"]["only"])


def test_the_generated_table_reads_back(latest):
    """`--table` writes what this test reads, for a target reached and one never reached."""
    assert disagreements(bench.readme_table(latest), latest) == []
    never = json.loads(json.dumps(latest))
    never["results"]["target"] = {"target": 1.5, "step": None, "val_loss": 1.91234, "seconds": 95.04}
    assert disagreements(bench.readme_table(never), never) == []


def test_a_drifted_figure_is_caught(latest):
    table = bench.readme_table(latest)
    small = latest["results"]["bpe"]["small_seconds"]
    drifted = table.replace(f"| {small:,.3f} s |", f"| {small + 0.5:,.3f} s |")
    assert drifted != table
    assert any(problem.startswith("'the same on its first'") for problem in disagreements(drifted, latest))
    other_machine = table.replace(f"torch {latest['machine']['torch']}", "torch 0.0")
    assert any("torch" in problem for problem in disagreements(other_machine, latest))
    missing = json.loads(json.dumps(latest))
    del missing["results"]["kv"]
    assert any("no 'kv' figures" in problem for problem in disagreements(table, missing))
