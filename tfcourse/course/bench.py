"""Benchmarks that print figures: `python -m tfcourse.course.bench` (or `tfcourse bench`, `make bench`).

Timings on shared machines are noisy, so these are scripts that report, not tests that pass or
fail; compare figures taken in one run. `--output FILE` also writes the figures to a JSON file
with the machine they were taken on (CPUs, torch), the date, the options and the run's length;
`make bench` writes benchmarks/latest.json, the file the README's table of measured figures
quotes (tests/test_readme_figures.py compares the two; `--table FILE` prints that table).
Targets (2-core CPU; TARGETS):
- BPE training on Tiny Shakespeare to a vocabulary of 1,000: at most as long as Hugging Face's Rust
  trainer (`tokenizers`, ByteLevel, default threads; best of 3 each, alternating; ratio <= 1.0), and
  on its first 130 kB (the size of CS336's corpus) to 500: <= 0.2 s;
- encoding Tiny Shakespeare with a 2,000-token vocabulary the course trains on it: at least as many
  MB/s as OpenAI's tiktoken given the same vocabulary (ratio >= 1.0; the same ids);
- GPT training throughput, CPU recipe (4 layers, 4 heads, d_model 128, context 64, batch 12): >= 12,000 tokens/s,
  and at least as fast per step as the same-size model built from PyTorch's own modules, trained by
  the plain loop a user would write (ratio >= 1.0);
- generating 500 tokens with the key/value cache vs without, on one thread, the same tokens: >= 15x faster;
- `--target-loss 1.88`: wall time until the CPU recipe's val loss first falls below 1.88 (<= 80 s);
- the first exercise check in a fresh process (lesson 05's LayerNorm check on a correct LayerNorm),
  timed after `import torch`: <= 0.3 s;
- `tfcourse grade` of lesson 03's complete notebook, its HTML report included, against plain
  `nbgrader autograde` of the same notebook in a prepared course (new processes, alternating, the
  medians of 3 each; run from the course folder): ratio <= 1.0.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import nn

from ..data import CharCorpus, char_corpus, load_tiny_shakespeare
from ..decoding import generate
from ..models import GPT
from ..training.recipes import CPU_RECIPE  # nanoGPT's CPU recipe; lesson 08 trains it for 2,000 steps
from ..tokenizers import GPT2_SPLIT_PATTERN, BPETokenizer, train_bpe
from ..training.loop import TrainConfig, train

# The targets on a 2-core CPU (the README's "target" column, the printed lines, the JSON file).
TARGETS = {
    "bpe_ratio": 1.0,  # BPE training, Tiny Shakespeare -> 1,000, train_bpe's time over the Rust trainer's: at most
    "bpe_small_seconds": 0.2,  # BPE training, 130 kB (CS336's corpus size) -> 500: at most
    "encode_ratio": 1.0,  # BPETokenizer.encode's MB/s over tiktoken's, same vocabulary: at least
    "tokens_per_sec": 12_000,  # GPT training throughput, CPU recipe: at least
    "ratio": 1.0,  # tfcourse's tokens/s over the plain PyTorch model's: at least
    "seconds_to_loss": 80.0,  # wall time until the CPU recipe's val loss first falls below 1.88: at most
    "kv_speedup": 15.0,  # generating 500 tokens with the KV cache vs without, one thread: at least
    "first_check_seconds": 0.3,  # the first exercise check in a fresh process: at most
    "grade_ratio": 1.0,  # `tfcourse grade` of a lesson (its report included) over plain `nbgrader autograde`: at most
}
DEFAULT_TARGET_LOSS = 1.88  # nanoGPT's CPU figure
BENCHMARKS = ["bpe", "encode", "train", "target", "kv", "check", "grade"]


def _timed(run: Callable[[], Any]) -> tuple[float, Any]:
    """(seconds, result) of one call of `run`."""
    started = time.perf_counter()
    result = run()
    return time.perf_counter() - started, result


def _train_rust_bpe(text: str, vocab_size: int) -> None:
    """Hugging Face `tokenizers`' Rust trainer with GPT-2's byte-level pre-tokenizer, at its default
    thread count: the same vocabulary (256 bytes + merges + <|endoftext|>) as train_bpe's."""
    from tokenizers import Tokenizer, models, pre_tokenizers, trainers

    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    trainer = trainers.BpeTrainer(vocab_size=vocab_size, special_tokens=["<|endoftext|>"], show_progress=False,
                                  initial_alphabet=pre_tokenizers.ByteLevel.alphabet())
    tokenizer.train_from_iterator([text], trainer=trainer)


