"""Embeddings, FFN, whole models and decoding: hand-computed values and properties that must hold."""

import math

import pytest
import torch

from tfcourse.attention import KVCache, MultiHeadAttention, causal_mask, scaled_dot_product_attention
from tfcourse.blocks import EncoderLayer, LayerNorm
from tfcourse.decoding import (beam_search_gpt, filter_logits, generate, length_penalty, sample_next_token,
                               translate_beam, translate)
from tfcourse.embedding import InputEmbedding, TokenEmbedding, sinusoidal_positional_encoding
from tfcourse.ffn import PositionwiseFeedForward
from tfcourse.models import (GPT, EncoderOnly, EncoderOnlyConfig, GPTConfig, Transformer, TransformerConfig,
                             count_parameters)


def tiny_gpt(seed=0, **overrides):
    torch.manual_seed(seed)
    config = dict(vocab_size=23, max_len=32, d_model=32, n_heads=4, n_layers=2, dropout=0.0)
    config.update(overrides)
    return GPT(GPTConfig.gpt(**config)).eval()


def tiny_transformer(seed=0, **overrides):
    torch.manual_seed(seed)
    config = dict(src_vocab_size=19, tgt_vocab_size=17, d_model=32, n_heads=4, n_layers=2, dropout=0.0, max_len=40)
    config.update(overrides)
    return Transformer(TransformerConfig(**config)).eval()


# ------------------------------------------------------------------------------------------
# embeddings and positional encoding
# ------------------------------------------------------------------------------------------


def test_positional_encoding_at_hand_computed_positions():
    pe = sinusoidal_positional_encoding(max_len=10, d_model=4)
    assert pe.shape == (10, 4)
    # position 0: sin(0) = 0 in even dims, cos(0) = 1 in odd dims
    torch.testing.assert_close(pe[0], torch.tensor([0.0, 1.0, 0.0, 1.0]))
    # i = 0: angle = pos; i = 1: angle = pos / 10000^(2/4) = pos / 100
    torch.testing.assert_close(pe[1], torch.tensor([math.sin(1), math.cos(1), math.sin(0.01), math.cos(0.01)]))
    torch.testing.assert_close(pe[7, 2:], torch.tensor([math.sin(0.07), math.cos(0.07)]))
    big = sinusoidal_positional_encoding(100, 512)
    torch.testing.assert_close(big[50, 510], torch.tensor(math.sin(50 / 10000 ** (510 / 512))))
    torch.testing.assert_close(big[50, 511], torch.tensor(math.cos(50 / 10000 ** (510 / 512))))


def test_token_embedding_is_scaled_lookup_equal_to_one_hot_product():
    torch.manual_seed(0)
    emb = TokenEmbedding(vocab_size=10, d_model=16)
    ids = torch.tensor([[3, 1, 3]])
    one_hot = torch.nn.functional.one_hot(ids, 10).float()  # (1, 3, 10)
    torch.testing.assert_close(emb(ids), one_hot @ emb.weight * 4.0)  # sqrt(16) = 4
    assert torch.equal(emb(ids)[0, 0], emb(ids)[0, 2])  # the same token gets the same vector


def test_without_positional_encoding_attention_is_permutation_invariant():
    # 猫追狗 vs 狗追猫: same tokens, different order. Without PE each token's output is identical.
    torch.manual_seed(1)
    vocab = {"猫": 0, "追": 1, "狗": 2}
    emb, attn = TokenEmbedding(3, 16), MultiHeadAttention(16, 2).eval()
    a = torch.tensor([[vocab[c] for c in "猫追狗"]])
    b = torch.tensor([[vocab[c] for c in "狗追猫"]])
    out_a, out_b = attn(emb(a)), attn(emb(b))
    torch.testing.assert_close(out_a[0, 0], out_b[0, 2])  # 猫 is first in a, last in b
    with_pe = InputEmbedding(3, 16, max_len=8, dropout=0.0)
    assert not torch.allclose(attn(with_pe(a))[0, 0], attn(with_pe(b))[0, 2], atol=1e-4)


