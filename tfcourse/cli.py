"""The `tfcourse` command: `tfcourse --help` lists what it does."""

from __future__ import annotations

import argparse
import sys

from . import __version__


def _info(args: argparse.Namespace) -> int:
    import torch

    from .data import DATA_DIR_ENV, cache_dir
    from .train import pick_device

    print(f"tfcourse {__version__}")
    print(f"python   {sys.version.split()[0]}")
    print(f"torch    {torch.__version__}")
    print(f"device   {pick_device()} (cuda -> mps -> cpu)")
    print(f"data     ${DATA_DIR_ENV} if set, else the cache {cache_dir()}")
    return 0


def _data(args: argparse.Namespace) -> int:
    from .data import DatasetUnavailableError, load_tiny_shakespeare

    try:
        text = load_tiny_shakespeare()
    except DatasetUnavailableError as error:
        print(error, file=sys.stderr)
        return 1
    print(f"Tiny Shakespeare ready: {len(text.encode()):,} bytes, checksum verified")
    return 0


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
    # Listed here for --help; main() hands its arguments straight to tfcourse.bench.
    commands.add_parser("bench", help="print the performance figures (see `tfcourse bench -h`)")
    return parser


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["bench"]:
        return _bench(argv[1:])
    args = build_parser().parse_args(argv)
    return args.run(args)


if __name__ == "__main__":
    raise SystemExit(main())
