"""The real model in the real loop: a tiny GPT learns a short text, and resumes exactly."""

import time

import torch

from tfcourse.data import get_batch
from tfcourse.decoding import generate
from tfcourse.models import GPT, GPTConfig
from tfcourse.tokenizers import CharTokenizer
from tfcourse.training.loop import TrainConfig, default_loss, train

TEXT = "to be or not to be, that is the question. 今天天气真好. " * 20


def _setup(dropout=0.0, seed=0):
    tokenizer = CharTokenizer.from_text(TEXT)
    data = torch.tensor(tokenizer.encode(TEXT))
    torch.manual_seed(seed)
    model = GPT(GPTConfig.gpt(tokenizer.vocab_size, max_len=32, d_model=64, n_heads=4, n_layers=2, dropout=dropout))

    def batches(split, generator):
        return get_batch(data, 16, 32, generator)  # the same text for train and val: we want to overfit

    return tokenizer, model, batches


def test_tiny_gpt_overfits_a_short_text_within_seconds(one_thread):
    tokenizer, model, batches = _setup()
    started = time.perf_counter()
    history = train(model, batches, TrainConfig(max_steps=150, lr=3e-3, warmup_steps=10, eval_interval=150,
                                                eval_steps=4, progress=False, device="cpu"))
    elapsed = time.perf_counter() - started
    first, last = history["val_loss"][0], history["val_loss"][-1]
    assert first > 2.5, "an untrained model should be near log(vocab_size)"
    assert last < 0.3, f"a tiny GPT should memorise a repeated sentence; val loss is {last:.2f}"
    assert elapsed < 120  # a sanity bound, not a benchmark
    prompt = torch.tensor([tokenizer.encode("to be or ")])
    continuation = tokenizer.decode(generate(model, prompt, 10, temperature=0)[0].tolist())
    assert continuation.startswith("to be or not to be")


class Crash(Exception):
    pass


def test_gpt_resume_from_checkpoint_equals_uninterrupted_run(tmp_path, one_thread):
    def run(path, resume=False, seed=0, crash_at_step=None):
        _, model, batches = _setup(dropout=0.1, seed=seed)
        steps_started = []

        def loss_fn(model, x, y):
            if model.training:  # a training step, not an evaluation
                steps_started.append(1)
                if len(steps_started) == crash_at_step:
                    raise Crash  # the power goes out during this step; the last checkpoint is step 5
            return default_loss(model, x, y)

        config = TrainConfig(max_steps=12, warmup_steps=4, eval_interval=5, eval_steps=2, progress=False,
                             device="cpu", checkpoint_path=str(path), checkpoint_interval=5)
        return model, train(model, batches, config, loss_fn, resume=resume)

    full_model, full = run(tmp_path / "full.pt")
    try:
        run(tmp_path / "crashed.pt", crash_at_step=7)
    except Crash:
        pass
    torch.manual_seed(123)  # disturb the global RNG: the checkpoint must restore it
    resumed_model, resumed = run(tmp_path / "crashed.pt", resume=True, seed=99)
    assert resumed["train_loss"] == full["train_loss"]
    assert resumed["val_loss"] == full["val_loss"]
    for (name, a), b in zip(full_model.state_dict().items(), resumed_model.state_dict().values()):
        assert torch.equal(a, b), f"{name} differs after resuming"
