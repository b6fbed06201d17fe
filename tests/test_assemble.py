"""The learner's own Transformer: components taken from the lesson notebooks (here the solutions),
assembled into the reference GPT and encoder-decoder, equal the reference with copied weights, train
the same, generate with a cache, and fall back to the reference only where a component is not ready."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import nbformat
import pytest
import torch

from tfcourse.course.assemble import (REFERENCE, _saved_when, save_first, reference_parts, your_gpt_config,
                                      your_parts, your_transformer_config)
from tfcourse.data import get_batch
from tfcourse.decoding import generate, translate
from tfcourse.models import GPT, Transformer
from tfcourse.training import TrainConfig, train

pytestmark = pytest.mark.slow  # imports the solution notebooks' cells: `make test-fast` leaves it out

ROOT = Path(__file__).resolve().parents[1]
SOLUTIONS = ROOT / "solutions"
MODEL_PARTS = ("input layer", "multi-head attention", "feed-forward network", "LayerNorm", "encoder layer",
               "decoder layer", "encoder stack")


@pytest.fixture(scope="module")
def parts():
    return your_parts(SOLUTIONS)


def _copy_into_reference(mine: torch.nn.Module, reference: torch.nn.Module) -> None:
    """The learner's weights into the reference; every parameter of the reference must be set."""
    result = reference.load_state_dict(mine.state_dict(), strict=False)
    assert result.missing_keys == [], f"the assembled model lacks {result.missing_keys}"
    assert all(key.endswith(".pe") for key in result.unexpected_keys), result.unexpected_keys  # the sin/cos table


def test_every_solution_component_is_taken_from_its_notebook(parts):
    for key, origin, why in parts.rows():
        assert origin != REFERENCE and why == "its check passed", f"{key}: {origin} ({why})"
    table = parts.table(markdown=True)
    assert table.count("\n") == len(parts.rows()) + 3 and "02_embeddings" in table  # the note, a blank, the header
    assert table.startswith(f"*{save_first()}*")  # the notebooks are read as saved: the learner is told so


@pytest.mark.parametrize("norm_first", [True, False])
def test_the_assembled_gpt_equals_the_reference_gpt(parts, norm_first):
    config = your_gpt_config(vocab_size=23, max_len=16, d_model=32, n_heads=4, n_layers=2, dropout=0.0,
                             norm_first=norm_first)
    torch.manual_seed(0)
    mine = parts.gpt(config).eval()
    reference = GPT(config).eval()
    _copy_into_reference(mine, reference)
    ids = torch.randint(0, 23, (3, 11))
    torch.testing.assert_close(mine(ids), reference(ids), atol=1e-5, rtol=1e-5)
    # generation through the cache: the same tokens with and without it, and as the reference's
    prompt = ids[:, :3]
    cached = generate(mine, prompt, 10, temperature=0, use_cache=True)
    assert torch.equal(cached, generate(mine, prompt, 10, temperature=0, use_cache=False))
    assert torch.equal(cached, generate(reference, prompt, 10, temperature=0, use_cache=True))


def test_the_assembled_encoder_decoder_equals_the_reference(parts):
    config = your_transformer_config(19, 17, d_model=32, n_heads=4, n_layers=2, dropout=0.0, max_len=40)
    torch.manual_seed(0)
    mine = parts.transformer(config).eval()
    reference = Transformer(config).eval()
    _copy_into_reference(mine, reference)
    src = torch.randint(1, 19, (2, 7))
    src[1, -2:] = config.pad_id  # padding in the source
    tgt = torch.randint(1, 17, (2, 5))
    torch.testing.assert_close(mine(src, tgt), reference(src, tgt), atol=1e-5, rtol=1e-5)
    assert torch.equal(translate(mine, src, 1, 2, 8), translate(reference, src, 1, 2, 8))


def test_the_assembled_gpt_trains_like_the_reference(parts):
    """Fast mode: 30 steps from the same weights on the same batches reach the same loss."""
    data = torch.randint(0, 13, (2000,))
    config = your_gpt_config(vocab_size=13, max_len=16, d_model=32, n_heads=4, n_layers=2, dropout=0.0)
    torch.manual_seed(0)
    mine = parts.gpt(config)
    reference = GPT(config)
    _copy_into_reference(mine, reference)
    settings = TrainConfig(max_steps=30, warmup_steps=5, eval_interval=30, eval_steps=2, device="cpu",
                           progress=False, seed=0)

    def batches(split, generator):
        return get_batch(data, 8, 16, generator)

    ours = train(mine, batches, settings)
    theirs = train(reference, batches, settings)
    assert ours["train_loss"][-1] < ours["train_loss"][0]  # it learns
    # Same arithmetic in the same order: the curves agree to float32 rounding.
    assert ours["val_loss"][-1] == pytest.approx(theirs["val_loss"][-1], rel=1e-4)


