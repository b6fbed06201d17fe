"""Checks for lesson 02, embeddings and positional encoding.

    check_one_hot_lookup        one_hot(ids) @ table, without indexing the table
    check_token_embedding       a lookup table initialised with std 1/sqrt(d_model), output x sqrt(d_model)
    check_permutation_test      a function that tells whether a layer ignores word order
    check_positional_encoding   the paper's sin/cos table (max_len, d_model)
    check_learned_positions     one trained vector per position, added to x, limited to max_len
    check_input_layer           X = dropout(TokenEmbedding(ids) * sqrt(d_model) + PE[offset : offset + T])

The three module checks end with `expect_portable`: a module that is right on the CPU must also run
on a GPU (every tensor it holds moves with .to(), its forward creates none on the CPU, its output
follows the input's dtype).
"""

from __future__ import annotations

import functools
import math
from collections.abc import Callable
from typing import Any

import torch
from torch import Tensor, nn

from ..attention import MultiHeadAttention, causal_mask, scaled_dot_product_attention
from ..embedding import InputEmbedding, LearnedPositionalEmbedding, TokenEmbedding, sinusoidal_positional_encoding
from ..ffn import PositionwiseFeedForward
from .debugging import PlantedBug, debug_exercise
from ..messages import say
from .core import (Case, CheckFailed, Exercise, OffLimitsError, build_module, call_learner, compare, composite,
                   expect_portable, isolated, load_state, one_thread, run, run_case, seeded)

# What each exercise may not call while its check runs, and the exercise as the runner judges it.
# no_grad=False: the learner's code runs with autograd on, as in the notebook (an in-place change of a
# parameter fails there, so it fails here too); the input layer's forward alone runs without it.
LOOKUP_OFF_LIMITS = ["torch.nn.functional.embedding", "torch.nn.Embedding", "tfcourse.embedding.TokenEmbedding"]
LOOKUP = Exercise("one-hot lookup", LOOKUP_OFF_LIMITS, "one-hot lookup equals table[ids] on {n} cases", no_grad=False)
TOKEN_EMBEDDING_OFF_LIMITS = LOOKUP_OFF_LIMITS + ["tfcourse.embedding.InputEmbedding"]
TOKEN_EMBEDDING = Exercise("scaled token embedding", TOKEN_EMBEDDING_OFF_LIMITS,
                           "ScaledTokenEmbedding: init std 1/sqrt(d_model), output x sqrt(d_model), gradient, any "
                           "device on {n} cases", no_grad=False)
PE_OFF_LIMITS = [
    "tfcourse.embedding.sinusoidal_positional_encoding",
    "tfcourse.embedding.SinusoidalPositionalEncoding",
    "tfcourse.embedding.InputEmbedding",
]
POSITIONAL_ENCODING = Exercise("sinusoidal positional encoding", PE_OFF_LIMITS,
                               "sinusoidal_positional_encoding matches the paper's table on {n} sizes", no_grad=False)
LEARNED_OFF_LIMITS = [
    "tfcourse.embedding.LearnedPositionalEmbedding",
    "tfcourse.embedding.InputEmbedding",
    "torch.nn.Embedding",
    "torch.nn.functional.embedding",
]
LEARNED_POSITIONS = Exercise("learned positional embedding", LEARNED_OFF_LIMITS,
                             "LearnedPositionalEmbedding: std 0.02 init, x + weight[offset:offset+T], gradient, "
                             "max_len limit, any device on {n} cases", no_grad=False)
# The input layer is built from parts: the learner's own (or the package's TokenEmbedding and
# sinusoidal_positional_encoding); the assembled answers are off-limits.
INPUT_LAYER_OFF_LIMITS = [
    "tfcourse.embedding.InputEmbedding",
    "tfcourse.embedding.SinusoidalPositionalEncoding",
    "tfcourse.embedding.LearnedPositionalEmbedding",
]
INPUT_LAYER = Exercise("input layer", INPUT_LAYER_OFF_LIMITS,
                       "InputLayer: embedding x sqrt(d_model) + PE buffer, offset, max_len limit, dropout, any device "
                       "on {n} cases", no_grad=False)


def _module(learner_cls, args: tuple) -> nn.Module:
    """The learner's module, built as `Name(*args)` (which messages name it)."""
    return build_module(f"{learner_cls.__name__}{args}", learner_cls, *args)


