"""Tests for tfcourse.training.loop, on a tiny bigram language model and a tiny repeated text."""

from __future__ import annotations

import copy
import io
import math
import os
from pathlib import Path

import pytest
import torch
from torch import nn

from tfcourse.training.loop import (
    LoopFunctions,
    StepwiseAdamW,
    TrainConfig,
    adamw_step,
    clip_gradients,
    configure_optimizer,
    default_loss,
    estimate_loss,
    inverse_sqrt_lr_at,
    lr_at,
    paper_lr_at,
    CHECKPOINT_KEYS,
    load_checkpoint,
    make_grad_scaler,
    mean_loss,
    pick_device,
    plain_train_step,
    save_checkpoint,
    train,
    train_step,
)

TEXT = "first citizen: before we proceed any further, hear me speak. " * 30
VOCAB = sorted(set(TEXT))
DATA = torch.tensor([VOCAB.index(char) for char in TEXT])
SPLITS = {"train": DATA[: int(0.9 * len(DATA))], "val": DATA[int(0.9 * len(DATA)) :]}
BATCH_SIZE, CONTEXT = 8, 8


pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def get_batch(split: str, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """Random windows of the text; y is x shifted one character to the left."""
    data = SPLITS[split]
    starts = torch.randint(len(data) - CONTEXT - 1, (BATCH_SIZE,), generator=generator)
    x = torch.stack([data[s : s + CONTEXT] for s in starts])
    y = torch.stack([data[s + 1 : s + CONTEXT + 1] for s in starts])
    return x, y


class BigramLM(nn.Module):
    """Predicts the next character from the current one. Has dropout, biases and a LayerNorm."""

    def __init__(self, vocab_size: int = len(VOCAB), dim: int = 16, dropout: float = 0.2):
        super().__init__()
        self.embed = nn.Embedding(vocab_size, dim)
        self.drop = nn.Dropout(dropout)
        self.norm = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab_size)

    def forward(self, idx: torch.Tensor) -> torch.Tensor:
        return self.head(self.norm(self.drop(self.embed(idx))))  # (B, T, V)


def make_model(seed: int = 0) -> BigramLM:
    torch.manual_seed(seed)
    return BigramLM()


def small_config(**overrides) -> TrainConfig:
    settings = dict(
        max_steps=40, lr=1e-2, min_lr=1e-3, warmup_steps=5, eval_interval=10,
        eval_steps=4, device="cpu", progress=False,
    )
    settings.update(overrides)
    return TrainConfig(**settings)


class Interrupted(Exception):
    """Stands in for a crash or a stopped notebook kernel."""


def loss_that_crashes_after(training_steps: int):
    """default_loss, but raising Interrupted in training step `training_steps + 1`."""
    calls = 0

    def loss_fn(model, x, y):
        nonlocal calls
        if torch.is_grad_enabled():  # a training step; estimates run under no_grad
            calls += 1
            if calls > training_steps:
                raise Interrupted
        return default_loss(model, x, y)

    return loss_fn


# --------------------------------------------------------------------------- schedule


def test_lr_warms_up_then_decays_along_a_cosine():
    config = TrainConfig(max_steps=110, warmup_steps=10, lr=1e-3, min_lr=1e-4)
    assert lr_at(0, config) == 0.0
    assert lr_at(5, config) == pytest.approx(5e-4)  # halfway through warm-up
    assert lr_at(10, config) == pytest.approx(1e-3)  # peak at the end of warm-up
    after_warmup = [lr_at(step, config) for step in range(10, 111)]
    assert all(a > b for a, b in zip(after_warmup, after_warmup[1:]))
    # Midpoint of the cosine (step 60): cos(pi/2) = 0, so halfway between lr and min_lr.
    assert lr_at(60, config) == pytest.approx(1e-4 + 0.5 * (1e-3 - 1e-4))
    # A quarter of the way (step 35): min_lr + (1 + cos(pi/4)) / 2 * (lr - min_lr).
    assert lr_at(35, config) == pytest.approx(1e-4 + (1 + math.sqrt(0.5)) / 2 * 9e-4)
    assert lr_at(110, config) == pytest.approx(1e-4)
    assert lr_at(500, config) == pytest.approx(1e-4)


def test_lr_without_warmup_starts_at_peak():
    config = TrainConfig(max_steps=10, warmup_steps=0, lr=1e-3, min_lr=0.0)
    assert lr_at(0, config) == pytest.approx(1e-3)
    assert lr_at(10, config) == 0.0


def test_inverse_sqrt_is_the_papers_schedule_with_its_peak_as_lr():
    d_model, warmup = 512, 4000
    config = TrainConfig(max_steps=100_000, warmup_steps=warmup, lr=(d_model * warmup) ** -0.5, schedule="inverse_sqrt")
    for step in (1, 7, 1000, 3999, 4000, 4001, 16_000, 99_999, 250_000):  # no end: it keeps decaying past max_steps
        assert inverse_sqrt_lr_at(step, config) == pytest.approx(paper_lr_at(step, d_model, warmup), rel=1e-12)
    assert inverse_sqrt_lr_at(16_000, config) == pytest.approx(config.lr / 2)  # sqrt(4000 / 16000)


