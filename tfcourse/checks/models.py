"""Checks for lessons 06 (the output layer and whole models) and 07 (decoding).

Lesson 06: log_softmax / cross_entropy (the output layer and its loss), a GPT assembled from tfcourse
parts, the parameter count of the paper's base model, shift_right (teacher forcing).
Lesson 07: filter_logits and sample_next_token (sampling), beam_search, and greedy generation with a
key/value cache.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import torch
from torch import Tensor, nn

from ..attention import causal_mask
from ..decoding import beam_search as reference_beam_search
from ..decoding import filter_logits as reference_filter_logits
from ..decoding import generate as reference_generate
from ..decoding import length_penalty
from ..decoding import sample_next_token as reference_sample_next_token
from ..models import GPT, GPTConfig, Transformer, TransformerConfig, count_parameters
from ..output import cross_entropy as reference_cross_entropy
from ..output import log_softmax as reference_log_softmax
from .core import (Case, CheckFailed, Exercise, OffLimitsError, build_module, call_learner, compare, composite,
                   isolated, load_state, run)
from .debugging import PlantedBug, debug_exercise

# ----------------------------------------------------------------------------------------------
# What each exercise is, and what it may not call
# ----------------------------------------------------------------------------------------------

LOG_SOFTMAX_OFF_LIMITS = [
    "tfcourse.output.log_softmax",
    "tfcourse.output.softmax",
    "tfcourse.output.cross_entropy",
    "torch.nn.functional.log_softmax",
    "torch.log_softmax",
    "torch.Tensor.log_softmax",
    "torch.special.log_softmax",
    "torch.nn.functional.cross_entropy",
    "torch.nn.functional.nll_loss",
    "torch.logsumexp",
    "torch.Tensor.logsumexp",
    "torch.special.logsumexp",
    "torch.nn.LogSoftmax",
    "torch.nn.CrossEntropyLoss",
    "torch.nn.NLLLoss",
]
LOG_SOFTMAX = Exercise("log_softmax", LOG_SOFTMAX_OFF_LIMITS, "log_softmax matches the reference on {n} inputs, "
                       "+100 and ×1000 included, with no overflow")
CROSS_ENTROPY_OFF_LIMITS = LOG_SOFTMAX_OFF_LIMITS
CROSS_ENTROPY = Exercise("cross_entropy", CROSS_ENTROPY_OFF_LIMITS,
                         "cross_entropy matches the reference on {n} inputs (finite for +100 and ×1000) "
                         "and its gradient is (softmax − one_hot) / N", no_grad=False)
GPT_OFF_LIMITS = [
    "tfcourse.models.GPT",
    "tfcourse.models.Transformer",
    "tfcourse.models.EncoderOnly",
    "torch.nn.Transformer",
    "torch.nn.TransformerEncoder",
    "torch.nn.TransformerEncoderLayer",
    "torch.nn.TransformerDecoderLayer",
]
GPT_EXERCISE = Exercise("assembling a GPT", GPT_OFF_LIMITS, "{name} equals tfcourse.models.GPT (same state_dict "
                        "keys, same logits, causal) on {n} configurations")
PARAMETER_COUNT_OFF_LIMITS = [
    "tfcourse.models.count_parameters",
    "tfcourse.models.Transformer",
    "torch.nn.Transformer",
]
PARAMETER_COUNT = Exercise("counting parameters", PARAMETER_COUNT_OFF_LIMITS,
                           "transformer_parameter_count matches count_parameters(Transformer(config)) on {n} "
                           "configurations, the base model's 63,082,496 included")
SHIFT_RIGHT_OFF_LIMITS: list[str] = []  # there is no library function to borrow
SHIFT_RIGHT = Exercise("shift_right", SHIFT_RIGHT_OFF_LIMITS,
                       "shift_right puts <bos> first and drops the last token on {n} targets")
FILTER_OFF_LIMITS = [
    "tfcourse.decoding.filter_logits",
    "tfcourse.decoding.sample_next_token",
]
FILTER = Exercise("filter_logits", FILTER_OFF_LIMITS,
                  "filter_logits keeps exactly the top-k / top-p tokens on {n} cases")
SAMPLE_OFF_LIMITS = [
    "tfcourse.decoding.sample_next_token",
    "tfcourse.decoding.filter_logits",
    "tfcourse.decoding.generate",
    "tfcourse.decoding.translate",
]
SAMPLE = Exercise("sampling", SAMPLE_OFF_LIMITS, "sample_next_token: greedy at T = 0 and the reference's draws for "
                  "temperature, top-k and top-p on {n} cases")
BEAM_OFF_LIMITS = [
    "tfcourse.decoding.beam_search",
    "tfcourse.decoding.beam_search_gpt",
    "tfcourse.decoding.translate_beam",
]
BEAM = Exercise("beam search", BEAM_OFF_LIMITS, "beam_search equals the reference on {n} searches: beam 1 = greedy, "
                "wider beams at least as likely as greedy, length penalty, <eos>")
CACHED_GENERATION_OFF_LIMITS = [
    "tfcourse.decoding.generate",
    "tfcourse.decoding.sample_next_token",
    "tfcourse.decoding.translate",
    "tfcourse.decoding.beam_search_gpt",
]
CACHED_GENERATION = Exercise("generation with a KV cache", CACHED_GENERATION_OFF_LIMITS,
                             "greedy_generate_cached equals generation without a cache on {n} prompts, "
                             "feeding one token per step")


def _stable_case(function: str, what: str, label: str, args: tuple, expected: Tensor,
                 mistakes: Mapping[str, Tensor]) -> Case:
    """A case of log_softmax or cross_entropy: NaN or inf in the output where the reference is finite is
    named by the unstable formula that gives it. (atol 1e-4: the logits × 1000 give values in the thousands.)"""
    atol, rtol = 1e-4, 1e-5

    def name_overflow(actual: Any) -> None:
        if (not isinstance(actual, Tensor) or actual.shape != expected.shape or not actual.is_floating_point()
                or torch.isfinite(actual.detach()).all() or not torch.isfinite(expected).all()):
            return
        for description, wrong in mistakes.items():  # NaN and ±inf in the same places count as equal here
            if not torch.isfinite(wrong).all() and actual.shape == wrong.shape and torch.allclose(
                    actual.detach().double(), wrong.double(), atol=atol, rtol=rtol, equal_nan=True):
                raise CheckFailed(f"{label}: your output equals {description}")
        raise CheckFailed(f"{label}: your output contains NaN or inf where the reference is finite — "
                          "subtract the maximum before exp() so that the largest exponent is exp(0) = 1")

    return Case(what, args, expected=expected, mistakes=mistakes, label=label, unchanged_what=function,
                inspect=name_overflow, atol=atol, rtol=rtol)


# ----------------------------------------------------------------------------------------------
# log_softmax
# ----------------------------------------------------------------------------------------------


def _log_softmax_mistakes(z: Tensor, dim: int) -> dict[str, Tensor]:
    ndim = z.dim()
    dim = dim % ndim
    exp = torch.exp(z)
    shifted_mean = z - z.mean(dim=dim, keepdim=True)
    stable_probs = torch.softmax(z, dim=dim)
    mistakes = {
        "log(exp(z) / Σ exp(z)) *without* subtracting the maximum: exp overflows to inf for large logits":
            torch.log(exp / exp.sum(dim=dim, keepdim=True)),
        "log-softmax with the *mean* subtracted instead of the max: the largest exponent can still overflow":
            shifted_mean - torch.log(torch.exp(shifted_mean).sum(dim=dim, keepdim=True)),
        "z − log Σ exp(z) *without* subtracting the maximum: exp overflows to inf for large logits":
            z - torch.log(exp.sum(dim=dim, keepdim=True)),
        "log(softmax(z)): tiny probabilities underflow to 0 and log(0) = −inf; stay in log space":
            torch.log(stable_probs),
        "softmax(z): the log is missing": stable_probs,
        "z − max(z) only: the − log Σ exp(z − max) term is missing":
            z - z.amax(dim=dim, keepdim=True),
    }
    for other in range(ndim):
        if other != dim:
            mistakes[f"log-softmax over the wrong axis (dim={other - ndim}, not dim={dim - ndim})"] = \
                reference_log_softmax(z, other)
    return mistakes


@isolated
def check_log_softmax(learner_fn: Callable, hidden: bool = False) -> None:
    """log_softmax(z, dim) = (z − m) − log Σ exp(z − m) with m the maximum along dim."""
    gen = torch.Generator().manual_seed(0)
    base = torch.randn(3, 7, generator=gen)
    inputs: list[tuple[str, Tensor, int]] = [
        ("logits (3, 7)", base, -1),
        ("logits (2, 4, 9)", torch.randn(2, 4, 9, generator=gen), -1),
        ("logits + 100", base + 100, -1),
        ("logits × 1000", base * 1000, -1),
    ]
    if hidden:
        inputs += [
            ("logits (2, 6, 3) with dim=1", torch.randn(2, 6, 3, generator=gen) * 3, 1),
            ("one position, logits (1, 1, 5)", torch.randn(1, 1, 5, generator=gen), -1),
            ("logits − 1000 (every exp underflows)", torch.randn(4, 5, generator=gen) - 1000, -1),
            ("logits × 1000 + 100, float64", (torch.randn(2, 8, generator=gen) * 1000 + 100).double(), -1),
            ("a vocabulary of one, logits (3, 1)", torch.randn(3, 1, generator=gen), -1),
        ]
    cases = [_stable_case("log_softmax", f"log_softmax({name}, dim={dim})", f"log_softmax for {name}, dim={dim}",
                          (z, dim), reference_log_softmax(z, dim), _log_softmax_mistakes(z, dim))
             for name, z, dim in inputs]
    run(LOG_SOFTMAX, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# cross_entropy
# ----------------------------------------------------------------------------------------------


def _cross_entropy_mistakes(logits: Tensor, targets: Tensor) -> dict[str, Tensor]:
    vocab = logits.shape[-1]
    flat_logits, flat_targets = logits.reshape(-1, vocab), targets.reshape(-1, 1)  # (N, V), (N, 1)
    log_probs = reference_log_softmax(flat_logits, -1)  # (N, V)
    nll = -log_probs.gather(1, flat_targets).squeeze(1)  # (N,)
    exp = torch.exp(flat_logits)
    mistakes = {
        "the *sum* over positions instead of the mean": nll.sum(),
        "+log p instead of −log p (the minus sign is missing; a loss must be ≥ 0)": -nll.mean(),
        "the mean over all N·V entries of −one_hot·log p (divided by V once too often)": nll.mean() / vocab,
        "−log p of the *most probable* token instead of the target token": -log_probs.amax(-1).mean(),
        "−p(target): probabilities, not log-probabilities": -torch.exp(-nll).mean(),
        "cross-entropy from a naive softmax without the max subtraction: exp overflows":
            -torch.log(exp / exp.sum(-1, keepdim=True)).gather(1, flat_targets).mean(),
        "cross-entropy from log(softmax(z)): probabilities underflow to 0 and log(0) = −inf":
            -torch.log(torch.softmax(flat_logits, -1)).gather(1, flat_targets).mean(),
    }
    if logits.dim() >= 3 and logits.shape[-2] > 1:
        wrong_axis = reference_log_softmax(logits, -2).reshape(-1, vocab)  # (N, V), normalised over positions
        mistakes["cross-entropy with the log-softmax over the wrong axis (positions, not the vocabulary)"] = \
            -wrong_axis.gather(1, flat_targets).mean()
    if logits.shape[0] > 1:
        wrong_axis = reference_log_softmax(logits, 0).reshape(-1, vocab)  # (N, V), normalised over the batch
        mistakes["cross-entropy with the log-softmax over the wrong axis (the batch, not the vocabulary)"] = \
            -wrong_axis.gather(1, flat_targets).mean()
    return mistakes


def _gradient_case(logits: Tensor, targets: Tensor) -> Case:
    """The loss must carry a gradient, and that gradient of the mean loss is (softmax − one_hot) / N."""
    expected = (torch.softmax(logits, -1) - nn.functional.one_hot(targets, logits.shape[-1])) / targets.numel()
    what = "cross_entropy(logits, targets) with gradients"

    def gradient(learner_fn: Callable) -> Any:
        leaf = logits.clone().requires_grad_(True)
        loss = call_learner(what, learner_fn, leaf, targets)
        if not isinstance(loss, Tensor) or loss.grad_fn is None:
            raise CheckFailed("cross_entropy: the loss has no gradient (grad_fn is None); keep every step a torch "
                              "operation on the logits — no .item(), .detach() or NumPy")
        call_learner("loss.backward()", loss.backward)
        return leaf.grad

    return Case(what, call=gradient, expected=expected, label="the gradient of your loss with respect to the logits")


# Judged with the reference log_softmax in place of the learner's (exercise 1).
@composite(log_softmax=lambda: reference_log_softmax)
@isolated
def check_cross_entropy(learner_fn: Callable, hidden: bool = False) -> None:
    """cross_entropy(logits (..., V), targets (...)) = mean over positions of −log softmax(logits)[target]."""
    gen = torch.Generator().manual_seed(1)
    base = torch.randn(5, 7, generator=gen)
    base_targets = torch.randint(0, 7, (5,), generator=gen)
    inputs: list[tuple[str, Tensor, Tensor]] = [
        ("logits (5, 7)", base, base_targets),
        ("logits (2, 6, 11)", torch.randn(2, 6, 11, generator=gen), torch.randint(0, 11, (2, 6), generator=gen)),
        ("logits + 100", base + 100, base_targets),
        ("logits × 1000", base * 1000, base_targets),
    ]
    if hidden:
        inputs += [
            ("one position, logits (1, 1, 9)", torch.randn(1, 1, 9, generator=gen), torch.tensor([[4]])),
            ("logits (3, 5, 4) × 50", torch.randn(3, 5, 4, generator=gen) * 50,
             torch.randint(0, 4, (3, 5), generator=gen)),
            ("a confident right answer", torch.tensor([[20.0, 0.0, 0.0]]), torch.tensor([0])),
        ]
    cases = [_stable_case("cross_entropy", f"cross_entropy({name}, targets)", f"cross-entropy for {name}",
                          (logits, targets), reference_cross_entropy(logits, targets),
                          _cross_entropy_mistakes(logits, targets))
             for name, logits, targets in inputs]
    gradient = _gradient_case(*inputs[1][1:])  # the (2, 6, 11) logits: positions and a batch
    run(CROSS_ENTROPY, learner_fn, [*cases, gradient], hidden, count=len(cases))


# ----------------------------------------------------------------------------------------------
# A GPT from tfcourse parts
# ----------------------------------------------------------------------------------------------


def _gpt_mistakes(reference: GPT, ids: Tensor) -> dict[str, Tensor]:
    x = reference.embed(ids)  # (B, T, d_model)
    length = ids.shape[1]
    logits = reference(ids)
    return {
        "the GPT *without* the causal mask: every position sees the future":
            reference.output(reference.blocks(x, None)),
        "the GPT with the mask inverted (~causal_mask): True must mean 'may attend'":
            reference.output(reference.blocks(x, ~causal_mask(length))),
        "softmax(logits): return the logits, the softmax belongs to the loss and the sampler":
            torch.softmax(logits, dim=-1),
        "the output layer applied straight to the embeddings: the blocks are skipped": reference.output(x),
    }


def _expect_gpt_structure(module: nn.Module, reference: GPT, n_params: int, cls_name: str) -> None:
    """The reference's parameter names, its weight tying (or not), its number of parameters (n_params)."""
    got, want = set(module.state_dict()), set(reference.state_dict())
    if got != want:
        parts = [f"{kind} {names[:3]}{' …' if len(names) > 3 else ''}"
                 for kind, names in (("missing", sorted(want - got)), ("unexpected", sorted(got - want))) if names]
        raise CheckFailed(f"{cls_name}'s parameters do not match tfcourse.models.GPT's ({'; '.join(parts)}); name "
                          "the parts `embed` (InputEmbedding), `blocks` (Encoder) and `output` (nn.Linear, no bias)")
    tied = module.output.weight is module.embed.token.weight
    if reference.config.tie_weights and not tied:
        raise CheckFailed("weight tying: with config.tie_weights, output.weight must be the *same* Parameter "
                          "as embed.token.weight (assign it: self.output.weight = self.embed.token.weight)")
    if tied and not reference.config.tie_weights:
        raise CheckFailed("config.tie_weights is False, but your output layer shares the embedding matrix")
    if count_parameters(module) != n_params:
        raise CheckFailed(f"{cls_name} has {count_parameters(module):,} trainable parameters, "
                          f"tfcourse.models.GPT has {n_params:,} for the same config")


