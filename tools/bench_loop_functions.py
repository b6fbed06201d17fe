"""Lesson 08's run with the learner's five functions inside `train` against the loop's own: the same
model, recipe, seed and batches; prints both validation curves, their largest gap and the time ratio.

    python tools/bench_loop_functions.py                 # the CPU recipe, 300 steps
    python tools/bench_loop_functions.py --steps 2000    # the whole CPU recipe
    python tools/bench_loop_functions.py --recipe gpu    # on a GPU

The five functions are the solution notebook's (lesson 08's exercises 1-5), read with import_from_notebook.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path

import torch

from tfcourse.course.notebook_import import import_from_notebook
from tfcourse.data import load_tiny_shakespeare, train_val_split
from tfcourse.models import GPT
from tfcourse.tokenizers import CharTokenizer
from tfcourse.training.loop import LoopFunctions, StepwiseAdamW, train, weight_groups
from tfcourse.training.recipes import CPU_RECIPE, GPU_RECIPE

LESSON = Path(__file__).resolve().parents[1] / "solutions" / "08_training" / "08_training.ipynb"


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--recipe", choices=["cpu", "gpu"], default="cpu")
    parser.add_argument("--steps", type=int, default=300)
    args = parser.parse_args()
    recipe = (CPU_RECIPE if args.recipe == "cpu" else GPU_RECIPE).replace(steps=args.steps)
    torch.set_num_threads(1) if args.recipe == "cpu" else None
    text = load_tiny_shakespeare()
    tokenizer = CharTokenizer.from_text(text)
    train_data, val_data = train_val_split(torch.tensor(tokenizer.encode(text)), 0.9)
    get_batch, adamw_step, lr_at, train_step, estimate_loss = (
        import_from_notebook(LESSON, name) for name in ("get_batch", "adamw_step", "lr_at", "train_step", "estimate_loss"))

    def batches(split: str, generator: torch.Generator):
        data = train_data if split == "train" else val_data
        return get_batch(data, recipe.batch_size, recipe.model.max_len, generator)

    learners = LoopFunctions(lr_at=lr_at, train_step=train_step, estimate_loss=estimate_loss,
                             make_optimizer=lambda model, c: StepwiseAdamW(weight_groups(model, c.weight_decay), c.lr,
                                                                           c.betas, update=adamw_step))
    config = recipe.train
    runs = {}
    for name, functions in [("the loop's own", None), ("lesson 08's five functions", learners)]:
        torch.manual_seed(0)
        model = GPT(recipe.gpt_config(tokenizer.vocab_size))
        started = time.perf_counter()
        history = train(model, batches, config, functions=functions)
        runs[name] = (history, time.perf_counter() - started)
        print(f"{name:28} val {' '.join(f'{v:.4f}' for v in history['val_loss'])}  "
              f"{runs[name][1]:.1f} s, {history['tokens_per_sec']:,.0f} tokens/s on {history['device']}")
    (own, own_s), (yours, yours_s) = runs.values()
    gap = max(abs(a - b) for a, b in zip(own["val_loss"], yours["val_loss"]))
    print(f"largest validation-loss gap {gap:.2e}; time ratio (five functions / own) {yours_s / own_s:.2f}")


if __name__ == "__main__":
    main()
