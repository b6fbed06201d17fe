"""tfcourse.heads: every head's weights are the model's own, and the scores find a hand-built
previous-token head and copying head, and nothing in a random model."""

from __future__ import annotations

import pytest
import torch

from tfcourse.heads import (COPYING_THRESHOLD, PREVIOUS_TOKEN_THRESHOLD, copying_score, find_heads,
                            previous_token_score, repeated_random_ids, self_attention_weights, uniform_score)
from tfcourse.models import GPT, GPTConfig

T = 16


def _positions_only_gpt(query_from, n_layers: int = 1, fused: bool = False) -> GPT:
    """A one-head GPT whose attention reads positions only: token table 0, position t one-hot, keys the
    position itself and the query of position t the one-hot of query_from(t) (scaled: a sharp softmax)."""
    config = GPTConfig.gpt(vocab_size=10, max_len=2 * T, d_model=2 * T, n_heads=1, n_layers=n_layers,
                           dropout=0.0, fused_attention=fused)
    model = GPT(config).eval()
    d = config.d_model
    wanted = torch.zeros(d, d)
    for t in range(d):
        wanted[query_from(t) % d, t] = 6.0  # q_t = 6 e_{query_from(t)}: q_t · k_s peaks at s = query_from(t)
    with torch.no_grad():
        model.embed.token.weight.zero_()
        model.embed.position.weight.copy_(torch.eye(d))
        for block in model.blocks.layers:
            attention = block.self_attn
            for linear in (attention.w_q, attention.w_k):
                linear.bias.zero_()
            attention.w_k.weight.copy_(torch.eye(d))
            attention.w_q.weight.copy_(wanted)
    return model


def test_the_weights_are_the_models_own_in_every_layer_and_rows_sum_to_one():
    torch.manual_seed(0)
    model = GPT(GPTConfig.gpt(vocab_size=50, max_len=64, d_model=32, n_heads=4, n_layers=3, dropout=0.1)).train()
    weights = self_attention_weights(model, torch.randint(0, 50, (20,)))
    assert weights.shape == (3, 4, 20, 20) and model.training, "the model is left in training mode"
    torch.testing.assert_close(weights.sum(-1), torch.ones(3, 4, 20))
    assert torch.all(weights.triu(diagonal=1) == 0), "no weight on a later position"


def test_a_hand_built_previous_token_head_is_found_and_a_random_model_has_none():
    model = _positions_only_gpt(lambda t: t - 1)
    ids = torch.randint(0, 10, (T,), generator=torch.Generator().manual_seed(0))
    score = previous_token_score(self_attention_weights(model, ids))
    assert score.shape == (1, 1) and score.item() > 0.8, score
    assert [(f.layer, f.head, f.kind) for f in find_heads(model, ids, period=8)] == [(0, 0, "previous-token")]
    torch.manual_seed(1)
    random_model = GPT(GPTConfig.gpt(vocab_size=10, max_len=2 * T, d_model=32, n_heads=4, n_layers=2, dropout=0.0))
    assert find_heads(random_model, ids, period=8) == []
    assert previous_token_score(self_attention_weights(random_model, ids)).max() < PREVIOUS_TOKEN_THRESHOLD


def test_a_hand_built_copying_head_is_found():
    period = T // 2
    # On a sequence repeated with this period, position t looks at t - period + 1: what followed last time.
    model = _positions_only_gpt(lambda t: t - period + 1 if t >= period else t)
    ids = repeated_random_ids(10, period, torch.Generator().manual_seed(0))
    assert copying_score(self_attention_weights(model, ids), period).item() > COPYING_THRESHOLD
    assert ("copying" in {f.kind for f in find_heads(model, ids[:period], period=period)})


def test_the_scores_on_weights_written_by_hand():
    shifted = torch.eye(5).roll(-1, dims=1).tril()  # row t: weight 1 on t - 1 (row 0: nothing)
    shifted[0, 0] = 1.0
    assert previous_token_score(shifted).item() == 1.0
    uniform = torch.tril(torch.ones(5, 5)) / torch.arange(1, 6).view(5, 1)
    assert previous_token_score(uniform).item() == pytest.approx(uniform_score(5))
    assert previous_token_score(torch.eye(5)).item() == 0.0  # all on the token itself
    assert previous_token_score(torch.stack([shifted, torch.eye(5)])).tolist() == [1.0, 0.0]
    copy = torch.zeros(8, 8)
    for t in range(8):
        copy[t, t - 3 if t >= 4 else t] = 1.0
    assert copying_score(copy, 4).item() == 1.0


def test_a_fused_attention_and_bad_input():
    model = _positions_only_gpt(lambda t: t - 1, fused=True)
    assert previous_token_score(self_attention_weights(model, torch.zeros(T, dtype=torch.long))).item() > 0.8
    with pytest.raises(ValueError, match=r"one sequence, \(T,\) or \(1, T\)"):
        self_attention_weights(model, torch.zeros(2, T, dtype=torch.long))
    with pytest.raises(ValueError, match="square"):
        previous_token_score(torch.ones(3, 4))
    with pytest.raises(ValueError, match="two copies of period=4"):
        copying_score(torch.ones(6, 6), 4)
    with pytest.raises(TypeError, match="torch.Tensor"):
        previous_token_score([[1.0]])
