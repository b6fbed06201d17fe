"""The checks of lesson 09 (translation): right answers pass with one line, every named mistake is
recognised, the reference is off-limits, and a stub says it is not implemented yet."""

from __future__ import annotations

import math

import pytest
import torch

from tfcourse import decoding
from tfcourse.training import translation
from tfcourse.attention import causal_mask, padding_mask
from tfcourse.checks.core import CheckFailed, OffLimitsError
from tfcourse.checks.translation import (check_encoder_decoder_forward, check_greedy_decode,
                                         check_label_smoothed_cross_entropy, check_paper_lr, check_shift_target)
from tfcourse.output import cross_entropy
from check_helpers import assert_passes, stub

pytestmark = pytest.mark.usefixtures("one_thread")  # tiny models: one thread is fastest (conftest.py)


# ----------------------------------------------------------------------------------------------
# Exercise 1: shift_target
# ----------------------------------------------------------------------------------------------


def make_shift(inp="right", eos="after_words", ignore_pad=True, labels_are_input=False, in_place=False,
               mask_before_extra_column=False):
    """A row-by-row implementation (independent of the package), with optional mistakes."""

    def shift(tgt, bos_id, eos_id, pad_id, ignore_index=-100):
        if in_place:
            tgt[0, 0] = bos_id  # writes into the caller's tensor
        rows_in, rows_out = [], []
        all_lengths = [sum(t != pad_id for t in row) for row in tgt.tolist()]
        for row in tgt.tolist():
            words = [t for t in row if t != pad_id]
            n_pad = len(row) - len(words)
            if inp == "right":
                rows_in.append([bos_id] + words + [pad_id] * n_pad)
            elif inp == "labels":
                rows_in.append(words + [eos_id] + [pad_id] * n_pad)
            elif inp == "labels_with_ignore":  # decoder_input = labels, after the padding became ignore_index
                rows_in.append(words + [eos_id] + [ignore_index] * n_pad)
            elif inp == "unshifted":
                rows_in.append(words + [pad_id] * (n_pad + 1))
            elif inp == "tgt":  # tgt itself, (B, T)
                rows_in.append(list(row))
            elif inp == "lesson_06":  # <bos> + tgt without its last column, (B, T)
                rows_in.append([bos_id] + row[:-1])
            elif inp == "bos_last":
                rows_in.append(row + [bos_id])
            elif inp == "pad_first":
                rows_in.append([pad_id] + row)
            elif inp == "ignore_for_pad":
                rows_in.append([bos_id] + words + [ignore_index] * n_pad)
            elif inp == "left":
                rows_in.append(words[1:] + [pad_id] * (n_pad + 2))
            if eos == "after_words":
                label = words + [eos_id] + [pad_id] * n_pad
            elif eos == "none":
                label = words + [pad_id] * (n_pad + 1)
            elif eos == "on_last_word":  # labels[rows, lengths - 1] = eos_id
                label = words + [pad_id] * (n_pad + 1)
                label[len(words) - 1] = eos_id
            elif eos == "every_row":  # labels[:, lengths] = eos_id
                label = words + [pad_id] * (n_pad + 1)
                for n in all_lengths:
                    label[n] = eos_id
            else:  # after the padding
                label = words + [pad_id] * n_pad + [eos_id]
            if labels_are_input:
                label = [bos_id] + words + [pad_id] * n_pad
            if mask_before_extra_column:  # padding -> ignore_index, then the extra column of <pad>, then <eos>
                label = [ignore_index if t == pad_id else t for t in row] + [pad_id]
                label[len(words)] = eos_id
                rows_out.append(label)
                continue
            rows_out.append([ignore_index if (t == pad_id and ignore_pad) else t for t in label])
        return torch.tensor(rows_in), torch.tensor(rows_out)

    return shift


def test_shift_target_accepts_a_correct_answer(capfd):
    assert_passes(check_shift_target, make_shift(), capfd)


