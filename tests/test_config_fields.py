"""Every model config speaks one vocabulary (tfcourse.config_fields): the same names, the same meaning,
the same default for every field but the sizes; the families differ through named configs."""

from __future__ import annotations

import dataclasses

import pytest

from tfcourse.config_fields import FIELDS, REQUIRED, SIZES
from tfcourse.models import GPT, EncoderOnlyConfig, GPTConfig, TransformerConfig, ablation_configs, count_parameters

CONFIGS = [TransformerConfig, GPTConfig, EncoderOnlyConfig]


@pytest.mark.parametrize("config", CONFIGS, ids=lambda c: c.__name__)
def test_every_field_is_in_the_vocabulary_with_its_shared_default(config):
    for field in dataclasses.fields(config):
        assert field.name in FIELDS, f"{config.__name__}.{field.name} is not in tfcourse.config_fields.FIELDS"
        if field.name in SIZES:
            continue
        meaning, default = FIELDS[field.name]
        has_default = field.default is not dataclasses.MISSING
        if default is REQUIRED:
            assert not has_default, f"{config.__name__}.{field.name} should have no default"
        else:
            assert has_default and field.default == default, (
                f"{config.__name__}.{field.name} defaults to {field.default!r}; the vocabulary says {default!r}")


def test_the_vocabulary_has_no_field_no_config_uses_and_says_what_each_means():
    used = {field.name for config in CONFIGS for field in dataclasses.fields(config)}
    assert set(FIELDS) == used
    assert all(isinstance(meaning, str) and len(meaning) > 10 for meaning, _ in FIELDS.values())


def test_the_old_names_are_gone():
    names = {field.name for config in CONFIGS for field in dataclasses.fields(config)}
    assert not names & {"tie_output", "ffn", "fused"}  # one name each: tie_weights, activation, fused_attention
    assert TransformerConfig(10, 10, d_model=8, n_heads=2, tie_weights=True).tie_output  # read-only alias


def test_the_named_configs_are_the_families():
    # The course's GPT: what GPTConfig's defaults were before the vocabulary (fixed values, not a formula).
    gpt = GPTConfig.gpt(65)
    assert (gpt.norm_first, gpt.positional, gpt.activation, gpt.tie_weights, gpt.scale_embedding, gpt.dropout,
            gpt.fused_attention, gpt.norm, gpt.bias) == (True, "learned", "gelu", True, False, 0.2, True, "layer", True)
    small = GPTConfig.gpt2_small()
    assert (small.vocab_size, small.max_len, small.d_model, small.n_layers, small.activation, small.dropout) == \
        (50257, 1024, 768, 12, "gelu_tanh", 0.1)
    llama = GPTConfig.llama(65, n_kv_heads=2)
    assert (llama.norm, llama.norm_eps, llama.activation, llama.positional, llama.bias, llama.norm_first,
            llama.n_kv_heads) == ("rms", 1e-6, "swiglu", "rope", False, True, 2)
    bert = EncoderOnlyConfig.bert(30)
    assert (bert.positional, bert.activation, bert.norm_first) == ("learned", "gelu", False)
    paper = GPTConfig(65)  # the defaults: the paper's block as a decoder
    assert (paper.norm_first, paper.positional, paper.activation, paper.scale_embedding) == \
        (False, "sinusoidal", "relu", True)


def test_one_stack_holds_every_variant():
    """The 2017 block, GPT-2's and LLaMA's are configs of one GPT: one block class, one init."""
    shape = dict(max_len=16, d_model=24, n_heads=4, n_layers=2)
    variants = {**ablation_configs(20, **shape), "gpt": GPTConfig.gpt(20, **shape),
                "no positions": GPTConfig(20, positional="none", **shape)}
    for name, config in variants.items():
        model = GPT(config)
        assert {type(layer).__name__ for layer in model.blocks.layers} == {"EncoderLayer"}, name
    # Parameter counts from the built models' own tensors (fixed numbers computed by hand in the comments):
    # 2017 rung, tied: token 20*24 + per block [attention 4*(24*24+24) + FFN 24*96+96+96*24+24 + 2 LN 2*48] * 2
    assert count_parameters(GPT(variants["2017: post-LN, ReLU, sinusoidal"])) == 480 + 2 * (2400 + 4728 + 96)
    assert count_parameters(GPT(variants["pre-LN"])) == 480 + 2 * (2400 + 4728 + 96) + 48  # + the final LayerNorm
    # LLaMA rung: no biases; SwiGLU width 2/3 * 96 = 64: 3 * 24 * 64; two RMSNorms of 24 per block, one final
    assert count_parameters(GPT(variants["pre-LN + RMSNorm + SwiGLU + RoPE"])) == \
        480 + 2 * (4 * 24 * 24 + 3 * 24 * 64 + 48) + 24


def test_options_outside_their_choices_name_the_field():
    with pytest.raises(ValueError, match="norm must be one of"):
        GPTConfig(10, norm="batch")
    with pytest.raises(ValueError, match="positional must be one of"):
        GPTConfig(10, positional="alibi")
    with pytest.raises(ValueError, match="only the decoder-only GPT"):
        TransformerConfig(10, 10, positional="rope")
    with pytest.raises(ValueError, match="only the decoder-only GPT"):
        EncoderOnlyConfig(10, positional="rope")


def test_every_block_option_reaches_every_layer():
    config = GPTConfig(20, max_len=16, d_model=24, n_heads=4, n_layers=3, n_kv_heads=2, norm="rms", norm_eps=1e-4,
                       activation="swiglu", bias=False, positional="rope", rope_base=500.0,
                       rope_layout="interleaved", norm_first=True, dropout=0.0)
    model = GPT(config)
    for layer in model.blocks.layers:
        attention = layer.self_attn
        assert (attention.n_kv_heads, attention.rope_base, attention.rope_layout, attention.w_q.bias) == \
            (2, 500.0, "interleaved", None)
        assert type(layer.ffn).__name__ == "SwiGLUFeedForward"
        assert {(type(norm).__name__, norm.eps) for norm in (layer.norm1, layer.norm2)} == {("RMSNorm", 1e-4)}
    assert (type(model.blocks.norm).__name__, model.blocks.norm.eps) == ("RMSNorm", 1e-4)  # the final norm too
    assert type(model.embed.position).__name__ == "NoPositions"  # RoPE adds nothing to the input
