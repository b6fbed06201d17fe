"""Train the GPT made of your own lesson components with the course's training script.

    python -m tfcourse.course.train_yours notebooks --recipe cpu --steps 200
    torchrun --nproc_per_node 2 -m tfcourse.course.train_yours notebooks --recipe cpu

The first argument is the folder that holds your lesson folders (01_tokenization, ...); every other
option is the training script's (`python -m tfcourse.training.shakespeare --help`). Each of your
components is checked first and used where it passes (the reference stands in elsewhere, and the table
printed at the start says why), in the configuration lesson 08 trains: sinusoidal positions, pre-LN.
"""

from __future__ import annotations

import argparse
import functools
import sys
from pathlib import Path

import torch
from torch import nn

from ..training import distributed, shakespeare
from ..training.recipes import Recipe
from .assemble import your_gpt_config, your_parts


def build_your_gpt(lessons: Path, recipe: Recipe, vocab_size: int, seed: int) -> tuple[nn.Module, str]:
    """The recipe's GPT from your components, and the table of where each came from."""
    parts = your_parts(lessons)
    m = recipe.model
    config = your_gpt_config(vocab_size, max_len=m.max_len, d_model=m.d_model, n_heads=m.n_heads,
                             n_layers=m.n_layers, dropout=m.dropout, norm_first=True)
    torch.manual_seed(seed)  # the initial weights (the checks above drew random numbers)
    return parts.gpt(config), f"your GPT, from the lessons in {lessons}:\n{parts.table()}"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m tfcourse.course.train_yours",
                                     description=__doc__.split("\n")[0], add_help=True)
    parser.add_argument("lessons", type=Path, help="the folder that holds your lesson folders")
    args, rest = parser.parse_known_args(sys.argv[1:] if argv is None else argv)
    if not args.lessons.is_dir():
        parser.error(f"{args.lessons} is not a folder: give the one that holds your lesson folders")
    return shakespeare.main(rest, build=functools.partial(build_your_gpt, args.lessons))


if __name__ == "__main__":
    distributed.exit_script(main())  # under torchrun: no interpreter shutdown, which can abort in gloo
