"""Checks leave no trace and see none: the learner's random state, default dtype and default device
are the same before and after a test cell, and the verdict does not depend on them."""

from __future__ import annotations

import functools
import importlib
import inspect
import pkgutil
import random

import pytest
import torch

import tfcourse.checks
from tfcourse.checks.core import CheckFailed, isolated
from tfcourse.checks.models import check_cross_entropy, check_log_softmax


def _every_check():
    for info in pkgutil.iter_modules(tfcourse.checks.__path__):
        if info.name == "core":
            continue
        module = importlib.import_module(f"tfcourse.checks.{info.name}")
        for name in dir(module):
            if name.startswith("check_") and getattr(module, name).__module__ == module.__name__:
                yield f"{info.name}.{name}", getattr(module, name)


ISOLATED_CODE = isolated(lambda: None).__code__


@pytest.mark.parametrize(("name", "check"), list(_every_check()), ids=lambda v: v if isinstance(v, str) else "")
def test_every_check_runs_isolated(name, check):
    assert check.__code__ is ISOLATED_CODE, f"{name} is not decorated with @isolated"


def my_log_softmax(logits, dim=-1):
    shifted = logits - logits.max(dim=dim, keepdim=True).values  # (..., V): the largest is 0
    return shifted - shifted.exp().sum(dim=dim, keepdim=True).log()


def my_cross_entropy(logits, targets):
    return -my_log_softmax(logits).gather(-1, targets[..., None]).mean()


@pytest.fixture
def learner_state():
    """A learner who experimented: float64 by default, their own seed."""
    dtype = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    torch.manual_seed(4242)
    random.seed(4242)
    yield
    torch.set_default_dtype(dtype)


@pytest.mark.parametrize("hidden", [False, True])
def test_a_check_leaves_the_learners_state_as_it_was_and_passes_in_float64(learner_state, hidden, capsys):
    torch_state, python_state = torch.get_rng_state(), random.getstate()
    check_log_softmax(my_log_softmax, hidden=hidden)
    check_cross_entropy(my_cross_entropy, hidden=hidden)  # used to fail: "expected dtype float32"
    assert torch.equal(torch.get_rng_state(), torch_state), "the check moved the learner's torch generator"
    assert random.getstate() == python_state, "the check moved the learner's Python generator"
    assert torch.get_default_dtype() == torch.float64
    assert capsys.readouterr().out.count("✔") == 2


def test_a_tensor_subclass_cannot_answer_the_comparison():
    """A subclass whose __torch_function__ makes every comparison true must not pass a check."""
    from tfcourse.checks.core import CheckFailed, compare

    class AlwaysClose(torch.Tensor):
        @classmethod
        def __torch_function__(cls, func, types, args=(), kwargs=None):
            if func in (torch.allclose, torch.equal, torch.Tensor.allclose):
                return True
            return super().__torch_function__(func, types, args, kwargs or {})

    fake = torch.zeros(3).as_subclass(AlwaysClose)
    with pytest.raises(CheckFailed, match="plain torch.Tensor, got the subclass AlwaysClose"):
        compare(fake, torch.ones(3), "log_softmax(x)")
    with pytest.raises(CheckFailed, match="plain torch.Tensor"):
        check_log_softmax(lambda logits, dim=-1: my_log_softmax(logits, dim).as_subclass(AlwaysClose))
    compare(torch.nn.Parameter(torch.ones(3)), torch.ones(3), "a parameter")  # parameters are fine


LEARNER_LESSON_05 = '''
import torch
from torch import nn
from tfcourse.attention import MultiHeadAttention
from tfcourse.ffn import PositionwiseFeedForward


class LayerNorm(nn.Module):  # wrong: the unbiased variance
    def __init__(self, d_model, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(d_model))
        self.bias = nn.Parameter(torch.zeros(d_model))

    def forward(self, x):
        centred = x - x.mean(-1, keepdim=True)
        return self.weight * centred / torch.sqrt(x.var(-1, keepdim=True) + self.eps) + self.bias


def sublayer_connection(x, sublayer, norm, norm_first=False):
    return x + sublayer(norm(x)) if norm_first else norm(x + sublayer(x))


class EncoderLayer(nn.Module):
    def __init__(self, d_model, n_heads, d_ff=None, dropout=0.1, norm_first=False):
        super().__init__()
        self.norm_first = norm_first
        self.self_attn = MultiHeadAttention(d_model, n_heads, dropout)
        self.ffn = PositionwiseFeedForward(d_model, d_ff, dropout)
        self.norm1, self.norm2 = LayerNorm(d_model), LayerNorm(d_model)
        self.dropout1, self.dropout2 = nn.Dropout(dropout), nn.Dropout(dropout)

    def forward(self, x, mask=None):
        x = sublayer_connection(x, lambda h: self.dropout1(self.self_attn(h, mask=mask)), self.norm1, ORDER)
        return sublayer_connection(x, lambda h: self.dropout2(self.ffn(h)), self.norm2, ORDER)
'''


