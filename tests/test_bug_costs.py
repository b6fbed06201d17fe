"""tfcourse.training.bug_costs: each mistake is in the model as a learner's code would put it, and
trained briefly on a fixed seed the leak's costs come out in the order lesson 08 describes."""

from __future__ import annotations

import random

import pytest
import torch

from tfcourse.data.batching import get_batch, train_val_split
from tfcourse.models import GPTConfig
from tfcourse.training.bug_costs import MISTAKES, with_mistake
from tfcourse.training.loop import TrainConfig, default_loss, estimate_loss, train

CONFIG = GPTConfig.gpt(vocab_size=20, max_len=16, d_model=32, n_heads=4, n_layers=2, dropout=0.0)


def _changes_at(model, position: int) -> set[int]:
    """The positions whose logits move when the token at `position` changes."""
    ids = torch.randint(0, 20, (1, 16), generator=torch.Generator().manual_seed(0))
    changed = ids.clone()
    changed[0, position] = (ids[0, position] + 1) % 20
    with torch.no_grad():
        moved = (model(ids) - model(changed)).abs().amax(dim=-1)[0]  # (T,)
    return set((moved > 1e-6).nonzero().flatten().tolist())


def test_the_leak_lets_each_position_see_the_next_token_until_it_is_taken_out():
    model, honest = with_mistake(CONFIG, "mask leaks one future token")
    reach = CONFIG.n_layers  # one future token per layer: position 5 - k sees token 5 through k layers
    assert _changes_at(model.eval(), 5) == set(range(5 - reach, 16)), "earlier positions should see token 5"
    honest()
    assert _changes_at(model, 5) == set(range(5, 16)), "after honest(): causal again"
    correct, nothing = with_mistake(CONFIG, "correct")
    nothing()
    assert _changes_at(correct.eval(), 5) == set(range(5, 16))


def test_no_scaling_gives_scores_q_dot_k_and_no_positions_has_no_table():
    torch.manual_seed(0)
    reference, _ = with_mistake(CONFIG, "correct")
    torch.manual_seed(0)
    unscaled, _ = with_mistake(CONFIG, "no 1/√d_k")
    attention, plain = unscaled.blocks.layers[0].self_attn, reference.blocks.layers[0].self_attn
    x = torch.randn(1, 6, 32)
    d_head = plain.d_head
    # Same weights; the unscaled queries are sqrt(d_head) times larger, so q·k/sqrt(d_head) = plain q·k.
    torch.testing.assert_close(attention.w_q(x), plain.w_q(x) * d_head ** 0.5)
    positions, _ = with_mistake(CONFIG, "no positional encoding")
    assert positions.config.positional == "none" and not any("position" in n for n, _ in positions.named_parameters())
    with pytest.raises(ValueError, match="mistake must be one of"):
        with_mistake(CONFIG, "no softmax")


def test_trained_briefly_the_leak_looks_best_in_training_and_is_worst_with_the_correct_mask():
    rnd = random.Random(0)
    words = "the cat sat on a mat dog ran to big red sun hot day".split()
    text = " ".join(rnd.choice(words) for _ in range(4000))
    chars = sorted(set(text))
    ids = torch.tensor([chars.index(c) for c in text])
    train_ids, val_ids = train_val_split(ids, 0.9)
    config = GPTConfig.gpt(vocab_size=len(chars), max_len=32, d_model=32, n_heads=4, n_layers=2, dropout=0.0)

    def batches(split, generator):
        return get_batch(train_ids if split == "train" else val_ids, 16, 32, generator)

    run = TrainConfig(max_steps=80, warmup_steps=10, lr=3e-3, eval_interval=60, eval_steps=5, progress=False,
                      device="cpu")
    trained, honest_val = {}, {}
    for mistake in MISTAKES:
        torch.manual_seed(0)
        model, honest = with_mistake(config, mistake)
        trained[mistake] = train(model, batches, run)["eval_train_loss"][-1]
        honest()
        honest_val[mistake] = estimate_loss(model, batches, 5, default_loss, torch.device("cpu"))["val"]
    leak = "mask leaks one future token"
    assert min(trained, key=trained.get) == leak, trained  # too good to be true ...
    assert honest_val[leak] > honest_val["correct"], honest_val  # ... and worse than correct, used honestly