def _gpt_case(cls_name: str, seed: int, config: GPTConfig, batch: int, length: int) -> Case:
    """One configuration: the learner's GPT, given the reference's weights, gives the reference's logits,
    and its logits before position `cut` do not change when the tokens from `cut` on do."""
    torch.manual_seed(seed)
    reference = GPT(config).eval()
    ids = torch.randint(0, config.vocab_size, (batch, length))
    cut = length // 2
    changed = torch.cat([ids[:, :cut], (ids[:, cut:] + 5) % config.vocab_size], dim=1)  # every token from `cut` on
    with torch.no_grad():
        expected, mistakes = reference(ids), _gpt_mistakes(reference, ids)
    n_params = count_parameters(reference)
    logits_changed = []  # the learner's logits for `changed` (when cut > 0)

    def build_and_run(learner_cls: type) -> Any:
        module = build_module(f"{cls_name}(config)", learner_cls, config)
        _expect_gpt_structure(module, reference, n_params, cls_name)
        load_state(module, reference.state_dict(), cls_name)
        module.eval()
        logits = call_learner(f"forward(ids of shape {tuple(ids.shape)})", module, ids)
        if cut > 0:
            logits_changed.append(call_learner("forward(ids)", module, changed))
        return logits

    def expect_causal(logits: Tensor) -> None:
        # After the logits: a GPT without the mask is named by that mistake, not only as "not causal".
        if logits_changed and not torch.allclose(logits[:, :cut], logits_changed[0][:, :cut], atol=1e-5):
            raise CheckFailed(f"changing tokens {cut}… changed the logits at earlier positions: "
                              "a GPT must not look at future tokens (pass causal_mask(T) to the blocks)")

    return Case(f"{cls_name}(config)", call=build_and_run, expected=expected, mistakes=mistakes,
                label=f"logits for ids of shape {tuple(ids.shape)}", after=expect_causal, unchanged=[ids],
                unchanged_what="forward(ids)", atol=1e-4, rtol=1e-4)