def _initial_table_case(seed: int, args: tuple, shape_name: str, shape: tuple[int, int], parameter: str,
                        table: str, std: float, named: dict[str, float]) -> Case:
    """The learner's module built after torch.manual_seed(seed): its only parameter is `weight`, of the given
    shape, and its spread is `std` (within 15 %); `named` maps a usual mistake's description to the spread it gives."""
    def build(learner_cls) -> nn.Module:
        torch.manual_seed(seed)
        return _module(learner_cls, args)

    def expect_table(module: nn.Module) -> None:
        names = [name for name, _ in module.named_parameters()]
        if names != ["weight"]:
            raise CheckFailed(f"expected exactly one parameter named `weight` ({parameter}), got {names}")
        if tuple(module.weight.shape) != shape:
            raise CheckFailed(f"weight should have shape {shape_name} = {shape}, got {tuple(module.weight.shape)}")
        actual = module.weight.detach().float().std().item()
        if abs(actual / std - 1) < 0.15:
            return
        for description, value in named.items():
            if abs(actual / value - 1) < 0.15:
                raise CheckFailed(f"{table} starts with std {actual:.3g}: {description}")
        raise CheckFailed(f"{table} starts with std {actual:.3g}, expected {std:.3g}")

    return Case("the initial table", call=build, after=expect_table)


def _table_forward(learner_cls, args: tuple, weight: Tensor, table: str, hint: str, what: str,
                   inputs: tuple) -> tuple[nn.Module, Any]:
    """The learner's module with the reference table loaded into its `weight`, its forward on `inputs`,
    and the backward of the output's sum (when the output can have one): (module, output)."""
    module = _module(learner_cls, args)
    if not isinstance(getattr(module, "weight", None), nn.Parameter):
        raise CheckFailed(f"{table} must be an nn.Parameter named `weight` so that it is trained")
    load_state(module, {"weight": weight}, f"{learner_cls.__name__}{args}", hint, strict=False)
    output = call_learner(what, module, *inputs)
    if isinstance(output, Tensor) and output.requires_grad:
        call_learner("backward through your output", lambda: output.sum().backward())
    return module, output


def _expect_output_and_gradient(result: tuple[nn.Module, Any], expected: Tensor, mistakes: dict[str, Tensor],
                                label: str, gradient: Tensor, gradient_label: str, hint: str) -> None:
    """The output first (it names the usual mistakes), then the gradient of its sum that reached `weight`."""
    module, output = result
    compare(output, expected, label, mistakes)
    if module.weight.grad is None:
        raise CheckFailed(f"no gradient reached `weight`: {hint}")
    compare(module.weight.grad, gradient, gradient_label)


# ----------------------------------------------------------------------------------------------
# 1. Embedding lookup as a one-hot matrix product
# ----------------------------------------------------------------------------------------------

@functools.cache
def _indexing_ops() -> frozenset:
    ops = {torch.Tensor.__getitem__, torch.embedding, torch.nn.functional.embedding}
    for name in ("index_select", "gather", "take", "take_along_dim", "select", "narrow", "unbind",
                 "embedding_bag", "index_put"):
        for owner in (torch, torch.Tensor):
            if hasattr(owner, name):
                ops.add(getattr(owner, name))
    return frozenset(ops)


class _WatchedTable(Tensor):
    """The table handed to the learner: any operation that picks rows out of it is refused."""

    @classmethod
    def __torch_function__(cls, func, types, args=(), kwargs=None):
        if func in _indexing_ops():
            raise OffLimitsError(
                "picking rows of the table directly (table[ids], index_select, gather, ...) is off-limits in this "
                "exercise (one-hot lookup): build the one-hot matrix and multiply it by the table"
            )
        with torch._C.DisableTorchFunctionSubclass():  # results are plain tensors again
            return func(*args, **(kwargs or {}))


def _lookup_case(seed: int, shape: tuple, vocab_size: int, d_model: int) -> Case:
    """lookup(ids, table) on a watched table; an integer one-hot times the float table says what to convert."""
    generator = seeded(seed)
    table = torch.randn(vocab_size, d_model, generator=generator)
    ids = torch.randint(0, vocab_size, shape, generator=generator)
    ids.view(-1)[0] = vocab_size - 1  # the last row must be reachable too
    what = f"lookup(ids of shape {shape}, table of shape {(vocab_size, d_model)})"
    label = f"lookup for ids of shape {shape} and a ({vocab_size}, {d_model}) table"

    def look_up(learner_fn: Callable) -> Any:
        try:
            return call_learner(what, learner_fn, ids, table.as_subclass(_WatchedTable))
        except CheckFailed as error:
            if "dtype" in str(error) and not isinstance(error, OffLimitsError):  # integer one-hot @ float table
                raise CheckFailed(f"{error} — F.one_hot gives integers: convert with .to(table.dtype) "
                                  f"before the product") from None
            raise

    def plain(actual: object) -> Tensor | None:
        """Not the one-hot matrix itself; what is compared is a plain tensor (the watched subclass dropped)."""
        if not isinstance(actual, Tensor):
            return None
        actual = actual.as_subclass(Tensor)
        if actual.shape == (*shape, vocab_size) and vocab_size != d_model:
            raise CheckFailed(f"{label}: you returned the one-hot matrix itself (last axis vocab_size="
                              f"{vocab_size}); multiply it by the table to get (..., d_model={d_model})")
        return actual

    return Case(what, call=look_up, expected=table[ids], label=label, inspect=plain,  # (*ids.shape, d_model)
                unchanged=(ids, table), unchanged_what="lookup(ids, table)", atol=1e-6, rtol=1e-5)