def test_the_schedule_is_chosen_by_name_and_checked():
    with pytest.raises(ValueError, match="schedule must be one of .*'cosine'.*'inverse_sqrt'.*got 'linear'"):
        TrainConfig(schedule="linear")
    with pytest.raises(ValueError, match="'inverse_sqrt' needs warmup_steps >= 1"):
        TrainConfig(schedule="inverse_sqrt", warmup_steps=0)


def test_train_follows_the_configured_schedule():
    config = TrainConfig(max_steps=12, warmup_steps=4, lr=1e-2, min_lr=1e-3, eval_interval=12, eval_steps=1,
                         device="cpu", progress=False, schedule="inverse_sqrt")
    history = train(make_model(), get_batch, config)
    assert history["lr"] == pytest.approx([inverse_sqrt_lr_at(step, config) for step in range(1, 13)])
    assert history["lr"][-1] == pytest.approx(1e-2 * math.sqrt(4 / 12))  # not min_lr: it has no end date


# --------------------------------------------------------------------------- optimizer


def test_weight_decay_only_on_matrices():
    model = make_model()
    optimizer = configure_optimizer(model, TrainConfig(weight_decay=0.1))
    decay_of = {
        id(p): group["weight_decay"] for group in optimizer.param_groups for p in group["params"]
    }
    assert len(decay_of) == len(list(model.parameters()))  # every parameter, exactly once
    assert decay_of[id(model.embed.weight)] == 0.1
    assert decay_of[id(model.head.weight)] == 0.1
    assert decay_of[id(model.head.bias)] == 0.0
    assert decay_of[id(model.norm.weight)] == 0.0
    assert decay_of[id(model.norm.bias)] == 0.0
    assert optimizer.defaults["betas"] == (0.9, 0.99)


def test_train_step_updates_weights_and_clears_gradients():
    model = make_model()
    config = small_config()
    optimizer = configure_optimizer(model, config)
    before = [p.detach().clone() for p in model.parameters()]
    x, y = get_batch("train", torch.Generator().manual_seed(0))

    loss = train_step(model, (x, y), optimizer, make_grad_scaler(torch.device("cpu"), True),
                      config, default_loss)

    # a 0-dim tensor, not read back: reading would make the CPU wait for a GPU
    assert isinstance(loss, torch.Tensor) and loss.dim() == 0 and not loss.requires_grad
    assert math.isfinite(loss.item())
    assert all(p.grad is None for p in model.parameters())
    assert all(not torch.equal(b, p) for b, p in zip(before, model.parameters()))


# --------------------------------------------------------------------------- clipping


def model_with_gradients(scale: float, seed: int = 0) -> BigramLM:
    """A model whose parameters hold random gradients, about `scale` in size per entry."""
    model = make_model(seed)
    generator = torch.Generator().manual_seed(seed)
    for p in model.parameters():
        p.grad = scale * torch.randn(p.shape, generator=generator)
    return model


# Each case: (how the parameters are given, from the model; max_norm). The model's gradients have a
# global norm of about 30 (scale 1.0): max_norm 1000 leaves them, 1.0 and 0.0 clip them.
CLIP_CASES = {
    "norm below max_norm: unchanged": (lambda m: list(m.parameters()), 1000.0),
    "norm above max_norm: scaled down": (lambda m: list(m.parameters()), 1.0),
    "max_norm 0: all gradients become 0": (lambda m: list(m.parameters()), 0.0),
    "an int max_norm": (lambda m: list(m.parameters()), 2),
    "parameters without a grad are skipped": (lambda m: [m.head.weight, m.norm.bias, m.embed.weight], 1.0),
    "one parameter, in a list": (lambda m: [m.head.weight], 0.5),
    "one parameter, as a tensor": (lambda m: m.head.weight, 0.5),
    "a generator (read once)": (lambda m: m.parameters(), 1.0),
    "a generator, norm below max_norm": (lambda m: (p for p in m.parameters()), 1000.0),
}


@pytest.mark.parametrize("case", list(CLIP_CASES))
def test_clip_gradients_matches_torchs_clip_grad_norm(case):
    choose, max_norm = CLIP_CASES[case]
    ours, theirs = model_with_gradients(1.0), model_with_gradients(1.0)
    for model in (ours, theirs):
        model.norm.bias.grad = None  # a parameter that took no part in the loss
    before = [None if p.grad is None else p.grad.clone() for p in ours.parameters()]

    norm = clip_gradients(choose(ours), max_norm)
    expected_norm = torch.nn.utils.clip_grad_norm_(choose(theirs), max_norm)

    assert isinstance(norm, torch.Tensor) and norm.dim() == 0
    torch.testing.assert_close(norm, expected_norm)
    for (name, a), b, old in zip(ours.named_parameters(), theirs.parameters(), before):
        if old is None:
            assert a.grad is None and b.grad is None, name
        else:
            torch.testing.assert_close(a.grad, b.grad, msg=name)
    if "unchanged" in case or "below" in case:
        assert all(old is None or torch.equal(p.grad, old) for p, old in zip(ours.parameters(), before))
    if "scaled down" in case:
        clipped = torch.linalg.vector_norm(torch.cat([p.grad.flatten() for p in ours.parameters()
                                                      if p.grad is not None]))
        assert norm > max_norm and clipped == pytest.approx(max_norm, rel=1e-4)