# ------------------------------------------------------------------------------------------
# feed-forward network
# ------------------------------------------------------------------------------------------


def test_ffn_worked_example_from_the_syllabus():
    # d_model = 2, d_ff = 3, x = (1, -2) -> h = (1, -2, 3) -> ReLU (1, 0, 3) -> (4, 1) -> + x = (5, -1)
    ffn = PositionwiseFeedForward(d_model=2, d_ff=3)
    with torch.no_grad():
        ffn.linear1.weight.copy_(torch.tensor([[1.0, 0.0], [0.0, 1.0], [1.0, -1.0]]))  # W1^T, (d_ff, d_model)
        ffn.linear1.bias.zero_()
        ffn.linear2.weight.copy_(torch.tensor([[1.0, 0.0, 1.0], [1.0, 0.0, 0.0]]))  # W2^T, (d_model, d_ff)
        ffn.linear2.bias.zero_()
    x = torch.tensor([1.0, -2.0])
    h = ffn.linear1(x)
    torch.testing.assert_close(h, torch.tensor([1.0, -2.0, 3.0]))
    torch.testing.assert_close(torch.relu(h), torch.tensor([1.0, 0.0, 3.0]))
    torch.testing.assert_close(ffn(x), torch.tensor([4.0, 1.0]))
    torch.testing.assert_close(ffn(x) + x, torch.tensor([5.0, -1.0]))


def test_ffn_is_position_wise_and_defaults_to_4x():
    torch.manual_seed(2)
    ffn = PositionwiseFeedForward(8)
    assert ffn.d_ff == 32
    x = torch.randn(2, 5, 8)
    x2 = x.clone()
    x2[:, 3] = torch.randn(2, 8)  # change one position only
    out, out2 = ffn(x), ffn(x2)
    torch.testing.assert_close(out[:, [0, 1, 2, 4]], out2[:, [0, 1, 2, 4]])
    torch.testing.assert_close(out[:, 3], ffn(x[:, 3]))


# ------------------------------------------------------------------------------------------
# shapes (table 3-1), parameter count (table 3-2), causality
# ------------------------------------------------------------------------------------------


def test_shapes_at_every_stage_of_the_encoder_decoder():
    model = tiny_transformer()
    src, tgt = torch.randint(1, 19, (3, 11)), torch.randint(1, 17, (3, 7))
    x = model.src_embed(src)
    assert x.shape == (3, 11, 32)  # (B, S, d_model)
    memory, src_mask = model.encode(src)
    assert memory.shape == (3, 11, 32) and src_mask.shape == (3, 1, 1, 11)
    heads = model.encoder.layers[0].self_attn.split_heads(x)
    assert heads.shape == (3, 4, 11, 8)  # (B, n_heads, S, d_head)
    assert model(src, tgt).shape == (3, 7, 17)  # (B, T, tgt_vocab)


def test_base_config_parameter_count():
    """Table 3-2: N=6, d_model=512, d_ff=2048, h=8, d_k=d_v=64, shared 37000-token vocabulary.

    embedding (shared by source, target and output): 37000 * 512             = 18,944,000
    one attention: 4 * (512 * 512 + 512)                                       =  1,050,624
    one FFN: 512 * 2048 + 2048 + 2048 * 512 + 512                             =  2,099,712
    encoder layer: attention + FFN + 2 LayerNorms (2 * 1024)                  =  3,152,384
    decoder layer: 2 attentions + FFN + 3 LayerNorms (3 * 1024)               =  4,204,032
    total: 18,944,000 + 6 * 3,152,384 + 6 * 4,204,032                         = 63,082,496
    The paper's "65M" (table 3) is this rounded; its exact vocabulary size is not given.
    """
    config = TransformerConfig.base()
    assert (config.d_model, config.d_ff, config.n_heads, config.d_head, config.n_layers) == (512, 2048, 8, 64, 6)
    assert config.d_head == config.d_model // config.n_heads and config.d_ff == 4 * config.d_model
    model = Transformer(config)
    assert count_parameters(model) == 63_082_496
    assert 60e6 < count_parameters(model) < 66e6


