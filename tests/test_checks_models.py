"""The checks of lessons 06 and 07 (tfcourse.checks.models): a correct answer passes; each usual mistake
is named; the answer itself is off-limits."""

from __future__ import annotations

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tfcourse.decoding
import tfcourse.models
import tfcourse.output
from tfcourse.attention import causal_mask
from tfcourse.blocks import Encoder
from tfcourse.checks.core import CheckFailed, OffLimitsError
from tfcourse.checks.models import (check_beam_search, check_cached_generation, check_cross_entropy,
                                    check_filter_logits, check_gpt, check_log_softmax, check_parameter_count,
                                    check_sample_next_token, check_shift_right)
from tfcourse.decoding import length_penalty
from tfcourse.embedding import InputEmbedding
from check_helpers import assert_passes, stub

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is fastest and steadiest


# ----------------------------------------------------------------------------------------------
# log_softmax
# ----------------------------------------------------------------------------------------------


def log_softmax(logits, dim=-1):
    shifted = logits - logits.amax(dim=dim, keepdim=True)
    return shifted - torch.log(torch.exp(shifted).sum(dim=dim, keepdim=True))


def test_log_softmax_passes(capfd):
    assert_passes(check_log_softmax, log_softmax, capfd)


def mean_shifted(z, dim=-1):
    shifted = z - z.mean(dim=dim, keepdim=True)
    return shifted - torch.log(torch.exp(shifted).sum(dim=dim, keepdim=True))


LOG_SOFTMAX_MISTAKES = {
    r"log\(exp\(z\) / Σ exp\(z\)\) without":
        lambda z, dim=-1: torch.log(torch.exp(z) / torch.exp(z).sum(dim, keepdim=True)),
    r"z − log Σ exp\(z\) without": lambda z, dim=-1: z - torch.log(torch.exp(z).sum(dim, keepdim=True)),
    r"mean subtracted": lambda z, dim=-1: mean_shifted(z, dim),
    r"log\(softmax\(z\)\)": lambda z, dim=-1: torch.log(torch.softmax(z, dim)),
    r"softmax\(z\): the log is missing": lambda z, dim=-1: torch.softmax(z, dim),
    r"z − max\(z\) only": lambda z, dim=-1: z - z.amax(dim, keepdim=True),
    "wrong axis": lambda z, dim=-1: log_softmax(z, 0),
}


@pytest.mark.parametrize("message", LOG_SOFTMAX_MISTAKES)
def test_log_softmax_mistakes_are_named(message):
    with pytest.raises(CheckFailed, match=message):
        check_log_softmax(LOG_SOFTMAX_MISTAKES[message])


def test_log_softmax_in_place_and_off_limits():
    def in_place(z, dim=-1):
        z.sub_(z.amax(dim, keepdim=True))
        return z - torch.log(torch.exp(z).sum(dim, keepdim=True))

    with pytest.raises(CheckFailed, match="in place"):
        check_log_softmax(in_place)
    with pytest.raises(OffLimitsError, match="tfcourse.output.log_softmax"):
        check_log_softmax(lambda z, dim=-1: tfcourse.output.log_softmax(z, dim))
    with pytest.raises(OffLimitsError, match="torch.nn.functional.log_softmax"):
        check_log_softmax(lambda z, dim=-1: F.log_softmax(z, dim))
    with pytest.raises(OffLimitsError, match="torch.logsumexp"):
        check_log_softmax(lambda z, dim=-1: z - torch.logsumexp(z, dim, keepdim=True))
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_log_softmax(stub)


# ----------------------------------------------------------------------------------------------
# cross_entropy
# ----------------------------------------------------------------------------------------------


def cross_entropy(logits, targets):
    log_probs = log_softmax(logits, dim=-1).reshape(-1, logits.shape[-1])  # (N, V)
    return -log_probs.gather(1, targets.reshape(-1, 1)).mean()