def test_clip_gradients_returns_the_norm_of_all_gradients_together():
    a, b = torch.zeros(2, requires_grad=True), torch.zeros(1, 1, requires_grad=True)
    a.grad, b.grad = torch.tensor([3.0, 0.0]), torch.tensor([[4.0]])  # norm sqrt(9 + 16) = 5
    norm = clip_gradients([a, b], 1.0)
    assert norm.item() == pytest.approx(5.0)
    torch.testing.assert_close(a.grad, torch.tensor([0.6, 0.0]), atol=1e-6, rtol=0)
    torch.testing.assert_close(b.grad, torch.tensor([[0.8]]), atol=1e-6, rtol=0)


def test_clip_gradients_without_any_gradient_returns_zero():
    model = make_model()
    assert clip_gradients(model.parameters(), 1.0).item() == 0.0
    assert all(p.grad is None for p in model.parameters())


@pytest.mark.parametrize(
    "parameters, max_norm, error, message",
    [
        ("parameters", -1.0, ValueError, r"max_norm must be >= 0, got -1.0"),
        ("parameters", float("nan"), ValueError, r"max_norm must be >= 0, got nan"),
        ("parameters", "1.0", TypeError, r"max_norm must be a number, got str"),
        ("parameters", torch.tensor(1.0), TypeError, r"max_norm must be a number, got Tensor"),
        ("model", 1.0, TypeError, r"model.parameters\(\), not the model itself"),
        ("floats", 1.0, TypeError, r"expects tensors \(parameters\), got float"),
    ],
)
def test_clip_gradients_refuses_bad_input(parameters, max_norm, error, message):
    model = model_with_gradients(1.0)
    given = {"parameters": model.parameters(), "model": model, "floats": [1.0, 2.0]}[parameters]
    with pytest.raises(error, match=message):
        clip_gradients(given, max_norm)


@pytest.mark.parametrize("grad_clip", [0.05, 100.0])  # clipping every step, and never
def test_train_step_is_the_step_with_torchs_clip_grad_norm(grad_clip):
    config = small_config(grad_clip=grad_clip)
    ours, theirs = make_model(), make_model()
    our_optimizer, their_optimizer = configure_optimizer(ours, config), configure_optimizer(theirs, config)
    generator = torch.Generator().manual_seed(0)
    for _ in range(3):
        x, y = get_batch("train", generator)
        torch.manual_seed(1)  # the same dropout masks in both
        loss = train_step(ours, (x, y), our_optimizer, make_grad_scaler(torch.device("cpu"), True), config)
        torch.manual_seed(1)
        expected = default_loss(theirs, x, y)
        expected.backward()
        torch.nn.utils.clip_grad_norm_(theirs.parameters(), grad_clip)
        their_optimizer.step()
        their_optimizer.zero_grad(set_to_none=True)
        torch.testing.assert_close(loss, expected.detach())
    for (name, a), b in zip(ours.named_parameters(), theirs.parameters()):
        torch.testing.assert_close(a, b, msg=name)


def test_estimate_loss_is_repeatable_and_restores_train_mode():
    model = make_model()
    model.train()
    first = estimate_loss(model, get_batch, 3, default_loss, torch.device("cpu"))
    second = estimate_loss(model, get_batch, 3, default_loss, torch.device("cpu"))
    assert set(first) == {"train", "val"}
    assert first == second  # same batches, no dropout
    assert model.training


def test_default_loss_names_a_wrong_model_output():
    class ReturnsTuple(nn.Module):
        def forward(self, idx):
            return idx.float(), None

    x, y = get_batch("train", torch.Generator().manual_seed(0))
    with pytest.raises(ValueError, match=r"logits of shape \(B, T, V\)"):
        default_loss(ReturnsTuple(), x, y)


# --------------------------------------------------------------------------- training


def test_training_lowers_the_loss():
    history = train(make_model(), get_batch, small_config(max_steps=60))
    first, last = history["val_loss"][0], history["val_loss"][-1]
    assert first > math.log(len(VOCAB)) - 0.5  # untrained: about uniform over the vocabulary
    assert last < 0.6 * first


def test_history_keys_and_lengths_agree():
    config = small_config(max_steps=25, eval_interval=10)
    history = train(make_model(), get_batch, config)
    assert set(history) == {
        "step", "train_loss", "lr", "eval_step", "eval_train_loss", "val_loss",
        "best_val_loss", "best_step", "tokens_per_sec", "seconds", "overhead_seconds", "device",
    }
    assert history["best_val_loss"] == min(history["val_loss"])
    assert history["best_step"] == history["eval_step"][history["val_loss"].index(min(history["val_loss"]))]
    assert history["step"] == list(range(1, 26))
    assert len(history["train_loss"]) == len(history["lr"]) == 25
    assert history["lr"] == [lr_at(step, config) for step in range(1, 26)]
    assert history["eval_step"] == [0, 10, 20, 25]  # before training, every 10, and the last
    assert len(history["eval_train_loss"]) == len(history["val_loss"]) == 4
    assert history["tokens_per_sec"] > 0 and history["seconds"] > 0
    overhead = history["overhead_seconds"]  # the loop's own work: batches, estimates, checkpoints (none here)
    assert set(overhead) == {"data", "evaluation", "checkpoints"} and overhead["checkpoints"] == 0
    assert overhead["data"] > 0 and overhead["evaluation"] > 0 and sum(overhead.values()) < history["seconds"]
    assert history["device"] == "cpu"