def bench_bpe(text: str, vocab_size: int = 1000, repeats: int = 3, small_bytes: int = 130_000,
              small_vocab_size: int = 500) -> dict:
    """Best of `repeats` runs of train_bpe (pre-tokenisation included) on `text`, alternating with
    Hugging Face's Rust trainer on the same text where `tokenizers` is installed; and train_bpe on the
    first `small_bytes` of the text (the size of CS336's corpus.en) to `small_vocab_size`."""
    ours, rust, small = [], [], []
    for _ in range(repeats):
        seconds, (vocab, merges) = _timed(lambda: train_bpe(text, vocab_size, ["<|endoftext|>"]))
        ours.append(seconds)
        small.append(_timed(lambda: train_bpe(text[:small_bytes], small_vocab_size, ["<|endoftext|>"]))[0])
        try:
            rust.append(_timed(lambda: _train_rust_bpe(text, vocab_size))[0])
        except ImportError:  # `tokenizers` comes with the "pretrained" extra
            pass
    result = {"seconds": min(ours), "vocab_size": len(vocab), "merges": len(merges), "small_seconds": min(small),
              "small_vocab_size": small_vocab_size, "small_bytes": len(text[:small_bytes])}
    if rust:
        result.update(rust_seconds=min(rust), ratio=min(ours) / min(rust))
    return result


def _tiktoken_encoding(tokenizer: BPETokenizer):
    """OpenAI's tiktoken with the same byte-level vocabulary, built in process (no download)."""
    import tiktoken

    ranks = {token: i for i, token in tokenizer.vocab.items() if i < 256 + len(tokenizer.merges)}
    return tiktoken.Encoding(name="tfcourse", pat_str=GPT2_SPLIT_PATTERN, mergeable_ranks=ranks, special_tokens={})


def bench_encode(text: str, vocab_size: int = 2000, repeats: int = 3) -> dict:
    """MB/s of BPETokenizer.encode on `text` with a vocabulary the course trains on it, best of `repeats`,
    alternating with tiktoken on the same vocabulary where it is installed (the ids must be the same).
    Before them, the tokenizer's first call is timed on its own: it merges each distinct pre-token once
    and keeps the result (the pre-token cache); the timed calls find them there."""
    tokenizer = BPETokenizer.train(text, vocab_size)
    megabytes = len(text.encode("utf-8")) / 1e6
    try:
        encoding = _tiktoken_encoding(tokenizer)
    except ImportError:  # tiktoken comes with the "pretrained" extra
        encoding = None
    first_call_seconds, _ = _timed(lambda: tokenizer.encode(text))
    ours, theirs = [], []
    for _ in range(repeats):
        seconds, ids = _timed(lambda: tokenizer.encode(text))
        ours.append(seconds)
        if encoding is not None:
            seconds, their_ids = _timed(lambda: encoding.encode_ordinary(text))
            theirs.append(seconds)
    result = {"mb_per_sec": megabytes / min(ours), "first_call_seconds": first_call_seconds, "megabytes": megabytes,
              "vocab_size": vocab_size}
    if encoding is not None:
        if their_ids != ids:
            raise AssertionError("tiktoken with the same vocabulary gave other ids than BPETokenizer.encode")
        result.update(tiktoken_mb_per_sec=megabytes / min(theirs), ratio=min(theirs) / min(ours))
    return result