@isolated
def check_gpt(learner_cls: type, hidden: bool = False) -> None:
    """A GPT built from InputEmbedding, Encoder (with a causal mask) and a Linear output layer gives the
    same logits as tfcourse.models.GPT with the same weights, and never looks at future tokens."""
    configs = [
        (GPTConfig.gpt(vocab_size=23, max_len=16, d_model=32, n_heads=4, n_layers=2), (2, 9)),
        (GPTConfig.gpt(vocab_size=23, max_len=16, d_model=32, n_heads=4, n_layers=2), (1, 1)),
    ]
    if hidden:
        configs += [
            (GPTConfig.gpt(vocab_size=17, max_len=12, d_model=16, n_heads=2, n_layers=1, norm_first=False,
                       positional="sinusoidal", tie_weights=False, scale_embedding=True, activation="relu"), (3, 12)),
            (GPTConfig.gpt(vocab_size=31, max_len=20, d_model=24, n_heads=3, n_layers=3, d_ff=40, dropout=0.0), (2, 20)),
        ]
    name = getattr(learner_cls, "__name__", "your class")
    cases = [_gpt_case(name, seed, config, batch, length) for seed, (config, (batch, length)) in enumerate(configs)]
    run(GPT_EXERCISE, learner_cls, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Parameter count of the encoder-decoder Transformer
# ----------------------------------------------------------------------------------------------


def _formula(c: TransformerConfig, bias: bool = True, layer_norm: bool = True, cross: bool = True,
             share_once: bool = True, output_bias: bool = False, pe: bool = False, final_norms: bool = True,
             position_tables: int = 2) -> int:
    """The count by formula, with switches that reproduce the usual mistakes."""
    d, d_ff = c.d_model, c.d_ff if c.d_ff is not None else 4 * c.d_model
    b = 1 if bias else 0
    attention = 4 * (d * d + b * d)
    ffn = d * d_ff + b * d_ff + d_ff * d + b * d
    norm = 2 * d if layer_norm else 0
    encoder_layer = attention + ffn + 2 * norm
    decoder_layer = (2 if cross else 1) * attention + ffn + (3 if cross else 2) * norm
    src = c.src_vocab_size * d
    tgt = 0 if c.share_embeddings and share_once else c.tgt_vocab_size * d
    out = 0 if c.tie_weights and share_once else d * c.tgt_vocab_size
    out += c.tgt_vocab_size if output_bias else 0
    learned = c.positional == "learned"
    # Each input layer (source, target) has its own learned table, even when the token table is shared.
    positions = (position_tables if learned else 2) * c.max_len * d if (learned or pe) else 0
    final = 2 * norm if c.norm_first and final_norms else 0  # pre-LN: one LayerNorm at the end of each stack
    return src + tgt + out + positions + final + c.n_layers * (encoder_layer + decoder_layer)


_TRUE_COUNTS: dict[str, int] = {}  # repr(config) -> count_parameters(Transformer(config)), each built once


def _true_count(config: TransformerConfig) -> int:
    if repr(config) not in _TRUE_COUNTS:
        _TRUE_COUNTS[repr(config)] = count_parameters(Transformer(config))
    return _TRUE_COUNTS[repr(config)]


def _count_mistakes(config: TransformerConfig) -> dict[str, int]:
    """The count each usual mistake gives."""
    return {
        "the count *without* the bias vectors (attention and FFN linears have biases)":
            _formula(config, bias=False),
        "the count *without* the LayerNorm gains and biases (2·d_model per LayerNorm)":
            _formula(config, layer_norm=False),
        "a decoder layer counted like an encoder layer: its cross-attention (and third LayerNorm) is missing":
            _formula(config, cross=False),
        "the shared embedding matrix counted once per use: shared or tied weights are one tensor, count it once":
            _formula(config, share_once=False),
        "an output layer with a bias: this one has none (bias=False)": _formula(config, output_bias=True),
        "the sinusoidal encoding counted as max_len × d_model parameters: it is a fixed buffer, not trained":
            _formula(config, pe=True),
        "the count *without* pre-LN's final LayerNorms (one at the end of each stack)":
            _formula(config, final_norms=False),
        "one learned position table for both input layers: the source and the target each have their own":
            _formula(config, position_tables=1),
        "the count *without* the learned position tables (max_len × d_model each)":
            _formula(config, position_tables=0),
    }


def _count_case(config: TransformerConfig) -> Case:
    """A Python int equal to the true count; else the mistake it equals, or how far off it is."""
    what = (f"parameter count for d_model={config.d_model}, n_layers={config.n_layers}, "
            f"vocab {config.src_vocab_size}/{config.tgt_vocab_size}, share_embeddings={config.share_embeddings}, "
            f"tie_weights={config.tie_weights}, norm_first={config.norm_first}, positional={config.positional!r}")
    true_count, mistakes = _true_count(config), _count_mistakes(config)

    def expect_count(answer: Any) -> None:
        if isinstance(answer, bool) or not isinstance(answer, int):
            raise CheckFailed(f"{what}: return a Python int, got {type(answer).__name__}")
        if answer == true_count:
            return
        for description, wrong in mistakes.items():
            if answer == wrong and wrong != true_count:
                raise CheckFailed(f"{what}: you got {answer:,}, which is {description}")
        raise CheckFailed(f"{what}: expected {true_count:,}, got {answer:,} (off by {answer - true_count:+,})")

    return Case("transformer_parameter_count(config)", (config,), after=expect_count)


@isolated
def check_parameter_count(learner_fn: Callable, hidden: bool = False) -> None:
    """transformer_parameter_count(config) by formula equals count_parameters(Transformer(config))."""
    configs = [
        TransformerConfig.base(),
        TransformerConfig(src_vocab_size=11, tgt_vocab_size=13, d_model=16, n_heads=2, n_layers=1, d_ff=24),
        TransformerConfig(src_vocab_size=11, tgt_vocab_size=13, d_model=16, n_heads=2, n_layers=2, max_len=40,
                          norm_first=True, positional="learned"),
    ]
    if hidden:
        configs += [
            TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=8, n_heads=2, n_layers=1, max_len=7,
                              positional="learned", share_embeddings=True, tie_weights=True),
            TransformerConfig(src_vocab_size=9, tgt_vocab_size=12, d_model=12, n_heads=3, n_layers=3, norm_first=True),
            TransformerConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=16, n_heads=2, n_layers=2,
                              share_embeddings=True),
            TransformerConfig(src_vocab_size=20, tgt_vocab_size=30, d_model=8, n_heads=2, n_layers=3, tie_weights=True),
            TransformerConfig(src_vocab_size=500, tgt_vocab_size=500, d_model=64, n_heads=8, n_layers=6, d_ff=256,
                              share_embeddings=True, tie_weights=True),
        ]
    run(PARAMETER_COUNT, learner_fn, [_count_case(config) for config in configs], hidden)


