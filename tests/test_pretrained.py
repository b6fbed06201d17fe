"""GPT-2's checkpoint layout in the course's GPT, and GPT-2's tokenizer files in the course's BPE:
both proven equal to Hugging Face `transformers` on small models and vocabularies built here.
Nothing is downloaded: every model is a random GPT2Config, every vocabulary is trained here."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
from torch import nn

from tfcourse.attention import MultiHeadAttention, scaled_dot_product_attention
from tfcourse.decoding import generate
from tfcourse.layouts import project_qkv
from tfcourse.ffn import ACTIVATIONS, gelu_tanh
from tfcourse.models import GPT, GPTConfig, count_parameters
from tfcourse.pretrained import (GPT2_FILES, convert_gpt2_attention, find_gpt2, gpt2_config, gpt2_from_state_dict,
                                 gpt2_to_course, load_gpt2_state_dict)
from tfcourse.tokenizers import BPETokenizer, bytes_to_unicode

transformers = pytest.importorskip("transformers")  # the `pretrained` extra
ROOT = Path(__file__).resolve().parents[1]


def tiny_gpt2(seed: int = 0, **options):
    """A random GPT2LMHeadModel in float64, eval mode; its biases and LayerNorms made non-trivial."""
    settings = dict(vocab_size=61, n_positions=24, n_embd=32, n_layer=3, n_head=4, bos_token_id=60, eos_token_id=60)
    settings.update(options)
    config = transformers.GPT2Config(**settings)
    torch.manual_seed(seed)
    model = transformers.GPT2LMHeadModel(config).double().eval()
    with torch.no_grad():  # GPT-2 starts with zero biases and unit LayerNorms: a swapped one would not show
        for name, parameter in model.named_parameters():
            if name.endswith("bias") or ".ln_" in name:
                parameter.add_(torch.randn_like(parameter) * 0.1)
    return model, config


@pytest.mark.parametrize("options", [{}, dict(n_inner=48), dict(activation_function="gelu", n_layer=1),
                                     dict(n_embd=48, n_head=6, n_layer=2, n_positions=9)])
def test_logits_equal_transformers(options):
    hf, config = tiny_gpt2(**options)
    ours = gpt2_from_state_dict(hf.state_dict(), config).double()
    ids = torch.randint(0, config.vocab_size, (3, config.n_positions), generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected, actual = hf(ids).logits, ours(ids)
    torch.testing.assert_close(actual, expected, atol=1e-10, rtol=1e-10)
    assert count_parameters(ours) == sum(p.numel() for p in hf.parameters())  # tied: the table counts once
    assert ours.output.weight is ours.embed.token.weight


def test_the_checkpoint_files_own_names_load_too():
    """The safetensors file on the hub has no "transformer." prefix and (older files) mask buffers."""
    hf, config = tiny_gpt2()
    file_layout = {name.removeprefix("transformer."): t for name, t in hf.state_dict().items() if name != "lm_head.weight"}
    for i in range(config.n_layer):
        file_layout[f"h.{i}.attn.bias"] = torch.ones(1, 1, 24, 24).tril()
    ours = gpt2_from_state_dict(file_layout, config).double()
    ids = torch.randint(0, 61, (2, 10))
    with torch.no_grad():
        torch.testing.assert_close(ours(ids), hf(ids).logits, atol=1e-10, rtol=1e-10)


def test_float32_and_the_kv_cache_agree_with_transformers():
    hf, config = tiny_gpt2(seed=3)
    hf = hf.float()
    ours = gpt2_from_state_dict(hf.state_dict(), config)
    prompt = torch.randint(0, 61, (2, 5), generator=torch.Generator().manual_seed(2))
    ours_ids = generate(ours, prompt, max_new_tokens=12, temperature=0.0)  # greedy, with the KV cache
    hf_ids = prompt
    with torch.no_grad():
        for _ in range(12):
            hf_ids = torch.cat([hf_ids, hf(hf_ids).logits[:, -1].argmax(-1, keepdim=True)], dim=1)
        torch.testing.assert_close(ours(hf_ids), hf(hf_ids).logits, atol=1e-5, rtol=1e-5)
    assert torch.equal(ours_ids, hf_ids)


def test_gpt2_config_reads_the_shape_and_rejects_what_it_cannot_load():
    _, config = tiny_gpt2(n_inner=40)
    ours = gpt2_config(config)
    assert (ours.vocab_size, ours.max_len, ours.d_model, ours.n_heads, ours.n_layers, ours.d_ff) == (61, 24, 32, 4, 3, 40)
    assert (ours.norm_first, ours.positional, ours.activation, ours.tie_weights, ours.scale_embedding, ours.dropout) == \
        (True, "learned", "gelu_tanh", True, False, 0.0)
    assert gpt2_config(config.to_dict()) == ours  # config.json's dict works too
    with pytest.raises(ValueError, match="activation_function 'silu'"):
        gpt2_config({**config.to_dict(), "activation_function": "silu"})
    with pytest.raises(ValueError, match="layer_norm_epsilon=1e-06"):
        gpt2_config({**config.to_dict(), "layer_norm_epsilon": 1e-6})
    with pytest.raises(ValueError, match=r"lacks \['n_embd'\]"):
        gpt2_config({k: v for k, v in config.to_dict().items() if k != "n_embd"})


def test_gpt2_small_is_124m():
    with torch.device("meta"):  # no memory: only the count
        model = GPT(GPTConfig.gpt2_small())
    assert count_parameters(model) == 124_439_808  # GPT-2 small as published by Hugging Face


# ----------------------------------------------------------------------------------------------
# The pieces: the attention split, the tanh GELU
# ----------------------------------------------------------------------------------------------


def test_convert_attention_matches_a_conv1d_forward():
    """Loaded into the course's MultiHeadAttention, the converted weights compute GPT-2's attention."""
    from tfcourse.attention import MultiHeadAttention, causal_mask

    hf, config = tiny_gpt2()
    block = hf.transformer.h[0].attn
    ours = MultiHeadAttention(32, 4).double().eval()
    ours.load_state_dict(convert_gpt2_attention(block.c_attn.weight, block.c_attn.bias, block.c_proj.weight,
                                                block.c_proj.bias))
    x = torch.randn(2, 7, 32, dtype=torch.float64)
    with torch.no_grad():
        expected = block(x)[0]  # causal self-attention, as in GPT-2
        actual = ours(x, mask=causal_mask(7))
    torch.testing.assert_close(actual, expected, atol=1e-10, rtol=1e-10)
    with pytest.raises(ValueError, match=r"c_attn_weight \(d_model, 3 \* d_model\)"):
        convert_gpt2_attention(torch.zeros(4, 8), torch.zeros(8), torch.zeros(4, 4), torch.zeros(4))
    with pytest.raises(TypeError, match="c_attn_weight"):
        convert_gpt2_attention([[0.0]], torch.zeros(3), torch.zeros(1, 1), torch.zeros(1))


def test_gelu_tanh_equals_torch_and_transformers_and_differs_from_exact_gelu():
    from transformers.activations import NewGELUActivation

    x = torch.linspace(-8, 8, 2001, dtype=torch.float64)
    torch.testing.assert_close(gelu_tanh(x), NewGELUActivation()(x), atol=1e-15, rtol=1e-15)
    torch.testing.assert_close(gelu_tanh(x), ACTIVATIONS["gelu_tanh"]()(x), atol=1e-12, rtol=1e-12)
    gap = (gelu_tanh(x) - nn.functional.gelu(x)).abs().max().item()
    assert 1e-4 < gap < 1e-3  # close to the exact GELU, but not equal: the checkpoint needs this one


# ----------------------------------------------------------------------------------------------
# Loading into other models whose names follow the course's GPT
# ----------------------------------------------------------------------------------------------


def test_loads_into_the_gpt_of_lesson_06():
    from tfcourse.course import import_from_notebook

    MiniGPT = import_from_notebook(ROOT / "solutions" / "06_models" / "06_models.ipynb", "MiniGPT")
    hf, config = tiny_gpt2()
    mini = load_gpt2_state_dict(MiniGPT(gpt2_config(config)).double(), hf.state_dict()).eval()
    ids = torch.randint(0, 61, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(mini(ids), hf(ids).logits, atol=1e-10, rtol=1e-10)


class FusedAttention(MultiHeadAttention):
    """The course's attention in nanoGPT's layout: one w_qkv (d, 3d) whose output splits as q | k | v."""

    def __init__(self, d_model, n_heads, *args, **kwargs):
        super().__init__(d_model, n_heads, *args, **kwargs)
        del self.w_q, self.w_k, self.w_v
        self.w_qkv = nn.Linear(d_model, 3 * d_model)

    def forward(self, x, memory=None, mask=None, cache=None, return_weights=False, is_causal=False):
        q, k, v = (self.split_heads(t) for t in project_qkv(self, x, memory))  # (B, n_heads, T, d_head) each
        out, _ = scaled_dot_product_attention(q, k, v, mask)
        return self.w_o(self.merge_heads(out))


def test_loads_into_a_gpt_whose_attention_is_fused():
    hf, config = tiny_gpt2()
    gpt = GPT(gpt2_config(config)).double()
    for layer in gpt.blocks.layers:
        layer.self_attn = FusedAttention(32, 4).double()
    load_gpt2_state_dict(gpt, hf.state_dict()).eval()
    ids = torch.randint(0, 61, (2, 12))
    with torch.no_grad():
        torch.testing.assert_close(gpt(ids), hf(ids).logits, atol=1e-10, rtol=1e-10)


def test_a_model_with_other_parameters_gets_one_clear_error():
    hf, config = tiny_gpt2()
    state = hf.state_dict()
    sinusoidal = GPT(gpt2_config(config, positional="sinusoidal"))
    with pytest.raises(ValueError, match=r"unexpected \(GPT-2 has them, your model does not\): embed.position.weight"):
        load_gpt2_state_dict(sinusoidal, state)
    wider = GPT(gpt2_config(config, d_ff=64))
    with pytest.raises(ValueError, match=r"mis-shaped .*blocks.layers.0.ffn.linear1.weight \(128, 32\) for \(64, 32\)"):
        load_gpt2_state_dict(wider, state)
    extra = GPT(gpt2_config(config))
    extra.gate = nn.Parameter(torch.zeros(3))
    with pytest.raises(ValueError, match=r"missing \(your model has them, GPT-2 does not\): gate"):
        load_gpt2_state_dict(extra, state)
    deeper = GPT(gpt2_config(config, n_layers=4))
    with pytest.raises(ValueError, match="missing .*blocks.layers.3"):
        load_gpt2_state_dict(deeper, state)
    with pytest.raises(TypeError, match="nn.Module"):
        load_gpt2_state_dict(state, state)


def test_unknown_or_untied_checkpoints_are_refused():
    hf, _ = tiny_gpt2()
    state = dict(hf.state_dict())
    with pytest.raises(ValueError, match="does not know: .'h.0.attn.rotary.weight'"):
        gpt2_to_course({**state, "transformer.h.0.attn.rotary.weight": torch.zeros(2)})
    with pytest.raises(ValueError, match="lm_head.weight differs"):
        gpt2_to_course({**state, "lm_head.weight": state["lm_head.weight"] + 1})
    with pytest.raises(KeyError, match="no 'wpe.weight'"):
        gpt2_to_course({k: v for k, v in state.items() if "wpe" not in k})


def test_loading_copies_the_values_and_keeps_the_tie():
    hf, config = tiny_gpt2()
    model = load_gpt2_state_dict(GPT(gpt2_config(config)), hf.state_dict())
    assert model.embed.token.weight.dtype == torch.float32  # cast to the model's dtype (hf's is float64)
    with torch.no_grad():
        model.embed.token.weight.zero_()
    assert hf.transformer.wte.weight.abs().sum() > 0  # the checkpoint is untouched
    assert model.output.weight.abs().sum() == 0  # still one tensor


# ----------------------------------------------------------------------------------------------
# Finding the real checkpoint: the cache first, the network only when allowed
# ----------------------------------------------------------------------------------------------


def test_find_gpt2_offline_finds_nothing_and_never_downloads(tmp_path, monkeypatch):
    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    import huggingface_hub

    def no_network(*args, **kwargs):
        if not kwargs.get("local_files_only"):
            raise AssertionError("find_gpt2 tried the network")
        return original(*args, **kwargs)

    original = huggingface_hub.snapshot_download
    monkeypatch.setattr(huggingface_hub, "snapshot_download", no_network)
    assert find_gpt2("gpt2", allow_download=True, cache_dir=tmp_path) is None


def test_find_gpt2_finds_a_cached_snapshot(tmp_path):
    """A Hugging Face cache laid out by hand (what a download leaves) with a tiny model in it."""
    hf, _ = tiny_gpt2()
    snapshot = tmp_path / "models--someone--tiny-gpt2" / "snapshots" / "0123abcd"
    hf.save_pretrained(snapshot)
    tokenizer = BPETokenizer.train("the cat sat on the mat. " * 20, 270, ["<|endoftext|>"])
    tokenizer.save_gpt2_files(snapshot)
    (tmp_path / "models--someone--tiny-gpt2" / "refs").mkdir()
    (tmp_path / "models--someone--tiny-gpt2" / "refs" / "main").write_text("0123abcd")
    assert sorted(p.name for p in snapshot.iterdir() if p.name in GPT2_FILES) == sorted(GPT2_FILES)
    folder = find_gpt2("someone/tiny-gpt2", cache_dir=tmp_path)
    assert folder == snapshot
    config = json.loads((folder / "config.json").read_text())
    model = gpt2_from_state_dict(transformers.GPT2LMHeadModel.from_pretrained(folder).state_dict(), config)
    assert model.config.d_model == 32
    assert find_gpt2("someone/other", cache_dir=tmp_path) is None


# ----------------------------------------------------------------------------------------------
# GPT-2's tokenizer files
# ----------------------------------------------------------------------------------------------

TRAINING_TEXT = (
    "The cat sits on the mat. The dog sits by the door!\n"
    "It's a cat's life: they'll sleep, we've eaten, I'm here, you'd know.\n"
    "今天天气真好。今天天气不错，明天天气也好。\n"
    "Numbers 123 4567 and    spaces\t\ttabs\n\n\nnewlines 🙂 café naïve"
) * 8

SAMPLES = [
    "今天天气真好",
    "The cat sits on the mat.",
    "  leading spaces and trailing   ",
    "line one\nline two\n\n\n  indented\ttab",
    "It's they'll we've I'm you'd DON'T",
    "punctuation!!! ?? ... --- (brackets) [x] {y} \"quotes\"",
    "unseen words: zyxwv qqq 99999 ½ ≠ 𝔘",
    "emoji 🙂🙂 and café, naïve, Ünïcödé",
    "<|endoftext|>a document ends<|endoftext|> and another begins",
    "",
    " ",
    "\n",
]


@pytest.fixture(scope="module")
def gpt2_files(tmp_path_factory):
    ours = BPETokenizer.train(TRAINING_TEXT, 400, ["<|endoftext|>"])
    folder = tmp_path_factory.mktemp("tokenizer")
    ours.save_gpt2_files(folder)
    return ours, folder


def test_bytes_to_unicode_is_gpt2s_table():
    from transformers.convert_slow_tokenizer import bytes_to_unicode as theirs

    table = bytes_to_unicode()
    assert table == theirs()
    assert table[ord(" ")] == "Ġ" and table[ord("\n")] == "Ċ" and table[ord("a")] == "a"
    assert len(set(table.values())) == 256


def test_our_files_read_back_into_the_same_tokenizer(gpt2_files):
    ours, folder = gpt2_files
    again = BPETokenizer.from_gpt2_files(folder / "vocab.json", folder / "merges.txt")
    assert again.vocab == ours.vocab and again.merges == ours.merges
    assert (folder / "merges.txt").read_text(encoding="utf-8").splitlines()[0] == "#version: 0.2"
    vocab = json.loads((folder / "vocab.json").read_text(encoding="utf-8"))
    assert vocab["Ġ"] == ord(" ") and vocab["<|endoftext|>"] == ours.encode("<|endoftext|>")[0] == len(vocab) - 1


@pytest.mark.parametrize("text", SAMPLES, ids=range(len(SAMPLES)))
def test_encode_and_decode_equal_transformers_gpt2_tokenizer(gpt2_files, text):
    ours_trained, folder = gpt2_files
    ours = BPETokenizer.from_gpt2_files(folder / "vocab.json", folder / "merges.txt")
    theirs = transformers.GPT2Tokenizer(vocab=str(folder / "vocab.json"), merges=str(folder / "merges.txt"))
    ids = theirs.encode(text)
    assert ours.encode(text) == ids == ours_trained.encode(text)
    assert ours.decode(ids) == theirs.decode(ids, clean_up_tokenization_spaces=False) == text


def test_decoding_a_cut_character_matches_transformers(gpt2_files):
    _, folder = gpt2_files
    ours = BPETokenizer.from_gpt2_files(folder / "vocab.json", folder / "merges.txt")
    theirs = transformers.GPT2Tokenizer(vocab=str(folder / "vocab.json"), merges=str(folder / "merges.txt"))
    ids = ours.encode("今天")[:-1]  # may end inside a character's bytes
    assert ours.decode(ids) == theirs.decode(ids, clean_up_tokenization_spaces=False)


def test_bad_tokenizer_files_get_a_clear_error(tmp_path):
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0, "☃": 1}), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\n", encoding="utf-8")
    with pytest.raises(ValueError, match="'☃'.*byte table"):
        BPETokenizer.from_gpt2_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    (tmp_path / "vocab.json").write_text(json.dumps({"a": 0, "b": 1, "ab": 2}), encoding="utf-8")
    (tmp_path / "merges.txt").write_text("#version: 0.2\na b c\n", encoding="utf-8")
    with pytest.raises(ValueError, match="line 2: expected two tokens"):
        BPETokenizer.from_gpt2_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
    (tmp_path / "vocab.json").write_text("[1, 2]", encoding="utf-8")
    with pytest.raises(ValueError, match="JSON object"):
        BPETokenizer.from_gpt2_files(tmp_path / "vocab.json", tmp_path / "merges.txt")