@isolated
@one_thread
def check_one_hot_lookup(learner_fn: Callable, hidden: bool = False) -> None:
    """lookup(ids, table) = one_hot(ids, V) @ table, which equals table[ids], for ids of any shape."""
    sizes = [((2, 4), 5, 3), ((1, 1), 7, 4)]  # (ids shape, vocab_size, d_model)
    if hidden:
        sizes += [((3, 6), 10, 6), ((5,), 4, 2), ((1, 3), 1, 2)]  # repeats and both ends; 1-D ids; V = 1
    run(LOOKUP, learner_fn, [_lookup_case(seed, *size) for seed, size in enumerate(sizes)], hidden)


# ----------------------------------------------------------------------------------------------
# 2. Token embedding with the x sqrt(d_model) scaling
# ----------------------------------------------------------------------------------------------

TOKEN_INIT_MISTAKES = {
    "that is std 1 (plain torch.randn); multiply by 1/sqrt(d_model) so that entries reach about 1 only "
    "after the x sqrt(d_model) in forward": 1.0,
    "that is GPT-2's 0.02 (GPT-2 does not scale); here the table starts at std 1/sqrt(d_model)": 0.02,
}


def _token_embedding_case(seed: int, shape: tuple, vocab_size: int, d_model: int) -> Case:
    """The reference table loaded into the learner's module: its output and the gradient of its sum."""
    torch.manual_seed(100 + seed)
    reference = TokenEmbedding(vocab_size, d_model)
    ids = torch.randint(0, vocab_size, shape, generator=seeded(seed))
    ids.view(-1)[0] = vocab_size - 1
    root = math.sqrt(d_model)
    with torch.no_grad():
        expected = reference(ids)
        raw = reference.weight[ids]
        mistakes = {
            "the lookup *without* the x sqrt(d_model) scaling": raw,
            "the lookup *divided* by sqrt(d_model) instead of multiplied": raw / root,
            "the lookup multiplied by d_model instead of sqrt(d_model)": raw * d_model,
        }
    counts = torch.bincount(ids.view(-1), minlength=vocab_size).float()  # how often each row was used
    gradient = counts[:, None].expand(vocab_size, d_model) * root  # d(sum of outputs)/d(weight)
    what = f"forward(ids of shape {shape})"
    return Case(what, call=lambda learner_cls: _table_forward(learner_cls, (vocab_size, d_model), reference.weight,
                                                              "the table", "the table is (vocab_size, d_model)",
                                                              what, (ids,)),
                inspect=lambda result: _expect_output_and_gradient(
                    result, expected, mistakes, f"token embedding of ids of shape {shape} (d_model={d_model})",
                    gradient, "the gradient reaching `weight`",
                    "use the parameter itself in forward (not weight.data, a detached copy, or torch.no_grad())"),
                unchanged=(ids,), unchanged_what="forward(ids)")


@isolated
@one_thread
def check_token_embedding(learner_cls, hidden: bool = False) -> None:
    """ScaledTokenEmbedding(vocab_size, d_model): `weight` (V, d_model) with std 1/sqrt(d_model); forward
    returns weight[ids] * sqrt(d_model) and lets the gradient reach `weight`."""
    init_sizes = [(1000, 64)] + ([(1500, 16)] if hidden else [])  # (vocab_size, d_model)
    sizes = [((2, 5), 11, 8), ((1, 1), 3, 4)]  # (ids shape, vocab_size, d_model)
    if hidden:
        sizes += [((3, 7), 20, 6), ((1, 9), 2, 32)]  # an odd d_model; a tiny vocabulary, many repeats
    initial = [_initial_table_case(seed, (vocab_size, d_model), "(vocab_size, d_model)", (vocab_size, d_model),
                                   "the table, an nn.Parameter", "the table", 1 / math.sqrt(d_model),
                                   TOKEN_INIT_MISTAKES)
               for seed, (vocab_size, d_model) in enumerate(init_sizes)]
    cases = [_token_embedding_case(seed, *size) for seed, size in enumerate(sizes)]
    ids = torch.randint(0, 11, (2, 5), generator=seeded(0))
    # The initial tables first (the ✔ line counts the other cases); then on a GPU too: a fresh module, moved to
    # float64 and to a data-less device.
    run(TOKEN_EMBEDDING, learner_cls, initial + cases, hidden, count=len(cases),
        then=lambda: expect_portable(f"{learner_cls.__name__}(11, 8)", _module(learner_cls, (11, 8)), [ids]))