@pytest.mark.parametrize(("wrong", "message"), [
    (make_shift(inp="labels"), r"the labels \(y1 … yn <eos>\): the decoder input must be shifted right"),
    (make_shift(inp="unshifted"), r"the target itself, not shifted"),
    (make_shift(inp="left"), r"shifted left"),
    (make_shift(eos="none"), r"labels without <eos>"),
    (make_shift(eos="after_padding"), r"<eos> appended after the padding"),
    (make_shift(ignore_pad=False), r"<pad> left in"),
    (make_shift(labels_are_input=True), r"the decoder input \(<bos> y1 …\)"),
    (make_shift(in_place=True), r"modified input #1 in place"),
    # a decoder input that is not shifted right, <bos> first
    (make_shift(inp="bos_last"), r"decoder_input .*: your output equals the target not shifted, with <bos> at the "
                                 r"end .*shifting right puts <bos> in front, torch.cat\(\[bos, tgt\], dim=1\)"),
    (make_shift(inp="labels_with_ignore"), r"decoder_input .*: your output equals the labels, ignore_index included"),
    (make_shift(inp="tgt"), r"decoder_input .*: your output equals tgt itself, not shifted"),
    (make_shift(inp="lesson_06"), r"tgt without its last column \(lesson 06's shift_right\)"),
    (make_shift(inp="pad_first"), r"shifted right with <pad> in front: the first column is <bos>"),
    (make_shift(inp="ignore_for_pad"), r"decoder input with ignore_index in place of <pad>"),
    (make_shift(eos="on_last_word"), r"labels .*<eos> written over each row's last word \(column n - 1\)"),
    (make_shift(eos="every_row"), r"every row's <eos> column set in every row \(labels\[:, lengths\] = eos_id\)"),
    (make_shift(mask_before_extra_column=True), r"<pad> left in their extra last column"),
])
def test_shift_target_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_shift_target(wrong, hidden=True)


def test_shift_target_names_hard_coded_special_ids():
    def hard_coded_ignore(tgt, bos_id, eos_id, pad_id, ignore_index=-100):
        return make_shift()(tgt, bos_id, eos_id, pad_id, -100)

    def hard_coded_pad(tgt, bos_id, eos_id, pad_id, ignore_index=-100):
        return make_shift()(tgt, bos_id, eos_id, 0, ignore_index)

    check_shift_target(hard_coded_ignore)  # the visible cases use -100 and pad_id 0
    with pytest.raises(CheckFailed, match=r"ignore_index hard-coded as -100"):
        check_shift_target(hard_coded_ignore, hidden=True)
    with pytest.raises(CheckFailed, match=r"pad_id hard-coded as 0"):
        check_shift_target(hard_coded_pad, hidden=True)


def test_shift_target_catches_the_hidden_edge_cases():
    def hard_coded_pad(tgt, bos_id, eos_id, pad_id, ignore_index=-100):
        return make_shift()(tgt, bos_id, eos_id, 0, ignore_index)  # pad_id 0 assumed

    check_shift_target(hard_coded_pad)  # the visible cases use pad_id 0
    with pytest.raises(CheckFailed):
        check_shift_target(hard_coded_pad, hidden=True)


def test_shift_target_reference_is_off_limits():
    def delegates(tgt, bos_id, eos_id, pad_id, ignore_index=-100):
        return translation.shift_target(tgt, bos_id, eos_id, pad_id, ignore_index)

    with pytest.raises(OffLimitsError, match="off-limits"):
        check_shift_target(delegates)


def test_shift_target_stub():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_shift_target(stub)


# ----------------------------------------------------------------------------------------------
# Exercise 2: label-smoothed cross-entropy, padding ignored
# ----------------------------------------------------------------------------------------------