def test_cross_entropy_passes(capfd):
    assert_passes(check_cross_entropy, cross_entropy, capfd)


def _nll(log_probs, targets):
    return -log_probs.reshape(-1, log_probs.shape[-1]).gather(1, targets.reshape(-1, 1))


CROSS_ENTROPY_MISTAKES = {
    r"sum over positions": lambda z, t: _nll(log_softmax(z), t).sum(),
    "minus sign is missing": lambda z, t: -_nll(log_softmax(z), t).mean(),
    "divided by V": lambda z, t: _nll(log_softmax(z), t).sum() / z.numel(),
    r"most probable": lambda z, t: -log_softmax(z).amax(-1).mean(),
    "probabilities, not log-probabilities": lambda z, t: -torch.exp(-_nll(log_softmax(z), t)).mean(),
    "naive softmax": lambda z, t: _nll(torch.log(torch.exp(z) / torch.exp(z).sum(-1, keepdim=True)), t).mean(),
    r"log\(softmax\(z\)\)": lambda z, t: _nll(torch.log(torch.softmax(z, -1)), t).mean(),
    r"wrong axis \(positions": lambda z, t: _nll(log_softmax(z, -2 if z.dim() == 3 else -1), t).mean(),
    r"wrong axis \(the batch": lambda z, t: _nll(log_softmax(z, 0), t).mean(),
}


@pytest.mark.parametrize("message", CROSS_ENTROPY_MISTAKES)
def test_cross_entropy_mistakes_are_named(message):
    with pytest.raises(CheckFailed, match=message):
        check_cross_entropy(CROSS_ENTROPY_MISTAKES[message])


def test_cross_entropy_gradient_off_limits_and_stub():
    with pytest.raises(CheckFailed, match="no gradient"):
        check_cross_entropy(lambda z, t: cross_entropy(z.detach(), t))
    with pytest.raises(OffLimitsError, match="tfcourse.output.cross_entropy"):
        check_cross_entropy(lambda z, t: tfcourse.output.cross_entropy(z, t))
    with pytest.raises(OffLimitsError, match="torch.nn.functional.cross_entropy"):
        check_cross_entropy(lambda z, t: F.cross_entropy(z.reshape(-1, z.shape[-1]), t.reshape(-1)))
    with pytest.raises(OffLimitsError, match="torch.nn.CrossEntropyLoss"):
        check_cross_entropy(lambda z, t: nn.CrossEntropyLoss()(z.reshape(-1, z.shape[-1]), t.reshape(-1)))
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_cross_entropy(stub)


# ----------------------------------------------------------------------------------------------
# GPT
# ----------------------------------------------------------------------------------------------


class MiniGPT(nn.Module):
    def __init__(self, config, mask="causal", softmax=False, tie=True, skip_blocks=False, bias=False):
        super().__init__()
        c = config
        self.embed = InputEmbedding(c.vocab_size, c.d_model, c.max_len, c.dropout, positional=c.positional,
                                    scale=c.scale_embedding)
        self.blocks = Encoder(c.n_layers, c.d_model, c.n_heads, c.d_ff, dropout=c.dropout, norm_first=c.norm_first, activation=c.activation)
        self.output = nn.Linear(c.d_model, c.vocab_size, bias=bias)
        if c.tie_weights and tie:
            self.output.weight = self.embed.token.weight
        self.mask, self.softmax, self.skip_blocks = mask, softmax, skip_blocks

    def forward(self, ids):
        length = ids.shape[1]
        mask = {"causal": causal_mask(length), "none": None, "inverted": ~causal_mask(length)}[self.mask]
        x = self.embed(ids)
        logits = self.output(x if self.skip_blocks else self.blocks(x, mask))
        return torch.softmax(logits, -1) if self.softmax else logits


def variant(**kwargs):
    class Variant(MiniGPT):
        def __init__(self, config):
            super().__init__(config, **kwargs)

    return Variant


