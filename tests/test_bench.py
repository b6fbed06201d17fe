"""The benchmark script runs and reports sane figures (timings are printed, never asserted)."""

import random

import torch

from tfcourse.course import bench
from tfcourse.tokenizers import train_bpe


def test_bench_bpe_reports_what_it_trained():
    rng = random.Random(0)
    text = " ".join("".join(rng.choice("abcdefghij今天气") for _ in range(rng.randint(1, 8))) for _ in range(3000))
    report = bench.bench_bpe(text, vocab_size=300)
    assert report["vocab_size"] == 300 and report["merges"] == 300 - 256 - 1
    assert report["seconds"] > 0
    assert len(train_bpe(text, 300, ["<|endoftext|>"])[1]) == report["merges"]


def test_bench_training_and_kv_cache_run(monkeypatch):
    text = "".join(chr(97 + (i * 7) % 26) for i in range(3000))
    report = bench.bench_training(text, steps=3)
    assert report["steps"] == 3 and report["tokens_per_sec"] > 0
    kv = bench.bench_kv_cache(new_tokens=20, repeats=1)
    assert kv["with_cache"] > 0 and kv["without_cache"] > 0 and kv["speedup"] > 0


def test_bench_main_prints_each_figure(capsys, monkeypatch):
    monkeypatch.setattr(bench, "bench_kv_cache", lambda: {"with_cache": 1.0, "without_cache": 6.0,
                                                          "speedup": 6.0, "new_tokens": 500})
    assert bench.main(["--only", "kv"]) == 0
    out = capsys.readouterr().out
    assert "6.0x faster" in out and f"torch {torch.__version__}" in out