def make_smoothed(others=False, padding="ignored", target_only=False, no_one_minus=False, vocab_sum=False,
                  no_smoothing=False, position_sum=False, smooth_all_positions=False, log_of_softmax=False,
                  detach=False, in_place=False, softmax_axis=-1, negated=False, mean_of_sentence_means=False):
    """A per-position implementation (independent of torch's), with optional mistakes."""

    def loss(logits, labels, epsilon, ignore_index):
        if in_place:
            logits -= logits.amax(dim=-1, keepdim=True)  # "stabilises" the caller's tensor
        if log_of_softmax:
            log_p = torch.log(torch.softmax(logits, dim=-1))
        else:
            log_p = torch.log_softmax(logits, dim=softmax_axis)
        vocab = logits.shape[-1]
        real = labels != ignore_index
        nll = -log_p.gather(-1, labels.clamp(min=0)[..., None]).squeeze(-1)
        smooth = -log_p.sum(-1) if vocab_sum else -log_p.mean(-1)
        if others:
            smooth = (-log_p.sum(-1) - nll) / (vocab - 1)
        target_weight = 1.0 if no_one_minus else 1 - epsilon
        per_position = target_weight * nll + (0.0 if (target_only or no_smoothing) else epsilon * smooth)
        if no_smoothing:
            per_position = nll
        if smooth_all_positions:
            result = target_weight * nll[real].mean() + epsilon * smooth.mean()
        elif padding == "scored":
            result = per_position.mean()
        elif padding == "divided_by_all":
            result = (per_position * real).sum() / real.numel()
        elif position_sum:
            result = per_position[real].sum()
        elif mean_of_sentence_means:
            result = torch.stack([row[keep].mean() for row, keep in zip(per_position, real)]).mean()
        else:
            result = per_position[real].mean()
        if negated:
            result = -result
        return result.detach() if detach else result

    return loss


def explicit_target_distribution(logits, labels, epsilon, ignore_index):
    """A correct alternative: build q explicitly, drop the padding rows first, then a dot product."""
    vocab = logits.shape[-1]
    keep = (labels != ignore_index).reshape(-1)
    flat_logits, flat_labels = logits.reshape(-1, vocab)[keep], labels.reshape(-1)[keep]  # (n, V), (n,)
    q = torch.full_like(flat_logits, epsilon / vocab)
    q[torch.arange(len(flat_labels)), flat_labels] += 1 - epsilon
    return -(q * torch.log_softmax(flat_logits, dim=-1)).sum(dim=-1).mean()


def test_label_smoothing_accepts_correct_answers(capfd):
    assert_passes(check_label_smoothed_cross_entropy, make_smoothed(), capfd)
    assert_passes(check_label_smoothed_cross_entropy, explicit_target_distribution, capfd)


@pytest.mark.parametrize(("wrong", "message"), [
    (make_smoothed(others=True), r"ε spread over the V − 1 other words"),
    (make_smoothed(padding="scored"), r"padding positions counted in the mean"),
    (make_smoothed(padding="divided_by_all"), r"divided by all positions"),
    (make_smoothed(smooth_all_positions=True), r"ε term averaged over all positions, padding included"),
    (make_smoothed(target_only=True), r"ε applied to the target only"),
    (make_smoothed(no_one_minus=True), r"weighted by \(1 − ε\)"),
    (make_smoothed(vocab_sum=True), r"sum of −log p_v over the vocabulary"),
    (make_smoothed(no_smoothing=True), r"without label smoothing"),
    (make_smoothed(position_sum=True), r"sum over the real positions"),
    (make_smoothed(log_of_softmax=True), r"log\(softmax\(z\)\) underflows"),
    (make_smoothed(detach=True), r"no gradient"),
    (make_smoothed(in_place=True), r"modified input #1 in place"),
    (make_smoothed(softmax_axis=1), r"log-softmax over axis 1 instead of the vocabulary: take it over the last axis"),
    (make_smoothed(softmax_axis=0), r"log-softmax over axis 0 instead of the vocabulary"),
    (make_smoothed(negated=True), r"your output equals minus the loss: log p is negative"),
    (make_smoothed(mean_of_sentence_means=True), r"the mean of each sentence's mean"),
])
def test_label_smoothing_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_label_smoothed_cross_entropy(wrong, hidden=True)


def test_label_smoothing_hidden_cases_catch_a_hard_coded_ignore_index():
    def hard_coded(logits, labels, epsilon, ignore_index):
        return make_smoothed()(logits, labels, epsilon, -100)

    check_label_smoothed_cross_entropy(hard_coded)  # the visible cases use -100
    with pytest.raises(CheckFailed, match=r"ignore_index=0"):
        check_label_smoothed_cross_entropy(hard_coded, hidden=True)