def test_gpt_passes(capfd):
    assert_passes(check_gpt, MiniGPT, capfd)


@pytest.mark.parametrize("kwargs, message", [
    ({"mask": "none"}, r"without the causal mask"),
    ({"mask": "inverted"}, "mask inverted"),
    ({"softmax": True}, r"softmax\(logits\)"),
    ({"skip_blocks": True}, "blocks are skipped"),
    ({"tie": False}, "weight tying"),
    ({"bias": True}, "do not match tfcourse.models.GPT's"),
])
def test_gpt_mistakes_are_named(kwargs, message):
    with pytest.raises(CheckFailed, match=message):
        check_gpt(variant(**kwargs))


def test_gpt_off_limits_and_stub():
    class Borrowed(nn.Module):
        def __init__(self, config):
            super().__init__()
            self.inner = tfcourse.models.GPT(config)

    with pytest.raises(OffLimitsError, match="tfcourse.models.GPT"):
        check_gpt(Borrowed)

    class TorchBlocks(MiniGPT):
        def __init__(self, config):
            super().__init__(config)
            self.extra = nn.TransformerEncoderLayer(config.d_model, config.n_heads)

    with pytest.raises(OffLimitsError, match="torch.nn.TransformerEncoderLayer"):
        check_gpt(TorchBlocks)

    class Stub(nn.Module):
        def __init__(self, config):
            raise NotImplementedError()

    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_gpt(Stub)


def test_gpt_not_a_module_and_the_class_name_in_the_line(capfd):
    with pytest.raises(CheckFailed, match="must be an nn.Module subclass"):
        check_gpt(lambda config: "a GPT")
    braces = type("GPT{n}", (MiniGPT,), {})  # the ✔ line is formatted: a name's braces stay as they are
    check_gpt(braces)
    assert capfd.readouterr().out.startswith("✔ GPT{n} equals tfcourse.models.GPT")


# ----------------------------------------------------------------------------------------------
# parameter count
# ----------------------------------------------------------------------------------------------