def test_gpt_is_causal():
    model = tiny_gpt()
    ids = torch.randint(0, 23, (2, 12))
    changed = ids.clone()
    changed[:, 7:] = (changed[:, 7:] + 5) % 23  # change every token from position 7 on
    torch.testing.assert_close(model(ids)[:, :7], model(changed)[:, :7])
    assert not torch.allclose(model(ids)[:, 7:], model(changed)[:, 7:])


def test_decoder_is_causal_and_encoder_sees_everything():
    model = tiny_transformer()
    src, tgt = torch.randint(1, 19, (2, 9)), torch.randint(1, 17, (2, 6))
    changed = tgt.clone()
    changed[:, 4:] = (changed[:, 4:] % 16) + 1
    torch.testing.assert_close(model(src, tgt)[:, :4], model(src, changed)[:, :4])
    src2 = src.clone()
    src2[:, -1] = (src2[:, -1] % 18) + 1  # the last source word affects every target position
    assert not torch.allclose(model(src, tgt)[:, 0], model(src2, tgt)[:, 0])


def test_tied_and_shared_embeddings_are_one_tensor():
    model = Transformer(TransformerConfig(20, 20, 16, 2, 1, share_embeddings=True, tie_weights=True))
    assert model.src_embed.token.weight is model.tgt_embed.token.weight is model.output.weight
    gpt = tiny_gpt()
    assert gpt.output.weight is gpt.embed.token.weight


def test_encoder_only_heads():
    torch.manual_seed(3)
    classifier = EncoderOnly(EncoderOnlyConfig.bert(vocab_size=30, n_classes=3, d_model=16, n_heads=2, n_layers=1))
    ids = torch.randint(1, 30, (4, 9))
    assert classifier(ids).shape == (4, 3)
    mlm = EncoderOnly(EncoderOnlyConfig.bert(vocab_size=30, d_model=16, n_heads=2, n_layers=1)).eval()
    assert mlm(ids).shape == (4, 9, 30)
    # bidirectional: the first position's output depends on the last token
    later = ids.clone()
    later[:, -1] = (later[:, -1] % 28) + 1
    assert not torch.allclose(mlm(ids)[:, 0], mlm(later)[:, 0])


# ------------------------------------------------------------------------------------------
# decoding
# ------------------------------------------------------------------------------------------


def test_kv_cache_generation_equals_generation_without_cache():
    model = tiny_gpt(4)
    prompt = torch.randint(0, 23, (2, 5))
    with_cache = generate(model, prompt, 20, temperature=0, use_cache=True)
    without = generate(model, prompt, 20, temperature=0, use_cache=False)
    assert torch.equal(with_cache, without)
    gen_a, gen_b = torch.Generator().manual_seed(0), torch.Generator().manual_seed(0)
    sampled_a = generate(model, prompt, 20, temperature=1.0, top_k=5, use_cache=True, generator=gen_a)
    sampled_b = generate(model, prompt, 20, temperature=1.0, top_k=5, use_cache=False, generator=gen_b)
    assert torch.equal(sampled_a, sampled_b)


def test_kv_cache_logits_match_full_forward():
    model = tiny_gpt(5)
    ids = torch.randint(0, 23, (1, 10))
    caches = model.make_caches()
    first = model(ids[:, :6], caches)
    rest = [model(ids[:, t : t + 1], caches) for t in range(6, 10)]
    torch.testing.assert_close(torch.cat([first, *rest], dim=1), model(ids), atol=1e-5, rtol=1e-5)