def test_step_hook_is_called_after_every_step_with_the_history():
    seen = []
    history = train(make_model(), get_batch, small_config(max_steps=12, eval_interval=5, log_interval=3),
                    on_step=lambda step, h: seen.append((step, len(h["train_loss"]))))
    assert [step for step, _ in seen] == list(range(1, 13))
    # Losses are read back every log_interval steps and at evaluations: complete at those steps.
    assert [step for step, known in seen if known == step] == [3, 5, 6, 9, 10, 12]
    assert history["step"][-1] == 12 and len(history["train_loss"]) == 12


def test_evaluating_does_not_change_the_training_run():
    rarely = train(make_model(), get_batch, small_config(max_steps=10, eval_interval=10))
    often = train(make_model(), get_batch, small_config(max_steps=10, eval_interval=1))
    assert len(often["eval_step"]) > len(rarely["eval_step"])
    assert often["train_loss"] == rarely["train_loss"]


def test_resume_continues_exactly(tmp_path):
    checkpoint = str(tmp_path / "run.pt")
    config = small_config(max_steps=20, eval_interval=5)
    straight_model = make_model()
    straight = train(straight_model, get_batch, config)

    resumable = small_config(max_steps=20, eval_interval=5, checkpoint_path=checkpoint,
                             checkpoint_interval=10)
    with pytest.raises(Interrupted):
        train(make_model(), get_batch, resumable, loss_fn=loss_that_crashes_after(13))
    assert torch.load(checkpoint, weights_only=False)["step"] == 10

    # A fresh model, initialised differently, and a shifted global RNG: all must be restored.
    resumed_model = make_model(seed=99)
    torch.rand(7)
    resumed = train(resumed_model, get_batch, resumable, resume=True)

    assert resumed["step"] == straight["step"]
    assert resumed["train_loss"] == straight["train_loss"]
    assert resumed["eval_step"] == straight["eval_step"]
    assert resumed["overhead_seconds"]["checkpoints"] > 0 == straight["overhead_seconds"]["checkpoints"]
    assert resumed["val_loss"] == straight["val_loss"]
    for (name, a), b in zip(straight_model.named_parameters(), resumed_model.parameters()):
        assert torch.equal(a, b), name


def test_resume_without_a_checkpoint_file_starts_fresh(tmp_path):
    config = small_config(max_steps=10, checkpoint_path=str(tmp_path / "new.pt"))
    fresh = train(make_model(), get_batch, small_config(max_steps=10))
    resumed = train(make_model(), get_batch, config, resume=True)
    assert resumed["train_loss"] == fresh["train_loss"]
    assert os.path.exists(config.checkpoint_path)


def test_resume_needs_a_checkpoint_path():
    with pytest.raises(ValueError, match="checkpoint_path"):
        train(make_model(), get_batch, small_config(), resume=True)


# --------------------------------------------------------------------------- checkpoints


def test_checkpoint_has_documented_keys_and_no_temporary_file(tmp_path):
    path = tmp_path / "checkpoints" / "run.pt"  # the folder does not exist yet
    config = small_config(max_steps=10, checkpoint_path=str(path), checkpoint_interval=5)
    train(make_model(), get_batch, config)

    assert os.listdir(path.parent) == ["run.pt"]
    checkpoint = torch.load(path, weights_only=False)
    assert set(checkpoint) == {
        "model", "optimizer", "scaler", "step", "history", "batch_generator",
        "torch_rng", "cuda_rng", "python_rng", "config",
    }
    assert checkpoint["step"] == 10
    assert checkpoint["config"]["max_steps"] == 10
    assert checkpoint["history"]["step"] == list(range(1, 11))


def test_crash_while_saving_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    path = tmp_path / "run.pt"
    model, config = make_model(), small_config()
    optimizer = configure_optimizer(model, config)
    scaler = make_grad_scaler(torch.device("cpu"), False)
    generator = torch.Generator().manual_seed(0)
    save_checkpoint(path, model, optimizer, scaler, 1, {}, generator, config)
    good = path.read_bytes()

    def save_half_then_fail(obj, file):
        file.write(b"half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", save_half_then_fail)
    with pytest.raises(OSError, match="disk full"):
        save_checkpoint(path, model, optimizer, scaler, 2, {}, generator, config)

    assert path.read_bytes() == good
    assert os.listdir(tmp_path) == ["run.pt"]


# --------------------------------------------------------------------------- device and config