def bench_training(corpus: CharCorpus, steps: int = 300) -> dict:
    """Tokens per second of the full training loop (tfcourse.training.loop) on the CPU recipe."""
    model = GPT(CPU_RECIPE.gpt_config(corpus.tokenizer.vocab_size))
    batches = corpus.batches(CPU_RECIPE.batch_size, CPU_RECIPE.context)
    config = dataclasses.replace(CPU_RECIPE.train, max_steps=steps, warmup_steps=min(100, steps),
                                 eval_interval=steps, eval_steps=5, device="cpu", progress=False)
    history = train(model, batches, config)
    return {"tokens_per_sec": history["tokens_per_sec"], "steps": steps, "seconds": history["seconds"]}


class PlainGPT(nn.Module):
    """The CPU recipe's GPT as a user would build it from PyTorch's own modules: nn.Embedding for tokens
    and positions, nn.TransformerEncoderLayer (pre-LN, GELU, batch_first) with a causal mask, a final
    LayerNorm and an output layer tied to the token table. The baseline of `bench_baseline`."""

    def __init__(self, vocab_size: int, max_len: int, d_model: int, n_heads: int, n_layers: int):
        super().__init__()
        self.tokens = nn.Embedding(vocab_size, d_model)
        self.positions = nn.Embedding(max_len, d_model)
        layer = nn.TransformerEncoderLayer(d_model, n_heads, 4 * d_model, dropout=0.0, activation="gelu",
                                           batch_first=True, norm_first=True)
        self.blocks = nn.TransformerEncoder(layer, n_layers, norm=nn.LayerNorm(d_model), enable_nested_tensor=False)
        self.head = nn.Linear(d_model, vocab_size, bias=False)
        self.head.weight = self.tokens.weight

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        length = ids.shape[1]
        x = self.tokens(ids) + self.positions(torch.arange(length, device=ids.device))  # (B, T, d_model)
        mask = nn.Transformer.generate_square_subsequent_mask(length, device=ids.device)  # (T, T)
        return self.head(self.blocks(x, mask=mask, is_causal=True))  # (B, T, V)


def bench_baseline(corpus: CharCorpus, steps: int = 300) -> dict:
    """Tokens per second of PlainGPT trained by a plain loop (AdamW with torch's default kernel, as
    nanoGPT's train.py makes it on a CPU; clipping, cross-entropy, no evaluation): what the course's
    model and loop are compared with, in the same process."""
    m = CPU_RECIPE.model
    torch.manual_seed(0)
    model = PlainGPT(corpus.tokenizer.vocab_size, m.max_len, m.d_model, m.n_heads, m.n_layers)
    optimizer = torch.optim.AdamW(model.parameters(), lr=CPU_RECIPE.train.lr, betas=CPU_RECIPE.train.betas,
                                  weight_decay=CPU_RECIPE.train.weight_decay)
    batches = corpus.batches(CPU_RECIPE.batch_size, CPU_RECIPE.context)
    generator = torch.Generator().manual_seed(0)
    started = time.perf_counter()
    for _ in range(steps):
        x, y = batches("train", generator)
        logits = model(x)  # (B, T, V)
        loss = F.cross_entropy(logits.flatten(0, 1), y.flatten())
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), CPU_RECIPE.train.grad_clip)
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
    seconds = time.perf_counter() - started
    return {"tokens_per_sec": steps * CPU_RECIPE.tokens_per_step / seconds, "steps": steps, "seconds": seconds}