def test_a_cache_with_room_writes_in_place_and_holds_what_a_growing_cache_holds():
    k, v = torch.randn(2, 3, 6, 4), torch.randn(2, 3, 6, 4)  # (B, n_heads, T, d_head)
    growing, roomy = KVCache(), KVCache(capacity=8)
    for start, stop in ((0, 3), (3, 4), (4, 6)):  # a prompt of 3, then one position at a time
        expected = growing.append(k[:, :, start:stop], v[:, :, start:stop])
        got = roomy.append(k[:, :, start:stop], v[:, :, start:stop])
        assert all(torch.equal(a, b) for a, b in zip(got, expected)) and len(roomy) == stop
        if start == 0:
            room = roomy.k.data_ptr()
        assert roomy.k.data_ptr() == room  # the same storage all along: no new tensor per append
    with pytest.raises(ValueError, match="holds 6 positions and has room for 8: 3 more do not fit"):
        roomy.append(k[:, :, :3], v[:, :, :3])
    roomy.k, roomy.v = k[:, :, :2], v[:, :, :2]  # replaced from outside (lesson 07's inputs cache does this)
    roomy.append(k[:, :, 2:3], v[:, :, 2:3])
    assert torch.equal(roomy.k, k[:, :, :3]) and torch.equal(roomy.v, v[:, :, :3])


def test_generation_caches_have_room_for_the_context_and_stop_early_at_eos():
    model = tiny_gpt(4)
    assert all(cache.capacity == model.config.max_len for cache in model.make_caches())
    prompt = torch.randint(0, 23, (1, 5))
    full = generate(model, prompt, 12, temperature=0)
    eos = int(full[0, 7])  # the third new token
    first = int((full[0, 5:] == eos).nonzero()[0])  # where it first appears among the new tokens
    stopped = generate(model, prompt, 12, temperature=0, eos_id=eos)
    assert torch.equal(stopped, full[:, : 5 + first + 1])  # the tokens up to and with the first eos
    assert torch.equal(stopped, generate(model, prompt, 12, temperature=0, eos_id=eos, use_cache=False))


def test_beam_search_with_beam_one_equals_greedy():
    model = tiny_gpt(6)
    prompt = torch.randint(0, 23, (1, 4))
    greedy = generate(model, prompt, 12, temperature=0)
    assert torch.equal(beam_search_gpt(model, prompt[0], 12, beam_size=1), greedy[0])
    greedy_eos = generate(model, prompt, 12, temperature=0, eos_id=int(greedy[0, 6]))
    assert torch.equal(beam_search_gpt(model, prompt[0], 12, beam_size=1, eos_id=int(greedy[0, 6])),
                       greedy_eos[0])


def test_beam_search_finds_a_sequence_at_least_as_likely_as_greedy():
    model = tiny_gpt(7)
    prompt = torch.randint(0, 23, (1, 3))

    def log_prob(seq):
        logits = model(seq[None, :-1])[0]
        return torch.log_softmax(logits, -1)[2:].gather(1, seq[3:, None]).sum()  # new tokens only

    greedy = generate(model, prompt, 6, temperature=0)[0]
    beam = beam_search_gpt(model, prompt[0], 6, beam_size=5, alpha=0.0)
    assert log_prob(beam) >= log_prob(greedy) - 1e-5


def test_encoder_decoder_greedy_with_cache_equals_beam_one():
    model = tiny_transformer(8)
    src = torch.randint(3, 19, (1, 8))
    greedy = translate(model, src, bos_id=1, eos_id=2, max_new_tokens=10)
    beam = translate_beam(model, src[0], bos_id=1, eos_id=2, max_new_tokens=10, beam_size=1)
    assert torch.equal(greedy[0], beam)
    # the cached decoder equals re-running the decoder on the whole prefix
    memory, src_mask = model.encode(src)
    logits = model.decode(greedy[:, :-1], memory, src_mask)
    assert torch.equal(logits.argmax(-1), greedy[:, 1:])


def test_encoder_decoder_sampling_is_reproducible_and_respects_top_k():
    model = tiny_transformer(9)
    src = torch.randint(3, 19, (4, 8))
    runs = [translate(model, src, 1, 2, 12, temperature=1.5, top_k=3, generator=torch.Generator().manual_seed(5))
            for _ in range(2)]
    assert torch.equal(runs[0], runs[1])
    memory, src_mask = model.encode(src)
    logits = model.decode(runs[0][:, :-1], memory, src_mask)  # (B, T, V)
    top3 = logits.topk(3, dim=-1).indices  # every sampled token must be among the 3 best
    chosen = runs[0][:, 1:, None]
    after_eos = (runs[0][:, :-1] == 2).cumsum(1).bool()  # tokens after eos are padding, not samples
    assert ((top3 == chosen).any(-1) | after_eos).all()