def _learner_module(source: str, name: str):
    import sys
    import types

    module = types.ModuleType(name)
    sys.modules[name] = module
    exec(compile(source, name, "exec"), module.__dict__)  # noqa: S102 - a learner's notebook, in a test
    return module


def test_a_layer_is_graded_on_its_own_when_an_earlier_exercise_is_wrong(capsys):
    from tfcourse.checks.blocks import check_encoder_layer

    learner = _learner_module(LEARNER_LESSON_05.replace("ORDER", "self.norm_first"), "_learner_05_right")
    check_encoder_layer(learner.EncoderLayer)  # passes: the composition is right
    out = capsys.readouterr().out
    assert "right with the reference LayerNorm in place — fix Exercise 1 (LayerNorm) first: with yours it fails" in out


def test_a_wrong_composition_still_fails_with_the_reference_parts():
    from tfcourse.checks.blocks import check_encoder_layer
    from tfcourse.checks.core import CheckFailed

    learner = _learner_module(LEARNER_LESSON_05.replace("ORDER", "not self.norm_first"), "_learner_05_wrong")
    with pytest.raises(CheckFailed):
        check_encoder_layer(learner.EncoderLayer)


def test_checks_modules_are_read_only_from_a_notebook():
    import tfcourse.checks.core as core
    import tfcourse.checks.ffn as ffn

    for module, name in ((ffn, "check_feed_forward"), (core, "compare")):
        with pytest.raises(AttributeError, match="read-only"):
            setattr(module, name, lambda *args, **kwargs: None)
        with pytest.raises(AttributeError, match="read-only"):
            delattr(module, name)
    assert callable(ffn.check_feed_forward) and ffn.check_feed_forward.__module__ == "tfcourse.checks.ffn"


# ------------------------------------------------------------------------------------------
# The guard knows the reference by its code, not only by its identity
# ------------------------------------------------------------------------------------------


def _copy_by_source(reference):
    """What a learner could do to hand in the reference under another identity."""
    namespace = dict(vars(importlib.import_module(reference.__module__)))
    exec(inspect.getsource(reference), namespace)  # noqa: S102 - the tampering under test
    return namespace[reference.__name__]


def test_handing_in_the_reference_or_a_copy_of_its_code_is_off_limits():
    from tfcourse.attention import scaled_dot_product_attention as reference
    from tfcourse.checks.attention import check_scaled_dot_product_attention

    copy = _copy_by_source(reference)
    assert copy is not reference
    for handed_in in (reference, copy, functools.partial(reference), functools.wraps(reference)(lambda *a: reference(*a))):
        with pytest.raises(CheckFailed, match=r"off-limits.*(reference itself, or a copy of its code|write it yourself)"):
            check_scaled_dot_product_attention(handed_in)


def test_a_function_calling_a_copy_held_in_its_namespace_is_off_limits():
    from tfcourse.checks.tokenization import check_count_pairs
    from tfcourse.tokenizers import count_pairs

    namespace = {"helper": _copy_by_source(count_pairs)}
    exec("def my_count_pairs(word_freqs):\n    return helper(word_freqs)\n", namespace)  # noqa: S102
    with pytest.raises(CheckFailed, match="off-limits"):
        check_count_pairs(namespace["my_count_pairs"])


def test_a_class_copied_from_the_reference_source_is_off_limits():
    from tfcourse.blocks import LayerNorm
    from tfcourse.checks.blocks import check_layer_norm

    for handed_in in (LayerNorm, _copy_by_source(LayerNorm)):
        with pytest.raises(CheckFailed, match="off-limits"):
            check_layer_norm(handed_in)
    # and the guard puts everything back
    assert LayerNorm(4)(torch.ones(1, 4)).shape == (1, 4)


def test_own_code_with_the_references_names_but_its_own_docstring_passes(capsys):
    from tfcourse.checks.tokenization import check_count_pairs
    from tfcourse.tokenizers import count_pairs

    source = inspect.getsource(count_pairs).replace(inspect.getdoc(count_pairs), "My own pair counter.")
    namespace = dict(vars(importlib.import_module(count_pairs.__module__)))
    exec(source, namespace)  # noqa: S102 - the same body, written by the learner with their own docstring
    check_count_pairs(namespace["count_pairs"])
    assert capsys.readouterr().out.startswith("✔")