@pytest.mark.skipif(
    torch.cuda.is_available() or torch.backends.mps.is_available(),
    reason="needs a machine without a GPU",
)
def test_pick_device_on_a_cpu_only_machine():
    assert pick_device() == torch.device("cpu")
    assert pick_device("cpu") == torch.device("cpu")
    with pytest.raises(RuntimeError, match="'cuda'.*CUDA is not available"):
        pick_device("cuda")


def test_pick_device_names_an_unknown_device():
    with pytest.raises(ValueError, match="'gpu' is not a device name"):
        pick_device("gpu")


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(max_steps=0), "max_steps must be at least 1, got 0"),
        (dict(max_steps=10, warmup_steps=20), r"warmup_steps must be between 0 and max_steps"),
        (dict(lr=1e-4, min_lr=1e-3), r"min_lr must be between 0 and lr \(0.0001\)"),
        (dict(min_lr=-1.0), "min_lr must be between 0 and lr"),
        (dict(lr=0.0, min_lr=0.0), "lr must be positive"),
        (dict(grad_clip=0.0), "grad_clip must be positive"),
        (dict(eval_interval=0), "eval_interval must be at least 1"),
        (dict(betas=(0.9, 1.0)), "betas must be two numbers in"),
        (dict(checkpoint_interval=100), "checkpoint_interval is set but checkpoint_path is None"),
    ],
)
def test_config_refuses_bad_settings(settings, message):
    with pytest.raises(ValueError, match=message):
        TrainConfig(**settings)


# --------------------------------------------------------------------------- output


def test_no_output_without_progress(capfd):
    train(make_model(), get_batch, small_config(max_steps=5, progress=False))
    out, err = capfd.readouterr()
    assert err == ""
    assert out == ""


def test_progress_bar_shows_loss_and_lr(capfd):
    train(make_model(), get_batch, small_config(max_steps=5, progress=True))
    err = capfd.readouterr().err
    assert "5/5" in err
    assert "loss=" in err and "lr=" in err


# --------------------------------------------------------------------------- GPU readiness, tested on the CPU


def test_the_loop_reads_numbers_back_only_at_log_and_eval_steps(monkeypatch):
    """Each read of a tensor's value (.item(), .tolist(), float(), bool()...) on a GPU tensor makes the
    CPU wait for the GPU. Count the reads made by tfcourse's code: none in ordinary steps, one at a
    log step, one per split at an evaluation. (AdamW's step counters are CPU tensors, and this
    test's own batches come from Python lists: their reads are not syncs and are not counted.)"""
    import sys

    import tfcourse.validation as validation

    # The token-range check reads two numbers, but only for ids on the CPU (never on a GPU).
    monkeypatch.setattr(validation, "expect_ids_in_vocabulary", lambda *args, **kwargs: None)
    package = str(Path(validation.__file__).parent)
    reads = []
    for name in ("item", "tolist", "__float__", "__int__", "__bool__", "__index__"):
        original = getattr(torch.Tensor, name)

        def counting(self, *args, _original=original, **kwargs):
            if sys._getframe(1).f_code.co_filename.startswith(package):
                reads.append(sys._getframe(1).f_code.co_name)
            return _original(self, *args, **kwargs)

        monkeypatch.setattr(torch.Tensor, name, counting)
    counts = []
    train(make_model(), get_batch, small_config(max_steps=20, eval_interval=20, log_interval=10, eval_steps=3),
          on_step=lambda step, h: counts.append(len(reads)))
    per_step = [b - a for a, b in zip([counts[0]] + counts, counts)]
    per_step[0] = counts[0] - 2  # step 1 follows the first estimate (2 reads: train and val)
    assert [n for step, n in enumerate(per_step, 1) if step not in (10, 20)] == [0] * 18, reads
    assert per_step[9] == 1, "a log step reads all the pending losses at once"
    assert per_step[19] == 1 + 2, "the last step: one read of the losses, one per split of the estimate"


def test_compile_failure_falls_back_to_eager_with_one_warning(monkeypatch):
    def broken_compile(model, *args, **kwargs):
        def call(*a, **k):
            raise RuntimeError("Triton needs a C compiler: none found")
        return call

    monkeypatch.setattr(torch, "compile", broken_compile)
    with pytest.warns(RuntimeWarning, match="torch.compile failed") as caught:
        history = train(make_model(), get_batch, small_config(max_steps=10, compile=True))
    assert len([w for w in caught if "torch.compile" in str(w.message)]) == 1
    assert len(history["train_loss"]) == 10


def test_the_best_val_checkpoint_is_kept(tmp_path):
    path = tmp_path / "best.pt"
    history = train(make_model(), get_batch, small_config(max_steps=30, eval_interval=5,
                                                          best_checkpoint_path=str(path)))
    best = torch.load(path, weights_only=True)
    assert best["step"] == history["best_step"] and best["val_loss"] == history["best_val_loss"]
    model = make_model()
    model.load_state_dict(best["model"])


