"""Two recipes for training a character-level GPT on Tiny Shakespeare: one for a GPU, one for a CPU.

A recipe is everything a run needs besides the data: the model (a GPTConfig), the loop
(a TrainConfig), the batch size and the context length. Both come from nanoGPT's
`shakespeare_char` configuration, which published what they reach:

- GPU_RECIPE (6 layers, 6 heads, d_model 384, context 256, batch 64, dropout 0.2, 2,500 steps):
  nanoGPT's README reports a validation loss of 1.4697 in about 3 minutes on one A100 (its config
  runs 5,000 steps and keeps the checkpoint with the lowest val loss). In this course's runs the
  lowest val loss comes at 2,000-2,500 steps (1.461 at step 2,500 on an H200), so the cosine ends there.
- CPU_RECIPE (4 layers, 4 heads, d_model 128, context 64, batch 12, dropout 0, 2,000 steps):
  nanoGPT reports about 1.88 after about 3 minutes on a laptop CPU. tfcourse's own GPT (pre-LN,
  GELU, learned positions, tied weights) has reached 1.79 with it in about 2 minutes on 2 cores.

`recipe_for(device, fast)` picks one for a device; `fast=True` shrinks it to a few seconds of
training (the course's fast mode, used in CI and when grading).
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass

import torch

from ..models import GPTConfig
from ..training.loop import TrainConfig

# Tiny Shakespeare has 65 distinct characters; a recipe's GPTConfig starts with that vocabulary.
# Use Recipe.gpt_config(vocab_size) for another tokenizer (e.g. BPE).
SHAKESPEARE_CHAR_VOCAB = 65


@dataclass(frozen=True)
class Recipe:
    """A complete training recipe: model, loop, batch size (the context is model.max_len)."""

    name: str  # a short name for files and messages
    model: GPTConfig  # the GPT's shape; vocab_size is Tiny Shakespeare's 65 characters
    train: TrainConfig  # steps, learning-rate schedule, evaluation, precision
    batch_size: int  # windows per optimizer step
    description: str = ""  # one line: where the recipe comes from and what it reaches

    @property
    def context(self) -> int:
        """Tokens per window: the model's context length."""
        return self.model.max_len

    @property
    def tokens_per_step(self) -> int:
        """Tokens the model is trained on in one optimizer step (batch_size x context)."""
        return self.batch_size * self.context

    def gpt_config(self, vocab_size: int) -> GPTConfig:
        """The recipe's GPTConfig for a tokenizer with `vocab_size` tokens."""
        return dataclasses.replace(self.model, vocab_size=vocab_size)

    def replace(self, **changes) -> "Recipe":
        """A copy with some fields changed; `steps=` also moves the schedule's end with it.

        Fields of the TrainConfig can be given directly, e.g. `recipe.replace(steps=500, compile=True)`.
        """
        train_fields = {field.name for field in dataclasses.fields(TrainConfig)}
        train_changes = {key: changes.pop(key) for key in list(changes) if key in train_fields}
        if "steps" in changes:
            train_changes["max_steps"] = steps = changes.pop("steps")
            # Warm-up stays at most a twentieth of a short run; evaluation at least twice.
            train_changes.setdefault("warmup_steps", min(self.train.warmup_steps, max(steps // 20, 1)))
            train_changes.setdefault("eval_interval", min(self.train.eval_interval, max(steps // 2, 1)))
        train = dataclasses.replace(self.train, **train_changes) if train_changes else self.train
        return dataclasses.replace(self, train=train, **changes)

    def summary(self) -> str:
        """One line: shape, batch and length of the run."""
        m, t = self.model, self.train
        return (f"{self.name}: {m.n_layers} layers, {m.n_heads} heads, d_model {m.d_model}, "
                f"context {m.max_len}, batch {self.batch_size}, dropout {m.dropout}, "
                f"{t.max_steps:,} steps, lr {t.lr:g} -> {t.min_lr:g}, warm-up {t.warmup_steps}")


# nanoGPT's config/train_shakespeare_char.py, in tfcourse's names.
GPU_RECIPE = Recipe(
    name="gpu",
    model=GPTConfig.gpt(
        vocab_size=SHAKESPEARE_CHAR_VOCAB,
        max_len=256,  # context: 256 characters, a few lines of verse
        d_model=384,
        n_heads=6,  # d_head = 64, as in GPT-2 and the paper
        n_layers=6,
        dropout=0.2,  # a 10.7M-parameter model overfits 1M characters without it
    ),
    train=TrainConfig(
        # nanoGPT trains 5,000 steps and keeps the checkpoint with the best val loss (1.4697 in its
        # README). In this course's runs the best val comes at 2,000-2,500 steps: half the steps, with
        # the cosine ending at 2,500, reaches it in half the time (1.461 at step 2,500 on an H200).
        max_steps=2500,
        lr=1e-3,  # small models tolerate a high rate
        min_lr=1e-4,  # lr / 10, as Chinchilla suggests
        warmup_steps=100,
        betas=(0.9, 0.99),  # beta2 0.99 (not 0.999): the batches are small in tokens
        weight_decay=0.1,
        grad_clip=1.0,
        eval_interval=250,
        eval_steps=50,  # 50 batches x 16k tokens: a smooth curve; nanoGPT's 200 cost ~1/3 of the run
        amp=True,  # bf16 autocast on CUDA
        compile=True,  # on CUDA: fuses the hand-written LayerNorm and GELU; falls back to eager if it fails
    ),
    batch_size=64,  # 64 x 256 = 16,384 tokens per step
    description="nanoGPT's shakespeare_char recipe, 2,500 steps: val loss ~1.47 (nanoGPT's README: 1.4697 on an A100)",
)

# nanoGPT's README, "I only have a macbook": the same recipe, small enough for a CPU.
CPU_RECIPE = Recipe(
    name="cpu",
    model=GPTConfig.gpt(
        vocab_size=SHAKESPEARE_CHAR_VOCAB,
        max_len=64,
        d_model=128,
        n_heads=4,  # d_head = 32
        n_layers=4,
        dropout=0.0,  # 2,000 small steps never see the data often enough to overfit
    ),
    train=TrainConfig(
        max_steps=2000,
        lr=1e-3,
        min_lr=1e-4,
        warmup_steps=100,
        betas=(0.9, 0.99),
        weight_decay=0.1,
        grad_clip=1.0,
        eval_interval=250,
        eval_steps=20,  # evaluation is expensive on a CPU: 20 batches are enough to see the trend
    ),
    batch_size=12,  # 12 x 64 = 768 tokens per step
    description="nanoGPT's CPU recipe: val loss ~1.88 in ~3 min on a laptop (tfcourse's GPT: ~1.79)",
)

RECIPES = {"gpu": GPU_RECIPE, "cpu": CPU_RECIPE}

# Fast mode: the same model shape, a few seconds of training. A few dozen steps take the loss
# from ln(65) = 4.17 to about 2.5-3: enough to see it fall and to sample (badly).
FAST_STEPS = 60


def fast_version(recipe: Recipe) -> Recipe:
    """`recipe` shrunk to seconds: few steps, short warm-up, cheap evaluation.

    The CPU recipe keeps its model (it is already small); the GPU recipe also shrinks its
    batch and context, so that even a CPU finishes it in seconds.
    """
    shrunk = recipe.replace(steps=FAST_STEPS, warmup_steps=10, eval_interval=FAST_STEPS // 2, eval_steps=4,
                            compile=False,  # compiling would take longer than the run
                            name=f"{recipe.name}-fast")
    if recipe.batch_size * recipe.context > CPU_RECIPE.tokens_per_step:
        shrunk = dataclasses.replace(
            shrunk, batch_size=CPU_RECIPE.batch_size,
            model=dataclasses.replace(recipe.model, max_len=CPU_RECIPE.context, n_layers=2),
        )
    return shrunk


def recipe_for(device: str | torch.device | None = None, fast: bool = False) -> Recipe:
    """The recipe for `device`: GPU_RECIPE on CUDA, CPU_RECIPE anywhere else; shrunk if `fast`.

    `device=None` asks torch which device this computer has. Apple's MPS gets the CPU recipe:
    it runs there, the GPU recipe would take hours.
    """
    if device is None:
        device = "cuda" if torch.cuda.is_available() else "cpu"
    kind = torch.device(device).type
    recipe = GPU_RECIPE if kind == "cuda" else CPU_RECIPE
    return fast_version(recipe) if fast else recipe


__all__ = ["Recipe", "GPU_RECIPE", "CPU_RECIPE", "RECIPES", "SHAKESPEARE_CHAR_VOCAB", "fast_version",
           "recipe_for"]