def test_top_k_top_p_and_temperature():
    logits = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    assert torch.isinf(filter_logits(logits, top_k=2)[0, 2:]).all()
    assert torch.isfinite(filter_logits(logits, top_k=2)[0, :2]).all()
    kept = torch.isfinite(filter_logits(logits, top_p=0.75))[0]  # 0.5 + 0.3 reaches 0.75
    assert kept.tolist() == [True, True, False, False]
    assert torch.isfinite(filter_logits(logits, top_p=0.01)).sum() == 1  # the best token always stays
    assert sample_next_token(logits, temperature=0).item() == 0
    gen = torch.Generator().manual_seed(0)
    draws = torch.cat([sample_next_token(logits, 1.0, top_k=2, generator=gen) for _ in range(300)])
    assert set(draws.tolist()) == {0, 1}
    cold = torch.cat([sample_next_token(logits, 0.05, generator=gen) for _ in range(100)])
    assert (cold == 0).all()
    assert length_penalty(1, 0.0) == 1.0 and length_penalty(7, 1.0) == 2.0


# ------------------------------------------------------------------------------------------
# bad input gets a clear error
# ------------------------------------------------------------------------------------------


def test_clear_errors():
    with pytest.raises(ValueError, match=r"d_model \(30\) must be divisible by n_heads \(4\)"):
        MultiHeadAttention(30, 4)
    with pytest.raises(ValueError, match="divisible by n_heads"):
        GPTConfig(vocab_size=10, d_model=30, n_heads=4)
    q = torch.randn(1, 2, 3, 4)
    with pytest.raises(TypeError, match="bool tensor"):
        scaled_dot_product_attention(q, q, q, mask=torch.ones(3, 3))
    with pytest.raises(ValueError, match=r"does not broadcast .* \(T_q, T_k\)"):
        scaled_dot_product_attention(q, q, q, mask=torch.ones(4, 4, dtype=torch.bool))
    with pytest.raises(ValueError, match=r"expected q \(\.\.\., T_q, d_k\)"):
        scaled_dot_product_attention(q, q[..., :2], q)
    model = tiny_gpt()
    with pytest.raises(ValueError, match=r"contain 23, outside the vocabulary \[0, 23\)"):
        model(torch.tensor([[1, 23]]))
    with pytest.raises(ValueError, match="contain -1"):
        model(torch.tensor([[-1, 2]]))
    with pytest.raises(TypeError, match="integer tensor"):
        model(torch.tensor([[1.0, 2.0]]))
    with pytest.raises(ValueError, match=r"must have 2 dimensions \(B, T\)"):
        model(torch.tensor([1, 2]))
    with pytest.raises(ValueError, match="longer than max_len=32"):
        model(torch.zeros(1, 33, dtype=torch.long))
    with pytest.raises(ValueError, match="empty batch"):
        model(torch.zeros(0, 5, dtype=torch.long))
    with pytest.raises(ValueError, match=r"d_model=8"):
        LayerNorm(8)(torch.randn(2, 7))
    with pytest.raises(ValueError, match=r"x must be \(B, T, d_model=32\)"):
        MultiHeadAttention(32, 4)(torch.randn(2, 3, 16))
    with pytest.raises(ValueError, match="d_model must be even"):
        sinusoidal_positional_encoding(4, 7)
    with pytest.raises(ValueError, match="exceeds max_len"):
        generate(model, torch.zeros(1, 30, dtype=torch.long), 10)
    with pytest.raises(ValueError, match="shared vocabulary"):
        TransformerConfig(10, 12, share_embeddings=True)
    layer = EncoderLayer(16, 2, dropout=0.0)
    with pytest.raises(ValueError, match=r"\(B, T, d_model\)"):
        layer(torch.randn(16))


# ------------------------------------------------------------------------------------------
# options reach every layer; the stated weight initialisation; no host sync on an accelerator
# ------------------------------------------------------------------------------------------

from torch import nn  # noqa: E402