# ----------------------------------------------------------------------------------------------
# shift_right (teacher forcing)
# ----------------------------------------------------------------------------------------------


def _shift_right_case(tgt: Tensor, bos_id: int) -> Case:
    batch, length = tgt.shape
    bos = torch.full((batch, 1), bos_id, dtype=tgt.dtype)
    mistakes = {
        "the target shifted *left* (that is the label sequence, not the decoder input)":
            torch.cat([tgt[:, 1:], bos], dim=1),
        "<bos> written over the first token instead of shifting the tokens right":
            torch.cat([bos, tgt[:, 1:]], dim=1),
        "torch.roll: the last token wraps round to the front where <bos> belongs": torch.roll(tgt, 1, dims=1),
    }
    if batch > 1:
        mistakes["the tokens shifted along the batch axis (dim 0) instead of time (dim 1)"] = \
            torch.cat([torch.full((1, length), bos_id, dtype=tgt.dtype), tgt[:-1]], dim=0)
    what = f"shift_right(tgt of shape {tuple(tgt.shape)}, bos_id={bos_id})"

    def expect_length_kept(actual: Any) -> None:
        if isinstance(actual, Tensor) and actual.shape == (batch, length + 1):
            raise CheckFailed(f"{what}: your output has T + 1 = {length + 1} positions; the decoder input keeps "
                              "the length T, so drop the last target token (it is never an input)")

    return Case(what, (tgt, bos_id), expected=torch.cat([bos, tgt[:, :-1]], dim=1), mistakes=mistakes,
                inspect=expect_length_kept, unchanged_what="shift_right", atol=0, rtol=0)