# The configurations check_parameter_count uses (the first three visible, all eight in the hidden run),
# each with its count worked out by hand, so that the check's formula is tested against fixed numbers,
# not against a second copy of itself. Per layer: attention 4·(d² + d) (W_Q, W_K, W_V, W_O with biases),
# FFN d·d_ff + d_ff + d_ff·d + d, LayerNorm 2·d; an encoder layer is attention + FFN + 2 LayerNorms, a
# decoder layer 2 attentions + FFN + 3 LayerNorms; a table (token, output or learned position) shared or
# tied is counted once; sinusoidal encodings are buffers; pre-LN adds one LayerNorm at each stack's end.
PARAMETER_COUNT_CONFIGS = {
    "base": tfcourse.models.TransformerConfig.base(),
    "small": tfcourse.models.TransformerConfig(src_vocab_size=11, tgt_vocab_size=13, d_model=16, n_heads=2,
                                               n_layers=1, d_ff=24),
    "pre-LN learned": tfcourse.models.TransformerConfig(src_vocab_size=11, tgt_vocab_size=13, d_model=16,
                                                        n_heads=2, n_layers=2, max_len=40, norm_first=True,
                                                        positional="learned"),
    # the hidden run's
    "tiny shared learned": tfcourse.models.TransformerConfig(src_vocab_size=30, tgt_vocab_size=30, d_model=8,
                                                             n_heads=2, n_layers=1, max_len=7, positional="learned",
                                                             share_embeddings=True, tie_weights=True),
    "pre-LN 3 layers": tfcourse.models.TransformerConfig(src_vocab_size=9, tgt_vocab_size=12, d_model=12,
                                                         n_heads=3, n_layers=3, norm_first=True),
    "shared, untied": tfcourse.models.TransformerConfig(src_vocab_size=20, tgt_vocab_size=20, d_model=16,
                                                        n_heads=2, n_layers=2, share_embeddings=True),
    "tied, unshared": tfcourse.models.TransformerConfig(src_vocab_size=20, tgt_vocab_size=30, d_model=8,
                                                        n_heads=2, n_layers=3, tie_weights=True),
    "wide shared": tfcourse.models.TransformerConfig(src_vocab_size=500, tgt_vocab_size=500, d_model=64,
                                                     n_heads=8, n_layers=6, d_ff=256, share_embeddings=True,
                                                     tie_weights=True),
}
PARAMETER_COUNTS = {
    # d 512, d_ff 2048, 6 layers, vocab 37,000 shared three ways, sinusoidal, post-LN:
    # attention 4·(512² + 512) = 1,050,624; FFN 512·2048 + 2048 + 2048·512 + 512 = 2,099,712; LayerNorm 1,024;
    # encoder layer 1,050,624 + 2,099,712 + 2·1,024 = 3,152,384; decoder layer 2·1,050,624 + 2,099,712 + 3·1,024
    # = 4,204,032; one table 37,000·512 = 18,944,000: 18,944,000 + 6·(3,152,384 + 4,204,032) = 63,082,496
    "base": 63_082_496,
    # d 16, d_ff 24, 1 layer, vocab 11/13, none shared: attention 4·(256 + 16) = 1,088; FFN 384 + 24 + 384 + 16
    # = 808; LayerNorm 32; encoder 1,088 + 808 + 64 = 1,960; decoder 2,176 + 808 + 96 = 3,080;
    # tables 11·16 + 13·16 + 16·13 = 592: 592 + 1,960 + 3,080 = 5,632
    "small": 5_632,
    # d 16, d_ff 64, 2 layers, vocab 11/13, learned positions (max_len 40), pre-LN: attention 1,088;
    # FFN 1,024 + 64 + 1,024 + 16 = 2,128; encoder 1,088 + 2,128 + 64 = 3,280; decoder 2,176 + 2,128 + 96
    # = 4,400; tables 592; position tables 2·40·16 = 1,280; final LayerNorms 2·32 = 64:
    # 592 + 1,280 + 64 + 2·(3,280 + 4,400) = 17,296
    "pre-LN learned": 17_296,
    # d 8, d_ff 32, 1 layer, vocab 30 shared and tied, learned positions (max_len 7): attention 4·(64 + 8) = 288;
    # FFN 256 + 32 + 256 + 8 = 552; encoder 288 + 552 + 32 = 872; decoder 576 + 552 + 48 = 1,176;
    # one table 30·8 = 240; position tables 2·7·8 = 112: 240 + 112 + 872 + 1,176 = 2,400
    "tiny shared learned": 2_400,
    # d 12, d_ff 48, 3 layers, vocab 9/12, pre-LN: attention 4·(144 + 12) = 624; FFN 576 + 48 + 576 + 12 = 1,212;
    # encoder 624 + 1,212 + 48 = 1,884; decoder 1,248 + 1,212 + 72 = 2,532; tables 9·12 + 12·12 + 12·12 = 396;
    # final LayerNorms 2·24 = 48: 396 + 48 + 3·(1,884 + 2,532) = 13,692
    "pre-LN 3 layers": 13_692,
    # d 16, d_ff 64, 2 layers, vocab 20 shared, output untied: layers 2·(3,280 + 4,400) = 15,360;
    # one input table 20·16 = 320, output 16·20 = 320: 640 + 15,360 = 16,000
    "shared, untied": 16_000,
    # d 8, d_ff 32, 3 layers, vocab 20/30, output tied to the target table: layers 3·(872 + 1,176) = 6,144;
    # tables 20·8 + 30·8 = 400: 400 + 6,144 = 6,544
    "tied, unshared": 6_544,
    # d 64, d_ff 256, 6 layers, vocab 500 shared three ways: attention 4·(4,096 + 64) = 16,640;
    # FFN 16,384 + 256 + 16,384 + 64 = 33,088; encoder 16,640 + 33,088 + 256 = 49,984;
    # decoder 33,280 + 33,088 + 384 = 66,752; one table 500·64 = 32,000: 32,000 + 6·(49,984 + 66,752) = 732,416
    "wide shared": 732_416,
}
# Each usual mistake: the first visible configuration where it changes the count, and the count it gives there.
PARAMETER_COUNT_MISTAKES = {
    # base without biases: 6·(encoder 4·512 + 2,048 + 512 + decoder 8·512 + 2,048 + 512) = 6·11,264 = 67,584 fewer
    r"without the bias": ("base", 63_082_496 - 67_584),  # 63,014,912
    # base without its 5 LayerNorms per layer pair: 6·5·1,024 = 30,720 fewer
    "LayerNorm": ("base", 63_082_496 - 30_720),  # 63,051,776
    # base's decoder layers without cross-attention and its LayerNorm: 6·(1,050,624 + 1,024) = 6,309,888 fewer
    "cross-attention": ("base", 63_082_496 - 6_309_888),  # 56,772,608
    # base's table counted for source, target and output: 2·18,944,000 = 37,888,000 more
    "count it once": ("base", 63_082_496 + 37_888_000),  # 100,970,496
    # base's output layer with a bias of 37,000
    "output layer with a bias": ("base", 63_082_496 + 37_000),  # 63,119,496
    # base's two sinusoidal encodings counted as 512·512 parameters each: 524,288 more
    "fixed buffer": ("base", 63_082_496 + 524_288),  # 63,606,784
    # pre-LN without its 2 final LayerNorms: 2·32 = 64 fewer
    "final LayerNorms": ("pre-LN learned", 17_296 - 64),  # 17,232
    # one learned position table, not two: 40·16 = 640 fewer
    "each have their own": ("pre-LN learned", 17_296 - 640),  # 16,656
    # no learned position tables: 2·40·16 = 1,280 fewer
    r"without the learned position tables": ("pre-LN learned", 17_296 - 1_280),  # 16,016
}


