"""Each lesson that trains runs on the parts its table claims: instrumented over a few steps, every learner
part the table says is yours is called, and a part made wrong falls back to the reference on its own, its
reason in the table. (The solutions stand in for a learner's notebooks; a part is made wrong by hand.)

Which parts a lesson's tables list, against the parts its code is handed, is checked on every solution
notebook that runs under nbval (conftest.py, tfcourse.course.assemble.TRACE)."""

from __future__ import annotations

import functools
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import torch
from torch import nn

from tfcourse import modern
from tfcourse.course.assemble import (GQA_LAYER, REFERENCE, THIS_NOTEBOOK, modern_gpt, this_lessons_parts,
                                      your_gpt_config, your_parts)
from tfcourse.course.notebook_import import import_from_notebook
from tfcourse.data import char_corpus, get_batch
from tfcourse.data import mlm
from tfcourse.data.recall import recall_batch
from tfcourse.models import GPTConfig
from tfcourse.training import loop, translation
from tfcourse.training.loop import LoopFunctions, StepwiseAdamW, TrainConfig, train, weight_groups

pytestmark = [pytest.mark.slow, pytest.mark.usefixtures("one_thread")]  # imports the solutions' cells

SOLUTIONS = Path(__file__).resolve().parents[1] / "solutions"


def _solution(lesson: str, name: str) -> Any:
    return import_from_notebook(SOLUTIONS / lesson / f"{lesson}.ipynb", name)


def _spied(function: Callable, calls: dict[str, int], name: str) -> Callable:
    """`function`, counting its calls under `name` (a plain function, as a learner's is, for the checks)."""
    @functools.wraps(function)
    def spy(*args: Any, **kwargs: Any) -> Any:
        calls[name] = calls.get(name, 0) + 1
        return function(*args, **kwargs)

    return spy


def _rows(parts) -> dict[str, tuple[str, str]]:
    return {key: (origin, why) for key, origin, why in parts.rows()}


def _expect_fallback(parts, name: str, reference: Any) -> None:
    origin, why = _rows(parts)[name]
    assert origin == REFERENCE and why.startswith("fails its check: "), (name, origin, why)
    assert parts.obj(name) is reference
    assert why.replace("fails its check: ", "") in parts.table()  # the reason, in the table


@pytest.fixture(scope="module")
def model_parts():
    return your_parts(SOLUTIONS)


def test_lesson_08_trains_with_each_of_its_loop_parts_and_a_wrong_schedule_falls_back(model_parts):
    names = ["get_batch", "adamw_step", "lr_at", "train_step", "estimate_loss"]
    calls: dict[str, int] = {}
    yours = {name: _spied(_solution("08_training", name), calls, name) for name in names}
    yours["lr_at"] = _spied(lambda step, config: config.lr, calls, "lr_at")  # no warm-up, no decay
    references = {"get_batch": get_batch, "adamw_step": loop.adamw_step, "lr_at": loop.lr_at,
                  "train_step": loop.plain_train_step, "estimate_loss": loop.mean_loss}
    parts = this_lessons_parts("08_training", yours, references)
    _expect_fallback(parts, "lr_at", loop.lr_at)
    assert all(_rows(parts)[name][0] == THIS_NOTEBOOK for name in names if name != "lr_at")

    data = torch.randint(0, 11, (400,))
    functions = LoopFunctions(
        lr_at=parts.obj("lr_at"), train_step=parts.obj("train_step"), estimate_loss=parts.obj("estimate_loss"),
        make_optimizer=lambda model, c: StepwiseAdamW(weight_groups(model, c.weight_decay), c.lr, c.betas,
                                                      update=parts.obj("adamw_step")))
    config = your_gpt_config(11, max_len=8, d_model=16, n_heads=2, n_layers=1, dropout=0.0, norm_first=True)
    torch.manual_seed(0)
    model = model_parts.gpt(config)
    attention_calls = []
    model.blocks.layers[0].self_attn.register_forward_hook(lambda *_: attention_calls.append(1))
    calls.clear()
    history = train(model, lambda split, g: parts.obj("get_batch")(data, 4, 8, g),
                    TrainConfig(max_steps=4, warmup_steps=1, eval_interval=2, eval_steps=1, device="cpu",
                                progress=False), functions=functions)
    assert history["val_loss"][-1] < history["val_loss"][0]
    assert calls["train_step"] == 4 and calls["adamw_step"] == 2 * 4  # two weight groups a step
    assert calls["estimate_loss"] == 2 * 3 and calls["get_batch"] == 4 + 2  # 2 evaluation batches, drawn once
    assert "lr_at" not in calls  # the reference's schedule ran in its place
    assert attention_calls and type(model.blocks.layers[0].self_attn).__name__ == "YourAttention"


