"""BERT's masked-token batches (tfcourse.data.mlm): the rules hold at every position, the proportions
hold over many draws, the same seed gives the same batch; the loss looks at the chosen positions only."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

from tfcourse.data.mlm import IGNORE_INDEX, mask_tokens, masked_lm_loss

PAD, CLS, MASK, VOCAB = 0, 1, 2, 50
SPECIALS = [PAD, CLS, MASK]


def batch(seed: int, size=(64, 128)) -> torch.Tensor:
    """[CLS] first, ordinary tokens, padding at the end of each row."""
    gen = torch.Generator().manual_seed(seed)
    ids = torch.randint(3, VOCAB, size, generator=gen)
    ids[:, 0] = CLS
    lengths = torch.randint(size[1] // 2, size[1] + 1, (size[0],), generator=gen)
    return torch.where(torch.arange(size[1]) < lengths[:, None], ids, torch.full_like(ids, PAD))


def draw(ids, seed, **options):
    return mask_tokens(ids, MASK, VOCAB, SPECIALS, generator=torch.Generator().manual_seed(seed), **options)


def test_rules_hold_at_every_position():
    for seed in range(5):
        ids = batch(seed)
        before = ids.clone()
        inputs, labels = draw(ids, seed)
        assert torch.equal(ids, before)  # not modified in place
        assert inputs.shape == labels.shape == ids.shape and inputs.dtype == labels.dtype == torch.long
        chosen = labels != IGNORE_INDEX
        special = torch.isin(ids, torch.tensor(SPECIALS))
        assert not (chosen & special).any()  # padding, [CLS], [MASK] never chosen
        assert torch.equal(labels[chosen], ids[chosen])  # labels: the original ids
        assert torch.equal(inputs[~chosen], ids[~chosen])  # the rest untouched
        changed = chosen & (inputs != ids) & (inputs != MASK)
        assert not torch.isin(inputs[changed], torch.tensor(SPECIALS)).any()  # random tokens are ordinary


def test_proportions_over_many_draws():
    """15 % chosen; of those 80 / 10 / 10, within five standard deviations over ~400k positions."""
    chosen_n = ordinary_n = masked = kept = randomised = 0
    counts = torch.zeros(VOCAB)
    for seed in range(50):
        ids = batch(seed)
        inputs, labels = draw(ids, 1000 + seed)
        chosen = labels != IGNORE_INDEX
        ordinary_n += int((~torch.isin(ids, torch.tensor(SPECIALS))).sum())
        chosen_n += int(chosen.sum())
        masked += int((inputs[chosen] == MASK).sum())
        kept += int((inputs[chosen] == ids[chosen]).sum())
        replaced = chosen & (inputs != MASK) & (inputs != ids)
        randomised += int(replaced.sum())
        counts += torch.bincount(inputs[replaced], minlength=VOCAB).float()
    rate = chosen_n / ordinary_n
    assert abs(rate - 0.15) < 5 * math.sqrt(0.15 * 0.85 / ordinary_n)
    n_ordinary_ids = VOCAB - len(SPECIALS)
    expected = {"mask": 0.8, "kept": 0.1 + 0.1 / n_ordinary_ids, "random": 0.1 * (1 - 1 / n_ordinary_ids)}
    for name, count in (("mask", masked), ("kept", kept), ("random", randomised)):
        p = expected[name]
        assert abs(count / chosen_n - p) < 5 * math.sqrt(p * (1 - p) / chosen_n), (name, count / chosen_n)
    # The random tokens are uniform over the ordinary ids: none missing, none far more frequent.
    ordinary_counts = counts[3:]
    assert counts[:3].sum() == 0 and ordinary_counts.min() > 0
    assert ordinary_counts.max() / ordinary_counts.mean() < 1.5


def test_mask_prob_is_honoured_and_zero_chooses_nothing():
    ids = batch(0, (128, 128))
    ordinary = int((~torch.isin(ids, torch.tensor(SPECIALS))).sum())
    _, labels = draw(ids, 0, mask_prob=0.4)
    assert abs(int((labels != IGNORE_INDEX).sum()) / ordinary - 0.4) < 0.02
    inputs, labels = draw(ids, 0, mask_prob=0.0)
    assert torch.equal(inputs, ids) and (labels == IGNORE_INDEX).all()


def test_same_seed_same_batch_other_seed_other_batch_and_the_global_generator_is_not_used():
    ids = batch(3)
    torch.manual_seed(1)
    first = draw(ids, 7)
    torch.manual_seed(2)
    again = draw(ids, 7)
    assert all(torch.equal(a, b) for a, b in zip(first, again))
    other = draw(ids, 8)
    assert not torch.equal(first[1], other[1])
    state = torch.get_rng_state()
    draw(ids, 9)
    assert torch.equal(torch.get_rng_state(), state)


def test_bad_arguments_are_named():
    ids = batch(0, (2, 8))
    with pytest.raises(TypeError, match="int64"):
        mask_tokens(ids.float(), MASK, VOCAB, SPECIALS)
    with pytest.raises(TypeError, match="ids must be a torch.Tensor"):
        mask_tokens(ids.tolist(), MASK, VOCAB, SPECIALS)
    with pytest.raises(ValueError, match="include mask_id=2"):
        mask_tokens(ids, MASK, VOCAB, [PAD, CLS])
    with pytest.raises(ValueError, match="mask_prob"):
        mask_tokens(ids, MASK, VOCAB, SPECIALS, mask_prob=1.5)
    with pytest.raises(ValueError, match="mask_id must be in"):
        mask_tokens(ids, 60, VOCAB, SPECIALS + [60])
    with pytest.raises(ValueError, match="no ordinary token"):
        mask_tokens(torch.zeros(1, 2, dtype=torch.long), 1, 2, [0, 1])


def test_masked_lm_loss_equals_torch_with_ignore_index_and_sees_only_chosen_positions():
    gen = torch.Generator().manual_seed(0)
    logits = torch.randn(4, 16, VOCAB, generator=gen, requires_grad=True)
    ids = batch(1, (4, 16))
    _, labels = draw(ids, 2)
    loss = masked_lm_loss(logits, labels)
    expected = F.cross_entropy(logits.reshape(-1, VOCAB), labels.reshape(-1), ignore_index=IGNORE_INDEX)
    torch.testing.assert_close(loss, expected)
    loss.backward()
    assert (logits.grad[labels == IGNORE_INDEX] == 0).all()  # ignored positions get no gradient
    assert (logits.grad[labels != IGNORE_INDEX].abs().sum(-1) > 0).all()
    large = masked_lm_loss(logits.detach() * 1000, labels)
    assert torch.isfinite(large)


def test_masked_lm_loss_errors():
    logits = torch.randn(2, 5, 7)
    with pytest.raises(ValueError, match="no position is chosen"):
        masked_lm_loss(logits, torch.full((2, 5), IGNORE_INDEX))
    with pytest.raises(ValueError, match=r"labels must be \(B, T\) = \(2, 5\)"):
        masked_lm_loss(logits, torch.zeros(2, 4, dtype=torch.long))
    with pytest.raises(ValueError, match=r"\(B, T, V\)"):
        masked_lm_loss(logits[0], torch.zeros(2, 5, dtype=torch.long))