def _config_name(config):
    for name, known in PARAMETER_COUNT_CONFIGS.items():
        if config == known:
            return name
    raise AssertionError(f"the check uses a configuration this test has no fixed count for: {config!r}")


def parameter_count(config):
    """A learner who counts every configuration right: the fixed count of each."""
    return PARAMETER_COUNTS[_config_name(config)]


def test_parameter_count_passes(capfd):
    assert_passes(check_parameter_count, parameter_count, capfd)


@pytest.mark.parametrize("message", PARAMETER_COUNT_MISTAKES)
def test_parameter_count_mistakes_are_named(message):
    shows_in, mistaken = PARAMETER_COUNT_MISTAKES[message]

    def with_the_mistake(config):  # right where the mistake changes nothing before, wrong where it shows
        name = _config_name(config)
        return mistaken if name == shows_in else PARAMETER_COUNTS[name]

    with pytest.raises(CheckFailed, match=message) as failed:
        check_parameter_count(with_the_mistake)
    assert f"you got {mistaken:,}" in str(failed.value)


def test_parameter_count_off_limits_and_stub():
    with pytest.raises(OffLimitsError, match="tfcourse.models.count_parameters"):
        check_parameter_count(lambda c: tfcourse.models.count_parameters(nn.Linear(2, 2)))
    with pytest.raises(OffLimitsError, match="tfcourse.models.Transformer"):
        check_parameter_count(lambda c: sum(p.numel() for p in tfcourse.models.Transformer(c).parameters()))
    with pytest.raises(OffLimitsError, match="torch.nn.Transformer"):
        check_parameter_count(lambda c: sum(p.numel() for p in nn.Transformer(c.d_model).parameters()))
    with pytest.raises(CheckFailed, match="return a Python int"):
        check_parameter_count(lambda c: float(parameter_count(c)))
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_parameter_count(stub)