# ----------------------------------------------------------------------------------------------
# 3. Attention without positions ignores word order
# ----------------------------------------------------------------------------------------------

def _bare_attention(x: Tensor) -> Tensor:
    return scaled_dot_product_attention(x, x, x)[0]  # Q = K = V = x, no weights


def _causal_attention(x: Tensor) -> Tensor:
    return scaled_dot_product_attention(x, x, x, causal_mask(x.shape[1]))[0]


def _running_mean(x: Tensor) -> Tensor:
    return x.cumsum(1) / torch.arange(1, x.shape[1] + 1)[:, None]  # (B, T, d_model)


class _AttentionAfterPE(nn.Module):
    """Attention on x + PE: the positions make order matter."""

    def __init__(self, d_model: int):
        super().__init__()
        self.attn = MultiHeadAttention(d_model, 2)

    def forward(self, x: Tensor) -> Tensor:
        return self.attn(x + sinusoidal_positional_encoding(x.shape[1], x.shape[2]))


# (description, build(d_model) -> layer): the first three ignore order, the last three do not.
PERMUTATION_LAYERS: list[tuple[str, Callable[[int], Callable]]] = [
    ("attention without positional encoding (Q = K = V = x)", lambda d_model: _bare_attention),
    ("multi-head attention without positional encoding", lambda d_model: MultiHeadAttention(d_model, 2).eval()),
    ("the position-wise feed-forward network", lambda d_model: PositionwiseFeedForward(d_model).eval()),
    ("multi-head attention *after adding* positional encoding", lambda d_model: _AttentionAfterPE(d_model).eval()),
    ("causal attention (position t sees only 0..t)", lambda d_model: _causal_attention),
    ("a running mean over positions", lambda d_model: _running_mean),
]
PERMUTATION_TEST = Exercise("permutation test", (), f"is_permutation_equivariant is right about "
                                                    f"{len(PERMUTATION_LAYERS)} layers on {{n}} inputs")


def _as_bool(result, what: str) -> bool:
    if isinstance(result, Tensor) and result.numel() == 1 and result.dtype == torch.bool:
        return bool(result)
    if isinstance(result, bool):
        return result
    raise CheckFailed(f"{what}: return True or False, got {type(result).__name__} {result!r:.60}")


def _layer_question(description: str, layer: Callable, x: Tensor, perm: list[int]) -> Case:
    """Is `layer` permutation-equivariant on x? The truth, measured (with the identity permutation or
    T = 1 every layer is); a wrong answer says how the comparison went wrong."""
    with torch.no_grad():
        permuted_first, permuted_after = layer(x[:, perm]), layer(x)[:, perm]  # (B, T, d_model) each
    equivariant = torch.allclose(permuted_first, permuted_after, atol=1e-5, rtol=1e-4)
    what = f"for {description}, x of shape {tuple(x.shape)} and perm={perm}"

    def expect_verdict(answer: object) -> None:
        answer = _as_bool(answer, what)
        if answer and not equivariant:
            gap = (permuted_first - permuted_after).abs().max().item()
            raise CheckFailed(f"{what} you said True, but layer(x[:, perm]) differs from layer(x)[:, perm] by up "
                              f"to {gap:.3g}: compare those two tensors, with a tight tolerance")
        if not answer and equivariant:
            hints = ["permute the output back with the same perm: compare layer(x[:, perm]) with layer(x)[:, perm]"]
            if perm != sorted(perm) and [perm[p] for p in perm] != sorted(perm):
                hints.append("index with perm itself, not its inverse (argsort)")
            if not torch.equal(permuted_first, permuted_after):
                hints.append("compare with a tolerance (torch.allclose): sums taken in another order differ "
                             "in the last bits")
            raise CheckFailed(f"{what} you said False, but layer(x[:, perm]) equals layer(x)[:, perm]; "
                              + "; ".join(hints))

    return Case(f"is_permutation_equivariant({description}, x, perm={perm})", (layer, x, perm),
                after=expect_verdict, unchanged_what="is_permutation_equivariant(layer, x, perm)")