def test_the_assembled_model_moves_to_any_device(parts):
    config = your_gpt_config(vocab_size=11, max_len=8, d_model=16, n_heads=2, n_layers=1)
    with torch.device("meta"):
        model = parts.gpt(config)
        logits = model(torch.zeros(1, 5, dtype=torch.long))
    assert logits.device.type == "meta" and logits.shape == (1, 5, 11)


def _lessons_copy(tmp_path: Path, edits: dict[str, tuple[str, str, str]]) -> Path:
    """The solution lessons with some cells edited: {lesson: (grade_id, old, new)}."""
    for lesson in ("02_embeddings", "03_attention", "04_ffn", "05_blocks"):
        shutil.copytree(SOLUTIONS / lesson, tmp_path / lesson)
    for lesson, (grade_id, old, new) in edits.items():
        path = tmp_path / lesson / f"{lesson}.ipynb"
        nb = nbformat.read(path, as_version=4)
        cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == grade_id)
        assert old in cell.source, f"{lesson}/{grade_id} changed: update this test"
        cell.source = cell.source.replace(old, new)
        nbformat.write(nb, path)
    return tmp_path


def test_the_table_says_when_each_notebook_was_saved():
    noon = 1_700_000_000.0
    assert _saved_when(None) == "-"
    assert _saved_when(noon, now=noon + 20).endswith(", just now")
    assert _saved_when(noon, now=noon + 3 * 60).endswith(", 3 min ago")
    assert _saved_when(noon, now=noon + 5 * 3600).endswith(", 5 h ago")
    assert _saved_when(noon, now=noon + 3 * 86400).count("-") == 2  # older than a day: the date as well


def test_a_chinese_lessons_table_says_why_in_chinese(tmp_path, monkeypatch):
    from tfcourse import messages

    monkeypatch.setattr(messages, "_lesson_language", ["zh"])  # what a Chinese lesson's setup cell sets
    monkeypatch.delenv("TFCOURSE_LANGUAGE", raising=False)
    folder = _lessons_copy(tmp_path, {"05_blocks": ("layer_norm_impl", "unbiased=False", "unbiased=True")})
    parts = your_parts(folder)
    rows = {key: why for key, _, why in parts.rows()}
    assert rows["LayerNorm"].startswith("没有通过检查：") and rows["input layer"] == "它的检查已通过"
    # The composite's own line is read in English, and said in Chinese.
    assert rows["encoder layer"] == "换上参考实现的 LayerNorm 后，它的检查通过了（请先修好 Exercise 1 (LayerNorm)）"
    table = parts.table(markdown=True)
    assert "| 组件 | 来源 | 保存时间 | 原因 |" in table and table.startswith("*读取的是你保存在磁盘上的笔记本")


def test_a_failing_component_falls_back_and_the_table_says_why(tmp_path):
    folder = _lessons_copy(tmp_path, {
        "05_blocks": ("layer_norm_impl", "unbiased=False", "unbiased=True"),  # a wrong LayerNorm
        "04_ffn": ("ffn_impl", "hidden = torch.relu(self.linear1(x))", "raise NotImplementedError()"),
    })
    parts = your_parts(folder)
    rows = {key: (origin, why) for key, origin, why in parts.rows()}
    assert rows["LayerNorm"][0] == REFERENCE and rows["LayerNorm"][1].startswith("fails its check: ")
    assert rows["feed-forward network"][0] == REFERENCE and rows["feed-forward network"][1].startswith("unfinished")
    assert rows["cross-entropy"][0] == REFERENCE and "no notebook" in rows["cross-entropy"][1]
    # Paths from the course folder, never absolute; the save time of every notebook read, none where none was.
    assert str(tmp_path) not in parts.table() and "06_models/06_models.ipynb" in rows["cross-entropy"][1]
    saved = {key: source.saved for key, source in parts.sources.items()}
    assert saved["cross-entropy"] is None and saved["LayerNorm"] is not None and saved["input layer"] is not None
    cells = [row.split(" | ") for row in parts.table(markdown=True).split("\n")[4:]]  # | key | from | saved | why |
    markdown_rows = {cell[0].lstrip("| "): cell[2] for cell in cells}
    assert re.fullmatch(r"\d\d:\d\d, .* ago|\d\d:\d\d, just now|\d{4}-\d\d-\d\d \d\d:\d\d, .*", markdown_rows["input layer"])
    assert markdown_rows["cross-entropy"] == "-"
    for key in ("input layer", "multi-head attention", "encoder layer", "encoder stack"):
        assert rows[key][0] != REFERENCE, key
    # The table says what the composites' own lines say: passed with the reference LayerNorm in place.
    for key in ("encoder layer", "decoder layer", "encoder stack"):
        assert rows[key][1] == ("its check passed with the reference LayerNorm in place "
                                "(fix Exercise 1 (LayerNorm) first)"), rows[key]
    assert rows["input layer"][1] == "its check passed"
    # The learner's own layers are built with the reference LayerNorm and FFN in place of theirs.
    config = your_gpt_config(vocab_size=11, max_len=8, d_model=16, n_heads=2, n_layers=2, dropout=0.0)
    model = parts.gpt(config).eval()
    layer = model.blocks.layers[0]
    assert type(layer.norm1) is parts.norm() and parts.norm().__module__ == "tfcourse.blocks"
    assert type(layer.self_attn).__mro__[1].__module__.startswith("_notebook_")  # the learner's attention
    reference = GPT(config).eval()
    _copy_into_reference(model, reference)
    ids = torch.randint(0, 11, (2, 6))
    torch.testing.assert_close(model(ids), reference(ids), atol=1e-5, rtol=1e-5)