def test_parameter_count_says_how_far_off():
    with pytest.raises(CheckFailed, match=r"expected 63,082,496, got 63,082,503 \(off by \+7\)"):
        check_parameter_count(lambda c: parameter_count(c) + 7)


# ----------------------------------------------------------------------------------------------
# shift_right
# ----------------------------------------------------------------------------------------------


def shift_right(tgt, bos_id):
    bos = torch.full((tgt.shape[0], 1), bos_id, dtype=tgt.dtype, device=tgt.device)  # (B, 1)
    return torch.cat([bos, tgt[:, :-1]], dim=1)  # (B, T)


def test_shift_right_passes(capfd):
    assert_passes(check_shift_right, shift_right, capfd)


def _bos(tgt, bos_id):
    return torch.full((tgt.shape[0], 1), bos_id, dtype=tgt.dtype)


@pytest.mark.parametrize("fn, message", [
    (lambda t, b: torch.cat([t[:, 1:], _bos(t, b)], 1), r"shifted left"),
    (lambda t, b: torch.cat([_bos(t, b), t[:, 1:]], 1), "written over the first token"),
    (lambda t, b: torch.roll(t, 1, dims=1), "wraps round"),
    (lambda t, b: torch.cat([torch.full((1, t.shape[1]), b), t[:-1]], 0), "batch axis"),
    (lambda t, b: torch.cat([_bos(t, b), t], 1), r"T \+ 1"),
])
def test_shift_right_mistakes_are_named(fn, message):
    with pytest.raises(CheckFailed, match=message):
        check_shift_right(fn)


def test_shift_right_in_place_and_stub():
    def in_place(tgt, bos_id):
        tgt[:, 1:] = tgt[:, :-1].clone()
        tgt[:, 0] = bos_id
        return tgt

    with pytest.raises(CheckFailed, match="in place"):
        check_shift_right(in_place)
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_shift_right(stub)


# ----------------------------------------------------------------------------------------------
# filter_logits and sample_next_token
# ----------------------------------------------------------------------------------------------


def filter_logits(logits, top_k=None, top_p=None, k_shift=0, keep_crossing=True, fill=float("-inf"), dim=-1,
                  p_after_k=True):
    original = logits
    if dim == 0:
        return filter_logits(logits.T, top_k, top_p).T
    if top_k is not None:
        k = min(top_k + k_shift, logits.shape[-1])
        kth_best = torch.topk(logits, k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < kth_best, fill)
    if top_p is not None:
        source = logits if p_after_k else original
        sorted_logits, order = torch.sort(source, dim=-1, descending=True)
        probs = torch.softmax(sorted_logits, dim=-1)
        cumulative = probs.cumsum(dim=-1)
        drop_sorted = (cumulative - probs >= top_p) if keep_crossing else (cumulative > top_p)
        drop = drop_sorted.scatter(-1, order, drop_sorted)
        logits = logits.masked_fill(drop, fill)
    return logits


def test_filter_logits_passes(capfd):
    assert_passes(check_filter_logits, filter_logits, capfd)


@pytest.mark.parametrize("kwargs, message", [
    ({"k_shift": 1}, r"k \+ 1"),
    ({"k_shift": -1}, "k − 1"),
    ({"keep_crossing": False}, "crosses p"),
    ({"fill": 0.0}, "set to 0"),
    ({"dim": 0}, "wrong axis"),
    ({"p_after_k": False}, "unfiltered distribution"),
])
def test_filter_logits_mistakes_are_named(kwargs, message):
    with pytest.raises(CheckFailed, match=message):
        check_filter_logits(lambda logits, k=None, p=None: filter_logits(logits, k, p, **kwargs))


def test_filter_logits_says_how_many_tokens_are_kept():
    with pytest.raises(CheckFailed, match="you keep .* tokens per row, the reference keeps"):
        check_filter_logits(lambda logits, k=None, p=None: filter_logits(logits, None if k is None else k + 2, p))
    with pytest.raises(CheckFailed, match="their logits changed"):
        check_filter_logits(lambda logits, k=None, p=None: filter_logits(logits, k, p) * 2)