@isolated
def check_shift_right(learner_fn: Callable, hidden: bool = False) -> None:
    """shift_right(tgt (B, T), bos_id) = <bos> followed by tgt without its last token, shape (B, T)."""
    gen = torch.Generator().manual_seed(2)
    targets = [(torch.randint(3, 20, (2, 6), generator=gen), 1), (torch.tensor([[7]]), 2)]
    if hidden:
        padded = torch.randint(3, 20, (4, 9), generator=gen)
        padded[1:, 6:] = 0  # padding at the end of the shorter targets
        targets += [(padded, 1), (torch.randint(3, 20, (3, 2), generator=gen), 5),
                    (torch.randint(3, 20, (1, 12), generator=gen), 0)]
    run(SHIFT_RIGHT, learner_fn, [_shift_right_case(tgt, bos_id) for tgt, bos_id in targets], hidden)


# ----------------------------------------------------------------------------------------------
# filter_logits and sample_next_token
# ----------------------------------------------------------------------------------------------


def _filter_mistakes(logits: Tensor, top_k: int | None, top_p: float | None) -> dict[str, Tensor]:
    expected = reference_filter_logits(logits, top_k, top_p)
    vocab = logits.shape[-1]
    mistakes: dict[str, Tensor] = {}
    if top_k is not None and top_k < vocab:
        mistakes["top-k keeping k + 1 tokens (keep the k best: logits < the k-th best are dropped)"] = \
            reference_filter_logits(logits, top_k + 1, top_p)
        if top_k > 1:
            mistakes["top-k keeping k − 1 tokens (keep the k best, the k-th included)"] = \
                reference_filter_logits(logits, top_k - 1, top_p)
    if top_p is not None:
        after_k = reference_filter_logits(logits, top_k, None)
        sorted_logits, order = torch.sort(after_k, dim=-1, descending=True)
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)
        # Two ways to drop the crossing token (cumulative > p, cumulative >= p); name whichever differs.
        variants = [after_k.masked_fill(drop.scatter(-1, order, drop), float("-inf"))
                    for drop in (cumulative > top_p, cumulative >= top_p)]
        crossing = next((v for v in variants if not torch.equal(torch.isinf(v), torch.isinf(expected))), variants[0])
        mistakes["top-p that also drops the token which crosses p: keep it, the kept mass must reach p"] = crossing
        if top_k is not None:
            only_p = reference_filter_logits(logits, None, top_p)
            mistakes["top-p measured on the unfiltered distribution: apply it after top-k, on what top-k kept"] = \
                after_k.masked_fill(torch.isinf(only_p), float("-inf"))
    dropped = torch.isinf(expected)
    mistakes["removed tokens set to 0 instead of −inf: exp(0) = 1, so they could still be sampled"] = \
        logits.masked_fill(dropped, 0.0)
    if logits.shape[0] > 1 and (top_k is None or top_k <= logits.shape[0]):
        mistakes["filtering along the wrong axis (dim 0, the batch) instead of the vocabulary"] = \
            reference_filter_logits(logits.T.contiguous(), top_k, top_p).T
    return mistakes


def _filter_case(logits: Tensor, k: int | None, p: float | None) -> Case:
    what = f"filter_logits(logits of shape {tuple(logits.shape)}, top_k={k}, top_p={p})"
    expected, mistakes = reference_filter_logits(logits, k, p), _filter_mistakes(logits, k, p)

    def expect_filtered(actual: Any) -> None:
        """compare, where 'values differ (largest difference inf)' becomes which tokens were kept."""
        try:
            compare(actual, expected, what, mistakes, atol=1e-6, rtol=1e-6)
        except CheckFailed as failure:
            if "values differ" not in str(failure) or not isinstance(actual, Tensor) or actual.shape != expected.shape:
                raise
            kept, wanted = torch.isfinite(actual), torch.isfinite(expected)
            if not torch.equal(kept, wanted):
                raise CheckFailed(f"{what}: you keep {kept.sum(-1).tolist()} tokens per row, the reference keeps "
                                  f"{wanted.sum(-1).tolist()}") from None
            raise CheckFailed(f"{what}: the right tokens are kept, but their logits changed; only the removed "
                              "ones become −inf") from None

    # Judged here alone: a mismatch says which tokens were kept, not only "values differ".
    return Case(what, (logits, k, p), unchanged_what="filter_logits", after=expect_filtered)


@isolated
def check_filter_logits(learner_fn: Callable, hidden: bool = False) -> None:
    """filter_logits(logits (B, V), top_k, top_p) sets every logit outside the top-k / top-p nucleus to −inf."""
    gen = torch.Generator().manual_seed(3)
    worked = torch.log(torch.tensor([[0.5, 0.3, 0.15, 0.05]]))
    table = torch.randn(4, 8, generator=gen) * 2
    settings: list[tuple[Tensor, int | None, float | None]] = [
        (table, 3, None), (table, None, 0.6), (table, 3, 0.7), (worked, 2, None), (worked, None, 0.75),
        (table, None, None),
    ]
    if hidden:
        wide = torch.randn(4, 50, generator=gen) * 3
        settings += [
            (table, 1, None), (table, 8, None), (table, 100, None), (table, None, 1.0), (table, None, 0.01),
            (wide, 10, 0.9), (wide, None, 0.95), (torch.randn(1, 2, generator=gen), None, 0.3),
        ]
    run(FILTER, learner_fn, [_filter_case(logits, k, p) for logits, k, p in settings], hidden)


_AGREE = 0.99  # same probabilities + same generator give the same draws, up to rounding at the edges


def _draws(logits: Tensor, temperature: float, top_k: int | None, top_p: float | None, seed: int) -> Tensor:
    return reference_sample_next_token(logits, temperature, top_k, top_p, generator=torch.Generator().manual_seed(seed))


def _expect_token_ids(actual: Any, what: str, batch: int) -> None:
    if not isinstance(actual, Tensor):
        raise CheckFailed(f"{what}: expected a torch.Tensor of token ids, got {type(actual).__name__}")
    if actual.shape == (batch, 1):
        raise CheckFailed(f"{what}: return shape (B,) = ({batch},), not (B, 1): squeeze the last axis")


