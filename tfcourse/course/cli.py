"""The `tfcourse` command: `tfcourse --help` lists what it does."""

from __future__ import annotations

import argparse
import sys

from .. import __version__


def _info(args: argparse.Namespace) -> int:
    import torch

    from ..data.shakespeare import DATA_DIR_ENV, cache_dir
    from ..training.loop import pick_device

    print(f"tfcourse {__version__}")
    print(f"python   {sys.version.split()[0]}")
    print(f"torch    {torch.__version__}")
    print(f"device   {pick_device()} (cuda -> mps -> cpu)")
    print(f"data     ${DATA_DIR_ENV} if set, else the cache {cache_dir()}")
    return 0


def _data(args: argparse.Namespace) -> int:
    from ..data import DatasetUnavailableError, load_tiny_shakespeare

    try:
        text = load_tiny_shakespeare()
    except DatasetUnavailableError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"Tiny Shakespeare ready: {len(text.encode()):,} bytes, checksum verified")
    return 0


def _run_solutions(args: argparse.Namespace) -> int:
    from pathlib import Path

    from .run_solutions import run_solutions

    results = run_solutions(Path(args.source), Path(args.out), fast=args.fast, only=args.lessons or None,
                            timeout=args.timeout)
    failed = [r for r in results if not r.ok]
    total = sum(r.seconds for r in results)
    print(f"{len(results) - len(failed)}/{len(results)} notebooks ran in {total:.0f} s "
          f"({'fast' if args.fast else 'full'} mode); executed copies in {args.out}/")
    return 1 if failed else 0


def _bench(argv: list[str]) -> int:
    from .bench import main as bench_main

    return bench_main(argv)


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="tfcourse", description="Build the Transformer piece by piece.")
    parser.add_argument("--version", action="version", version=f"tfcourse {__version__}")
    commands = parser.add_subparsers(dest="command", required=True, metavar="COMMAND")
    commands.add_parser("info", help="versions, the device training will use, where data is read from"
                        ).set_defaults(run=_info)
    commands.add_parser("data", help="download Tiny Shakespeare into the cache (once) and verify it"
                        ).set_defaults(run=_data)
    run = commands.add_parser("run-solutions", help="execute every solution notebook end to end into an output folder")
    run.add_argument("lessons", nargs="*", help="lessons to run, e.g. 03 or 03_attention (default: all)")
    run.add_argument("--fast", action="store_true", help="fast mode: training cells shrink to seconds")
    run.add_argument("--source", default="solutions", help="folder of lesson notebooks (default: solutions)")
    run.add_argument("--out", default="runs/solutions", help="where executed copies go (default: runs/solutions)")
    run.add_argument("--timeout", type=int, default=1800, help="seconds allowed per cell (default: 1800)")
    run.set_defaults(run=_run_solutions)
    # Listed here for --help; main() hands their arguments straight to tfcourse.course.grade / tfcourse.course.bench.
    commands.add_parser("grade", help="grade your notebooks with the full tests (see `tfcourse grade -h`)")
    commands.add_parser("bench", help="print the performance figures, --output also into a JSON file "
                        "(see `tfcourse bench -h`)")
    commands.add_parser("autograde", help="nbgrader autograde for a whole class, N submissions at a time "
                        "(see `tfcourse autograde -h`)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        return _bench(argv[1:])
    if argv[:1] == ["grade"]:
        from .grade import main as grade_main

        return grade_main(argv[1:])
    if argv[:1] == ["autograde"]:
        from .parallel_autograde import main as autograde_main

        return autograde_main(argv[1:])
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
