"""The two Tiny Shakespeare recipes, and the end-to-end script `python -m tfcourse.training.shakespeare`."""

from __future__ import annotations

import json
import re
import subprocess
import sys

import pytest
import torch

from tfcourse.course import bench
from tfcourse.training import recipes
from tfcourse.training import shakespeare as train_shakespeare
from tfcourse.models import GPT
from tfcourse.training.recipes import CPU_RECIPE, GPU_RECIPE, recipe_for


@pytest.fixture(autouse=True)
def _tiny_models_on_one_thread(one_thread):
    """Tiny models are fastest on one thread (see conftest.py), and a busy second core cannot stall them."""


def test_gpu_recipe_is_nanogpts_shakespeare_char():
    m, t = GPU_RECIPE.model, GPU_RECIPE.train
    assert (m.n_layers, m.n_heads, m.d_model, m.max_len, m.dropout) == (6, 6, 384, 256, 0.2)
    assert (GPU_RECIPE.batch_size, GPU_RECIPE.context, GPU_RECIPE.tokens_per_step) == (64, 256, 16384)
    # nanoGPT's 5,000 steps reach their best val at ~2,000-2,500 and overfit after: 2,500 here.
    assert (t.max_steps, t.lr, t.min_lr, t.warmup_steps, t.betas) == (2500, 1e-3, 1e-4, 100, (0.9, 0.99))
    assert t.amp and t.grad_clip == 1.0 and t.weight_decay == 0.1 and t.compile and t.eval_steps == 50
    # nanoGPT's model has 10.65M parameters without its position table; ours has LayerNorm biases too.
    n = train_shakespeare.non_embedding_parameters(GPT(GPU_RECIPE.model))
    assert 10.6e6 < n < 10.7e6


def test_cpu_recipe_is_nanogpts_cpu_recipe():
    m, t = CPU_RECIPE.model, CPU_RECIPE.train
    assert (m.n_layers, m.n_heads, m.d_model, m.max_len, m.dropout) == (4, 4, 128, 64, 0.0)
    assert (CPU_RECIPE.batch_size, t.max_steps, t.lr, t.min_lr, t.warmup_steps) == (12, 2000, 1e-3, 1e-4, 100)
    assert t.eval_steps == 20


def test_bench_times_the_cpu_recipe():
    assert bench.CPU_RECIPE is recipes.CPU_RECIPE


@pytest.mark.parametrize(("device", "expected"), [("cuda", GPU_RECIPE), ("cuda:1", GPU_RECIPE), ("cpu", CPU_RECIPE),
                                                  ("mps", CPU_RECIPE), (torch.device("cpu"), CPU_RECIPE)])
def test_recipe_for_picks_by_device(device, expected):
    assert recipe_for(device) is expected


@pytest.mark.parametrize("device", ["cuda", "cpu"])
def test_fast_mode_shrinks_both_recipes_to_seconds(device):
    full, fast = recipe_for(device), recipe_for(device, fast=True)
    assert fast.train.max_steps <= 100 < full.train.max_steps
    assert fast.tokens_per_step <= CPU_RECIPE.tokens_per_step
    assert fast.train.eval_steps <= 5 and fast.train.warmup_steps < fast.train.max_steps
    assert fast.train.eval_interval < fast.train.max_steps  # the curve has a point in the middle
    assert fast.name.endswith("-fast")


def test_replace_moves_the_schedule_with_the_steps():
    short = CPU_RECIPE.replace(steps=40)
    assert short.train.max_steps == 40 and short.train.warmup_steps == 2 and short.train.eval_interval == 20
    assert CPU_RECIPE.replace(steps=40, warmup_steps=5).train.warmup_steps == 5
    assert CPU_RECIPE.replace(compile=True, batch_size=4).train.compile
    assert CPU_RECIPE.gpt_config(50257).vocab_size == 50257 and CPU_RECIPE.model.vocab_size == 65


def test_flops_per_token_is_6n_plus_attention():
    config = GPU_RECIPE.model
    n = 10_000_000
    assert train_shakespeare.flops_per_token(n, config) == 6 * n + 12 * 6 * 384 * 256
    # 1e5 tokens/s of that model is 6.7 TFLOP/s, i.e. 10% of a 67 TFLOP/s peak.
    mfu = train_shakespeare.model_flops_utilisation(1e5, n, config, peak_tflops=67.08)
    assert mfu == pytest.approx(0.1, rel=1e-3)


@pytest.fixture
def text_file(tmp_path):
    words = ["to", "be", "or", "not", "that", "is", "the", "question", "whether", "tis", "nobler"]
    rng = torch.Generator().manual_seed(0)
    text = " ".join(words[i] for i in torch.randint(0, len(words), (800,), generator=rng).tolist())
    path = tmp_path / "play.txt"
    path.write_text(text, encoding="utf-8")
    return path


def _figure(pattern: str, out: str) -> float:
    match = re.search(pattern, out)
    assert match, f"{pattern!r} not in:\n{out}"
    return float(match.group(1).replace(",", ""))


