"""tfcourse's components against PyTorch's own implementations, with copied weights.

PyTorch is the independent reference: if our attention, blocks or whole stack disagree with
torch.nn on the same weights and inputs, ours is wrong.
"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfcourse.attention import MultiHeadAttention, causal_mask, padding_mask, scaled_dot_product_attention
from tfcourse.blocks import Decoder, DecoderLayer, Encoder, EncoderLayer, LayerNorm, layer_norm
from tfcourse.output import cross_entropy, log_softmax, softmax

from torch_copy import copy_decoder_layer, copy_encoder_layer, copy_mha, copy_norm

TOL = dict(atol=1e-5, rtol=1e-5)
D_MODEL, N_HEADS, D_FF = 32, 4, 64


def _ids_with_padding(batch=3, length=7, pad_lengths=(0, 2, 4)):
    ids = torch.randint(1, 20, (batch, length))
    for row, n_pad in enumerate(pad_lengths):
        if n_pad:
            ids[row, -n_pad:] = 0
    return ids


# ------------------------------------------------------------------------------------------
# scaled dot-product attention
# ------------------------------------------------------------------------------------------


@pytest.mark.parametrize("shape", [(2, 4, 5, 8), (1, 1, 1, 16), (3, 7, 4)])
def test_sdpa_equals_torch_without_mask(shape):
    torch.manual_seed(0)
    q, k, v = torch.randn(shape), torch.randn(shape), torch.randn(shape)
    out, weights = scaled_dot_product_attention(q, k, v)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), **TOL)
    torch.testing.assert_close(weights.sum(-1), torch.ones(shape[:-1]), **TOL)


def test_sdpa_equals_torch_with_causal_and_padding_masks():
    torch.manual_seed(1)
    q, k, v = (torch.randn(3, 2, 6, 8) for _ in range(3))
    ids = _ids_with_padding(3, 6, (0, 2, 5))
    for mask in (causal_mask(6), padding_mask(ids, 0), causal_mask(6) & padding_mask(ids, 0)):
        ours, _ = scaled_dot_product_attention(q, k, v, mask)
        torch.testing.assert_close(ours, F.scaled_dot_product_attention(q, k, v, attn_mask=mask), **TOL)


def test_sdpa_cross_attention_lengths_differ():
    torch.manual_seed(2)
    q, k, v = torch.randn(2, 3, 4, 8), torch.randn(2, 3, 9, 8), torch.randn(2, 3, 9, 5)
    out, weights = scaled_dot_product_attention(q, k, v)
    assert out.shape == (2, 3, 4, 5) and weights.shape == (2, 3, 4, 9)
    torch.testing.assert_close(out, F.scaled_dot_product_attention(q, k, v), **TOL)


def test_fully_masked_row_gives_zeros_not_nan():
    torch.manual_seed(3)
    q, k, v = (torch.randn(1, 1, 3, 4, requires_grad=True) for _ in range(3))
    mask = torch.tensor([[True, False, False], [False, False, False], [True, True, True]])
    out, weights = scaled_dot_product_attention(q, k, v, mask)
    assert torch.isfinite(out).all() and torch.isfinite(weights).all()
    assert torch.equal(weights[0, 0, 1], torch.zeros(3)) and torch.equal(out[0, 0, 1], torch.zeros(4))
    torch.testing.assert_close(weights[0, 0, 0], torch.tensor([1.0, 0.0, 0.0]))
    out.sum().backward()
    assert all(torch.isfinite(t.grad).all() for t in (q, k, v))


def test_causal_mask_is_lower_triangular_and_offset_for_cache():
    assert torch.equal(causal_mask(3), torch.tensor([[1, 0, 0], [1, 1, 0], [1, 1, 1]], dtype=torch.bool))
    # one new query after 4 cached keys sees all 5 keys; two new queries see 4 and 5 keys
    assert causal_mask(1, 5).all()
    assert torch.equal(causal_mask(2, 5).sum(-1), torch.tensor([4, 5]))


# ------------------------------------------------------------------------------------------
# multi-head attention vs nn.MultiheadAttention
# ------------------------------------------------------------------------------------------


def _mha_pair(seed=0):
    torch.manual_seed(seed)
    theirs = nn.MultiheadAttention(D_MODEL, N_HEADS, batch_first=True).eval()
    ours = MultiHeadAttention(D_MODEL, N_HEADS).eval()
    copy_mha(ours, theirs)
    return ours, theirs


@pytest.mark.parametrize("fused", [False, True])
def test_mha_self_attention_with_causal_mask(fused):
    ours, theirs = _mha_pair()
    ours.fused = fused
    x = torch.randn(2, 5, D_MODEL)
    expected, expected_weights = theirs(x, x, x, attn_mask=~causal_mask(5), average_attn_weights=False)
    torch.testing.assert_close(ours(x, mask=causal_mask(5)), expected, **TOL)
    _, weights = ours(x, mask=causal_mask(5), return_weights=True)
    torch.testing.assert_close(weights, expected_weights, **TOL)


def test_mha_cross_attention_with_key_padding():
    ours, theirs = _mha_pair(1)
    x, memory = torch.randn(3, 4, D_MODEL), torch.randn(3, 7, D_MODEL)
    src = _ids_with_padding(3, 7, (0, 3, 6))
    # torch's key_padding_mask uses True = ignore; ours uses True = may attend.
    expected, _ = theirs(x, memory, memory, key_padding_mask=src == 0)
    torch.testing.assert_close(ours(x, memory, mask=padding_mask(src, 0)), expected, **TOL)


def test_mha_kv_cache_matches_full_computation():
    ours, _ = _mha_pair(2)
    x = torch.randn(2, 6, D_MODEL)
    full = ours(x, mask=causal_mask(6))
    from tfcourse.attention import KVCache

    cache = KVCache()
    prefix = ours(x[:, :4], mask=causal_mask(4), cache=cache)
    steps = [ours(x[:, t : t + 1], mask=causal_mask(1, t + 1), cache=cache) for t in (4, 5)]
    torch.testing.assert_close(torch.cat([prefix, *steps], dim=1), full, **TOL)
    assert len(cache) == 6


# ------------------------------------------------------------------------------------------
# LayerNorm, encoder / decoder layers and stacks vs torch.nn
# ------------------------------------------------------------------------------------------


def test_layernorm_equals_torch():
    torch.manual_seed(4)
    theirs = nn.LayerNorm(D_MODEL)
    nn.init.normal_(theirs.weight)
    nn.init.normal_(theirs.bias)
    ours = LayerNorm(D_MODEL)
    copy_norm(ours, theirs)
    x = torch.randn(3, 5, D_MODEL) * 10 + 3
    torch.testing.assert_close(ours(x), theirs(x), **TOL)
    constant = torch.full((1, D_MODEL), 7.0)  # var = 0: eps inside the sqrt keeps it finite
    torch.testing.assert_close(ours(constant), theirs(constant), **TOL)


def test_layernorm_module_computes_the_formula_forward_and_backward():
    """LayerNorm runs torch's fused kernel; `layer_norm` is its formula step by step: they agree,
    gradients included (float64, so only a real difference shows)."""
    torch.manual_seed(5)
    module = LayerNorm(D_MODEL, eps=1e-3).double()
    nn.init.normal_(module.weight)
    nn.init.normal_(module.bias)
    x = (torch.randn(2, 3, D_MODEL, dtype=torch.float64) * 4 + 1).requires_grad_()
    fused = module(x)
    formula = layer_norm(x, module.weight, module.bias, module.eps)
    torch.testing.assert_close(fused, formula, rtol=1e-12, atol=1e-12)
    upstream = torch.randn_like(fused)
    fused_grads = torch.autograd.grad(fused, (x, module.weight, module.bias), upstream)
    formula_grads = torch.autograd.grad(formula, (x, module.weight, module.bias), upstream)
    for ours, by_hand in zip(fused_grads, formula_grads):
        torch.testing.assert_close(ours, by_hand, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("norm_first", [False, True])
def test_encoder_layer_equals_torch(norm_first):
    torch.manual_seed(5)
    theirs = nn.TransformerEncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.1, batch_first=True,
                                        norm_first=norm_first).eval()
    ours = EncoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.1, norm_first=norm_first).eval()
    copy_encoder_layer(ours, theirs)
    x = torch.randn(3, 7, D_MODEL)
    ids = _ids_with_padding()
    torch.testing.assert_close(ours(x), theirs(x), **TOL)
    torch.testing.assert_close(ours(x, mask=causal_mask(7)), theirs(x, src_mask=~causal_mask(7)), **TOL)
    # torch's fast path returns 0 at padded query positions; compare the real positions only.
    keep = ids != 0
    ours_out = ours(x, mask=padding_mask(ids, 0))
    theirs_out = theirs(x, src_key_padding_mask=ids == 0)
    torch.testing.assert_close(ours_out[keep], theirs_out[keep], **TOL)


@pytest.mark.parametrize("norm_first", [False, True])
def test_decoder_layer_equals_torch(norm_first):
    torch.manual_seed(6)
    theirs = nn.TransformerDecoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.1, batch_first=True,
                                        norm_first=norm_first).eval()
    ours = DecoderLayer(D_MODEL, N_HEADS, D_FF, dropout=0.1, norm_first=norm_first).eval()
    copy_decoder_layer(ours, theirs)
    x, memory = torch.randn(3, 5, D_MODEL), torch.randn(3, 7, D_MODEL)
    src = _ids_with_padding()
    expected = theirs(x, memory, tgt_mask=~causal_mask(5), memory_key_padding_mask=src == 0)
    torch.testing.assert_close(ours(x, memory, causal_mask(5), padding_mask(src, 0)), expected, **TOL)


# torch notes that its nested-tensor speed-up is off for pre-LN; irrelevant to the comparison.
@pytest.mark.filterwarnings("ignore:enable_nested_tensor is True")
@pytest.mark.parametrize("norm_first", [False, True])
def test_whole_stack_equals_nn_transformer(norm_first):
    torch.manual_seed(7)
    n_layers = 3
    theirs = nn.Transformer(D_MODEL, N_HEADS, n_layers, n_layers, D_FF, dropout=0.1, batch_first=True,
                            norm_first=norm_first).eval()
    if not norm_first:
        # nn.Transformer always ends each stack with a LayerNorm; the paper's post-LN stack has
        # none (each layer already ends in one). Remove it for the comparison.
        theirs.encoder.norm = None
        theirs.decoder.norm = None
    encoder = Encoder(n_layers, D_MODEL, N_HEADS, D_FF, dropout=0.1, norm_first=norm_first).eval()
    decoder = Decoder(n_layers, D_MODEL, N_HEADS, D_FF, dropout=0.1, norm_first=norm_first).eval()
    for ours, layer in zip(encoder.layers, theirs.encoder.layers):
        copy_encoder_layer(ours, layer)
    for ours, layer in zip(decoder.layers, theirs.decoder.layers):
        copy_decoder_layer(ours, layer)
    if norm_first:
        copy_norm(encoder.norm, theirs.encoder.norm)
        copy_norm(decoder.norm, theirs.decoder.norm)
    src_x, tgt_x = torch.randn(2, 9, D_MODEL), torch.randn(2, 6, D_MODEL)
    src = _ids_with_padding(2, 9, (0, 3))
    expected = theirs(src_x, tgt_x, tgt_mask=~causal_mask(6), src_key_padding_mask=src == 0,
                      memory_key_padding_mask=src == 0)
    src_mask = padding_mask(src, 0)
    memory = encoder(src_x, src_mask)
    torch.testing.assert_close(decoder(tgt_x, memory, causal_mask(6), src_mask), expected, **TOL)


# ------------------------------------------------------------------------------------------
# softmax / cross-entropy
# ------------------------------------------------------------------------------------------


def test_log_softmax_and_cross_entropy_equal_torch():
    torch.manual_seed(8)
    logits, targets = torch.randn(4, 6, 11), torch.randint(0, 11, (4, 6))
    torch.testing.assert_close(log_softmax(logits), F.log_softmax(logits, -1), **TOL)
    torch.testing.assert_close(softmax(logits), F.softmax(logits, -1), **TOL)
    for smoothing in (0.0, 0.1):
        expected = F.cross_entropy(logits.reshape(-1, 11), targets.reshape(-1), ignore_index=3,
                                   label_smoothing=smoothing)
        torch.testing.assert_close(cross_entropy(logits, targets, 3, smoothing), expected, **TOL)


def test_softmax_and_cross_entropy_stay_finite_for_extreme_logits():
    torch.manual_seed(9)
    logits, targets = torch.randn(5, 7), torch.randint(0, 7, (5,))
    for extreme in (logits + 100, logits * 1000, logits * 1000 + 100):
        assert torch.isfinite(log_softmax(extreme)).all()
        probs = softmax(extreme)
        assert torch.isfinite(probs).all()
        torch.testing.assert_close(probs.sum(-1), torch.ones(5))
        loss = cross_entropy(extreme, targets)
        assert torch.isfinite(loss)
        torch.testing.assert_close(loss, F.cross_entropy(extreme, targets))
    # shifting every logit by a constant changes nothing
    torch.testing.assert_close(softmax(logits + 100), softmax(logits), **TOL)