def bench_training_against_plain(corpus: CharCorpus, steps: int = 300, rounds: int = 3) -> dict:
    """`bench_training` and `bench_baseline` in turn, `rounds` times, steps // rounds steps each, so that a
    machine that speeds up or slows down during the run slows both alike: each side's median round, and
    the median of the rounds' ratios (tfcourse / plain)."""
    per_round = max(steps // rounds, 1)
    ours, plain = [], []
    for _ in range(rounds):
        ours.append(bench_training(corpus, per_round))
        plain.append(bench_baseline(corpus, per_round))
    ratios = [mine["tokens_per_sec"] / theirs["tokens_per_sec"] for mine, theirs in zip(ours, plain)]

    def median_round(runs: list[dict]) -> dict:
        return sorted(runs, key=lambda run: run["tokens_per_sec"])[len(runs) // 2]

    return {"tfcourse": median_round(ours), "plain": median_round(plain), "ratio": statistics.median(ratios),
            "rounds": rounds}


class _TargetReached(Exception):
    pass


def bench_time_to_loss(corpus: CharCorpus, target: float, eval_interval: int = 50, eval_steps: int = 20) -> dict:
    """Wall time (evaluations included) until the CPU recipe's val loss first falls below `target`."""
    torch.manual_seed(1337)
    model = GPT(CPU_RECIPE.gpt_config(corpus.tokenizer.vocab_size))
    config: TrainConfig = dataclasses.replace(CPU_RECIPE.train, eval_interval=eval_interval, eval_steps=eval_steps,
                                              device="cpu", progress=False, seed=1337)
    started = time.perf_counter()
    reached: dict = {}

    def stop_at_target(step: int, history: dict) -> None:
        if history["eval_step"] and history["eval_step"][-1] == step and history["val_loss"][-1] < target:
            reached.update(step=step, val_loss=history["val_loss"][-1], seconds=time.perf_counter() - started)
            raise _TargetReached

    try:
        history = train(model, corpus.batches(CPU_RECIPE.batch_size, CPU_RECIPE.context), config,
                        on_step=stop_at_target)
        reached.update(step=None, val_loss=history["best_val_loss"], seconds=time.perf_counter() - started)
    except _TargetReached:
        pass
    return {"target": target, **reached}


@torch.no_grad()
def bench_kv_cache(new_tokens: int = 500, repeats: int = 2) -> dict:
    """Seconds to generate `new_tokens` greedily with and without the key/value cache, on one thread
    (one sequence: a second thread only adds overhead to its small matrix products), in turn, the best
    of `repeats` each; the two must give the same tokens."""
    torch.manual_seed(0)
    config = dataclasses.replace(CPU_RECIPE.model, max_len=new_tokens + 1)
    model = GPT(config).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    tokens = {}
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    try:
        runs: dict[bool, list[float]] = {True: [], False: []}
        for _ in range(repeats):  # in turn, so that a machine that slows down mid-run slows both alike
            for use_cache in (True, False):
                run_seconds, tokens[use_cache] = _timed(
                    lambda: generate(model, prompt, new_tokens, temperature=0, use_cache=use_cache))
                runs[use_cache].append(run_seconds)
        seconds = {use_cache: min(times) for use_cache, times in runs.items()}  # the least disturbed run
    finally:
        torch.set_num_threads(threads)
    if not torch.equal(tokens[True], tokens[False]):
        raise AssertionError("generation with the KV cache gave other tokens than without it")
    return {"with_cache": seconds[True], "without_cache": seconds[False],
            "speedup": seconds[False] / seconds[True], "new_tokens": new_tokens}


# Run in a fresh interpreter: what a learner's first test cell pays (the checks' imports, their
# first use of torch's machinery), after the setup cell has imported torch.
FIRST_CHECK = """
import contextlib, io, json, time
import torch
from torch import nn

class LayerNorm(nn.Module):  # a learner's correct answer (the reference itself is off-limits)
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.weight, self.bias, self.eps = nn.Parameter(torch.ones(d_model)), nn.Parameter(torch.zeros(d_model)), eps

    def forward(self, x):
        mean, var = x.mean(-1, keepdim=True), x.var(-1, keepdim=True, unbiased=False)
        return self.weight * (x - mean) / torch.sqrt(var + self.eps) + self.bias

started = time.perf_counter()
from tfcourse.checks.blocks import check_layer_norm
with contextlib.redirect_stdout(io.StringIO()):
    check_layer_norm(LayerNorm)
first = time.perf_counter() - started
started = time.perf_counter()
with contextlib.redirect_stdout(io.StringIO()):
    check_layer_norm(LayerNorm)
print(json.dumps({"first": first, "second": time.perf_counter() - started}))
"""


def bench_first_check(repeats: int = 3) -> dict:
    """Seconds of the first LayerNorm check (its import included) in a fresh process, after `import
    torch`, and of the second one; the best of `repeats` fresh processes."""
    runs = [json.loads(subprocess.run([sys.executable, "-c", FIRST_CHECK], capture_output=True, text=True,
                                      check=True).stdout.strip().splitlines()[-1]) for _ in range(repeats)]
    return {"first": min(r["first"] for r in runs), "second": min(r["second"] for r in runs), "repeats": repeats}


def bench_grading(lesson: str = "03_attention", pairs: int = 3, course: Path = Path(".")) -> dict:
    """Seconds of `tfcourse grade` on the lesson's complete notebook (its report included) and of
    `nbgrader autograde` of the same notebook in a course prepared for it, each a new process,
    alternating, `pairs` of each: what a learner's regrade and an instructor's autograde cost once the
    lesson has been generated for grading."""
    import shutil
    import tempfile

    notebook = (course / "solutions" / lesson / f"{lesson}.ipynb").resolve()

    def run(*args: str, cwd: Path) -> None:  # (the course's nbgrader_config.py puts this environment on PATH)
        subprocess.run([sys.executable, "-m", *args], cwd=cwd, check=True, capture_output=True)

    with tempfile.TemporaryDirectory(prefix="tfcourse-bench-grade-") as tmp:
        prepared = Path(tmp) / "course"
        shutil.copytree(notebook.parent, prepared / "solutions" / lesson)
        shutil.copy(course / "nbgrader_config.py", prepared)
        (prepared / "submitted" / "learner" / lesson).mkdir(parents=True)
        shutil.copy(notebook, prepared / "submitted" / "learner" / lesson)
        run("nbgrader", "generate_assignment", lesson, "--force", cwd=prepared)
        grade = ("tfcourse.course.cli", "grade", str(notebook), "--report-dir", str(Path(tmp) / "reports"))
        autograde = ("nbgrader", "autograde", lesson, "--force")
        run(*autograde, "--create", cwd=prepared)  # once each untimed: the student's row, the cached lesson
        run(*grade, cwd=course)
        ours, theirs = [], []
        for _ in range(pairs):
            ours.append(_timed(lambda: run(*grade, cwd=course))[0])
            theirs.append(_timed(lambda: run(*autograde, cwd=prepared))[0])
    grade_seconds, nbgrader_seconds = statistics.median(ours), statistics.median(theirs)
    return {"lesson": lesson, "pairs": pairs, "grade": grade_seconds, "nbgrader": nbgrader_seconds,
            "ratio": grade_seconds / nbgrader_seconds, "grade_runs": ours, "nbgrader_runs": theirs}


def machine() -> dict:
    """What the figures were taken on: CPUs (all, and those this process may use), the CPU's name,
    torch's version and threads, Python, the platform."""
    cpu = platform.processor()
    try:
        with open("/proc/cpuinfo", encoding="utf-8") as cpuinfo:
            cpu = next((line.split(":", 1)[1].strip() for line in cpuinfo if line.startswith("model name")), cpu)
    except OSError:
        pass
    usable = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count()
    return {"cpu_count": os.cpu_count(), "cpus_usable": usable, "cpu": cpu, "torch": torch.__version__,
            "torch_threads": torch.get_num_threads(), "python": platform.python_version(),
            "platform": platform.platform()}


def write_report(path: Path, report: dict) -> None:
    """`report` as JSON at `path` (its folder made if need be), whole or not at all."""
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(path.name + ".partial")
    partial.write_text(json.dumps(report, indent=2) + "\n", encoding="utf-8")
    partial.replace(path)


def _number(value: float, decimals: int) -> str:
    return f"{value:,.{decimals}f}"


def readme_table(report: dict) -> str:
    """The README's table of benchmark figures from a report (`--output`'s file): the line naming
    the run (its command, date and length) and the machine, then one row per benchmark with its
    target and what was measured."""
    m, results, t = report["machine"], report["results"], report["targets"]
    lines = [f"Measured by `{report['command']}` on {report['date'][:10]} in {report['seconds']:.0f} s: "
             f"{m['cpu_count']} CPUs ({m['cpu']}), "
             f"torch {m['torch']}, {m['torch_threads']} threads.", "",
             "| benchmark | target on a 2-core CPU | measured |", "| --- | --- | --- |"]
    if "bpe" in results:
        r = results["bpe"]
        against = (f"{_number(r['ratio'], 2)} ({_number(r['seconds'], 2)} s vs {_number(r['rust_seconds'], 2)} s)"
                   if "ratio" in r else f"{_number(r['seconds'], 2)} s (`tokenizers` not installed)")
        lines.append("| BPE training on Tiny Shakespeare to a vocabulary of 1,000, against Hugging Face's Rust "
                     "trainer (`tokenizers`, ByteLevel, default threads; best of 3 each, alternating) | "
                     f"ratio ≤ {t['bpe_ratio']:g} | {against} |")
        lines.append(f"| the same on its first 130 kB (CS336's corpus size) to a vocabulary of 500 | "
                     f"≤ {t['bpe_small_seconds']:g} s | {_number(r['small_seconds'], 3)} s |")
    if "encode" in results:
        r = results["encode"]
        against = (f"{_number(r['ratio'], 2)} ({_number(r['mb_per_sec'], 1)} MB/s vs "
                   f"{_number(r['tiktoken_mb_per_sec'], 1)} MB/s)" if "ratio" in r else
                   f"{_number(r['mb_per_sec'], 1)} MB/s (`tiktoken` not installed)")
        lines.append("| encoding Tiny Shakespeare with a 2,000-token vocabulary trained on it, against OpenAI's "
                     "`tiktoken` with the same vocabulary (the same ids; best of 3 each, alternating, after a first "
                     "call that fills the pre-token cache: its time is the figure after the semicolon) | "
                     f"ratio ≥ {t['encode_ratio']:g} | {against}; {_number(r['first_call_seconds'], 2)} s |")
    if "train" in results:
        train_result = results["train"]
        lines.append("| GPT training throughput, CPU recipe (4 layers, 4 heads, d_model 128, context 64, batch 12) | "
                     f"≥ {t['tokens_per_sec']:,} tokens/s | {_number(train_result['tfcourse']['tokens_per_sec'], 0)} "
                     f"tokens/s (median of {train_result['rounds']} rounds of {train_result['tfcourse']['steps']:,} "
                     "steps) |")
        lines.append("| the same, against the same-size GPT built from PyTorch's own modules "
                     "(`nn.TransformerEncoderLayer`, pre-LN, GELU, tied output) in a plain loop, AdamW with the same "
                     "settings (torch's default kernel, as nanoGPT's on a CPU; the course's loop takes the fused one), "
                     "the two in turn (the median of the rounds' ratios) | "
                     f"ratio ≥ {t['ratio']:.1f} | {_number(train_result['ratio'], 2)} "
                     f"({_number(train_result['plain']['tokens_per_sec'], 0)} tokens/s) |")
    if "target" in results:
        r = results["target"]
        reached = (f"{_number(r['seconds'], 1)} s (val {_number(r['val_loss'], 3)} < {r['target']:g} at step "
                   f"{r['step']:,})" if r["step"] is not None else
                   f"never below {r['target']:g}: best val {_number(r['val_loss'], 3)} in {_number(r['seconds'], 1)} s")
        lines.append(f"| wall time until the CPU recipe's val loss first falls below {r['target']:g} "
                     f"(`--target-loss`) | ≤ {t['seconds_to_loss']:g} s | {reached} |")
    if "kv" in results:
        r = results["kv"]
        lines.append(f"| generating 500 tokens with the KV cache vs without (one thread, the same tokens; in turn, best of 2 "
                     "each) | "
                     f"≥ {t['kv_speedup']:g}× faster | "
                     f"{_number(r['speedup'], 1)}× ({_number(r['with_cache'], 2)} s vs "
                     f"{_number(r['without_cache'], 2)} s) |")
    if "check" in results:
        r = results["check"]
        lines.append("| the first exercise check in a fresh process (lesson 05's LayerNorm check, timed after "
                     f"`import torch`; `--only check`) | ≤ {t['first_check_seconds']:g} s | "
                     f"{_number(r['first'], 2)} s (the second {_number(r['second'], 3)} s) |")
    if "grade" in results:
        r = results["grade"]
        lines.append(f"| `tfcourse grade` of lesson {r['lesson'][:2]}'s complete notebook, its report included, vs plain "
                     f"`nbgrader autograde` of it (medians of {r['pairs']}, alternating; `--only grade`) | "
                     f"ratio ≤ {t['grade_ratio']:g} | {_number(r['ratio'], 2)} ({_number(r['grade'], 1)} s vs "
                     f"{_number(r['nbgrader'], 1)} s) |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    parser = argparse.ArgumentParser(prog="tfcourse bench", description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=BENCHMARKS, action="append",
                        help="run only this benchmark (repeatable); default: all")
    parser.add_argument("--train-steps", type=int, default=300,
                        help="training steps to time, in 3 rounds each for the course's loop and the plain one "
                             "(default 300)")
    parser.add_argument("--target-loss", type=float, default=DEFAULT_TARGET_LOSS,
                        help=f"val loss for the time-to-target benchmark (default {DEFAULT_TARGET_LOSS}, "
                             "nanoGPT's CPU figure)")
    parser.add_argument("--output", metavar="PATH", type=Path,
                        help="also write the figures, the machine, the options, the date and the run's length "
                             "to this JSON file (`make bench`: benchmarks/latest.json); default: print only")
    parser.add_argument("--table", metavar="PATH", type=Path,
                        help="print the README's table of figures from a file written by --output, and exit "
                             "(runs nothing)")
    args = parser.parse_args(argv)
    if args.table is not None:
        print(readme_table(json.loads(args.table.read_text(encoding="utf-8"))))
        return 0
    chosen = args.only or BENCHMARKS
    t = TARGETS
    started = time.perf_counter()
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    results: dict = {}
    text = load_tiny_shakespeare() if {"bpe", "encode", "train", "target"} & set(chosen) else ""
    corpus = char_corpus(text) if {"train", "target"} & set(chosen) else None  # encoded once for both
    if "bpe" in chosen:
        r = results["bpe"] = bench_bpe(text)
        rust = (f"Hugging Face's Rust trainer {r['rust_seconds']:.2f} s: ratio {r['ratio']:.2f}   "
                f"(target <= {t['bpe_ratio']:g})" if "ratio" in r else "(tokenizers not installed: no Rust figure)")
        print(f"BPE training, Tiny Shakespeare -> vocab {r['vocab_size']} ({r['merges']} merges), best of 3: "
              f"train_bpe {r['seconds']:.2f} s, {rust}")
        print(f"BPE training, its first {r['small_bytes']:,} characters -> vocab {r['small_vocab_size']}: "
              f"{r['small_seconds']:.3f} s   (target <= {t['bpe_small_seconds']:g} s)")
    if "encode" in chosen:
        r = results["encode"] = bench_encode(text)
        theirs = (f"tiktoken {r['tiktoken_mb_per_sec']:.1f} MB/s: ratio {r['ratio']:.2f}   (target >= "
                  f"{t['encode_ratio']:g})" if "ratio" in r else "(tiktoken not installed: no figure to compare)")
        print(f"Encoding Tiny Shakespeare ({r['megabytes']:.1f} MB, vocab {r['vocab_size']:,}), best of 3: "
              f"BPETokenizer {r['mb_per_sec']:.1f} MB/s, {theirs}; its first call (empty pre-token cache) "
              f"{r['first_call_seconds']:.2f} s, before the timed ones")
    if "train" in chosen:
        r = results["train"] = bench_training_against_plain(corpus, args.train_steps)
        ours, plain = r["tfcourse"], r["plain"]
        print(f"GPT training, CPU recipe, {r['rounds']} rounds of {ours['steps']} steps, median: "
              f"{ours['tokens_per_sec']:,.0f} tokens/s ({1000 * CPU_RECIPE.tokens_per_step / ours['tokens_per_sec']:.1f} "
              f"ms/step)   (target >= {t['tokens_per_sec']:,} tokens/s)")
        print(f"the same model from PyTorch's modules, plain loop, in turn with it: {plain['tokens_per_sec']:,.0f} "
              f"tokens/s ({1000 * CPU_RECIPE.tokens_per_step / plain['tokens_per_sec']:.1f} ms/step); "
              f"ratio tfcourse / plain, median of the rounds {r['ratio']:.2f}   (target >= {t['ratio']:.1f})")
    if "target" in chosen:
        r = results["target"] = bench_time_to_loss(corpus, args.target_loss)
        if r["step"] is None:
            print(f"CPU recipe never reached val {r['target']}: best {r['val_loss']:.3f} in {r['seconds']:.1f} s")
        else:
            print(f"CPU recipe reached val {r['val_loss']:.3f} < {r['target']} at step {r['step']:,} after "
                  f"{r['seconds']:.1f} s, evaluations included   (target <= {t['seconds_to_loss']:g} s)")
    if "kv" in chosen:
        r = results["kv"] = bench_kv_cache()
        print(f"Generating {r['new_tokens']} tokens: {r['with_cache']:.2f} s with the KV cache, "
              f"{r['without_cache']:.2f} s without: {r['speedup']:.1f}x faster   (target >= {t['kv_speedup']:g}x)")
    if "check" in chosen:
        r = results["check"] = bench_first_check()
        print(f"First exercise check in a fresh process (LayerNorm, after import torch; best of {r['repeats']}): "
              f"{r['first']:.2f} s, the second {r['second']:.3f} s   (target <= {t['first_check_seconds']:g} s)")
    if "grade" in chosen and not Path("solutions", "03_attention").is_dir():
        print("Grading: not run (it grades solutions/03_attention: run from the course folder)")
    elif "grade" in chosen:
        r = results["grade"] = bench_grading()
        print(f"Grading lesson {r['lesson']}'s complete notebook (medians of {r['pairs']}, alternating): tfcourse grade "
              f"{r['grade']:.1f} s with its report, nbgrader autograde {r['nbgrader']:.1f} s: ratio {r['ratio']:.2f}   "
              f"(target <= {t['grade_ratio']:g})")
    if args.output is not None:
        report = {"command": " ".join(["tfcourse bench", *argv]),
                  "date": datetime.datetime.now(datetime.timezone.utc).isoformat(timespec="seconds"),
                  "seconds": time.perf_counter() - started, "machine": machine(),
                  "options": {"only": chosen, "train_steps": args.train_steps, "target_loss": args.target_loss},
                  "targets": TARGETS, "results": results}
        write_report(args.output, report)
        print(f"figures written to {args.output}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