def test_script_trains_the_cpu_recipe_and_prints_its_figures(text_file, tmp_path, capsys):
    out_dir = tmp_path / "run"
    # --device cpu: on a GPU machine the script would pick cuda (compile on, a peak FLOP/s known)
    args = ["--recipe", "cpu", "--steps", "6", "--data", str(text_file), "--out", str(out_dir), "--quiet",
            "--eval-steps", "2", "--sample-chars", "20", "--device", "cpu"]
    assert train_shakespeare.main(args) == 0
    out = capsys.readouterr().out
    assert "cpu: 4 layers, 4 heads, d_model 128, context 64, batch 12" in out
    val = _figure(r"final val loss (\d+\.\d+)", out)
    assert 0 < val < 4.0  # a vocabulary of ~20 characters: ln 20 = 3.0 at the start
    assert _figure(r"wall time (\d+\.\d+) s", out) > 0
    assert _figure(r"tokens/s ([\d,]+)", out) > 0
    assert "MFU n/a" in out  # no peak is known for a CPU
    share = _figure(r"the loop's own work (\d+\.\d+)% of it \(data [\d.]+ s, evaluation [\d.]+ s, checkpoints", out)
    assert 0 < share < 100  # 6 steps, 2 estimates and 2 checkpoints: most of this tiny run
    assert "sample (temperature 0.8, top-k 40)" in out

    record = json.loads((out_dir / "history.json").read_text())
    assert record["figures"]["val_loss"] == pytest.approx(val, abs=1e-4)
    assert record["figures"]["overhead_seconds"]["checkpoints"] > 0
    assert record["figures"]["steps"] == 6 and record["recipe"]["model"]["n_layers"] == 4
    assert len(record["history"]["train_loss"]) == 6 and record["figures"]["mfu"] is None
    assert (out_dir / "checkpoint.pt").exists()
    best = _figure(r"best val loss (\d+\.\d+) at step", out)
    assert best == pytest.approx(min(record["history"]["val_loss"]), abs=1e-4) and best <= val
    assert torch.load(out_dir / "best.pt", weights_only=True)["step"] == record["figures"]["best_step"]

    # Resuming a finished run trains nothing and reports the same loss.
    assert train_shakespeare.main(args + ["--resume"]) == 0
    again = capsys.readouterr().out
    assert _figure(r"final val loss (\d+\.\d+)", again) == val and "nothing left to train" in again
    # Resuming with more steps continues the run; a known peak gives an MFU.
    longer = [a if a != "6" else "8" for a in args]
    assert train_shakespeare.main(longer + ["--resume", "--peak-tflops", "0.5"]) == 0
    longer_out = capsys.readouterr().out
    assert "after 8 steps" in longer_out
    assert 0 < _figure(r"MFU (\d+\.\d+)% = ", longer_out) < 100
    assert len(json.loads((out_dir / "history.json").read_text())["history"]["train_loss"]) == 8


def test_script_refuses_resume_without_a_folder(capsys):
    with pytest.raises(SystemExit):
        train_shakespeare.main(["--resume"])
    assert "--resume needs --out" in capsys.readouterr().err


def test_script_runs_as_a_module():
    result = subprocess.run([sys.executable, "-m", "tfcourse.training.shakespeare", "--help"],
                            capture_output=True, text=True, check=True)
    assert "--peak-tflops" in result.stdout and "--no-compile" in result.stdout and "989" in result.stdout


def test_script_without_the_data_says_where_to_put_it(tmp_path, monkeypatch, capsys):
    monkeypatch.setenv("TFCOURSE_DATA_DIR", "")
    monkeypatch.setenv("TFCOURSE_CACHE_DIR", str(tmp_path / "cache"))

    def offline(*args, **kwargs):
        raise OSError("no network")

    monkeypatch.setattr("urllib.request.urlopen", offline)
    assert train_shakespeare.main(["--recipe", "cpu", "--steps", "1", "--quiet", "--device", "cpu"]) == 1
    assert "TFCOURSE_DATA_DIR" in capsys.readouterr().err


def test_step_timer_times_only_synced_steps_and_skips_evaluations(monkeypatch):
    clock = iter([0.0, 1.0, 2.0, 3.0, 10.0, 11.0, 12.0])
    monkeypatch.setattr(train_shakespeare.time, "perf_counter", lambda: next(clock))
    timer = train_shakespeare.StepTimer()
    history = {"step": [], "train_loss": [], "eval_step": [0]}
    for step in range(1, 15):
        history["step"].append(step)
        if step % 2 == 0:  # the losses are read back every second step
            history["train_loss"] += [1.0, 1.0]
        if step == 8:
            history["eval_step"].append(8)
        timer(step, history)
    # marks at steps 2, 4, ..., 14 at times 0, 1, 2, 3, 10, 11, 12: the jump from 3 to 10 contains
    # the evaluation at step 8 and is skipped; every other interval is 1 s per 2 steps.
    assert timer.median_step_seconds() == pytest.approx(0.5)
