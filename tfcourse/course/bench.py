"""Benchmarks that print figures: `python -m tfcourse.course.bench` (or `tfcourse bench`, `make bench`).

Timings on shared machines are noisy, so these are scripts that report, not tests that pass or
fail; compare figures taken in one run. Targets (2-core CPU):
- BPE training on Tiny Shakespeare to a vocabulary of 1,000: <= 10 s;
- GPT training throughput, CPU recipe (4 layers, 4 heads, d_model 128, context 64, batch 12): >= 12,000 tokens/s,
  and at least as fast per step as the same-size model built from PyTorch's own modules, trained by
  the plain loop a user would write (ratio >= 1.0);
- generating 500 tokens with the key/value cache vs without: >= 5x faster;
- `--target-loss 1.88`: wall time until the CPU recipe's val loss first falls below 1.88 (<= 80 s);
- the first exercise check in a fresh process (lesson 05's LayerNorm check on a correct LayerNorm),
  timed after `import torch`: <= 0.3 s.
"""

from __future__ import annotations

import argparse
import dataclasses
import json
import subprocess
import sys
import time

import torch
import torch.nn.functional as F
from torch import nn

from ..data import CharCorpus, char_corpus, load_tiny_shakespeare
from ..decoding import generate
from ..models import GPT
from ..training.recipes import CPU_RECIPE  # nanoGPT's CPU recipe; lesson 08 trains it for 2,000 steps
from ..tokenizers import train_bpe
from ..training.loop import TrainConfig, train


def bench_bpe(text: str, vocab_size: int = 1000) -> dict:
    """Time train_bpe on `text` (pre-tokenisation included)."""
    started = time.perf_counter()
    vocab, merges = train_bpe(text, vocab_size, ["<|endoftext|>"])
    return {"seconds": time.perf_counter() - started, "vocab_size": len(vocab), "merges": len(merges)}


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
    """Tokens per second of PlainGPT trained by a plain loop (AdamW, clipping, cross-entropy, no
    evaluation): what the course's model and loop are compared with, in the same process."""
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
    """Seconds to generate `new_tokens` greedily with and without the key/value cache."""
    torch.manual_seed(0)
    config = dataclasses.replace(CPU_RECIPE.model, max_len=new_tokens + 1)
    model = GPT(config).eval()
    prompt = torch.zeros(1, 1, dtype=torch.long)
    seconds = {}
    for use_cache in (True, False):
        runs = []
        for _ in range(repeats):
            started = time.perf_counter()
            generate(model, prompt, new_tokens, temperature=0, use_cache=use_cache)
            runs.append(time.perf_counter() - started)
        seconds[use_cache] = min(runs)  # the least disturbed run
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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tfcourse bench", description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=["bpe", "train", "target", "kv", "check"], action="append",
                        help="run only this benchmark (repeatable); default: all")
    parser.add_argument("--train-steps", type=int, default=300, help="training steps to time (default 300)")
    parser.add_argument("--target-loss", type=float, default=1.88,
                        help="val loss for the time-to-target benchmark (default 1.88, nanoGPT's CPU figure)")
    args = parser.parse_args(argv)
    chosen = args.only or ["bpe", "train", "target", "kv", "check"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    text = load_tiny_shakespeare() if {"bpe", "train", "target"} & set(chosen) else ""
    corpus = char_corpus(text) if {"train", "target"} & set(chosen) else None  # encoded once for both
    if "bpe" in chosen:
        r = bench_bpe(text)
        print(f"BPE training, Tiny Shakespeare -> vocab {r['vocab_size']} ({r['merges']} merges): "
              f"{r['seconds']:.2f} s   (target <= 10 s)")
    if "train" in chosen:
        ours, plain = bench_training(corpus, args.train_steps), bench_baseline(corpus, args.train_steps)
        print(f"GPT training, CPU recipe, {ours['steps']} steps: {ours['tokens_per_sec']:,.0f} tokens/s "
              f"({1000 * CPU_RECIPE.tokens_per_step / ours['tokens_per_sec']:.1f} ms/step)   (target >= 12,000 tokens/s)")
        print(f"the same model from PyTorch's modules, plain loop: {plain['tokens_per_sec']:,.0f} tokens/s "
              f"({1000 * CPU_RECIPE.tokens_per_step / plain['tokens_per_sec']:.1f} ms/step); "
              f"ratio tfcourse / plain {ours['tokens_per_sec'] / plain['tokens_per_sec']:.2f}   (target >= 1.0)")
    if "target" in chosen:
        r = bench_time_to_loss(corpus, args.target_loss)
        if r["step"] is None:
            print(f"CPU recipe never reached val {r['target']}: best {r['val_loss']:.3f} in {r['seconds']:.1f} s")
        else:
            print(f"CPU recipe reached val {r['val_loss']:.3f} < {r['target']} at step {r['step']:,} after "
                  f"{r['seconds']:.1f} s, evaluations included   (target <= 80 s)")
    if "kv" in chosen:
        r = bench_kv_cache()
        print(f"Generating {r['new_tokens']} tokens: {r['with_cache']:.2f} s with the KV cache, "
              f"{r['without_cache']:.2f} s without: {r['speedup']:.1f}x faster   (target >= 5x)")
    if "check" in chosen:
        r = bench_first_check()
        print(f"First exercise check in a fresh process (LayerNorm, after import torch; best of {r['repeats']}): "
              f"{r['first']:.2f} s, the second {r['second']:.3f} s   (target <= 0.3 s)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