def test_the_optimizer_is_fused_where_torch_has_the_kernel_and_falls_back_where_not(monkeypatch):
    assert all(group["fused"] for group in configure_optimizer(make_model(), small_config()).param_groups)
    made, adamw = [], torch.optim.AdamW

    def without_fused_kernel(*args, fused=None, **kwargs):  # what torch < 2.4 answers on a CPU
        made.append(fused)
        if fused:
            raise RuntimeError("`fused=True` requires all the params to be floating point Tensors of supported "
                               "devices: ['cuda', 'xpu', 'privateuseone'].")
        return adamw(*args, **kwargs)

    monkeypatch.setattr(torch.optim, "AdamW", without_fused_kernel)
    optimizer = configure_optimizer(make_model(), small_config())
    assert made == [True, None] and not any(group["fused"] for group in optimizer.param_groups)


def test_resuming_keeps_this_machines_optimizer_kernel(tmp_path):
    """A checkpoint saved with fused=False (where torch has no fused AdamW) must not turn off the
    fused kernel that configure_optimizer chose for this machine."""
    model = make_model()
    config = small_config(max_steps=6, checkpoint_path=str(tmp_path / "ckpt.pt"))
    train(model, get_batch, config)
    saved = torch.load(config.checkpoint_path, weights_only=False)
    for group in saved["optimizer"]["param_groups"]:
        group["fused"] = False  # as saved where torch has no fused AdamW
    torch.save(saved, config.checkpoint_path)
    optimizer = configure_optimizer(model, config)
    assert all(group["fused"] for group in optimizer.param_groups)  # this machine's choice
    generator = torch.Generator()
    load_checkpoint(config.checkpoint_path, model, optimizer, make_grad_scaler(torch.device("cpu"), True), generator)
    assert all(group["fused"] for group in optimizer.param_groups)


# --------------------------------------------------------------------------- checkpoints in memory or a file object


def steps_from(model, optimizer, generator, config, n: int) -> list[float]:
    """`n` train_steps on batches from `generator`; their losses."""
    scaler = make_grad_scaler(torch.device("cpu"), True)
    return [train_step(model, get_batch("train", generator), optimizer, scaler, config).item() for _ in range(n)]


def trained_for(steps: int, config: TrainConfig):
    """A model, its optimizer and the batch generator after `steps` train_steps."""
    model = make_model()
    optimizer = configure_optimizer(model, config)
    generator = torch.Generator().manual_seed(0)
    steps_from(model, optimizer, generator, config, steps)
    return model, optimizer, generator


def open_for_writing(tmp_path, kind: str):
    return io.BytesIO() if kind == "BytesIO" else open(tmp_path / "run.pt", "wb")


def reopened_for_reading(file, tmp_path):
    if isinstance(file, io.BytesIO):
        file.seek(0)  # a file object is read from where it stands
        return file
    file.close()
    return open(tmp_path / "run.pt", "rb")


@pytest.mark.parametrize("kind", ["BytesIO", "open file"])
def test_checkpoint_round_trip_through_a_file_object_continues_exactly(tmp_path, kind):
    config = small_config()
    model, optimizer, generator = trained_for(5, config)
    scaler = make_grad_scaler(torch.device("cpu"), True)
    history = {"step": [1, 2, 3, 4, 5]}
    file = open_for_writing(tmp_path, kind)
    save_checkpoint(file, model, optimizer, scaler=scaler, step=5, history=history, generator=generator,
                    config=config)
    assert not file.closed  # the caller's file: left open
    saved_model, saved_optimizer = copy.deepcopy(model.state_dict()), copy.deepcopy(optimizer.state_dict())
    straight = steps_from(model, optimizer, generator, config, 5)  # what happens without the round trip

    restored = make_model(seed=99)  # initialised differently: everything must come from the file
    restored_optimizer = configure_optimizer(restored, config)
    restored_generator = torch.Generator()
    torch.rand(7)  # a shifted global RNG: dropout's stream must be restored too
    with reopened_for_reading(file, tmp_path) as source:
        step, restored_history = load_checkpoint(source, restored, restored_optimizer, scaler, restored_generator)

    assert step == 5 and restored_history == history
    for name, value in saved_model.items():
        assert torch.equal(restored.state_dict()[name], value), name
    assert restored_optimizer.state_dict()["state"].keys() == saved_optimizer["state"].keys()
    for index, state in saved_optimizer["state"].items():
        for key, value in state.items():
            assert torch.equal(restored_optimizer.state_dict()["state"][index][key], value), (index, key)
    assert steps_from(restored, restored_optimizer, restored_generator, config, 5) == straight
    for (name, a), b in zip(model.named_parameters(), restored.parameters()):
        assert torch.equal(a, b), name


def test_checkpoint_without_scaler_generator_and_history_round_trips():
    config = small_config()
    model, optimizer, generator = trained_for(3, config)
    buffer = io.BytesIO()
    save_checkpoint(buffer, model, optimizer, step=3, config=config)
    buffer.seek(0)
    stored = torch.load(buffer, weights_only=False)
    assert set(stored) == {"model", "optimizer", "step", "torch_rng", "cuda_rng", "python_rng", "config"}

    restored = make_model(seed=99)
    restored_optimizer = configure_optimizer(restored, config)
    scaler, batch_generator = make_grad_scaler(torch.device("cpu"), True), torch.Generator().manual_seed(5)
    scaler_state, generator_state = scaler.state_dict(), batch_generator.get_state()
    buffer.seek(0)
    # Given a scaler and a generator that the checkpoint does not hold: they are left as they are.
    assert load_checkpoint(buffer, restored, restored_optimizer, scaler, batch_generator) == (3, None)
    assert scaler.state_dict() == scaler_state and torch.equal(batch_generator.get_state(), generator_state)
    for (name, a), b in zip(model.named_parameters(), restored.parameters()):
        assert torch.equal(a, b), name
    buffer.seek(0)
    assert load_checkpoint(buffer, make_model(), configure_optimizer(make_model(), config)) == (3, None)


