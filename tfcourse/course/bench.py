"""Benchmarks that print figures: `python -m tfcourse.course.bench` (or `tfcourse bench`, `make bench`).

Timings on shared machines are noisy, so these are scripts that report, not tests that pass or
fail; compare figures taken in one run. Targets (2-core CPU):
- BPE training on Tiny Shakespeare to a vocabulary of 1,000: <= 10 s;
- GPT training throughput, CPU recipe (4 layers, 4 heads, d_model 128, context 64, batch 12): >= 12,000 tokens/s;
- generating 500 tokens with the key/value cache vs without: >= 5x faster.
"""

from __future__ import annotations

import argparse
import dataclasses
import time

import torch

from ..data import char_corpus, load_tiny_shakespeare
from ..decoding import generate
from ..models import GPT
from ..training.recipes import CPU_RECIPE  # nanoGPT's CPU recipe; lesson 08 trains it for 2,000 steps
from ..tokenizers import train_bpe
from ..training.loop import train


def bench_bpe(text: str, vocab_size: int = 1000) -> dict:
    """Time train_bpe on `text` (pre-tokenisation included)."""
    started = time.perf_counter()
    vocab, merges = train_bpe(text, vocab_size, ["<|endoftext|>"])
    return {"seconds": time.perf_counter() - started, "vocab_size": len(vocab), "merges": len(merges)}


def bench_training(text: str, steps: int = 300) -> dict:
    """Tokens per second of the full training loop (tfcourse.training.loop) on the CPU recipe."""
    corpus = char_corpus(text)
    model = GPT(CPU_RECIPE.gpt_config(corpus.tokenizer.vocab_size))
    batches = corpus.batches(CPU_RECIPE.batch_size, CPU_RECIPE.context)
    config = dataclasses.replace(CPU_RECIPE.train, max_steps=steps, warmup_steps=min(100, steps),
                                 eval_interval=steps, eval_steps=5, device="cpu", progress=False)
    history = train(model, batches, config)
    return {"tokens_per_sec": history["tokens_per_sec"], "steps": steps, "seconds": history["seconds"]}


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


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tfcourse bench", description=__doc__.split("\n")[0])
    parser.add_argument("--only", choices=["bpe", "train", "kv"], action="append",
                        help="run only this benchmark (repeatable); default: all")
    parser.add_argument("--train-steps", type=int, default=300, help="training steps to time (default 300)")
    args = parser.parse_args(argv)
    chosen = args.only or ["bpe", "train", "kv"]
    print(f"torch {torch.__version__}, {torch.get_num_threads()} threads")
    text = load_tiny_shakespeare() if {"bpe", "train"} & set(chosen) else ""
    if "bpe" in chosen:
        r = bench_bpe(text)
        print(f"BPE training, Tiny Shakespeare -> vocab {r['vocab_size']} ({r['merges']} merges): "
              f"{r['seconds']:.2f} s   (target <= 10 s)")
    if "train" in chosen:
        r = bench_training(text, args.train_steps)
        print(f"GPT training, CPU recipe, {r['steps']} steps: {r['tokens_per_sec']:,.0f} tokens/s "
              f"({r['seconds']:.1f} s with evaluation)   (target >= 12,000 tokens/s)")
    if "kv" in chosen:
        r = bench_kv_cache()
        print(f"Generating {r['new_tokens']} tokens: {r['with_cache']:.2f} s with the KV cache, "
              f"{r['without_cache']:.2f} s without: {r['speedup']:.1f}x faster   (target >= 5x)")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