def _greedy_case(what: str, args: tuple) -> Case:
    """Temperature 0: the argmax, token for token; a crash there is most likely a division by T = 0."""
    logits = args[0]

    def call_greedy(learner_fn: Callable) -> Any:
        try:
            return call_learner(what, learner_fn, *args)
        except CheckFailed as failure:
            if isinstance(failure, OffLimitsError) or "not implemented" in str(failure):
                raise
            raise CheckFailed(f"{failure} — temperature 0 means greedy: return logits.argmax(dim=-1) "
                              "before dividing by the temperature") from None

    return Case(what, args, expected=logits.argmax(dim=-1), call=call_greedy, unchanged_what="sample_next_token",
                inspect=lambda actual: _expect_token_ids(actual, what, logits.shape[0]), atol=0, rtol=0)


def _sampling_case(logits: Tensor, temperature: float, k: int | None, p: float | None, seed: int) -> Case:
    what = f"sample_next_token(logits of shape {tuple(logits.shape)}, temperature={temperature}, top_k={k}, top_p={p})"
    args = (logits, temperature, k, p, torch.Generator().manual_seed(seed))
    if temperature == 0:
        return _greedy_case(what, args)
    expected = _draws(logits, temperature, k, p, seed)
    mistakes = {
        "draws with the temperature applied *after* softmax (softmax(z) / T is renormalised by sampling, "
        "so T changes nothing): divide the logits by T": _draws(logits, 1.0, k, p, seed),
        "draws with the logits *multiplied* by T instead of divided by it":
            _draws(logits, 1 / temperature, k, p, seed),
    }
    if k is not None or p is not None:
        mistakes["draws without top-k / top-p filtering"] = _draws(logits, temperature, None, None, seed)
    if p is not None and temperature != 1.0:
        filtered_first = torch.softmax(reference_filter_logits(logits, k, p) / temperature, dim=-1)
        mistakes["draws with top-p applied *before* dividing by T: filter the tempered logits"] = \
            torch.multinomial(filtered_first, 1, generator=torch.Generator().manual_seed(seed)).squeeze(-1)
    allowed = torch.isfinite(reference_filter_logits(logits / temperature, k, p))  # (B, V)
    batch, vocab = logits.shape

    def expect_draws(actual: Any) -> None:
        """Nearly all draws equal the reference's with the same generator; else the mistake they equal, or
        tokens that the filter removes, or the generator not passed on."""
        _expect_token_ids(actual, what, batch)
        if actual.shape != expected.shape or actual.dtype.is_floating_point:
            raise CheckFailed(f"{what}: expected integer token ids of shape ({batch},), "
                              f"got {actual.dtype} of shape {tuple(actual.shape)}")
        if ((actual < 0) | (actual >= vocab)).any():
            raise CheckFailed(f"{what}: token ids must lie in [0, V) = [0, {vocab})")
        agree = (actual == expected).float().mean().item()
        if agree >= _AGREE:
            return
        for description, wrong in mistakes.items():
            if (actual == wrong).float().mean().item() >= _AGREE:
                raise CheckFailed(f"{what}: your samples equal {description}")
        if not allowed[torch.arange(batch), actual.long()].all():
            raise CheckFailed(f"{what}: you sampled tokens that top-k / top-p removes; sample from the filtered "
                              "logits (their −inf entries get probability 0)")
        raise CheckFailed(f"{what}: with the same seed only {agree:.0%} of your draws equal torch.multinomial("
                          "softmax(filter_logits(logits / T, top_k, top_p)), 1, generator=generator); "
                          "did you pass the generator to torch.multinomial?")

    # Judged here alone: draws agree up to rounding at the edges, not exactly.
    return Case(what, args, unchanged_what="sample_next_token", after=expect_draws)


