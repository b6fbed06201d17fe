"""Train a character-level GPT on Tiny Shakespeare end to end: `python -m tfcourse.training.shakespeare`.

    python -m tfcourse.training.shakespeare                    # the recipe for this computer's device
    python -m tfcourse.training.shakespeare --recipe gpu --out runs/gpu
    python -m tfcourse.training.shakespeare --recipe cpu --steps 20

Picks a recipe (tfcourse.training.recipes: GPU_RECIPE on CUDA, CPU_RECIPE elsewhere), trains it with
tfcourse.training.loop (AdamW, warm-up + cosine, clipping; on CUDA bf16 autocast, TF32 matmuls, torch's
fused attention kernel and, by default, torch.compile), then prints the final validation loss,
the wall time, the throughput in tokens/s and the model FLOPs utilisation (MFU):

    MFU = (6 N + 12 L d T) x tokens/s / peak FLOP/s

N: parameters (without the position table, which is only looked up); 6 N: the forward and
backward matrix multiplications per token; 12 L d T: the attention scores and their weighted sum
(L layers, width d, context T). The peak is `--peak-tflops`, by default 989 TFLOP/s, the dense
bf16 peak of an H100/H200-class GPU (an A100 has 312). On a CPU, MFU is printed only when you
give its peak. With `--out DIR` the checkpoint (DIR/checkpoint.pt, resumable with `--resume`)
and the history and figures (DIR/history.json) are written there.

Data-parallel on N processes (GPUs, or CPU cores with gloo), on one machine or several:

    torchrun --nproc_per_node 2 -m tfcourse.training.shakespeare --recipe cpu --steps 200
    torchrun --nnodes 2 --nproc_per_node 8 --rdzv-backend c10d --rdzv-endpoint HOST:29500 --rdzv-id run1 \
             -m tfcourse.training.shakespeare --recipe gpu --out runs/gpu     # the same on each machine

The recipe's batch is the global one: each of the N workers trains on its 1/N of every batch, so the
run sees the same examples for any N and its checkpoint resumes with another N
(tfcourse.training.distributed). `python -m tfcourse.course.train_yours LESSONS ...` runs this script with
the GPT made of your own lesson components instead of the package's (under torchrun too).
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import statistics
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
from torch import nn

from ..data import CharCorpus, DatasetUnavailableError, char_corpus
from ..decoding import generate
from ..models import GPT, GPTConfig, count_parameters
from .recipes import RECIPES, Recipe, recipe_for
from ..tokenizers import CharTokenizer
from . import distributed
from .loop import amp_dtype, pick_device, train

# Dense bf16 peak of an H100 SXM / H200 (989.4 TFLOP/s; twice that is quoted with sparsity).
DEFAULT_PEAK_TFLOPS = 989.0


def non_embedding_parameters(model: nn.Module) -> int:
    """Parameters that take part in matrix multiplications: all but the position table.

    The token table counts: with tied weights it is also the output layer.
    """
    positions = sum(p.numel() for name, p in model.named_parameters() if "position" in name)
    return count_parameters(model) - positions


def flops_per_token(n_params: int, config: GPTConfig) -> float:
    """Training FLOPs per token: 6 N for the weights (2 forward, 4 backward) plus attention.

    Attention adds, per layer and token, 2 T d multiply-adds for the scores QK^T and as many for
    the weighted sum of V: 12 L d T with the backward pass. The causal mask skips half of them
    in a fused kernel, but the convention (PaLM, nanoGPT) counts them all.
    """
    return 6 * n_params + 12 * config.n_layers * config.d_model * config.max_len


def model_flops_utilisation(tokens_per_sec: float, n_params: int, config: GPTConfig,
                            peak_tflops: float) -> float:
    """The fraction of the hardware's peak that the model's own arithmetic uses."""
    return flops_per_token(n_params, config) * tokens_per_sec / (peak_tflops * 1e12)


class StepTimer:
    """A step hook for train(): the time at each step where the losses were just read back.

    Only those steps are timed because only there has the CPU waited for the GPU: elsewhere a
    step's end on the CPU says nothing about the GPU. The median speed over the intervals between
    them ignores the slow first steps (torch.compile, CUDA warm-up) and the intervals that ran an
    evaluation.
    """

    def __init__(self) -> None:
        self.marks: list[tuple[int, float]] = []  # (step, seconds)
        self.eval_steps: list[int] = []

    def __call__(self, step: int, history: dict[str, Any]) -> None:
        if len(history["train_loss"]) == len(history["step"]):  # just read back: the GPU has caught up
            self.marks.append((step, time.perf_counter()))
        self.eval_steps = history["eval_step"]

    def median_step_seconds(self) -> float | None:
        per_step = [(t1 - t0) / (s1 - s0) for (s0, t0), (s1, t1) in zip(self.marks, self.marks[1:])
                    if not any(s0 < e <= s1 for e in self.eval_steps)]
        return statistics.median(per_step) if len(per_step) >= 2 else None


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m tfcourse.training.shakespeare",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--recipe", choices=sorted(RECIPES),
                        help="gpu or cpu (default: gpu on CUDA, cpu elsewhere)")
    parser.add_argument("--steps", type=int, help="optimizer steps (default: the recipe's)")
    parser.add_argument("--compile", action=argparse.BooleanOptionalAction, default=None,
                        help="torch.compile the model (default: on for CUDA, off elsewhere)")
    parser.add_argument("--out", type=Path, help="folder for checkpoint.pt and history.json")
    parser.add_argument("--resume", action="store_true", help="continue from --out's checkpoint")
    parser.add_argument("--peak-tflops", type=float,
                        help=f"the device's peak FLOP/s in TFLOP/s, for MFU (default on CUDA: "
                             f"{DEFAULT_PEAK_TFLOPS:g}, an H100/H200's dense bf16 peak; A100: 312)")
    parser.add_argument("--device", help="cuda, cpu, mps... (default: the fastest available)")
    parser.add_argument("--eval-steps", type=int, help="batches per loss estimate (default: the recipe's)")
    parser.add_argument("--data", type=Path,
                        help="train on this text file instead of Tiny Shakespeare")
    parser.add_argument("--seed", type=int, default=1337, help="seed of the run (default 1337)")
    parser.add_argument("--sample-chars", type=int, default=300,
                        help="characters to sample after training (0: none)")
    parser.add_argument("--quiet", action="store_true", help="no progress bar")
    return parser


def configure(args: argparse.Namespace, device: torch.device) -> Recipe:
    """The recipe with the command line's changes applied."""
    recipe = RECIPES[args.recipe] if args.recipe else recipe_for(device)
    if args.steps is not None:
        recipe = recipe.replace(steps=args.steps)
    changes: dict[str, Any] = {
        "device": str(device),
        "compile": device.type == "cuda" if args.compile is None else args.compile,
        "progress": not args.quiet,
        "seed": args.seed,
    }
    if args.eval_steps is not None:
        changes["eval_steps"] = args.eval_steps
    if args.out is not None:
        changes["checkpoint_path"] = str(args.out / "checkpoint.pt")
        changes["best_checkpoint_path"] = str(args.out / "best.pt")  # the weights at the best val loss
        changes["checkpoint_interval"] = max(recipe.train.max_steps // 5, 1)
    return recipe.replace(**changes)


def load_corpus(path: Path | None) -> CharCorpus:
    """The text of --data, or Tiny Shakespeare, encoded character by character."""
    return char_corpus(path.read_text(encoding="utf-8") if path else None)


def build_model(recipe: Recipe, vocab_size: int, seed: int) -> GPT:
    torch.manual_seed(seed)  # the initial weights
    return GPT(recipe.gpt_config(vocab_size))


def describe_run(recipe: Recipe, corpus: CharCorpus, n_params: int, device: torch.device,
                 worker: distributed.Worker | None = None) -> str:
    precision = amp_dtype(device, recipe.train.amp)
    parallel = "" if worker is None else (
        f"\ndata-parallel: {worker.world_size} workers, {recipe.batch_size // worker.world_size} of the batch's "
        f"{recipe.batch_size} windows each (backend {torch.distributed.get_backend()})")
    return (f"{recipe.summary()}\n"
            f"{len(corpus.text):,} characters, vocabulary {corpus.tokenizer.vocab_size}; "
            f"{n_params / 1e6:.2f}M parameters (without the position table); device {device}, "
            f"{'fp32' if precision is None else str(precision).replace('torch.', '') + ' autocast'}, "
            f"compile {'on' if recipe.train.compile else 'off'}{parallel}")


def measure(history: dict[str, Any], timer: StepTimer, model: GPT, recipe: Recipe, n_params: int,
            peak: float | None, total_seconds: float) -> dict[str, Any]:
    """The run's figures: losses, times, steady tokens/s, TFLOP/s and MFU (None where not measured)."""
    step_seconds = timer.median_step_seconds()
    steady = recipe.tokens_per_step / step_seconds if step_seconds else history["tokens_per_sec"]
    achieved_tflops = flops_per_token(n_params, recipe.model) * steady / 1e12
    figures = {
        "best_val_loss": history["best_val_loss"],
        "best_step": history["best_step"],
        "val_loss": history["val_loss"][-1],
        "train_loss": history["eval_train_loss"][-1],
        "steps": history["step"][-1] if history["step"] else 0,
        "train_seconds": history["seconds"],
        "overhead_seconds": dict(history["overhead_seconds"]),  # data, evaluation, checkpoints
        "total_seconds": total_seconds,
        "tokens_per_sec": steady,
        "tokens_per_sec_all_steps": history["tokens_per_sec"],
        "flops_per_token": flops_per_token(n_params, recipe.model),
        "achieved_tflops": achieved_tflops,
        "peak_tflops": peak,
        "mfu": achieved_tflops / peak if peak else None,
    }
    if not timer.marks:  # a finished checkpoint: this call measured no speed
        figures.update(tokens_per_sec=None, tokens_per_sec_all_steps=None, achieved_tflops=None, mfu=None)
    return figures


def report(figures: dict[str, Any], peak_is_default: bool) -> str:
    lines = [f"best val loss {figures['best_val_loss']:.4f} at step {figures['best_step']:,}",
             f"final val loss {figures['val_loss']:.4f} (train {figures['train_loss']:.4f}) "
             f"after {figures['steps']:,} steps",
             f"wall time {figures['train_seconds']:.1f} s training and evaluation, "
             f"{figures['total_seconds']:.1f} s in all"]
    overhead = figures["overhead_seconds"]
    if figures["train_seconds"] > 0:
        share = sum(overhead.values()) / figures["train_seconds"]
        parts = ", ".join(f"{name} {seconds:.1f} s" for name, seconds in overhead.items())
        lines.append(f"the loop's own work {100 * share:.1f}% of it ({parts}; target under 5%)")
    if figures["tokens_per_sec"] is None:
        lines.append(f"nothing left to train: the checkpoint had finished its {figures['steps']:,} steps")
        return "\n".join(lines)
    lines.append(f"tokens/s {figures['tokens_per_sec']:,.0f} (steady state: median step); "
                 f"{figures['tokens_per_sec_all_steps']:,.0f} over all steps, first ones included")
    achieved, peak = figures["achieved_tflops"], figures["peak_tflops"]
    if peak:
        lines.append(f"MFU {100 * figures['mfu']:.1f}% = {achieved:.3g} TFLOP/s of a {peak:g} TFLOP/s peak"
                     + (" (default: H100/H200-class dense bf16; set --peak-tflops for another GPU)"
                        if peak_is_default else ""))
    else:
        lines.append(f"MFU n/a: achieved {achieved:.3g} TFLOP/s; pass --peak-tflops with this "
                     f"device's peak to get the utilisation")
    return "\n".join(lines)


def sample_text(model: GPT, corpus: CharCorpus, n_chars: int, seed: int, device: torch.device) -> str:
    tokenizer = corpus.tokenizer
    start = "\n" if "\n" in tokenizer.stoi else corpus.text[0]  # a new line, as the plays' speeches begin
    prompt = torch.tensor([tokenizer.encode(start)], device=device)
    sample = generate(model, prompt, n_chars, temperature=0.8, top_k=40, use_cache=False,
                      generator=torch.Generator(device=device).manual_seed(seed))
    return tokenizer.decode(sample[0].tolist())


def save_record(out: Path, recipe: Recipe, model: GPT, tokenizer: CharTokenizer, figures: dict[str, Any],
                history: dict[str, Any]) -> Path:
    """history.json beside the checkpoint: the recipe, the vocabulary, the figures and the curves."""
    out.mkdir(parents=True, exist_ok=True)
    record = {"recipe": {"name": recipe.name, "batch_size": recipe.batch_size,
                         "model": dataclasses.asdict(model.config),
                         "train": dataclasses.asdict(recipe.train)},
              "vocabulary": tokenizer.itos, "figures": figures, "history": history}
    path = out / "history.json"
    path.write_text(json.dumps(record, indent=1), encoding="utf-8")
    return path


def _silent(*_: Any, **__: Any) -> None:
    """print() for the workers other than rank 0: one report per run, not one per worker."""


# build(recipe, vocab_size, seed) -> (the model to train, a description to print or None)
ModelBuilder = Callable[[Recipe, int, int], tuple[nn.Module, str | None]]


def main(argv: list[str] | None = None, build: ModelBuilder | None = None) -> int:
    """The script; `build` makes the model instead of build_model (tfcourse.course.train_yours: your GPT)."""
    parser = build_parser()
    args = parser.parse_args(argv)
    if args.resume and args.out is None:
        parser.error("--resume needs --out: the folder that holds the checkpoint")
    started = time.perf_counter()
    device = pick_device(args.device)
    worker = distributed.start(device.type)  # None unless torchrun started this process
    if worker is not None and device.type == "cuda":
        device = torch.device("cuda", worker.local_rank)  # one GPU per worker
    try:
        return _train_and_report(args, parser, device, worker, started, build)
    finally:
        distributed.stop()


def _train_and_report(args: argparse.Namespace, parser: argparse.ArgumentParser, device: torch.device,
                      worker: distributed.Worker | None, started: float, build: ModelBuilder | None) -> int:
    say = print if worker is None or worker.rank == 0 else _silent
    recipe = configure(args, device)
    if worker is not None:
        if recipe.batch_size % worker.world_size:
            parser.error(f"the recipe's batch of {recipe.batch_size} does not split into {worker.world_size} "
                         "equal shards: choose a number of workers that divides it")
    if device.type == "cuda":
        # fp32 matmuls (outside autocast) may use TF32 tensor cores: ~10 bits of mantissa is plenty.
        torch.set_float32_matmul_precision("high")
    try:
        corpus = load_corpus(args.data)
    except DatasetUnavailableError as error:  # offline without a copy: say where to put one
        print(error, file=sys.stderr)
        return 1

    if device.type == "cuda":
        corpus = corpus.to(device)  # 1M token ids, 8 MB: on the GPU once, no copy per step
    if build is None:
        model = build_model(recipe, corpus.tokenizer.vocab_size, args.seed)
    else:
        model, description = build(recipe, corpus.tokenizer.vocab_size, args.seed)
        if description:
            say(description)
    n_params = non_embedding_parameters(model)
    say(describe_run(recipe, corpus, n_params, device, worker))
    get_batch = corpus.batches(recipe.batch_size, recipe.context)  # the global batch
    if worker is not None:
        get_batch = distributed.sharded(get_batch, worker)  # this worker's rows of it
    timer = StepTimer()
    history = train(model, get_batch, recipe.train, resume=args.resume, on_step=timer)

    peak = args.peak_tflops if args.peak_tflops is not None else (
        DEFAULT_PEAK_TFLOPS if device.type == "cuda" else None)
    figures = measure(history, timer, model, recipe, n_params, peak, time.perf_counter() - started)
    if worker is not None:
        figures["workers"] = worker.world_size
    say(report(figures, peak_is_default=args.peak_tflops is None))
    if args.sample_chars > 0 and say is print:
        print("sample (temperature 0.8, top-k 40):\n" + sample_text(model, corpus, args.sample_chars,
                                                                     args.seed, device))
    if args.out is not None and say is print:
        path = save_record(args.out, recipe, model, corpus.tokenizer, figures, history)
        print(f"wrote {args.out / 'checkpoint.pt'}, {args.out / 'best.pt'} (step {figures['best_step']:,}) and {path}")
    return 0


if __name__ == "__main__":
    distributed.exit_script(main())  # under torchrun: no interpreter shutdown, which can abort in gloo