def test_label_smoothing_reference_and_torch_built_ins_are_off_limits():
    def torch_loss(logits, labels, epsilon, ignore_index):
        return torch.nn.functional.cross_entropy(logits.reshape(-1, logits.shape[-1]), labels.reshape(-1),
                                                 ignore_index=ignore_index, label_smoothing=epsilon)

    def package_loss(logits, labels, epsilon, ignore_index):
        return cross_entropy(logits, labels, ignore_index=ignore_index, label_smoothing=epsilon)

    def nll_loss(logits, labels, epsilon, ignore_index):
        return torch.nn.NLLLoss(ignore_index=ignore_index)(torch.log_softmax(logits, -1).reshape(-1, logits.shape[-1]),
                                                           labels.reshape(-1))

    for borrowed, name in [(torch_loss, "torch.nn.functional.cross_entropy"),
                           (package_loss, "tfcourse.output.cross_entropy"), (nll_loss, "torch.nn.NLLLoss")]:
        with pytest.raises(OffLimitsError, match=name):
            check_label_smoothed_cross_entropy(borrowed)
    assert torch.nn.functional.cross_entropy(torch.zeros(1, 2), torch.tensor([0])) > 0  # put back afterwards


def test_label_smoothing_stub():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_label_smoothed_cross_entropy(stub)


# ----------------------------------------------------------------------------------------------
# Exercise 3: the forward pass
# ----------------------------------------------------------------------------------------------


def make_forward(causal=True, tgt_pad=True, enc_src_mask=True, cross="src", encoder_causal=False, pad_id=None,
                 combine="and", self_pad_from="tgt", src_embed="src", encode=True, output="logits"):
    def forward(model, src, tgt):
        pad = model.config.pad_id if pad_id is None else pad_id
        src_mask = padding_mask(src, pad)
        enc_mask = src_mask if enc_src_mask else None
        if encoder_causal:
            enc_mask = enc_mask & causal_mask(src.shape[1])
        embedded = (model.src_embed if src_embed == "src" else model.tgt_embed)(src)
        memory = model.encoder(embedded, enc_mask) if encode else embedded
        self_mask = None
        if causal:
            self_mask = causal_mask(tgt.shape[1])
        if tgt_pad:
            pad_mask = padding_mask(tgt if self_pad_from == "tgt" else src, pad)
            if self_mask is None:
                self_mask = pad_mask
            else:
                self_mask = self_mask & pad_mask if combine == "and" else self_mask | pad_mask
        memory_mask = {"src": src_mask, "none": None, "tgt": padding_mask(tgt, pad)}[cross]
        hidden = model.decoder(model.tgt_embed(tgt), memory, self_mask, memory_mask)
        if output == "hidden":
            return hidden
        logits = model.output(hidden)
        return {"logits": logits, "softmax": logits.softmax(-1), "log_softmax": logits.log_softmax(-1)}[output]

    return forward


def test_forward_accepts_a_correct_answer(capfd):
    assert_passes(check_encoder_decoder_forward, make_forward(), capfd)


@pytest.mark.parametrize(("wrong", "message"), [
    (make_forward(causal=False), r"without the causal mask"),
    (make_forward(enc_src_mask=False, cross="none"), r"without any source padding mask"),
    (make_forward(cross="none"), r"without the source padding mask in cross-attention"),
    (make_forward(enc_src_mask=False), r"without the source padding mask in the encoder"),
    (make_forward(encoder_causal=True), r"causal mask in the encoder"),
    (make_forward(tgt_pad=False), r"your output equals the logits with the causal mask alone \(they differ only at "
                                  r"padded target positions\): combine"),
    (make_forward(causal=False, tgt_pad=False, enc_src_mask=False, cross="none"), r"no masks at all"),
    (make_forward(cross="tgt"), r"cross-attention mask built from the target"),
    (make_forward(combine="or"), r"causal and target padding masks combined with \| \(or\)"),
    (make_forward(self_pad_from="src"), r"self-attention masked by the source padding"),
    (make_forward(src_embed="tgt"), r"source embedded by model.tgt_embed"),
    (make_forward(encode=False), r"source embeddings as the decoder's memory: run model.encoder"),
    (make_forward(output="hidden"), r"the decoder's output \(2, 6, 16\), \(B, T, d_model\): apply model.output"),
    (make_forward(output="softmax"), r"your output equals the softmax of the logits"),
    (make_forward(output="log_softmax"), r"your output equals the log-softmax of the logits"),
])
def test_forward_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_encoder_decoder_forward(wrong, hidden=True)


