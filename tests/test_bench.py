"""The benchmark script runs and reports sane figures (timings are printed, never asserted)."""

import datetime
import json
import os
import random

import pytest
import torch

from tfcourse.course import bench
from tfcourse.data import char_corpus
from tfcourse.tokenizers import train_bpe

pytestmark = pytest.mark.slow  # times training runs: `make test-fast` leaves it out


def test_bench_bpe_reports_what_it_trained():
    rng = random.Random(0)
    text = " ".join("".join(rng.choice("abcdefghij今天气") for _ in range(rng.randint(1, 8))) for _ in range(3000))
    report = bench.bench_bpe(text, vocab_size=300, repeats=1, small_bytes=5000, small_vocab_size=280)
    assert report["vocab_size"] == 300 and report["merges"] == 300 - 256 - 1
    assert report["seconds"] > 0 and report["small_seconds"] > 0 and report["small_bytes"] == 5000
    try:
        import tokenizers  # noqa: F401  (the "pretrained" extra): the Rust trainer's figure
    except ImportError:
        assert "ratio" not in report
    else:
        assert report["rust_seconds"] > 0 and report["ratio"] == report["seconds"] / report["rust_seconds"]
    assert len(train_bpe(text, 300, ["<|endoftext|>"])[1]) == report["merges"]


def test_bench_encode_compares_the_same_ids():
    rng = random.Random(1)
    text = " ".join("".join(rng.choice("abcdefghij") for _ in range(rng.randint(1, 8))) for _ in range(3000))
    report = bench.bench_encode(text, vocab_size=300, repeats=1)
    assert report["mb_per_sec"] > 0 and report["megabytes"] == len(text) / 1e6 and report["first_call_seconds"] > 0
    try:
        import tiktoken  # noqa: F401  (the "pretrained" extra)
    except ImportError:
        assert "ratio" not in report
    else:
        assert report["tiktoken_mb_per_sec"] > 0 and report["ratio"] > 0


def test_bench_training_and_kv_cache_run(monkeypatch):
    text = "".join(chr(97 + (i * 7) % 26) for i in range(3000))
    report = bench.bench_training(char_corpus(text), steps=3)
    assert report["steps"] == 3 and report["tokens_per_sec"] > 0
    kv = bench.bench_kv_cache(new_tokens=20, repeats=1)
    assert kv["with_cache"] > 0 and kv["without_cache"] > 0 and kv["speedup"] > 0


def test_bench_main_prints_each_figure(capsys, monkeypatch):
    monkeypatch.setattr(bench, "bench_kv_cache", lambda: {"with_cache": 1.0, "without_cache": 6.0,
                                                          "speedup": 6.0, "new_tokens": 500})
    assert bench.main(["--only", "kv"]) == 0
    out = capsys.readouterr().out
    assert "6.0x faster" in out and f"torch {torch.__version__}" in out


def test_bench_first_check_times_a_fresh_process():
    report = bench.bench_first_check(repeats=1)
    assert report["first"] > 0 and report["second"] > 0 and report["repeats"] == 1


def test_the_plain_pytorch_baseline_is_the_same_size_as_the_course_gpt():
    from tfcourse.models import GPT, count_parameters
    from tfcourse.training.recipes import CPU_RECIPE

    m = CPU_RECIPE.model
    plain = bench.PlainGPT(65, m.max_len, m.d_model, m.n_heads, m.n_layers)
    ours = GPT(CPU_RECIPE.gpt_config(65))
    assert count_parameters(plain) == count_parameters(ours)
    ids = torch.randint(0, 65, (2, 16))
    assert plain(ids).shape == (2, 16, 65)
    # causal: changing the last token changes no earlier logit
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 65
    torch.testing.assert_close(plain(ids)[:, :-1], plain(changed)[:, :-1])


def test_bench_baseline_and_time_to_loss_run():
    text = "".join(chr(97 + (i * 7) % 26) for i in range(3000))  # a periodic text: learned fast
    plain = bench.bench_baseline(char_corpus(text), steps=3)
    assert plain["steps"] == 3 and plain["tokens_per_sec"] > 0
    both = bench.bench_training_against_plain(char_corpus(text), steps=4, rounds=2)
    assert both["rounds"] == 2 and both["tfcourse"]["steps"] == both["plain"]["steps"] == 2
    assert both["ratio"] > 0 and both["tfcourse"]["tokens_per_sec"] > 0
    reached = bench.bench_time_to_loss(char_corpus(text), target=3.0, eval_interval=5, eval_steps=2)
    assert reached["step"] is not None and reached["val_loss"] < 3.0 and reached["seconds"] > 0


def test_bench_main_writes_the_figures_with_the_machine_and_tables_them(tmp_path, capsys, monkeypatch):
    kv = {"with_cache": 1.0, "without_cache": 6.0, "speedup": 6.0, "new_tokens": 500}
    monkeypatch.setattr(bench, "bench_kv_cache", lambda: kv)
    path = tmp_path / "benchmarks" / "latest.json"  # its folder is made
    assert bench.main(["--only", "kv", "--output", str(path)]) == 0
    assert f"figures written to {path}" in capsys.readouterr().out
    report = json.loads(path.read_text(encoding="utf-8"))
    assert report["command"] == f"tfcourse bench --only kv --output {path}"
    assert datetime.datetime.fromisoformat(report["date"]).tzinfo is not None and report["seconds"] >= 0
    assert report["machine"]["cpu_count"] == os.cpu_count() and report["machine"]["torch"] == torch.__version__
    assert report["options"] == {"only": ["kv"], "train_steps": 300, "target_loss": 1.88}
    assert report["targets"] == bench.TARGETS and report["results"] == {"kv": kv}
    assert not list(path.parent.glob("*.partial"))
    assert bench.main(["--table", str(path)]) == 0
    table = capsys.readouterr().out
    assert ("| generating 500 tokens with the KV cache vs without (one thread, the same tokens; in turn, best of 2 "
            "each) | ≥ 15× faster | 6.0× (1.00 s vs 6.00 s) |") in table
    assert table.startswith(f"Measured by `tfcourse bench --only kv --output {path}` on {report['date'][:10]}")

