"""tfcourse.modern and the LLaMA-style GPT against independent references: torch.nn.RMSNorm,
F.scaled_dot_product_attention with enable_gqa, a complex-number RoPE written here, and Hugging Face's Llama
(rotary embedding, MLP, attention, the whole model) with copied weights. Only the Hugging Face comparisons
need `transformers` (the `pretrained` extra, which CI installs); the others run without it."""

from __future__ import annotations

import dataclasses
import importlib.util
import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from tfcourse.attention import KVCache, causal_mask, padding_mask
from tfcourse.data import get_batch
from tfcourse.ffn import PositionwiseFeedForward
from tfcourse.models import GPT, GPTConfig, ablation_configs, ablation_ladder, count_parameters
from tfcourse.modern import swiglu_hidden_size
from tfcourse.modern import (GroupedQueryAttention, RMSNorm, SwiGLUFeedForward, apply_rope, cache_bytes,
                             grouped_query_attention, kv_cache_bytes, repeat_kv, rope_cos_sin, rope_rows_to_half,
                             rotary, rotate_half, swiglu_hidden_size)
from tfcourse.training import TrainConfig, train

# The `pretrained` extra. Its Llama module is imported by the tests that use it, not here: importing it
# takes seconds, and every test worker imports this file to collect it.
needs_transformers = pytest.mark.skipif(importlib.util.find_spec("transformers") is None,
                                        reason="compares with Hugging Face's Llama: "
                                               "install the `pretrained` extra (transformers)")


def _llama():
    from transformers.models.llama import modeling_llama
    return modeling_llama


def _llama_config(**overrides):
    fields = dict(vocab_size=50, hidden_size=32, intermediate_size=48, num_hidden_layers=2, num_attention_heads=4,
                  num_key_value_heads=2, max_position_embeddings=64, rms_norm_eps=1e-6, tie_word_embeddings=True,
                  attention_bias=False, mlp_bias=False)
    fields.update(overrides)
    config = _llama().LlamaConfig(**fields)
    config._attn_implementation = "eager"  # the plain softmax path
    return config


# ----------------------------------------------------------------------------------------------
# RMSNorm
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("shape", "eps"), [((2, 5, 8), 1e-6), ((1, 1, 16), 1e-5), ((3, 7), 1e-3), ((4,), 1e-6)])
def test_rms_norm_equals_torch(shape, eps):
    torch.manual_seed(0)
    ours, theirs = RMSNorm(shape[-1], eps=eps).double(), nn.RMSNorm(shape[-1], eps=eps).double()
    with torch.no_grad():
        ours.weight.normal_()
        theirs.weight.copy_(ours.weight)
    x = 0.01 * torch.randn(shape, dtype=torch.float64) + 0.5  # a small spread: eps matters
    torch.testing.assert_close(ours(x), theirs(x), atol=1e-12, rtol=1e-10)
    torch.testing.assert_close(ours(x), F.rms_norm(x, (shape[-1],), ours.weight, eps), atol=1e-12, rtol=1e-10)


def test_rms_norm_of_zeros_is_finite_and_it_has_no_bias():
    norm = RMSNorm(6)
    assert [name for name, _ in norm.named_parameters()] == ["weight"]
    assert torch.equal(norm(torch.zeros(2, 6)), torch.zeros(2, 6))
    with pytest.raises(ValueError, match=r"d_model=6"):
        norm(torch.zeros(2, 5))
    with pytest.raises(TypeError, match=r"torch.Tensor"):
        norm([1.0] * 6)


# ----------------------------------------------------------------------------------------------
# SwiGLU
# ----------------------------------------------------------------------------------------------