def test_loading_without_scaler_and_generator_ignores_their_stored_states(tmp_path):
    config = small_config()
    model, optimizer, generator = trained_for(2, config)
    path = tmp_path / "run.pt"
    save_checkpoint(path, model, optimizer, make_grad_scaler(torch.device("cpu"), True), 2, {"step": [1, 2]},
                    generator, config)
    restored = make_model(seed=99)
    step, history = load_checkpoint(path, restored, configure_optimizer(restored, config))
    assert step == 2 and history == {"step": [1, 2]}
    assert torch.equal(restored.head.weight, model.head.weight)


@pytest.mark.parametrize("as_path", [str, Path])
def test_checkpoint_round_trip_through_a_path_positionally(tmp_path, as_path):
    """The positional calls of before: save_checkpoint(path, model, optimizer, scaler, step, history,
    generator, config) and load_checkpoint(path, model, optimizer, scaler, generator)."""
    config = small_config()
    model, optimizer, generator = trained_for(4, config)
    path = as_path(tmp_path / "run.pt")
    scaler = make_grad_scaler(torch.device("cpu"), True)
    save_checkpoint(path, model, optimizer, scaler, 4, {"step": [1, 2, 3, 4]}, generator, config)
    assert os.listdir(tmp_path) == ["run.pt"]  # no temporary file left
    assert set(torch.load(path, weights_only=False)) == set(CHECKPOINT_KEYS)
    straight = steps_from(model, optimizer, generator, config, 3)

    restored = make_model(seed=99)
    restored_optimizer, restored_generator = configure_optimizer(restored, config), torch.Generator()
    step, history = load_checkpoint(path, restored, restored_optimizer, scaler, restored_generator)
    assert step == 4 and history == {"step": [1, 2, 3, 4]}
    assert steps_from(restored, restored_optimizer, restored_generator, config, 3) == straight


def test_resume_from_a_checkpoint_without_history(tmp_path):
    config = small_config(max_steps=8, checkpoint_path=str(tmp_path / "run.pt"))
    model, optimizer, generator = trained_for(5, config)
    save_checkpoint(config.checkpoint_path, model, optimizer, step=5, generator=generator, config=config)
    history = train(make_model(), get_batch, config, resume=True)
    assert history["step"] == [6, 7, 8]  # the curves start at the checkpoint
    assert len(history["train_loss"]) == 3


def test_save_checkpoint_needs_step_and_config():
    model = make_model()
    optimizer = configure_optimizer(model, small_config())
    with pytest.raises(TypeError, match="needs step and config"):
        save_checkpoint(io.BytesIO(), model, optimizer)


def not_a_checkpoint_path(tmp_path, what: str) -> Path:
    path = tmp_path / "not-a-checkpoint.pt"
    if what == "text":
        path.write_text("plain text, not a torch file")
    elif what == "a tensor":
        torch.save(torch.zeros(3), path)
    else:  # a dict without the keys: e.g. the best-val file, which holds only the weights
        torch.save({"model": make_model().state_dict(), "step": 3}, path)
    return path


@pytest.mark.parametrize("what", ["text", "a tensor", "a dict of weights"])
@pytest.mark.parametrize("given_as", ["path", "file object"])
def test_not_a_checkpoint_is_a_clear_error(tmp_path, what, given_as):
    path = not_a_checkpoint_path(tmp_path, what)
    source = path if given_as == "path" else io.BytesIO(path.read_bytes())
    model = make_model()
    with pytest.raises(ValueError, match="is not a training checkpoint") as caught:
        load_checkpoint(source, model, configure_optimizer(model, small_config()))
    if what == "a dict of weights":
        assert "lacks ['optimizer', 'torch_rng', 'cuda_rng', 'python_rng', 'config']" in str(caught.value)
    if given_as == "path":
        assert str(path) in str(caught.value)


def test_a_file_object_not_rewound_gets_a_hint():
    model, config = make_model(), small_config()
    optimizer = configure_optimizer(model, config)
    buffer = io.BytesIO()
    save_checkpoint(buffer, model, optimizer, step=1, config=config)  # the buffer now stands at its end
    with pytest.raises(ValueError, match=r"not a training checkpoint.*seek\(0\)"):
        load_checkpoint(buffer, model, optimizer)