def test_forward_hidden_cases_catch_a_hard_coded_pad_id():
    pad_zero = make_forward(pad_id=0)
    check_encoder_decoder_forward(pad_zero)
    with pytest.raises(CheckFailed, match=r"pad_id=1"):
        check_encoder_decoder_forward(pad_zero, hidden=True)


def test_forward_reference_and_torch_transformer_are_off_limits():
    with pytest.raises(OffLimitsError, match="Transformer.forward"):
        check_encoder_decoder_forward(lambda model, src, tgt: model(src, tgt))
    with pytest.raises(OffLimitsError, match="Transformer.encode"):
        check_encoder_decoder_forward(lambda model, src, tgt: model.decode(tgt, *model.encode(src)))

    def torch_transformer(model, src, tgt):
        layer = torch.nn.Transformer(d_model=16, nhead=2, batch_first=True)
        return layer(model.src_embed(src), model.tgt_embed(tgt))

    with pytest.raises(OffLimitsError, match="torch.nn.Transformer"):
        check_encoder_decoder_forward(torch_transformer)


def test_forward_stub():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_encoder_decoder_forward(stub)


# ----------------------------------------------------------------------------------------------
# Exercise 4: greedy decoding
# ----------------------------------------------------------------------------------------------


def make_greedy(feed="all", position=-1, stop=True, keep_bos=True, keep_eos=True, batch_dim=False, start="bos",
                extra_rounds=0):
    def greedy(model, src, bos_id, eos_id, max_new_tokens):
        memory, src_mask = model.encode(src[None])
        ys = [{"bos": bos_id, "zero": 0, "eos": eos_id}[start]]
        for _ in range(max_new_tokens + extra_rounds):
            seen = {"all": ys, "bos": ys[:1], "last": ys[-1:]}[feed]
            logits = model.decode(torch.tensor([seen]), memory, src_mask)
            next_id = int(logits[0, position].argmax())
            if next_id == eos_id and stop and not keep_eos:
                break
            ys.append(next_id)
            if next_id == eos_id and stop:
                break
        out = torch.tensor(ys if keep_bos else ys[1:])
        return out[None] if batch_dim else out

    return greedy


def test_greedy_accepts_a_correct_answer(capfd):
    assert_passes(check_greedy_decode, make_greedy(), capfd)


@pytest.mark.parametrize(("wrong", "message"), [
    (make_greedy(feed="bos"), r"the same token again and again"),
    (make_greedy(position=0), r"the same token again and again"),
    (make_greedy(feed="last"), r"feeds back only the newest token"),
    (make_greedy(stop=False), r"does not stop at <eos>"),
    (make_greedy(keep_bos=False), r"without its leading <bos>"),
    (make_greedy(keep_eos=False), r"without its final <eos>"),
    (make_greedy(batch_dim=True), r"return a 1-D tensor"),
    (make_greedy(start="zero"), r"starts from id 0 \(<pad>\) instead of <bos>"),
    (make_greedy(start="eos"), r"starts from <eos> instead of <bos>"),
    (make_greedy(extra_rounds=1), r"one token longer than max_new_tokens allows"),
])
def test_greedy_names_the_mistake(wrong, message):
    with pytest.raises(CheckFailed, match=message):
        check_greedy_decode(wrong, hidden=True)


def test_greedy_hidden_cases_catch_hard_coded_special_ids():
    def hard_coded(model, src, bos_id, eos_id, max_new_tokens):
        return make_greedy()(model, src, 2, 3, max_new_tokens)

    check_greedy_decode(hard_coded)
    with pytest.raises(CheckFailed):
        check_greedy_decode(hard_coded, hidden=True)