def test_reference_parts_build_the_reference_models():
    parts = reference_parts()
    config = your_gpt_config(vocab_size=11, max_len=8, d_model=16, n_heads=2, n_layers=1, dropout=0.0)
    model = parts.gpt(config).eval()
    reference = GPT(config).eval()
    _copy_into_reference(model, reference)
    ids = torch.randint(0, 11, (1, 6))
    torch.testing.assert_close(model(ids), reference(ids))


def test_a_config_your_parts_cannot_build_is_refused(parts):
    with pytest.raises(ValueError, match="your FFN uses ReLU"):
        parts.gpt(your_gpt_config(vocab_size=11, activation="gelu"))


FUSED_EDITS = [  # lesson 03's answer in nanoGPT's layout: one w_qkv whose output splits as q | k | v
    ("        self.w_q = nn.Linear(d_model, d_model)  # all heads' W^Q side by side: head i owns a block of d_head "
     "outputs\n        self.w_k = nn.Linear(d_model, d_model)\n        self.w_v = nn.Linear(d_model, d_model)\n",
     "        self.w_qkv = nn.Linear(d_model, 3 * d_model)  # q | k | v\n"),
    ("        q = split_heads(self.w_q(x), self.n_heads)  # (B, n_heads, T_q, d_head)\n"
     "        k = split_heads(self.w_k(source), self.n_heads)  # (B, n_heads, T_k, d_head)\n"
     "        v = split_heads(self.w_v(source), self.n_heads)  # (B, n_heads, T_k, d_head)\n",
     "        d = x.shape[-1]\n"
     "        q = split_heads(x @ self.w_qkv.weight[:d].T + self.w_qkv.bias[:d], self.n_heads)\n"
     "        kv = source @ self.w_qkv.weight[d:].T + self.w_qkv.bias[d:]  # (B, T_k, 2 d)\n"
     "        k, v = (split_heads(t, self.n_heads) for t in kv.split(d, dim=-1))\n"),
]


def test_a_fused_attention_is_yours_in_the_assembled_gpt_and_its_cache(tmp_path):
    folder = _lessons_copy(tmp_path, {})
    path = folder / "03_attention" / "03_attention.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "mha_impl")
    for old, new in FUSED_EDITS:
        assert old in cell.source, "03_attention/mha_impl changed: update this test"
        cell.source = cell.source.replace(old, new)
    nbformat.write(nb, path)
    parts = your_parts(folder)
    origin, why = next((o, w) for key, o, w in parts.rows() if key == "multi-head attention")
    assert origin != REFERENCE and why == "its check passed", why
    config = your_gpt_config(vocab_size=11, max_len=16, d_model=16, n_heads=2, n_layers=2, dropout=0.0)
    torch.manual_seed(0)
    model = parts.gpt(config).eval()
    assert hasattr(model.blocks.layers[0].self_attn, "w_qkv")  # the learner's attention, fused
    prompt = torch.randint(0, 11, (2, 3))
    cached = generate(model, prompt, 8, temperature=0, use_cache=True)
    assert torch.equal(cached, generate(model, prompt, 8, temperature=0, use_cache=False))