def test_a_text_mode_file_is_a_clear_error(tmp_path):
    model, config = make_model(), small_config()
    optimizer = configure_optimizer(model, config)
    with open(tmp_path / "run.pt", "w") as file:
        with pytest.raises(TypeError, match=r"'.*run.pt' is open in text mode.*open\(path, 'wb'\)"):
            save_checkpoint(file, model, optimizer, step=1, config=config)
    with pytest.raises(TypeError, match="the StringIO is open in text mode"):
        save_checkpoint(io.StringIO(), model, optimizer, step=1, config=config)
    save_checkpoint(tmp_path / "run.pt", model, optimizer, step=1, config=config)
    with open(tmp_path / "run.pt") as file:
        with pytest.raises(TypeError, match=r"open in text mode.*open\(path, 'rb'\)"):
            load_checkpoint(file, model, optimizer)
    with pytest.raises(TypeError, match="a path .* or a binary file object with .write\\(\\), got int"):
        save_checkpoint(3, model, optimizer, step=1, config=config)


# --------------------------------------------------------------------------- lesson 08's functions in the loop


def test_adamw_step_is_torchs_adamw():
    torch.manual_seed(0)
    weights = [torch.randn(3, 4), torch.randn(5)]
    mine = [w.clone() for w in weights]
    torchs = [nn.Parameter(w.clone()) for w in weights]
    optimizer = torch.optim.AdamW(torchs, lr=0.01, betas=(0.8, 0.95), eps=1e-6, weight_decay=0.1, foreach=False)
    m, v = [torch.zeros_like(w) for w in weights], [torch.zeros_like(w) for w in weights]
    for step in range(1, 6):
        grads = [torch.randn_like(w) for w in weights]
        for p, g in zip(torchs, grads):
            p.grad = g.clone()
        optimizer.step()
        adamw_step(mine, grads, m, v, step, 0.01, (0.8, 0.95), 1e-6, 0.1)
    for a, b in zip(mine, torchs):
        torch.testing.assert_close(a, b.detach(), rtol=1e-5, atol=1e-6)


def test_the_loops_functions_train_as_the_loop_does():
    """LoopFunctions' defaults (lesson 08's exercises, written by the reference) give the loop's own run."""
    config = small_config(max_steps=20, eval_interval=5)
    own = train(make_model(), get_batch, config)
    functions = train(make_model(), get_batch, config, functions=LoopFunctions())
    assert functions["eval_step"] == own["eval_step"]
    torch.testing.assert_close(torch.tensor(functions["train_loss"]), torch.tensor(own["train_loss"]),
                               rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(torch.tensor(functions["val_loss"]), torch.tensor(own["val_loss"]),
                               rtol=1e-4, atol=1e-5)


class Spy:
    """Calls `function` and counts the calls."""

    def __init__(self, function):
        self.function, self.calls = function, 0

    def __call__(self, *args):
        self.calls += 1
        return self.function(*args)


def test_train_calls_every_function_it_is_given():
    spies = {name: Spy(getattr(LoopFunctions(), name))
             for name in ("lr_at", "make_optimizer", "train_step", "estimate_loss")}
    config = small_config(max_steps=12, eval_interval=4)
    history = train(make_model(), get_batch, config, functions=LoopFunctions(**spies))
    assert spies["make_optimizer"].calls == 1
    assert spies["lr_at"].calls == spies["train_step"].calls == 12
    assert spies["estimate_loss"].calls == 2 * len(history["eval_step"])  # train and val at each estimate
    assert isinstance(spies["make_optimizer"].function(make_model(), config), StepwiseAdamW)


def test_a_run_with_the_functions_resumes_exactly(tmp_path):
    checkpoint = str(tmp_path / "run.pt")
    config = small_config(max_steps=12, eval_interval=4)
    straight = train(make_model(), get_batch, config, functions=LoopFunctions())

    crashes_after_7 = Spy(plain_train_step)

    def train_step_that_crashes(*args):
        if crashes_after_7.calls == 7:
            raise Interrupted
        return crashes_after_7(*args)

    resumable = small_config(max_steps=12, eval_interval=4, checkpoint_path=checkpoint, checkpoint_interval=6)
    with pytest.raises(Interrupted):
        train(make_model(), get_batch, resumable, functions=LoopFunctions(train_step=train_step_that_crashes))
    resumed = train(make_model(seed=5), get_batch, resumable, resume=True, functions=LoopFunctions())
    assert resumed["train_loss"] == straight["train_loss"]
    assert resumed["val_loss"] == straight["val_loss"]


def test_functions_and_a_loss_fn_are_refused_together():
    with pytest.raises(ValueError, match="leave loss_fn out"):
        train(make_model(), get_batch, small_config(), loss_fn=lambda m, x, y: default_loss(m, x, y),
              functions=LoopFunctions())
    with pytest.raises(TypeError, match="must be a tfcourse.training.loop.LoopFunctions, got dict"):
        train(make_model(), get_batch, small_config(), functions={"lr_at": lr_at})


def test_mean_loss_restores_the_mode_and_matches_estimate_loss():
    model = make_model().train()
    generator = torch.Generator().manual_seed(0)
    batches = [get_batch("val", generator) for _ in range(3)]
    value = mean_loss(model, batches)
    assert model.training
    with torch.no_grad():
        expected = sum(default_loss(model.eval(), x, y).item() for x, y in batches) / 3
    assert value == pytest.approx(expected)