from tfcourse.blocks import DecoderLayer  # noqa: E402
from tfcourse.embedding import LearnedPositionalEmbedding, SinusoidalPositionalEncoding  # noqa: E402


def _layer_settings(model: nn.Module) -> list[dict]:
    """What each encoder/decoder layer of `model` was actually built with."""
    settings = []
    for layer in model.modules():
        if not isinstance(layer, (EncoderLayer, DecoderLayer)):
            continue
        attentions = [m for m in layer.modules() if isinstance(m, MultiHeadAttention)]
        dropouts = {m.p for m in layer.modules() if isinstance(m, nn.Dropout)} | {a.dropout for a in attentions}
        settings.append({
            "d_ff": layer.ffn.d_ff,
            "activation": type(layer.ffn.activation).__name__,
            "norm_first": layer.norm_first,
            "fused": {a.fused for a in attentions},
            "dropout": dropouts,
        })
    return settings


# Each option set to a value that is not its default, for every model family.
CHANGED_OPTIONS = {"d_ff": 40, "dropout": 0.25, "activation": "gelu", "norm_first": True, "fused_attention": True}
FAMILIES = {
    "transformer": (Transformer, TransformerConfig, dict(src_vocab_size=11, tgt_vocab_size=13), 2 * 3),
    "gpt": (GPT, GPTConfig, dict(vocab_size=11), 3),
    "encoder-only": (EncoderOnly, EncoderOnlyConfig, dict(vocab_size=11), 3),
}


@pytest.mark.parametrize("family", FAMILIES)
@pytest.mark.parametrize("option", CHANGED_OPTIONS)
def test_every_option_reaches_every_layer(family, option):
    model_cls, config_cls, sizes, n_layer_modules = FAMILIES[family]
    defaults = config_cls(**sizes, d_model=16, n_heads=2, n_layers=3)
    value = CHANGED_OPTIONS[option]
    if getattr(defaults, option) == value:  # this family's default already: flip it the other way
        value = {"activation": "relu", "norm_first": False, "fused_attention": False}[option]
    model = model_cls(config_cls(**sizes, d_model=16, n_heads=2, n_layers=3, **{option: value}))
    settings = _layer_settings(model)
    assert len(settings) == n_layer_modules
    expected = {"d_ff": value if option == "d_ff" else 4 * 16,
                "activation": {"relu": "ReLU", "gelu": "GELU"}[value if option == "activation" else defaults.activation],
                "norm_first": value if option == "norm_first" else defaults.norm_first,
                "fused": {value if option == "fused_attention" else defaults.fused_attention},
                "dropout": {value if option == "dropout" else defaults.dropout}}
    for i, got in enumerate(settings):
        assert got == expected, f"{family}: layer {i} did not get {option}={value!r}"
    final_norms = [m.norm for m in model.modules() if hasattr(m, "layers") and hasattr(m, "norm")]
    pre_ln = expected["norm_first"]
    assert all(isinstance(norm, LayerNorm) == pre_ln for norm in final_norms), "pre-LN stacks end in a LayerNorm"


def test_positional_and_embedding_options_reach_the_input_layers():
    model = Transformer(TransformerConfig(11, 13, d_model=16, n_heads=2, n_layers=1, positional="learned"))
    assert isinstance(model.src_embed.position, LearnedPositionalEmbedding)
    assert isinstance(model.tgt_embed.position, LearnedPositionalEmbedding)
    gpt = GPT(GPTConfig.gpt(vocab_size=11, d_model=16, n_heads=2, n_layers=1, positional="sinusoidal",
                        scale_embedding=True, tie_weights=False))
    assert isinstance(gpt.embed.position, SinusoidalPositionalEncoding)
    assert gpt.embed.token.scale == pytest.approx(4.0)
    assert gpt.output.weight is not gpt.embed.token.weight


def _std(t: torch.Tensor) -> float:
    return t.detach().float().std().item()