def test_your_attention_serves_a_real_key_value_cache(parts):
    """With the learner's attention, each cached step projects keys and values for the new token only
    (lesson 07's cache), and the tokens are those generated without a cache."""
    config = your_gpt_config(vocab_size=11, max_len=24, d_model=16, n_heads=2, n_layers=2, dropout=0.0)
    torch.manual_seed(0)
    model = parts.gpt(config).eval()
    attention = model.blocks.layers[0].self_attn
    assert type(attention).__name__ == "YourAttention"  # the learner's class, adapted
    rows = {"w_k": [], "w_v": [], "w_q": []}
    for name, seen in rows.items():
        getattr(attention, name).register_forward_hook(lambda module, args, out, seen=seen: seen.append(args[0].shape[1]))
    prompt = torch.randint(0, 11, (2, 5))
    cached = generate(model, prompt, 6, temperature=0, use_cache=True)
    assert rows["w_k"] == rows["w_v"] == [5] + [1] * 5  # the prompt once, then one new position per step
    assert rows["w_q"] == [5] + [1] * 5
    for seen in rows.values():
        seen.clear()
    assert torch.equal(cached, generate(model, prompt, 6, temperature=0, use_cache=False))
    assert rows["w_k"] == [5, 6, 7, 8, 9, 10]  # without the cache every step projects every position again


def test_this_lessons_parts_takes_yours_when_it_passes_and_the_reference_otherwise():
    """Lesson 09's loss pipeline: each of its exercises 1-3 from the running notebook when it passes its
    check, the reference in its place otherwise, the reason in the table."""
    from tfcourse.course.assemble import THIS_NOTEBOOK, this_lessons_parts
    from tfcourse.course.notebook_import import import_from_notebook
    from tfcourse.training import translation

    notebook = SOLUTIONS / "09_translation" / "09_translation.ipynb"
    yours = {"shift_target": import_from_notebook(notebook, "shift_target"),
                 "label_smoothed_cross_entropy": lambda logits, labels, epsilon, ignore_index=-100: logits.mean()}
    references = {"shift_target": translation.shift_target,
                  "label_smoothed_cross_entropy": translation.smoothed_cross_entropy,
                  "encoder_decoder_forward": translation.model_forward}
    pipeline = this_lessons_parts("09_translation", yours, references)
    rows = {key: (origin, why) for key, origin, why in pipeline.rows()}
    assert rows["shift_target"] == (THIS_NOTEBOOK, "its check passed")
    assert pipeline.obj("shift_target") is yours["shift_target"]
    assert rows["label_smoothed_cross_entropy"][0] == REFERENCE
    assert rows["label_smoothed_cross_entropy"][1].startswith("fails its check: ")
    assert pipeline.obj("label_smoothed_cross_entropy") is translation.smoothed_cross_entropy
    assert rows["encoder_decoder_forward"] == (REFERENCE, "no encoder_decoder_forward in this notebook: run its cell")
    assert not pipeline.table().startswith(save_first())  # nothing was read from disk


def test_an_attention_that_reads_its_weights_itself_keeps_the_inputs_cache(tmp_path):
    """`source @ self.w_k.weight.T + self.w_k.bias` never calls w_k: the adapter sees it at the first cached
    step and keeps the layer's inputs from then on; the tokens are right either way."""
    folder = _lessons_copy(tmp_path, {})
    path = folder / "03_attention" / "03_attention.ipynb"
    nb = nbformat.read(path, as_version=4)
    cell = next(c for c in nb.cells if c.metadata.get("nbgrader", {}).get("grade_id") == "mha_impl")
    for name in ("k", "v"):
        old = f"{name} = split_heads(self.w_{name}(source), self.n_heads)"
        assert old in cell.source, "03_attention/mha_impl changed: update this test"
        cell.source = cell.source.replace(old, f"{name} = split_heads(source @ self.w_{name}.weight.T + "
                                                f"self.w_{name}.bias, self.n_heads)")
    nbformat.write(nb, path)
    parts = your_parts(folder)
    config = your_gpt_config(vocab_size=11, max_len=16, d_model=16, n_heads=2, n_layers=2, dropout=0.0)
    torch.manual_seed(0)
    model = parts.gpt(config).eval()
    prompt = torch.randint(0, 11, (2, 3))
    cached = generate(model, prompt, 8, temperature=0, use_cache=True)
    assert torch.equal(cached, generate(model, prompt, 8, temperature=0, use_cache=False))
    assert model.blocks.layers[0].self_attn.calls_its_projections is False