def test_filter_logits_in_place_off_limits_and_stub():
    def in_place(logits, top_k=None, top_p=None):
        result = filter_logits(logits, top_k, top_p)
        logits.copy_(result)
        return logits

    with pytest.raises(CheckFailed, match="in place"):
        check_filter_logits(in_place)
    with pytest.raises(OffLimitsError, match="tfcourse.decoding.filter_logits"):
        check_filter_logits(lambda logits, k=None, p=None: tfcourse.decoding.filter_logits(logits, k, p))
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_filter_logits(stub)


def sample_next_token(logits, temperature=1.0, top_k=None, top_p=None, generator=None, mistake=None):
    if temperature == 0 and mistake != "no greedy":
        return logits.argmax(dim=-1)
    if mistake == "after softmax":
        probs = torch.softmax(filter_logits(logits, top_k, top_p), dim=-1) / temperature
    elif mistake == "filter first":
        probs = torch.softmax(filter_logits(logits, top_k, top_p) / temperature, dim=-1)
    else:
        scaled = logits * temperature if mistake == "multiply" else logits / temperature
        filtered = scaled if mistake == "no filter" else filter_logits(scaled, top_k, top_p)
        probs = torch.softmax(filtered, dim=-1)
    draws = torch.multinomial(probs, 1, generator=None if mistake == "no generator" else generator)
    return draws if mistake == "keepdim" else draws.squeeze(-1)


def test_sample_next_token_passes(capfd):
    assert_passes(check_sample_next_token, sample_next_token, capfd)


@pytest.mark.parametrize("mistake, message", [
    ("after softmax", r"after softmax"),
    ("multiply", r"multiplied"),
    ("no filter", "without top-k / top-p filtering"),
    ("filter first", r"top-p applied before"),
    ("no greedy", "temperature 0 means greedy"),
    ("no generator", "pass the generator"),
    ("keepdim", r"not \(B, 1\)"),
])
def test_sample_next_token_mistakes_are_named(mistake, message):
    with pytest.raises(CheckFailed, match=message):
        check_sample_next_token(lambda logits, t=1.0, k=None, p=None, g=None:
                                sample_next_token(logits, t, k, p, g, mistake=mistake))


def test_sample_next_token_off_limits_and_stub():
    with pytest.raises(OffLimitsError, match="tfcourse.decoding.sample_next_token"):
        check_sample_next_token(lambda logits, t=1.0, k=None, p=None, g=None:
                                tfcourse.decoding.sample_next_token(logits, t, k, p, g))
    def borrowed_filter(logits, t=1.0, k=None, p=None, g=None):
        filtered = tfcourse.decoding.filter_logits(logits / max(t, 1e-3), k, p)
        return torch.multinomial(torch.softmax(filtered, -1), 1, generator=g).squeeze(-1)

    with pytest.raises(OffLimitsError, match="tfcourse.decoding.filter_logits"):
        check_sample_next_token(borrowed_filter)
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_sample_next_token(stub)


# ----------------------------------------------------------------------------------------------
# beam search
# ----------------------------------------------------------------------------------------------