@isolated
@one_thread
def check_permutation_test(learner_fn: Callable, hidden: bool = False) -> None:
    """is_permutation_equivariant(layer, x, perm) -> True iff layer(x[:, perm]) == layer(x)[:, perm]."""
    inputs = [(2, 3, 8, [2, 1, 0]), (1, 3, 8, [1, 2, 0])]  # (B, T, d_model, perm): 猫追狗 -> 狗追猫; a rotation
    if hidden:
        inputs += [(3, 6, 16, [4, 0, 5, 1, 3, 2]), (1, 1, 4, [0]), (2, 4, 8, [0, 1, 2, 3])]
    cases = []
    for seed, (batch, length, d_model, perm) in enumerate(inputs):
        torch.manual_seed(seed)
        x = torch.randn(batch, length, d_model)
        layers = [(description, build(d_model)) for description, build in PERMUTATION_LAYERS]
        questions = [_layer_question(description, layer, x, perm) for description, layer in layers]
        # One case per input, each a question per layer: the ✔ line counts the inputs.
        cases.append(Case(f"the layers on x of shape {tuple(x.shape)}, perm={perm}",
                          call=lambda learner_fn, questions=questions:
                          [run_case(PERMUTATION_TEST, learner_fn, question) for question in questions]))
    run(PERMUTATION_TEST, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# 4. The sinusoidal positional encoding
# ----------------------------------------------------------------------------------------------

def _sinusoid_variant(max_len: int, d_model: int, *, base: float = 10000.0, start: int = 0,
                      exponent: str = "2i", swap: bool = False, halves: bool = False) -> Tensor:
    """The table as the usual mistakes compute it (the defaults give the right one)."""
    position = torch.arange(start, start + max_len, dtype=torch.float32)[:, None]  # (max_len, 1)
    pair = torch.arange(d_model // 2, dtype=torch.float32)  # i = 0, 1, ..., d_model/2 - 1
    column = torch.arange(d_model, dtype=torch.float32)  # the dimension index of every column
    if exponent == "column":  # each column uses its own index: 2i for sin, 2i+1 for cos
        angle = position / base ** (column / d_model)  # (max_len, d_model)
        first, second = angle[:, 0::2], angle[:, 1::2]
    else:
        power = {"2i": 2 * pair, "i": pair, "2 x column": 2 * column[0::2]}[exponent]
        first = second = position / base ** (power / d_model)  # (max_len, d_model/2)
    sin, cos = torch.sin(first), torch.cos(second)
    if swap:
        sin, cos = torch.cos(first), torch.sin(second)
    pe = torch.cat([sin, cos], dim=1) if halves else torch.stack([sin, cos], dim=2).reshape(max_len, d_model)
    return pe


def pe_mistakes(max_len: int, d_model: int) -> dict[str, Tensor]:
    """The usual wrong sin/cos tables, by description."""
    right = _sinusoid_variant(max_len, d_model)
    return {
        "the table with sin and cos swapped (sin belongs in the even dimensions 2i, cos in the odd 2i+1)":
            _sinusoid_variant(max_len, d_model, swap=True),
        "the table with exponent i/d_model instead of 2i/d_model (i counts the sin/cos *pairs*; "
        "the exponent uses 2i, the even dimension index)": _sinusoid_variant(max_len, d_model, exponent="i"),
        "a table where each column uses its own index in the exponent (the cos in column 2i+1 must share "
        "the frequency of the sin in column 2i)": _sinusoid_variant(max_len, d_model, exponent="column"),
        "a table with exponent 2j/d_model where j is the column index (the even column 2i already *is* 2i)":
            _sinusoid_variant(max_len, d_model, exponent="2 x column"),
        "the table multiplied by sqrt(d_model) (only the token embedding is scaled, never the PE)":
            right * math.sqrt(d_model),
        "the table for positions 1..max_len (positions start at 0)": _sinusoid_variant(max_len, d_model, start=1),
        "the table with base 1000 instead of 10000": _sinusoid_variant(max_len, d_model, base=1000.0),
        "all sines in the first half and all cosines in the second (the paper interleaves them: "
        "sin in even, cos in odd dimensions)": _sinusoid_variant(max_len, d_model, halves=True),
    }


@isolated
@one_thread
def check_positional_encoding(learner_fn: Callable, hidden: bool = False) -> None:
    """sinusoidal_positional_encoding(max_len, d_model) -> (max_len, d_model) float32, the paper's table."""
    sizes = [(10, 4), (50, 16), (1, 2)]
    if hidden:
        sizes += [(100, 512), (7, 6), (1, 8), (3, 2), (1024, 32)]
    # Angles up to max_len radians: float32 rounding of the angle moves sin/cos by ~1e-7 * max_len.
    cases = [Case(f"sinusoidal_positional_encoding({max_len}, {d_model})", (max_len, d_model),
                  expected=sinusoidal_positional_encoding(max_len, d_model), mistakes=pe_mistakes(max_len, d_model),
                  atol=1e-4 + 1e-7 * max_len, rtol=1e-4)
             for max_len, d_model in sizes]
    run(POSITIONAL_ENCODING, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# 5. Learned positional embeddings
# ----------------------------------------------------------------------------------------------

LEARNED_INIT_MISTAKES = {"that is std 1 (plain torch.randn); learned positions start small, at std 0.02": 1.0}


def _expect_value_error(fn: Callable, what: str, hint: str) -> None:
    try:
        result = fn()
    except ValueError:
        return
    except NotImplementedError:
        raise CheckFailed(f"{what}: not implemented yet — replace `raise NotImplementedError()` "
                          f"with your code") from None
    except Exception as error:  # noqa: BLE001 - any other error becomes one clear line
        raise CheckFailed(f"{what}: expected a ValueError {hint}, got {type(error).__name__}: {error}") from None
    shape = tuple(result.shape) if isinstance(result, Tensor) else type(result).__name__
    raise CheckFailed(f"{what}: returned {shape} instead of raising a ValueError {hint}")


def _learned_positions_case(seed: int, batch: int, length: int, d_model: int, max_len: int, offset: int) -> Case:
    """The reference table loaded into the learner's module: x plus its rows, their gradient, the max_len limit."""
    torch.manual_seed(10 + seed)
    reference = LearnedPositionalEmbedding(d_model, max_len)
    x = torch.randn(batch, length, d_model)
    with torch.no_grad():
        expected = reference(x, offset)
        rows = reference.weight[offset: offset + length]  # (T, d_model)
        mistakes = {"the position vectors alone: add them to x": rows.expand_as(x).clone(),
                    "x unchanged: nothing was added": x.clone()}
        if offset:
            mistakes["x + weight[:T]: the offset was ignored"] = reference(x, 0)
    gradient = torch.zeros(max_len, d_model)
    gradient[offset: offset + length] = batch  # each used row receives the sum over the batch
    what = f"forward(x of shape {tuple(x.shape)}, offset={offset})"

    def expect_positions_added(result: tuple[nn.Module, Any]) -> None:
        """The output, then the gradient that reached the rows used, then the error past max_len."""
        _expect_output_and_gradient(result, expected, mistakes, f"learned positions for x of shape "
                                    f"{tuple(x.shape)}, offset={offset}, max_len={max_len}", gradient,
                                    "the gradient reaching `weight` (only rows offset..offset+T-1)",
                                    "add the parameter itself (not weight.data or a copy)")
        # Past max_len there is no vector to add: that must be an error, not a silently shorter slice.
        too_far = max_len - length + 1
        _expect_value_error(lambda: result[0](x, too_far), f"forward(x with T={length}, offset={too_far}) "
                            f"with max_len={max_len}", "(offset + T > max_len: there is no learned vector for those "
                            "positions)")

    return Case(what, call=lambda learner_cls: _table_forward(learner_cls, (d_model, max_len), reference.weight,
                                                              "the position table",
                                                              "one row per position: (max_len, d_model)",
                                                              what, (x, offset)),
                inspect=expect_positions_added, unchanged=(x,), unchanged_what="forward(x, offset)")


@isolated
@one_thread
def check_learned_positions(learner_cls, hidden: bool = False) -> None:
    """LearnedPositionalEmbedding(d_model, max_len): `weight` (max_len, d_model), std 0.02;
    forward(x, offset=0) = x + weight[offset : offset + T]; a ValueError past max_len."""
    init_sizes = [(512, 64)] + ([(300, 8)] if hidden else [])  # (max_len, d_model)
    sizes = [(2, 5, 8, 16, 0), (2, 5, 8, 16, 3), (1, 1, 4, 6, 5)]  # (B, T, d_model, max_len, offset)
    if hidden:
        sizes += [(3, 16, 8, 16, 0), (1, 2, 6, 9, 7), (4, 1, 2, 1, 0)]  # T = max_len; the last two; max_len 1
    initial = [_initial_table_case(seed, (d_model, max_len), "(max_len, d_model)", (max_len, d_model),
                                   "an nn.Parameter with one row per position", "the position table", 0.02,
                                   LEARNED_INIT_MISTAKES)
               for seed, (max_len, d_model) in enumerate(init_sizes)]
    cases = [_learned_positions_case(seed, *size) for seed, size in enumerate(sizes)]
    x = torch.randn(2, 5, 8, generator=seeded(0))
    # The initial tables first (the ✔ line counts the other cases); then a fresh module on a GPU too.
    run(LEARNED_POSITIONS, learner_cls, initial + cases, hidden, count=len(cases),
        then=lambda: expect_portable(f"{learner_cls.__name__}(8, 16)", _module(learner_cls, (8, 16)), [x, 3]))


# ----------------------------------------------------------------------------------------------
# 6. The input layer: X = dropout(Embedding(ids) * sqrt(d_model) + PE)
# ----------------------------------------------------------------------------------------------

TOKEN_HINT = "self.token = ScaledTokenEmbedding(vocab_size, d_model)"


def _input_layer(learner_cls, args: tuple) -> nn.Module:
    """The learner's InputLayer(*args), with a `pe` buffer, one parameter `token.weight` and an nn.Dropout."""
    module = _module(learner_cls, args)
    buffers = dict(module.named_buffers())
    parameters = [name for name, _ in module.named_parameters()]
    if "pe" in parameters:
        raise CheckFailed("`pe` is an nn.Parameter: the sinusoidal table is fixed, register it with "
                          "self.register_buffer('pe', ...) (moved by .to(device), never trained)")
    if "pe" not in buffers:
        raise CheckFailed(f"expected a buffer named `pe` (self.register_buffer('pe', table)), found buffers "
                          f"{sorted(buffers)}")
    if parameters != ["token.weight"]:
        raise CheckFailed(f"expected one parameter, the token table `token.weight` (self.token = your "
                          f"ScaledTokenEmbedding), got {parameters}")
    if not isinstance(getattr(module, "dropout", None), nn.Dropout):
        raise CheckFailed("expected self.dropout = nn.Dropout(dropout): it drops only in training mode")
    return module


# The earlier exercises the input layer calls by name, with the references that stand in while it
# is judged on its own (a swapped sin/cos costs the positional-encoding exercise only).
INPUT_LAYER_PARTS = dict(ScaledTokenEmbedding=lambda: TokenEmbedding,
                         sinusoidal_positional_encoding=lambda: sinusoidal_positional_encoding)


def _input_layer_case(seed: int, shape: tuple, vocab_size: int, d_model: int, max_len: int, offset: int) -> Case:
    """The learner's layer (its `pe` first) with the reference tokens, in eval mode: its output, then the
    max_len limit."""
    length, root = shape[1], math.sqrt(d_model)
    torch.manual_seed(20 + seed)
    reference = InputEmbedding(vocab_size, d_model, max_len, dropout=0.0).eval()
    ids = torch.randint(0, vocab_size, shape, generator=seeded(seed))
    pe = sinusoidal_positional_encoding(max_len + 1, d_model)  # one extra row for the "starts at 1" mistake
    with torch.no_grad():
        expected = reference(ids, offset)  # (B, T, d_model)
        raw = reference.token.weight[ids]  # (B, T, d_model), unscaled
        rows = pe[offset: offset + length]  # (T, d_model)
        mistakes = {
            "the token embedding *without* x sqrt(d_model), plus PE": raw + rows,
            "(embedding + PE) x sqrt(d_model): only the token embedding is scaled, not the PE":
                (raw + rows) * root,
            "the token embedding alone: the positional encoding was not added": raw * root,
            "embedding + PE for positions offset+1..offset+T (positions start at 0)":
                raw * root + pe[offset + 1: offset + length + 1],
        }
        if offset:
            mistakes["embedding + PE[:T]: the offset was ignored (ids[:, 0] sits at position offset)"] = \
                raw * root + pe[:length]
    what = f"forward(ids of shape {shape}, offset={offset}) with d_model={d_model}"
    wrong_tables = pe_mistakes(max_len, d_model)

    def forward(learner_cls) -> tuple[nn.Module, Any]:
        """The learner's layer, its `pe` judged first; then with the reference tokens, in eval mode, on ids."""
        module = _input_layer(learner_cls, (vocab_size, d_model, max_len, 0.0))
        compare(module.pe, pe[:max_len], f"self.pe (the sinusoidal table, max_len={max_len}, d_model={d_model})",
                wrong_tables, atol=1e-4, rtol=1e-4)
        load_state(module, {"token.weight": reference.token.weight}, "your input layer", TOKEN_HINT, strict=False)
        module.eval()
        with torch.no_grad():
            return module, call_learner(what, module, ids, offset)

    def expect_output(result: tuple[nn.Module, Any]) -> None:
        """The usual wrong shapes and an eval-mode dropout first, then the values, then the error past max_len."""
        module, actual = result
        concatenated = isinstance(actual, Tensor) and actual.dim() == 3
        got = concatenated and say(f"{what}: expected shape {tuple(expected.shape)}, got {tuple(actual.shape)} — PE was ")
        if concatenated and actual.shape[-1] == 2 * d_model:
            raise CheckFailed(got + "concatenated instead of added; X = Embedding + PE keeps d_model features")
        if concatenated and actual.shape[1] == 2 * length:
            raise CheckFailed(got + "concatenated along positions; add it, one PE row per token")
        if isinstance(actual, Tensor) and actual.shape == expected.shape and (actual == 0).float().mean() > 0.2:
            raise CheckFailed(f"{what}: many entries are 0 in eval mode — dropout must be inactive after .eval(): "
                              f"use self.dropout (an nn.Dropout), not F.dropout without training=self.training")
        compare(actual, expected, what, mistakes)
        too_far = max_len - length + 1
        with torch.no_grad():
            _expect_value_error(lambda: module(ids, too_far),
                                f"forward(ids with T={length}, offset={too_far}) with max_len={max_len}",
                                "(offset + T > max_len: the table has no rows for those positions)")

    return Case(what, call=forward, inspect=expect_output, unchanged=(ids,), unchanged_what="forward(ids, offset)")


def _expect_dropout(learner_cls, args: tuple, token_weight: Tensor, ids: Tensor, expected: Tensor,
                    rng_state: Tensor) -> None:
    """Dropout acts on the sum, in training mode only: about half the entries zeroed, the rest x 1/(1 - p).
    The layer is built and drops from `rng_state`: its mask does not depend on the cases before."""
    p = args[-1]
    torch.set_rng_state(rng_state)
    module = _input_layer(learner_cls, args)
    load_state(module, {"token.weight": token_weight}, "your input layer", TOKEN_HINT, strict=False)
    module.train()
    with torch.no_grad():
        actual = call_learner("forward(ids) in training mode with dropout=0.5", module, ids)
    compare(actual, expected, "forward(ids) in training mode (shape and dtype)", atol=math.inf)
    dropped = actual == 0
    share = dropped.float().mean().item()
    if share < 0.3:
        raise CheckFailed(f"with dropout=0.5 in training mode only {share:.0%} of the entries are 0: pass "
                          f"embedding + PE through self.dropout")
    kept = ~dropped
    if torch.allclose(actual[kept], expected[kept], atol=1e-5, rtol=1e-4):
        raise CheckFailed("kept entries were not rescaled by 1/(1 - p): use nn.Dropout, which does it for you")
    if share > 0.7 or not torch.allclose(actual[kept], expected[kept] / (1 - p), atol=1e-5, rtol=1e-4):
        raise CheckFailed("in training mode the output should be dropout(embedding + PE): about half the entries 0, "
                          "the rest (embedding + PE) / (1 - p); apply dropout once, to the sum")


@composite(**INPUT_LAYER_PARTS)
@isolated
@one_thread
def check_input_layer(learner_cls, hidden: bool = False) -> None:
    """InputLayer(vocab_size, d_model, max_len, dropout): forward(ids, offset=0) =
    dropout(token(ids) + pe[offset : offset + T]); `pe` a buffer; a ValueError past max_len."""
    sizes = [((2, 5), 13, 8, 16, 0), ((2, 5), 13, 8, 16, 4), ((1, 1), 5, 4, 3, 1)]  # ids, V, d, max_len, offset
    if hidden:
        sizes += [((3, 10), 7, 16, 12, 2), ((1, 6), 30, 6, 6, 0), ((2, 1), 4, 2, 8, 7)]
    cases = [_input_layer_case(seed, *size) for seed, size in enumerate(sizes)]
    # Then dropout in training mode, and a fresh layer on a GPU too (moved to float64, to a data-less device).
    args = (13, 16, 12, 0.5)  # vocab_size, d_model, max_len, p
    torch.manual_seed(7)
    reference = InputEmbedding(*args[:3], dropout=0.0).eval()
    rng_state = torch.get_rng_state()
    ids = torch.randint(0, 13, (2, 6), generator=seeded(7))
    with torch.no_grad():
        expected = reference(ids)
    portable_inputs = [torch.randint(0, 13, (2, 5), generator=seeded(1)), 2]

    def after_the_cases() -> None:
        _expect_dropout(learner_cls, args, reference.token.weight, ids, expected, rng_state)
        expect_portable(f"{learner_cls.__name__}{args}", _input_layer(learner_cls, args), portable_inputs)

    run(INPUT_LAYER, learner_cls, cases, hidden, then=after_the_cases)


# ----------------------------------------------------------------------------------------------
# Debug exercise: a colleague's positional encoding with one planted mistake
# ----------------------------------------------------------------------------------------------

COLLEAGUES_POSITIONAL_ENCODING = PlantedBug(
    "02_embeddings", "pe_debug_impl", "colleagues_positional_encoding",
    source='''def colleagues_positional_encoding(max_len: int, d_model: int) -> Tensor:
    """A colleague's sinusoidal table (max_len, d_model), called as yours. It has one mistake."""
    position = torch.arange(max_len, dtype=torch.float32)[:, None]  # (max_len, 1)
    i = torch.arange(d_model // 2, dtype=torch.float32)  # (d_model/2,): one index per sin/cos pair
    angle = position / 10000.0 ** (i / d_model)  # (max_len, d_model/2): one angle per position and pair
    pe = torch.zeros(max_len, d_model)
    pe[:, 0::2] = torch.sin(angle)  # even dimensions 2i
    pe[:, 1::2] = torch.cos(angle)  # odd dimensions 2i + 1: the same angle
    return pe
''',
    mistake="exponent i/d_model instead of 2i/d_model",
    coarse_hint="print row 1 of the table for d_model = 4 and compare it, pair by pair, with PE(1) as section 4 "
                "worked it out by hand")
check_positional_encoding_debug = debug_exercise(check_positional_encoding, COLLEAGUES_POSITIONAL_ENCODING)