def test_gpt_init_is_fan_in_with_gpt2s_residual_scaling():
    torch.manual_seed(0)
    n_layers = 4
    model = GPT(GPTConfig.gpt(vocab_size=500, d_model=256, n_heads=4, n_layers=n_layers))
    residual_scale = 1 / math.sqrt(2 * n_layers)
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and module is not model.output:
            std = module.in_features ** -0.5
            if name.endswith(("self_attn.w_o", "ffn.linear2")):
                std *= residual_scale
            assert _std(module.weight) == pytest.approx(std, rel=0.05), name
            assert module.bias is None or torch.all(module.bias == 0), name
    for table in (model.embed.token.weight, model.embed.position.weight, model.output.weight):
        assert _std(table) == pytest.approx(0.02, rel=0.05)
    for norm in (m for m in model.modules() if isinstance(m, LayerNorm)):
        assert torch.all(norm.weight == 1) and torch.all(norm.bias == 0)
    untied = GPT(GPTConfig.gpt(vocab_size=500, d_model=256, n_heads=4, n_layers=1, tie_weights=False))
    assert _std(untied.output.weight) == pytest.approx(0.02, rel=0.05)


@pytest.mark.parametrize("variant", ["llama", "transformer_2017"])
def test_every_decoder_variant_has_the_same_init_policy(variant):
    """One policy for the one GPT: SwiGLU's w_down is a residual projection too, RMSNorm's gain starts
    at 1, and a token table multiplied by sqrt(d_model) starts at N(0, 1/d_model)."""
    torch.manual_seed(0)
    n_layers, d_model = 4, 256
    config = getattr(GPTConfig, variant)(500, d_model=d_model, n_heads=4, n_layers=n_layers, max_len=16)
    model = GPT(config)
    residual_scale = 1 / math.sqrt(2 * n_layers)
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear) and module is not model.output:
            std = module.in_features ** -0.5
            if name.endswith(("self_attn.w_o", "ffn.linear2", "ffn.w_down")):
                std *= residual_scale
            assert _std(module.weight) == pytest.approx(std, rel=0.05), name
    token_std = 0.02 if variant == "llama" else d_model ** -0.5  # the 2017 block scales its embeddings
    assert _std(model.embed.token.weight) == pytest.approx(token_std, rel=0.05)
    assert model.output.weight is model.embed.token.weight  # tied
    gains = [m.weight for m in model.modules() if type(m).__name__ in ("RMSNorm", "LayerNorm")]
    assert len(gains) == 2 * n_layers + (1 if config.norm_first else 0) and all(torch.all(g == 1) for g in gains)


def test_transformer_init_is_xavier_with_scaled_token_tables():
    torch.manual_seed(0)
    d_model = 128
    model = Transformer(TransformerConfig(300, 400, d_model=d_model, n_heads=4, n_layers=2))
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            fan_out, fan_in = module.weight.shape
            xavier_std = math.sqrt(2.0 / (fan_in + fan_out))
            assert _std(module.weight) == pytest.approx(xavier_std, rel=0.05), name
            assert module.bias is None or torch.all(module.bias == 0), name
    for table in (model.src_embed.token.weight, model.tgt_embed.token.weight):
        assert _std(table) == pytest.approx(d_model ** -0.5, rel=0.05)
        # x sqrt(d_model): looked-up entries are of size 1, like the sin/cos they are added to
        assert _std(table * math.sqrt(d_model)) == pytest.approx(1.0, rel=0.05)
    tied = Transformer(TransformerConfig(300, 300, d_model=d_model, n_heads=4, n_layers=1, share_embeddings=True,
                                         tie_weights=True))
    assert _std(tied.output.weight) == pytest.approx(d_model ** -0.5, rel=0.05)


def test_encoder_only_init_is_berts():
    torch.manual_seed(0)
    model = EncoderOnly(EncoderOnlyConfig.bert(vocab_size=300, d_model=128, n_heads=4, n_layers=2))
    for name, module in model.named_modules():
        if isinstance(module, nn.Linear):
            assert _std(module.weight) == pytest.approx(0.02, rel=0.05), name
            assert torch.all(module.bias == 0), name