def test_lesson_09_trains_and_translates_with_its_pipeline_and_a_wrong_shift_falls_back(model_parts):
    lesson = "09_translation"
    names = ["shift_target", "label_smoothed_cross_entropy", "encoder_decoder_forward", "greedy_decode"]
    calls: dict[str, int] = {}
    yours = {name: _spied(_solution(lesson, name), calls, name) for name in names}
    references = {"shift_target": translation.shift_target,
                  "label_smoothed_cross_entropy": translation.smoothed_cross_entropy,
                  "encoder_decoder_forward": translation.model_forward, "greedy_decode": translation.greedy_decode}
    parts = this_lessons_parts(lesson, yours, references)
    assert all(origin == THIS_NOTEBOOK for origin, _ in _rows(parts).values())
    calls.clear()

    def make_loss(source_vocab, target_vocab, epsilon):
        return translation.make_loss_fn(source_vocab, target_vocab, epsilon, shift=parts.obj("shift_target"),
                                        loss=parts.obj("label_smoothed_cross_entropy"),
                                        forward=parts.obj("encoder_decoder_forward"))

    recipe = translation.TranslationRecipe(n_pairs=200, d_model=16, n_heads=2, n_layers=1, batch_size=8,
                                           max_steps=3, warmup_steps=1)
    run = translation.train_translator(recipe, build_model=model_parts.transformer, make_loss=make_loss)
    assert calls["shift_target"] == calls["label_smoothed_cross_entropy"] == calls["encoder_decoder_forward"] > 3
    sentences = [english for english, _ in run["test_pairs"][:3]]
    translation.translate_sentences(run["model"], sentences, run["source_vocab"], run["target_vocab"],
                                    decode=parts.obj("greedy_decode"))
    assert calls["greedy_decode"] == 3
    assert type(run["model"].decoder.layers[0]).__name__ == "YourLayer"  # the learner's decoder layer

    def labels_unshifted(tgt, bos_id, eos_id, pad_id, ignore_index=-100):
        decoder_input, _ = translation.shift_target(tgt, bos_id, eos_id, pad_id, ignore_index)
        return decoder_input, decoder_input  # the same tokens to read and to predict

    wrong = this_lessons_parts(lesson, {**yours, "shift_target": labels_unshifted}, references)
    _expect_fallback(wrong, "shift_target", translation.shift_target)


def test_lesson_10_draws_its_batches_with_the_learners_make_recall_batch():
    calls: dict[str, int] = {}
    yours = {"make_recall_batch": _spied(_solution("10_rnn_vs_transformer", "make_recall_batch"), calls, "batch")}
    parts = this_lessons_parts("10_rnn_vs_transformer", yours, {"make_recall_batch": recall_batch})
    calls.clear()
    x, y = parts.obj("make_recall_batch")(4, 12, 8, 16, torch.Generator().manual_seed(0))
    assert calls == {"batch": 1} and x.shape == (4, 12)

    def always_first_key(batch_size, length, n_keys, n_distractors, generator=None):
        x, y = recall_batch(batch_size, length, n_keys, n_distractors, generator)
        return x, torch.zeros_like(y)

    wrong = this_lessons_parts("10_rnn_vs_transformer", {"make_recall_batch": always_first_key},
                               {"make_recall_batch": recall_batch})
    _expect_fallback(wrong, "make_recall_batch", recall_batch)


LESSON_11 = {"RMSNorm": modern.RMSNorm, "SwiGLUFeedForward": modern.SwiGLUFeedForward, "apply_rope": modern.apply_rope,
             "grouped_query_attention": modern.grouped_query_attention, GQA_LAYER: modern.GroupedQueryAttention}


def _lesson_11_yours() -> dict[str, Any]:
    names = {name: name for name in LESSON_11} | {GQA_LAYER: "GroupedQueryAttention"}
    return {key: _solution("11_modern_llm", name) for key, name in names.items()}