def beam_search(log_probs_fn, prefix, max_new_tokens, beam_size=4, alpha=0.6, eos_id=None, mistake=None):
    beams = prefix[None, :]
    scores = torch.zeros(1)
    finished = []
    for step in range(1, max_new_tokens + 1):
        log_probs = log_probs_fn(beams)
        vocab = log_probs.shape[-1]
        if mistake == "last":
            top_last, top_index = log_probs.reshape(-1).topk(min(beam_size, log_probs.numel()))
            top_scores = scores[top_index // vocab] + top_last
        else:
            candidates = (scores[:, None] + log_probs).reshape(-1)
            top_scores, top_index = candidates.topk(min(beam_size, candidates.numel()))
        beam_index, token = top_index // vocab, top_index % vocab
        beams = torch.cat([beams[beam_index], token[:, None]], dim=1)
        scores = top_scores
        if eos_id is not None and mistake != "no eos":
            ended = token == eos_id
            for seq, score in zip(beams[ended], scores[ended]):
                finished.append((score.item() / length_penalty(step, 0.0 if mistake == "no penalty" else alpha), seq))
            beams, scores = beams[~ended], scores[~ended]
            if len(finished) >= beam_size or beams.shape[0] == 0:
                break
    a = 0.0 if mistake == "no penalty" else alpha
    survivors = [(s.item() / length_penalty(beams.shape[1] - prefix.shape[0], a), b) for s, b in zip(scores, beams)]
    best = max(finished + survivors, key=lambda pair: pair[0])[1]
    return best[prefix.shape[0]:] if mistake == "no prefix" else best


def test_beam_search_passes(capfd):
    assert_passes(check_beam_search, beam_search, capfd)


@pytest.mark.parametrize("mistake, message", [
    ("no penalty", r"without the length penalty"),
    ("last", "last token's log-probability only"),
    ("no eos", "after <eos>"),
    ("no prefix", "must start with the prefix"),
])
def test_beam_search_mistakes_are_named(mistake, message):
    with pytest.raises(CheckFailed, match=message):
        check_beam_search(lambda fn, prefix, n, beam=4, alpha=0.6, eos=None:
                          beam_search(fn, prefix, n, beam, alpha, eos, mistake=mistake))


def test_beam_one_must_be_greedy_and_off_limits():
    def always_first_token(fn, prefix, n, beam=4, alpha=0.6, eos=None):
        return torch.cat([prefix, torch.zeros(n, dtype=prefix.dtype)])

    with pytest.raises(CheckFailed, match="must equal greedy"):
        check_beam_search(always_first_token)
    with pytest.raises(OffLimitsError, match="tfcourse.decoding.beam_search"):
        check_beam_search(lambda fn, prefix, n, beam=4, alpha=0.6, eos=None:
                          tfcourse.decoding.beam_search(fn, prefix, n, beam, alpha, eos))
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_beam_search(stub)


# ----------------------------------------------------------------------------------------------
# cached generation
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def greedy_generate_cached(model, ids, max_new_tokens, mistake=None):
    if mistake != "no eval":
        model.eval()
    caches = None if mistake == "no cache" else model.make_caches()
    new_input = ids
    for _ in range(max_new_tokens):
        logits = model(new_input, caches)[:, -1]
        next_id = logits.argmax(dim=-1, keepdim=True)
        ids = torch.cat([ids, next_id], dim=1)
        new_input = ids if mistake == "whole" else (ids if caches is None else next_id)
    return ids[:, -max_new_tokens:] if mistake == "new only" else ids


def test_cached_generation_passes(capfd):
    assert_passes(check_cached_generation, greedy_generate_cached, capfd)


@pytest.mark.parametrize("mistake, message", [
    ("no eval", "model.eval()"),
    ("no cache", "without caches"),
    ("whole", "feed only the newest token"),
    ("new only", "not the new tokens alone"),
])
def test_cached_generation_mistakes_are_named(mistake, message):
    with pytest.raises(CheckFailed, match=message):
        check_cached_generation(lambda model, ids, n: greedy_generate_cached(model, ids, n, mistake=mistake))


def test_cached_generation_off_limits_and_stub():
    with pytest.raises(OffLimitsError, match="tfcourse.decoding.generate"):
        check_cached_generation(lambda model, ids, n: tfcourse.decoding.generate(model, ids, n, temperature=0))
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_cached_generation(stub)


def test_cached_generation_names_what_came_back():
    def returns_nothing(model, ids, n):
        greedy_generate_cached(model, ids, n)

    with pytest.raises(CheckFailed, match="expected a torch.Tensor, got NoneType"):
        check_cached_generation(returns_nothing)