def test_range_check_runs_once_per_input_and_never_reads_an_accelerator(monkeypatch):
    import tfcourse.validation as validation

    calls = []
    real = validation.expect_ids_in_vocabulary
    monkeypatch.setattr(validation, "expect_ids_in_vocabulary", lambda *a, **k: calls.append(1) or real(*a, **k))
    tiny_gpt()(torch.zeros(2, 5, dtype=torch.long))
    assert len(calls) == 1, "one range check per GPT forward"
    calls.clear()
    tiny_transformer()(torch.ones(2, 4, dtype=torch.long), torch.ones(2, 3, dtype=torch.long))
    assert len(calls) == 2, "one range check per input: the source and the target"
    # On a device other than the CPU the check would read a value back (a sync): it is skipped.
    # A 'meta' tensor has no values at all, so any read-back there raises.
    calls.clear()
    with torch.device("meta"):
        logits = GPT(GPTConfig.gpt(vocab_size=23, max_len=16, d_model=32, n_heads=4, n_layers=2))(
            torch.zeros(2, 8, dtype=torch.long))
    assert logits.shape == (2, 8, 23) and calls == []


def test_debug_mode_checks_the_range_on_any_device(monkeypatch):
    import tfcourse.validation as validation

    monkeypatch.setenv("TFCOURSE_DEBUG", "1")
    calls = []
    monkeypatch.setattr(validation, "expect_ids_in_vocabulary", lambda *a, **k: calls.append(a[0].device.type))
    with torch.device("meta"):
        GPT(GPTConfig.gpt(vocab_size=23, max_len=16, d_model=32, n_heads=4, n_layers=1))(torch.zeros(1, 4, dtype=torch.long))
    assert calls == ["meta"]


def test_fused_attention_hands_the_causal_mask_to_the_kernel(monkeypatch):
    """FlashAttention takes is_causal=True but no explicit mask: causal self-attention must reach
    F.scaled_dot_product_attention that way, decided from shapes (reading the mask would sync)."""
    import torch.nn.functional as F

    real = F.scaled_dot_product_attention
    calls = []

    def recording(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        calls.append((attn_mask is None, is_causal, q.shape[-2], k.shape[-2]))
        return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    fused = tiny_gpt(fused_attention=True)
    plain = tiny_gpt(fused_attention=False)
    plain.load_state_dict(fused.state_dict())
    ids = torch.randint(0, 23, (2, 9))
    torch.testing.assert_close(fused(ids), plain(ids), atol=1e-5, rtol=1e-5)
    assert calls and all(c == (True, True, 9, 9) for c in calls)  # no mask, is_causal

    calls.clear()
    caches = fused.make_caches()
    fused(ids[:, :4], caches)  # the prompt: queries = keys -> is_causal
    fused(ids[:, 4:5], caches)  # one new token: it may see every key -> no mask at all
    fused(ids[:, 5:8], caches)  # several new tokens after a cache -> the explicit mask
    layers = len(fused.blocks.layers)
    assert calls[:layers] == [(True, True, 4, 4)] * layers
    assert calls[layers:2 * layers] == [(True, False, 1, 5)] * layers
    assert calls[2 * layers:] == [(False, False, 3, 8)] * layers
    # and the cached steps give the full forward's logits
    full = plain(ids[:, :8])
    caches = fused.make_caches()
    fused(ids[:, :4], caches)
    fused(ids[:, 4:5], caches)
    torch.testing.assert_close(fused(ids[:, 5:8], caches), full[:, 5:8], atol=1e-5, rtol=1e-5)


def test_padding_and_cross_attention_keep_their_explicit_masks(monkeypatch):
    import torch.nn.functional as F

    real = F.scaled_dot_product_attention
    calls = []

    def recording(q, k, v, attn_mask=None, dropout_p=0.0, is_causal=False):
        calls.append((attn_mask is None, is_causal))
        return real(q, k, v, attn_mask=attn_mask, dropout_p=dropout_p, is_causal=is_causal)

    monkeypatch.setattr(F, "scaled_dot_product_attention", recording)
    model = tiny_transformer(fused_attention=True)
    model(torch.tensor([[3, 4, 0]]), torch.tensor([[1, 5, 6]]))
    assert calls and all(call == (False, False) for call in calls)  # padding masks everywhere