def _modern_config() -> GPTConfig:
    return GPTConfig.llama(65, max_len=16, d_model=32, n_heads=4, n_layers=2, n_kv_heads=2)


def _train_briefly(model: nn.Module, config: GPTConfig) -> dict:
    corpus = char_corpus(text="To be, or not to be, that is the question. " * 40)
    run = TrainConfig(max_steps=4, warmup_steps=1, eval_interval=2, eval_steps=1, device="cpu", progress=False)
    return train(model, corpus.batches(4, config.max_len), run)


def test_lesson_11_trains_a_modern_block_of_the_learners_layers_as_the_packages():
    parts = this_lessons_parts("11_modern_llm", _lesson_11_yours(), LESSON_11)
    assert all(origin == THIS_NOTEBOOK for origin, _ in _rows(parts).values())
    config = _modern_config()
    torch.manual_seed(0)
    yours = modern_gpt(config, parts)
    kinds = {type(m).__name__ for m in yours.modules()}
    assert {"RMSNorm", "SwiGLUFeedForward", "YourGroupedAttention"} <= kinds
    learners = (parts.obj("RMSNorm"), parts.obj("SwiGLUFeedForward"), parts.obj(GQA_LAYER))
    forward_calls = []
    for module in yours.modules():
        if isinstance(module, learners):
            module.register_forward_hook(lambda m, *_: forward_calls.append(type(m).__mro__[0]))
    torch.manual_seed(0)
    from tfcourse.models import GPT

    package = GPT(config)
    torch.testing.assert_close(dict(yours.state_dict()), dict(package.state_dict()))  # the same initial draw
    h_yours, h_package = _train_briefly(yours, config), _train_briefly(package, config)
    assert len(forward_calls) > 0
    torch.testing.assert_close(torch.tensor(h_yours["val_loss"]), torch.tensor(h_package["val_loss"]),
                               rtol=1e-4, atol=1e-4)


def test_lesson_11_a_wrong_rope_takes_the_layer_that_calls_it_with_it():
    def rope_on_half_the_pairs(x, offset=0, base=10000.0):  # a usual mistake: the second half left as it was
        half = x.shape[-1] // 2
        return torch.cat([modern.apply_rope(x, offset, base)[..., :half], x[..., half:]], dim=-1)

    parts = this_lessons_parts("11_modern_llm", {**_lesson_11_yours(), "apply_rope": rope_on_half_the_pairs},
                               LESSON_11)
    _expect_fallback(parts, "apply_rope", modern.apply_rope)
    origin, why = _rows(parts)[GQA_LAYER]
    assert origin == REFERENCE and why.startswith("its check passed, but it calls your apply_rope:"), why
    assert _rows(parts)["RMSNorm"][0] == THIS_NOTEBOOK  # the others stay yours
    model = modern_gpt(_modern_config(), parts)
    assert not any(type(m).__name__ == "YourGroupedAttention" for m in model.modules())


def test_lesson_12_trains_its_masked_model_with_the_learners_masking_and_loss():
    calls: dict[str, int] = {}
    names = ["mask_tokens", "masked_lm_loss"]
    yours = {name: _spied(_solution("12_pretrained", name), calls, name) for name in names}
    references = {"mask_tokens": mlm.mask_tokens, "masked_lm_loss": mlm.masked_lm_loss}
    parts = this_lessons_parts("12_pretrained", yours, references)
    assert all(origin == THIS_NOTEBOOK for origin, _ in _rows(parts).values())
    calls.clear()
    ids = torch.randint(2, 30, (3, 16))
    inputs, labels = parts.obj("mask_tokens")(ids, 1, 30, [0, 1], generator=torch.Generator().manual_seed(0))
    parts.obj("masked_lm_loss")(torch.randn(3, 16, 30), labels)
    assert calls == {"mask_tokens": 1, "masked_lm_loss": 1}

    def mean_over_every_position(logits, labels):  # the ignored positions counted as well
        return torch.nn.functional.cross_entropy(logits.flatten(0, 1), labels.clamp(min=0).flatten())

    wrong = this_lessons_parts("12_pretrained", {**yours, "masked_lm_loss": mean_over_every_position}, references)
    _expect_fallback(wrong, "masked_lm_loss", mlm.masked_lm_loss)
    assert _rows(wrong)["mask_tokens"][0] == THIS_NOTEBOOK