@isolated
def check_sample_next_token(learner_fn: Callable, hidden: bool = False) -> None:
    """sample_next_token(logits (B, V), temperature, top_k, top_p, generator) -> (B,) token ids.

    Temperature 0 is greedy; otherwise divide by T, filter, softmax, and draw with
    torch.multinomial(probs, 1, generator=generator). Same seed, same probabilities: same draws.
    """
    gen = torch.Generator().manual_seed(4)
    rows = torch.randn(4, 10, generator=gen) * 1.5
    many = rows.repeat(400, 1)  # (1600, 10): many draws from four distributions in one call
    settings: list[tuple[Tensor, float, int | None, float | None]] = [
        (rows, 0.0, None, None), (many, 1.0, None, None), (many, 0.5, 3, None), (many, 2.0, None, 0.7),
    ]
    if hidden:
        settings += [
            (many, 0.7, 5, 0.8), (many, 1.5, 2, None),
            (torch.randn(1, 6, generator=gen).repeat(500, 1), 1.0, None, 0.5),
            (torch.randn(3, 7, generator=gen), 0.0, 2, 0.5),
        ]
    cases = [_sampling_case(logits, temperature, k, p, seed=100 + i)
             for i, (logits, temperature, k, p) in enumerate(settings)]
    run(SAMPLE, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# beam search
# ----------------------------------------------------------------------------------------------


def _beam_variant(log_probs_fn: Callable[[Tensor], Tensor], prefix: Tensor, max_new_tokens: int, beam_size: int,
                  alpha: float, eos_id: int | None, accumulate: bool = True) -> Tensor:
    """The reference algorithm, with a switch for the usual mistake of ranking by the last token only."""
    beams, scores = prefix[None, :], torch.zeros(1)
    finished: list[tuple[float, Tensor]] = []

    def penalty(seq_len: int) -> float:
        return length_penalty(seq_len - prefix.shape[0], alpha)

    for _ in range(max_new_tokens):
        log_probs = log_probs_fn(beams)
        vocab = log_probs.shape[-1]
        candidates = ((scores[:, None] if accumulate else 0.0) + log_probs).reshape(-1)  # (beams · V,)
        top_scores, top_index = candidates.topk(min(beam_size, candidates.numel()))
        beam_index, token = top_index // vocab, top_index % vocab
        if accumulate:
            new_scores = top_scores
        else:  # ranked by the last token only, but the total is still what a hypothesis is worth
            new_scores = scores[beam_index] + top_scores
        beams = torch.cat([beams[beam_index], token[:, None]], dim=1)
        scores = new_scores
        if eos_id is not None:
            ended = token == eos_id
            for seq, score in zip(beams[ended], scores[ended]):
                finished.append((score.item() / penalty(seq.shape[0]), seq))
            beams, scores = beams[~ended], scores[~ended]
            if len(finished) >= beam_size or beams.shape[0] == 0:
                break
    survivors = [(s.item() / penalty(b.shape[0]), b) for s, b in zip(scores, beams)]
    return max(finished + survivors, key=lambda pair: pair[0])[1]


def _bigram_fn(vocab: int, seed: int, eos_id: int | None = None, eos_bias: float = 0.0) -> Callable[[Tensor], Tensor]:
    """A tiny 'language model': the next token's log-probabilities depend on the last token only."""
    gen = torch.Generator().manual_seed(seed)
    scores = torch.randn(vocab, vocab, generator=gen) * 2.0
    if eos_id is not None:
        scores[:, eos_id] += eos_bias
    table = reference_log_softmax(scores, -1)  # (V, V)

    def log_probs_fn(beams: Tensor) -> Tensor:
        return table[beams[:, -1]]  # (beams, V)

    return log_probs_fn


def _gpt_fn(seed: int) -> Callable[[Tensor], Tensor]:
    torch.manual_seed(seed)
    model = GPT(GPTConfig.gpt(vocab_size=13, max_len=16, d_model=16, n_heads=2, n_layers=1, dropout=0.0)).eval()

    @torch.no_grad()
    def log_probs_fn(beams: Tensor) -> Tensor:
        return reference_log_softmax(model(beams)[:, -1], -1)  # (beams, V)

    return log_probs_fn


def _greedy(log_probs_fn: Callable[[Tensor], Tensor], prefix: Tensor, max_new_tokens: int,
            eos_id: int | None) -> Tensor:
    seq = prefix
    for _ in range(max_new_tokens):
        token = log_probs_fn(seq[None, :])[0].argmax()
        seq = torch.cat([seq, token[None]])
        if eos_id is not None and token.item() == eos_id:
            break
    return seq


def _sequence_log_prob(log_probs_fn: Callable[[Tensor], Tensor], seq: Tensor, prefix_len: int) -> float:
    return sum(log_probs_fn(seq[None, :t])[0, seq[t]].item() for t in range(prefix_len, seq.shape[0]))


def _beam_case(name: str, fn: Callable[[Tensor], Tensor], prefix: Tensor, n: int, beam: int, alpha: float,
               eos: int | None) -> Case:
    """One search: the reference's sequence, the usual mistakes' and greedy decoding's, found first."""
    what = f"beam_search on the {name}"
    with torch.no_grad():
        expected = reference_beam_search(fn, prefix, n, beam, alpha, eos)
        mistakes = {
            "beam search *without* the length penalty (alpha ignored): divide each finished score by "
            "length_penalty(new tokens, alpha)": reference_beam_search(fn, prefix, n, beam, 0.0, eos),
            "beam search that ranks candidates by the last token's log-probability only (greedy in disguise): "
            "rank by the running total, beam score + log p(token)":
                _beam_variant(fn, prefix, n, beam, alpha, eos, accumulate=False),
        }
        if eos is not None:
            mistakes["beam search that keeps extending hypotheses after <eos>: set them aside as finished"] = \
                reference_beam_search(fn, prefix, n, beam, alpha, None)
        greedy = _greedy(fn, prefix, n, eos)
    # Without a length penalty or <eos>, a wider beam can only find a sequence at least as likely as greedy's.
    must_beat_greedy = alpha == 0.0 and eos is None and beam > 1
    greedy_log_prob = _sequence_log_prob(fn, greedy, prefix.shape[0]) if must_beat_greedy else None

    def expect_sequence(actual: Any) -> None:
        if not isinstance(actual, Tensor) or actual.dim() != 1:
            got = f"shape {tuple(actual.shape)}" if isinstance(actual, Tensor) else type(actual).__name__
            raise CheckFailed(f"{what}: return one sequence, a 1-D tensor (prefix followed by the new tokens), "
                              f"got {got}")
        if actual.shape[0] < prefix.shape[0] or not torch.equal(actual[: prefix.shape[0]], prefix):
            raise CheckFailed(f"{what}: the result must start with the prefix {prefix.tolist()}, got {actual.tolist()}")
        if beam == 1 and not torch.equal(actual, greedy):
            raise CheckFailed(f"{what}: with beam_size=1 beam search must equal greedy decoding "
                              f"({greedy.tolist()}), got {actual.tolist()}")
        if must_beat_greedy and _sequence_log_prob(fn, actual, prefix.shape[0]) < greedy_log_prob - 1e-5:
            raise CheckFailed(f"{what}: your sequence {actual.tolist()} is less likely than greedy's "
                              f"{greedy.tolist()}; keep the beam_size best candidates over *all* beams at each step")
        if torch.equal(actual, expected):
            return
        for description, wrong in mistakes.items():
            if torch.equal(actual, wrong):
                raise CheckFailed(f"{what}: your sequence {actual.tolist()} equals {description}")
        raise CheckFailed(f"{what}: expected {expected.tolist()}, got {actual.tolist()}")

    # Judged by the inspector alone: sequences are equal or not, and the message lists their tokens.
    return Case(what, (fn, prefix, n, beam, alpha, eos), inspect=expect_sequence, unchanged_what="beam_search")


@isolated
def check_beam_search(learner_fn: Callable, hidden: bool = False) -> None:
    """beam_search(log_probs_fn, prefix, max_new_tokens, beam_size, alpha, eos_id) equals the reference:
    beam_size 1 is greedy, and a wider beam finds a sequence at least as likely as greedy."""
    searches = [  # (name, log_probs_fn, prefix, max_new_tokens, beam_size, alpha, eos_id)
        ("bigram model, beam 1", _bigram_fn(6, 0), torch.tensor([0]), 5, 1, 0.6, None),
        ("bigram model, beam 3", _bigram_fn(6, 7), torch.tensor([0]), 5, 3, 0.0, None),
        ("bigram model with <eos>, beam 4, alpha 1", _bigram_fn(8, 46, eos_id=1, eos_bias=1.0),
         torch.tensor([0]), 8, 4, 1.0, 1),
    ]
    if hidden:
        searches += [
            ("tiny GPT, beam 5", _gpt_fn(7), torch.tensor([3, 1, 4]), 6, 5, 0.0, None),
            ("tiny GPT with <eos>, beam 1", _gpt_fn(8), torch.tensor([2]), 8, 1, 0.6, 5),
            ("bigram model, beam wider than the vocabulary", _bigram_fn(4, 3), torch.tensor([1, 2]), 3, 9, 0.6, None),
            ("bigram model, one new token", _bigram_fn(6, 4), torch.tensor([0]), 1, 3, 0.6, None),
            ("bigram model with <eos>, beam 3, alpha 0.6", _bigram_fn(8, 95, eos_id=1, eos_bias=2.0),
             torch.tensor([0, 3]), 8, 3, 0.6, 1),
        ]
    run(BEAM, learner_fn, [_beam_case(*search) for search in searches], hidden)


# ----------------------------------------------------------------------------------------------
# Greedy generation with a key/value cache
# ----------------------------------------------------------------------------------------------


def _cached_generation_case(model: GPT, prompt: Tensor, n: int) -> Case:
    """One prompt: the tokens of greedy generation without a cache, and the model's calls recorded."""
    expected = reference_generate(model, prompt, n, temperature=0.0, use_cache=False)
    what = f"greedy_generate_cached(model, prompt of shape {tuple(prompt.shape)}, max_new_tokens={n})"
    calls: list[tuple[tuple[int, ...], bool, bool]] = []  # each call's (ids shape, caches passed?, training?)

    def diagnose_calls() -> None:
        if calls and not all(cached for _, cached, _ in calls):
            raise CheckFailed(f"{what}: the model was called without caches; make them once with "
                              "model.make_caches() and pass them on every call: model(new_ids, caches)")
        if calls and calls[0][0][1:] != (prompt.shape[1],):
            raise CheckFailed(f"{what}: the first call must read the whole prompt, shape {tuple(prompt.shape)}; "
                              f"it got {calls[0][0]}")
        for step, (shape, _, _) in enumerate(calls[1:], start=2):
            if shape[1:] != (1,):
                raise CheckFailed(f"{what}: call {step} fed the model {shape[1] if len(shape) > 1 else '?'} "
                                  "tokens; with the cache, feed only the newest token, shape (B, 1): the keys and "
                                  "values of the earlier tokens are already in the cache")

    def record(module: nn.Module, args: tuple, kwargs: dict) -> None:
        ids = args[0] if args else kwargs.get("ids")
        caches = args[1] if len(args) > 1 else kwargs.get("caches")
        calls.append((tuple(ids.shape) if isinstance(ids, Tensor) else (), caches is not None, module.training))

    def generate_recorded(learner_fn: Callable) -> Any:
        model.train()  # as a model comes out of training: dropout on
        handle = model.register_forward_pre_hook(record, with_kwargs=True)
        try:
            return call_learner(what, learner_fn, model, prompt, n)
        except CheckFailed as failure:
            diagnose_calls()  # a crash is often the symptom of feeding too much
            raise failure from None
        finally:
            handle.remove()

    def expect_cached_calls(actual: Any) -> None:
        diagnose_calls()
        if isinstance(actual, Tensor) and actual.shape == (prompt.shape[0], n):
            raise CheckFailed(f"{what}: return the prompt followed by the new tokens, shape (B, T + n) = "
                              f"{tuple(expected.shape)}, not the new tokens alone")
        if len(calls) != n:
            raise CheckFailed(f"{what}: expected {n} calls to the model (one per new token), got {len(calls)}")
        dropout_on = any(training for _, _, training in calls)
        if dropout_on and not (isinstance(actual, Tensor) and torch.equal(actual, expected)):
            raise CheckFailed(f"{what}: the model was still in training mode, so dropout changed the tokens; "
                              "call model.eval() before generating")

    return Case(what, call=generate_recorded, inspect=expect_cached_calls, expected=expected, unchanged=[prompt],
                unchanged_what="greedy_generate_cached", atol=0, rtol=0)


@isolated
def check_cached_generation(learner_fn: Callable, hidden: bool = False) -> None:
    """greedy_generate_cached(model, ids, max_new_tokens) gives exactly the tokens of greedy generation
    without a cache, feeding the model the prompt once and then one token per step."""
    prompts = [((2, 4), 8), ((1, 1), 1)]
    if hidden:
        prompts += [((3, 5), 19), ((1, 23), 1), ((4, 2), 6)]  # fills the context window exactly; a long prompt
    torch.manual_seed(11)
    model = GPT(GPTConfig.gpt(vocab_size=23, max_len=24, d_model=32, n_heads=4, n_layers=2, dropout=0.1))
    gen = torch.Generator().manual_seed(5)
    cases = [_cached_generation_case(model, torch.randint(0, 23, (batch, length), generator=gen), n)
             for (batch, length), n in prompts]
    run(CACHED_GENERATION, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Debug exercises: a colleague's code with one planted mistake (lesson 06: cross-entropy; lesson 07: top-p)
# ----------------------------------------------------------------------------------------------

COLLEAGUES_CROSS_ENTROPY = PlantedBug(
    "06_models", "cross_entropy_debug_impl", "colleagues_cross_entropy",
    source='''def colleagues_cross_entropy(logits: Tensor, targets: Tensor) -> Tensor:
    """A colleague's cross-entropy, called as yours: logits (..., V), targets (...) -> the mean loss."""
    # Log-softmax over the vocabulary, with the max subtracted so that exp never overflows.
    shifted = logits - logits.amax(dim=1, keepdim=True)  # same shape as logits
    log_probs = shifted - torch.log(torch.exp(shifted).sum(dim=1, keepdim=True))  # same shape as logits
    vocab = logits.shape[-1]
    picked = log_probs.reshape(-1, vocab).gather(1, targets.reshape(-1, 1))  # (N, 1): log p(target)
    return -picked.mean()
''',
    mistake="the log-softmax over the wrong axis (positions, not the vocabulary)",
    coarse_hint="give it uniform logits of shape (2, 4, 10): an untrained model should score ln 10 = 2.303. "
                "Which length does the number it gives belong to?")
check_cross_entropy_debug = debug_exercise(check_cross_entropy, COLLEAGUES_CROSS_ENTROPY)

COLLEAGUES_FILTER_LOGITS = PlantedBug(
    "07_decoding", "filter_debug_impl", "colleagues_filter_logits",
    source='''def colleagues_filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """A colleague's filter_logits, called as yours: logits (B, V) -> the same shape, removed tokens at -inf."""
    if top_k is not None:
        kth_best = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth_best, float("-inf"))  # exp(-inf) = 0: never sampled
    if top_p is not None:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V), best first
        cumulative = torch.softmax(sorted_logits, dim=-1).cumsum(dim=-1)  # (B, V): the mass up to each token
        drop_sorted = cumulative > top_p  # (B, V): the tokens outside the nucleus
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits
''',
    mistake="top-p that also drops the token which crosses p",
    coarse_hint="run it on section 3's worked example, p = (0.5, 0.3, 0.15, 0.05) with top_p=0.75: which "
                "tokens must stay, and which stay here?")
check_filter_debug = debug_exercise(check_filter_logits, COLLEAGUES_FILTER_LOGITS)

__all__ = [
    "check_log_softmax", "check_cross_entropy", "check_gpt", "check_parameter_count", "check_shift_right",
    "check_filter_logits", "check_sample_next_token", "check_beam_search", "check_cached_generation",
    "check_cross_entropy_debug", "check_filter_debug",
]