@needs_transformers
def test_swiglu_equals_llama_mlp():
    torch.manual_seed(1)
    config = _llama_config(hidden_size=24, intermediate_size=64)
    theirs = _llama().LlamaMLP(config).eval()
    ours = SwiGLUFeedForward(24, 64).eval()
    ours.load_state_dict({"w_gate.weight": theirs.gate_proj.weight, "w_up.weight": theirs.up_proj.weight,
                          "w_down.weight": theirs.down_proj.weight})
    x = torch.randn(2, 7, 24)
    with torch.no_grad():
        torch.testing.assert_close(ours(x), theirs(x), atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("d_model", [3, 96, 384, 768, 4095])
def test_swiglu_keeps_the_relu_ffns_parameter_count(d_model):
    """2/3 * 4 d_model: three bias-free matrices hold what two bias-free 4 d_model matrices hold (exactly
    when 3 divides d_model; otherwise the rounding leaves less than 3 d_model parameters of difference)."""
    hidden = swiglu_hidden_size(d_model)
    assert hidden == int(2 / 3 * 4 * d_model) == 8 * d_model // 3
    swiglu = count_parameters(SwiGLUFeedForward(d_model))
    relu = 2 * d_model * 4 * d_model  # W1 and W2 of the paper's FFN, without its biases
    assert swiglu == 3 * d_model * hidden
    if d_model % 3 == 0:
        assert swiglu == relu
    else:
        assert 0 < relu - swiglu < 3 * d_model
    with_biases = count_parameters(PositionwiseFeedForward(d_model))
    assert with_biases - relu == 5 * d_model  # b1 (4 d_model) and b2 (d_model)


# ----------------------------------------------------------------------------------------------
# RoPE, against Hugging Face's Llama (the same half-split layout): exactly equal
# ----------------------------------------------------------------------------------------------


@needs_transformers
@pytest.mark.parametrize(("d_head", "length", "offset", "base"), [(16, 7, 0, 10000.0), (8, 1, 5, 10000.0),
                                                                  (32, 12, 30, 500000.0), (2, 3, 0, 10.0)])
def test_rope_equals_llamas_rotary_embedding_exactly(d_head, length, offset, base):
    config = _llama_config(hidden_size=4 * d_head, num_attention_heads=4, num_key_value_heads=2,
                           rope_parameters={"rope_type": "default", "rope_theta": base})
    rotary = _llama().LlamaRotaryEmbedding(config)
    torch.manual_seed(2)
    q = torch.randn(2, 4, length, d_head)  # (B, n_heads, T, d_head)
    k = torch.randn(2, 2, length, d_head)  # (B, n_kv_heads, T, d_head)
    position_ids = torch.arange(offset, offset + length).expand(2, length)  # (B, T)
    cos, sin = rotary(q, position_ids)  # (B, T, d_head)
    ours_cos, ours_sin = rope_cos_sin(length, d_head, offset, base)
    assert torch.equal(ours_cos, cos[0]) and torch.equal(ours_sin, sin[0])
    q_theirs, k_theirs = _llama().apply_rotary_pos_emb(q, k, cos, sin)
    assert torch.equal(apply_rope(q, offset, base), q_theirs)
    assert torch.equal(apply_rope(k, offset, base), k_theirs)
    assert torch.equal(rotate_half(q), _llama().rotate_half(q))


def test_rope_scores_depend_only_on_the_relative_offset():
    torch.manual_seed(3)
    q, k = torch.randn(1, 1, 1, 16, dtype=torch.float64), torch.randn(1, 1, 1, 16, dtype=torch.float64)

    def score(m: int, n: int) -> float:
        return (apply_rope(q, m) * apply_rope(k, n)).sum().item()

    for m, n in [(0, 0), (5, 2), (2, 5), (17, 3)]:
        for shift in (1, 10, 100):
            assert math.isclose(score(m, n), score(m + shift, n + shift), rel_tol=1e-5, abs_tol=1e-5)
    assert not math.isclose(score(5, 2), score(5, 3), rel_tol=1e-3)  # a different offset, a different score
    # A rotation keeps lengths: RoPE changes no vector's norm.
    x = torch.randn(2, 3, 9, 16)
    torch.testing.assert_close(apply_rope(x, 4).norm(dim=-1), x.norm(dim=-1))


def test_interleaved_rope_is_the_half_split_one_after_a_permutation():
    """Meta's LLaMA and RoFormer rotate neighbouring pairs (2i, 2i + 1); this package pairs i with i + d/2.
    Permuting the dimensions (as a weight conversion would, on W_q and W_k) turns one into the other."""
    d, length = 8, 5
    torch.manual_seed(4)
    x = torch.randn(1, 1, length, d)
    angles = torch.outer(torch.arange(length, dtype=torch.float32), 1.0 / 10000 ** (torch.arange(0, d, 2) / d))
    pairs = x.view(1, 1, length, d // 2, 2)  # interleaved: (x[2i], x[2i + 1])
    even = pairs[..., 0] * angles.cos() - pairs[..., 1] * angles.sin()
    odd = pairs[..., 0] * angles.sin() + pairs[..., 1] * angles.cos()
    interleaved = torch.stack([even, odd], dim=-1).view(1, 1, length, d)
    to_half_split = torch.cat([torch.arange(0, d, 2), torch.arange(1, d, 2)])  # evens first, then odds
    torch.testing.assert_close(apply_rope(x[..., to_half_split]), interleaved[..., to_half_split])
    assert not torch.allclose(apply_rope(x), interleaved)  # without the permutation they differ


def _complex_rope(x: torch.Tensor, positions: torch.Tensor, base: float, layout: str) -> torch.Tensor:
    """RoPE as RoFormer writes it: every pair is a complex number, multiplied by e^(i * position * theta_j).
    x (B, heads, T, d) in float64; positions (T,) or (B, T)."""
    d = x.shape[-1]
    if layout == "interleaved":
        pairs = x.reshape(*x.shape[:-1], d // 2, 2)
        z = torch.complex(pairs[..., 0], pairs[..., 1])  # (..., d/2)
    else:
        z = torch.complex(x[..., : d // 2], x[..., d // 2:])
    theta = base ** (-torch.arange(0, d, 2, dtype=torch.float64) / d)  # (d/2,)
    angle = positions.double()[..., None] * theta  # (T, d/2) or (B, T, d/2)
    if angle.dim() == 3:
        angle = angle[:, None]  # (B, 1, T, d/2): every head alike
    turned = z * torch.polar(torch.ones_like(angle), angle)
    if layout == "interleaved":
        return torch.stack([turned.real, turned.imag], dim=-1).reshape(x.shape)
    return torch.cat([turned.real, turned.imag], dim=-1)


@pytest.mark.parametrize("layout", ["half", "interleaved"])
@pytest.mark.parametrize(("positions", "base"), [("offset 0", 10000.0), ("offset 7", 10000.0), ("offset 3", 500000.0),
                                                 ("per token", 10000.0), ("per token", 10.0)])
def test_rotary_equals_a_complex_number_rope(layout, positions, base):
    torch.manual_seed(11)
    x = torch.randn(3, 2, 6, 16, dtype=torch.float64)  # (B, heads, T, d_head)
    if positions == "per token":  # e.g. left padding: each row starts at its own position, one jumps
        given = torch.tensor([[0, 1, 2, 3, 4, 5], [0, 0, 0, 1, 2, 3], [9, 10, 11, 20, 21, 22]])  # (B, T)
        ours = rotary(x, given, base, layout)
    else:
        offset = int(positions.split()[1])
        given = torch.arange(offset, offset + 6)
        ours = rotary(x, offset, base, layout)
        torch.testing.assert_close(rotary(x, given, base, layout), ours, atol=0, rtol=0)  # (T,) = the offset
    torch.testing.assert_close(ours, _complex_rope(x, given, base, layout), atol=1e-5, rtol=1e-5)


def test_rotary_with_the_half_layout_is_the_lessons_apply_rope_exactly():
    torch.manual_seed(12)
    x = torch.randn(2, 4, 9, 8)
    for offset, base in [(0, 10000.0), (5, 10000.0), (3, 50.0)]:
        assert torch.equal(rotary(x, offset, base), apply_rope(x, offset, base))
    with pytest.raises(ValueError, match="positions must be integers of shape"):
        rotary(x, torch.zeros(2, 5, dtype=torch.long))  # T = 9, not 5
    with pytest.raises(ValueError, match="layout must be one of"):
        rotary(x, layout="pairs")


def test_permuting_the_rows_of_w_q_and_w_k_turns_an_interleaved_model_into_a_half_split_one():
    """A LLaMA-style GPT trained with interleaved RoPE, its W_q and W_k rows permuted (rope_rows_to_half):
    the same logits from the half-split model, with and without a cache."""
    torch.manual_seed(13)
    shape = dict(max_len=16, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2)
    interleaved = GPT(GPTConfig.llama(30, rope_layout="interleaved", **shape)).eval()
    half = GPT(GPTConfig.llama(30, **shape)).eval()
    state = interleaved.state_dict()
    for name in list(state):
        if name.endswith(("self_attn.w_q.weight", "self_attn.w_k.weight")):
            heads = 4 if "w_q" in name else 2
            state[name] = rope_rows_to_half(state[name], heads)
    half.load_state_dict(state)
    ids = torch.randint(0, 30, (2, 10))
    with torch.no_grad():
        torch.testing.assert_close(half(ids), interleaved(ids), atol=1e-5, rtol=1e-4)
        unconverted = GPT(GPTConfig.llama(30, **shape)).eval()
        unconverted.load_state_dict(interleaved.state_dict())
        assert not torch.allclose(unconverted(ids), interleaved(ids), atol=1e-3)  # the layout matters
        caches = half.make_caches()
        stepwise = torch.cat([half(ids[:, :6], caches), half(ids[:, 6:], caches)], dim=1)
        torch.testing.assert_close(stepwise, interleaved(ids), atol=1e-5, rtol=1e-4)


def test_gqa_takes_one_position_per_token():
    """(B, T) positions: each row as if it were alone with its own positions (packed or left-padded batches).
    A shift of all of a row's positions changes nothing (RoPE sees offsets only); a gap does."""
    torch.manual_seed(14)
    attention = GroupedQueryAttention(32, 4, 2).eval()
    x = torch.randn(3, 5, 32)
    rows = [torch.arange(5), torch.arange(7, 12), torch.tensor([0, 1, 2, 10, 11])]
    with torch.no_grad():
        together = attention(x, causal_mask(5), positions=torch.stack(rows))  # positions (B, T)
        for b, positions in enumerate(rows):
            alone = attention(x[b:b + 1], causal_mask(5), positions=positions)
            torch.testing.assert_close(together[b:b + 1], alone, atol=1e-6, rtol=1e-5)
        default = attention(x, causal_mask(5))  # positions 0 .. T-1
    torch.testing.assert_close(together[1], default[1], atol=1e-5, rtol=1e-4)  # shifted: the same
    assert not torch.allclose(together[2, 3:], default[2, 3:], atol=1e-3)  # after the gap: different


@pytest.mark.parametrize("eps", [1e-5, 1e-6])
def test_the_configs_rms_norm_epsilon_reaches_every_norm(eps):
    model = GPT(GPTConfig.llama(10, max_len=8, d_model=16, n_heads=2, n_layers=2, norm_eps=eps))
    norms = [m for m in model.modules() if isinstance(m, RMSNorm)]
    assert len(norms) == 2 * 2 + 1 and all(norm.eps == eps for norm in norms)  # two per block and the final one
    x = 0.01 * torch.randn(3, 16) + 0.5  # a small spread: eps matters
    torch.testing.assert_close(norms[0](x), nn.RMSNorm(16, eps=eps)(x), atol=1e-6, rtol=1e-5)


def test_rope_refuses_an_odd_head_size():
    with pytest.raises(ValueError, match="even d_head"):
        apply_rope(torch.zeros(1, 2, 3, 5))


# ----------------------------------------------------------------------------------------------
# Grouped-query attention
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n_heads", "n_kv_heads", "t_q", "t_k"), [(8, 2, 5, 5), (4, 1, 3, 7), (4, 4, 6, 6),
                                                                   (6, 3, 1, 1), (6, 2, 1, 9)])
def test_grouped_query_attention_equals_torchs_enable_gqa(n_heads, n_kv_heads, t_q, t_k):
    torch.manual_seed(5)
    q = torch.randn(2, n_heads, t_q, 8)
    k, v = torch.randn(2, n_kv_heads, t_k, 8), torch.randn(2, n_kv_heads, t_k, 8)
    mask = causal_mask(t_q, t_k)
    ours = grouped_query_attention(q, k, v, mask)
    n_rep = n_heads // n_kv_heads
    # kv head j serves query heads j * n_rep .. (j + 1) * n_rep - 1 (Hugging Face's repeat_kv, written out)
    repeated = k[:, :, None].expand(2, n_kv_heads, n_rep, t_k, 8).reshape(2, n_heads, t_k, 8)
    assert torch.equal(repeat_kv(k, n_rep), repeated)
    if "enable_gqa" in (F.scaled_dot_product_attention.__doc__ or ""):
        theirs = F.scaled_dot_product_attention(q, k, v, attn_mask=mask, enable_gqa=True)
    else:  # older torch: the same heads repeated by hand
        values = v[:, :, None].expand(2, n_kv_heads, n_rep, t_k, 8).reshape(2, n_heads, t_k, 8)
        theirs = F.scaled_dot_product_attention(q, repeated, values, attn_mask=mask)
    torch.testing.assert_close(ours, theirs, atol=1e-6, rtol=1e-5)


def test_grouped_query_attention_refuses_heads_that_do_not_group():
    with pytest.raises(ValueError, match="n_kv_heads dividing n_heads"):
        grouped_query_attention(torch.zeros(1, 6, 2, 4), torch.zeros(1, 4, 2, 4), torch.zeros(1, 4, 2, 4))
    with pytest.raises(ValueError, match="must divide n_heads"):
        GroupedQueryAttention(24, 6, 4)


@needs_transformers
@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
def test_gqa_module_equals_llama_attention(n_kv_heads):
    torch.manual_seed(6)
    config = _llama_config(num_key_value_heads=n_kv_heads)
    theirs = _llama().LlamaAttention(config, layer_idx=0).eval()
    ours = GroupedQueryAttention(32, 4, n_kv_heads).eval()
    ours.load_state_dict({f"w_{a}.weight": getattr(theirs, f"{a}_proj").weight for a in "qkvo"})
    x = torch.randn(2, 6, 32)
    position_embeddings = _llama().LlamaRotaryEmbedding(config)(x, torch.arange(6).expand(2, 6))
    additive = torch.zeros(6, 6).masked_fill(~causal_mask(6), float("-inf")).expand(2, 1, 6, 6)
    with torch.no_grad():
        expected, _ = theirs(x, position_embeddings, additive)
        torch.testing.assert_close(ours(x, causal_mask(6)), expected, atol=1e-6, rtol=1e-5)
        ours.fused = True
        torch.testing.assert_close(ours(x, causal_mask(6), is_causal=True), expected, atol=1e-6, rtol=1e-5)


@pytest.mark.parametrize("fused", [False, True])
def test_gqa_with_a_cache_equals_the_whole_sequence(fused):
    """Prefix, then one token, then three at once: RoPE's offset and the cache of un-repeated kv heads."""
    torch.manual_seed(7)
    attention = GroupedQueryAttention(32, 8, 2, fused=fused).eval()
    x = torch.randn(2, 9, 32)
    with torch.no_grad():
        whole = attention(x, causal_mask(9), is_causal=True)
        cache = KVCache()
        parts = [attention(x[:, :5], causal_mask(5), cache, is_causal=True),
                 attention(x[:, 5:6], causal_mask(1, 6), cache, is_causal=True),
                 attention(x[:, 6:9], causal_mask(3, 9), cache, is_causal=True)]
    torch.testing.assert_close(torch.cat(parts, dim=1), whole, atol=1e-5, rtol=1e-4)
    assert cache.k.shape == (2, 2, 9, 4)  # (B, n_kv_heads, T, d_head): not the 8 query heads


def test_padding_masks_work_in_both_paths():
    torch.manual_seed(8)
    attention = GroupedQueryAttention(16, 4, 2, rope=False).eval()
    x = torch.randn(2, 5, 16)
    mask = padding_mask(torch.tensor([[1, 1, 1, 0, 0], [1, 1, 1, 1, 1]]), pad_id=0)  # (B, 1, 1, T)
    with torch.no_grad():
        explicit = attention(x, mask)
        attention.fused = True
        torch.testing.assert_close(attention(x, mask), explicit, atol=1e-6, rtol=1e-5)


# ----------------------------------------------------------------------------------------------
# The KV cache's size: formula and measurement
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("n_kv_heads", "dtype"), [(8, torch.float32), (2, torch.float32), (1, torch.float64),
                                                   (4, torch.bfloat16)])
def test_kv_cache_bytes_formula_equals_the_measured_cache(n_kv_heads, dtype):
    config = GPTConfig.llama(40, max_len=32, d_model=64, n_heads=8, n_kv_heads=n_kv_heads, n_layers=3)
    model = GPT(config).to(dtype).eval()
    caches = model.make_caches()
    ids = torch.randint(0, 40, (2, 10))
    with torch.no_grad():
        model(ids[:, :7], caches)
        model(ids[:, 7:], caches)
    measured = cache_bytes(caches)
    assert measured == kv_cache_bytes(3, 2, 10, n_kv_heads, 8, dtype)
    assert measured == 2 * 3 * 2 * 10 * n_kv_heads * 8 * torch.empty((), dtype=dtype).element_size()
    full = kv_cache_bytes(3, 2, 10, 8, 8, dtype)
    assert full == measured * (8 // n_kv_heads)  # GQA saves exactly n_heads / n_kv_heads


# ----------------------------------------------------------------------------------------------
# The whole model: Llama's, and the ablation's variants
# ----------------------------------------------------------------------------------------------


def _load_llama_weights(ours: GPT, theirs: nn.Module, n_layers: int) -> None:
    weights = theirs.state_dict()
    names = {"self_attn.w_q": "self_attn.q_proj", "self_attn.w_k": "self_attn.k_proj",
             "self_attn.w_v": "self_attn.v_proj", "self_attn.w_o": "self_attn.o_proj", "ffn.w_gate": "mlp.gate_proj",
             "ffn.w_up": "mlp.up_proj", "ffn.w_down": "mlp.down_proj", "norm1": "input_layernorm",
             "norm2": "post_attention_layernorm"}
    state = {"embed.token.weight": weights["model.embed_tokens.weight"],
             "blocks.norm.weight": weights["model.norm.weight"], "output.weight": weights["lm_head.weight"]}
    for i in range(n_layers):
        for a, b in names.items():
            state[f"blocks.layers.{i}.{a}.weight"] = weights[f"model.layers.{i}.{b}.weight"]
    ours.load_state_dict(state)


@needs_transformers
@pytest.mark.parametrize("n_kv_heads", [1, 2, 4])
def test_the_llama_variant_equals_hugging_faces_llama(n_kv_heads):
    torch.manual_seed(9)
    theirs = _llama().LlamaForCausalLM(_llama_config(num_key_value_heads=n_kv_heads)).eval()
    ours = GPT(GPTConfig.llama(50, max_len=64, d_model=32, n_heads=4, n_kv_heads=n_kv_heads,
                               n_layers=2, d_ff=48)).eval()
    _load_llama_weights(ours, theirs, 2)
    ids = torch.randint(0, 50, (2, 11))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), theirs(ids).logits, atol=1e-5, rtol=1e-4)
        caches = ours.make_caches()  # and token by token with the cache
        stepwise = torch.cat([ours(ids[:, t:t + 1], caches) for t in range(11)], dim=1)
        torch.testing.assert_close(stepwise, theirs(ids).logits, atol=1e-5, rtol=1e-4)


def test_the_ablation_variants_differ_only_where_they_say():
    variants = ablation_configs(65, max_len=32, d_model=48, n_heads=4, n_layers=2)
    fields = {name: dataclasses.asdict(c) for name, c in variants.items()}
    first, second, third = fields.values()
    assert {k for k in first if first[k] != second[k]} == {"norm_first"}
    assert {k for k in second if second[k] != third[k]} == {"norm", "norm_eps", "activation", "positional", "bias",
                                                            "scale_embedding"}
    counts = [count_parameters(GPT(c)) for c in variants.values()]
    assert counts[1] - counts[0] == 2 * 48  # pre-LN's final LayerNorm (gain and bias)
    # SwiGLU at 2/3 width holds the ReLU FFN's matrices; the modern variant drops the biases and LayerNorm's shift.
    assert 0 < counts[0] - counts[2] < 0.02 * counts[0]


def _resolved(config: GPTConfig) -> dict:
    """The config's fields with d_ff as the model builds it (None means 4 * d_model, or 2/3 of it for SwiGLU)."""
    fields = dataclasses.asdict(config)
    fields["d_ff"] = GPT(config).blocks.layers[0].ffn.d_ff
    return fields


def test_every_rung_of_the_ladder_changes_one_idea_of_its_parent():
    ladder = ablation_ladder(65, max_len=32, d_model=48, n_heads=4, n_layers=2)
    assert list(ladder) == ["post-LN (2017)", "pre-LN", "+ RMSNorm", "+ SwiGLU", "+ RoPE", "+ no biases",
                            "NoPE (from + RoPE)"]
    expected = {"pre-LN": {"norm_first"}, "+ RMSNorm": {"norm", "norm_eps"}, "+ SwiGLU": {"activation", "d_ff"},
                "+ RoPE": {"positional"}, "+ no biases": {"bias"}, "NoPE (from + RoPE)": {"positional"}}
    first = ladder["post-LN (2017)"]
    assert first.parent is None and first.config == GPTConfig.transformer_2017(65, max_len=32, d_model=48,
                                                                                 n_heads=4, n_layers=2)
    for name, rung in list(ladder.items())[1:]:
        parent, child = _resolved(ladder[rung.parent].config), _resolved(rung.config)
        assert {k for k in child if child[k] != parent[k]} == expected[name], name
        assert set(rung.change) == expected[name], name  # the rung says what it changes
    assert ladder["NoPE (from + RoPE)"].parent == "+ RoPE"
    assert ladder["+ SwiGLU"].config.positional == "sinusoidal" and ladder["NoPE (from + RoPE)"].config.positional == "none"
    # SwiGLU's width is part of its idea: 2/3 of the ReLU FFN's 4 * d_model, so the parameters stay (within 2 %).
    assert _resolved(ladder["+ SwiGLU"].config)["d_ff"] == swiglu_hidden_size(48) == 128
    assert _resolved(ladder["+ RMSNorm"].config)["d_ff"] == 4 * 48
    counts = {name: count_parameters(GPT(rung.config)) for name, rung in ladder.items()}
    assert abs(counts["+ SwiGLU"] - counts["+ RMSNorm"]) < 0.02 * counts["+ RMSNorm"]
    assert counts["+ RoPE"] == counts["+ SwiGLU"] == counts["NoPE (from + RoPE)"]  # no position has parameters here
    # All rungs keep the paper's scaled embeddings: the ladder's end is LLaMA's block but for that one field.
    last = dataclasses.asdict(ladder["+ no biases"].config)
    llama = dataclasses.asdict(GPTConfig.llama(65, max_len=32, d_model=48, n_heads=4, n_layers=2,
                                               d_ff=swiglu_hidden_size(48)))
    assert {k for k in last if last[k] != llama[k]} == {"scale_embedding"}


@pytest.mark.parametrize("name", ["2017: post-LN, ReLU, sinusoidal", "pre-LN", "pre-LN + RMSNorm + SwiGLU + RoPE"])
def test_every_variant_trains_and_its_cache_matches_the_whole_sequence(name, one_thread):
    config = ablation_configs(20, max_len=16, d_model=32, n_heads=4, n_kv_heads=2, n_layers=2)[name]
    torch.manual_seed(10)
    model = GPT(config)
    data = torch.arange(400) % 20  # a repeating sequence: easy to learn
    history = train(model, lambda split, g: get_batch(data, 8, 16, g),
                    TrainConfig(max_steps=100, warmup_steps=4, eval_interval=100, eval_steps=2, lr=3e-3, device="cpu",
                                progress=False))
    assert history["val_loss"][-1] < 0.5 * history["val_loss"][0]
    model.eval()
    ids = torch.randint(0, 20, (2, 9))
    with torch.no_grad():
        whole = model(ids)
        caches = model.make_caches()
        stepwise = torch.cat([model(ids[:, :4], caches), model(ids[:, 4:5], caches), model(ids[:, 5:], caches)], dim=1)
        for c in model.blocks.layers:  # the explicit path gives the same
            c.self_attn.fused = False
        explicit = model(ids)
    torch.testing.assert_close(stepwise, whole, atol=1e-5, rtol=1e-4)
    torch.testing.assert_close(explicit, whole, atol=1e-5, rtol=1e-4)


def test_the_model_refuses_bad_input_and_bad_configs():
    model = GPT(GPTConfig.llama(10, max_len=8, d_model=16, n_heads=2, n_layers=1))
    with pytest.raises(ValueError, match="max_len=8"):
        model(torch.zeros(1, 9, dtype=torch.long))
    with pytest.raises(ValueError, match=r"outside the vocabulary \[0, 10\)"):
        model(torch.full((1, 3), 10))
    with pytest.raises(TypeError, match="integer tensor"):
        model(torch.zeros(1, 3))
    with pytest.raises(ValueError, match="activation must be one of"):
        GPTConfig(10, activation="geglu")
    with pytest.raises(ValueError, match="n_kv_heads"):
        GPTConfig(10, d_model=48, n_heads=6, n_kv_heads=4)
    with pytest.raises(ValueError, match="rope_layout must be"):
        GPTConfig.llama(10, rope_layout="pairs")