def test_greedy_reference_is_off_limits():
    def delegates(model, src, bos_id, eos_id, max_new_tokens):
        return decoding.translate(model, src[None], bos_id, eos_id, max_new_tokens)[0]

    with pytest.raises(OffLimitsError, match="translate"):
        check_greedy_decode(delegates)

    def beam(model, src, bos_id, eos_id, max_new_tokens):
        return decoding.translate_beam(model, src, bos_id, eos_id, max_new_tokens, beam_size=1)

    with pytest.raises(OffLimitsError, match="translate_beam"):
        check_greedy_decode(beam)


def test_greedy_stub():
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_greedy_decode(stub)


def test_shift_target_judges_both_outputs_as_tensors():
    def labels_missing(tgt, bos_id, eos_id, pad_id, ignore_index=-100):
        return make_shift()(tgt, bos_id, eos_id, pad_id, ignore_index)[0], None

    with pytest.raises(CheckFailed, match=r"^labels for tgt .*: expected a torch.Tensor, got NoneType"):
        check_shift_target(labels_missing)


def test_success_lines_are_kept(capfd):
    check_shift_target(make_shift())
    check_label_smoothed_cross_entropy(make_smoothed(), hidden=True)
    assert capfd.readouterr().out.splitlines() == [
        "✔ shift_target builds decoder inputs and labels on 2 batches",
        "✔ label_smoothed_cross_entropy equals torch's cross_entropy(..., ignore_index, label_smoothing) on 8 "
        "inputs, gradient included (hidden cases included)",
    ]


# ----------------------------------------------------------------------------------------------
# The paper's learning-rate schedule (eq. 3)
# ----------------------------------------------------------------------------------------------


def paper_lr(step, d_model, warmup_steps):
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def paper_lr_with_math(step, d_model, warmup_steps):
    return min(1 / math.sqrt(step), step / warmup_steps / math.sqrt(warmup_steps)) / math.sqrt(d_model)


def paper_lr_as_a_float32_tensor(step, d_model, warmup_steps):
    return torch.tensor(paper_lr(step, d_model, warmup_steps))


@pytest.mark.parametrize("learner", [paper_lr, paper_lr_with_math, paper_lr_as_a_float32_tensor])
def test_paper_lr_right_answers_pass(learner, capfd):
    check_paper_lr(learner, hidden=True)
    out, err = capfd.readouterr()
    assert out.startswith("✔ paper_lr matches the paper's eq. 3") and err == ""


@pytest.mark.parametrize(("learner", "message"), [
    (lambda s, d, w: min(s ** -0.5, s * w ** -1.5), r"without its d_model\^-0.5 factor"),
    (lambda s, d, w: d ** -0.5 * min(s ** -0.5, s * w ** -0.5), r"s · W\^-0.5 in the warm-up"),
    (lambda s, d, w: d ** -0.5 * max(s ** -0.5, s * w ** -1.5), r"the larger of the two terms"),
    (lambda s, d, w: d ** -0.5 * min(max(s - 1, 1e-12) ** -0.5, (s - 1) * w ** -1.5), r"one step late"),
    (lambda s, d, w: "0.001", r"should return a float, got str"),
])
def test_paper_lr_mistakes_are_named(learner, message):
    with pytest.raises(CheckFailed, match=message):
        check_paper_lr(learner)


def test_paper_lr_reference_is_off_limits_and_refuses_step_0():
    import tfcourse.training.loop

    with pytest.raises(OffLimitsError, match="tfcourse.training.loop.paper_lr_at"):
        check_paper_lr(lambda s, d, w: tfcourse.training.loop.paper_lr_at(s, d, w))
    assert tfcourse.training.loop.paper_lr_at(4000, 512, 4000) == pytest.approx(6.988e-4, rel=1e-3)  # the peak
    with pytest.raises(ValueError, match="counted from 1"):
        tfcourse.training.loop.paper_lr_at(0, 512, 4000)
