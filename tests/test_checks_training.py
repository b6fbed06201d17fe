"""Lesson 08's checks: right answers pass, every usual mistake is named, the answers are off-limits."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F

import tfcourse.data
import tfcourse.training.loop
from tfcourse.checks.core import CheckFailed, OffLimitsError
from tfcourse.checks.training import (check_adamw_step, check_estimate_loss, check_get_batch, check_lr_schedule,
                                      check_previous_token_score, check_train_step)
from check_helpers import assert_passes, stub


@pytest.fixture(autouse=True)
def _tiny_models_on_one_thread(one_thread):
    """Tiny models are fastest on one thread (see conftest.py), and a busy second core cannot stall them."""


@pytest.mark.parametrize("check", [check_get_batch, check_adamw_step, check_lr_schedule, check_train_step,
                                   check_estimate_loss, check_previous_token_score])
def test_a_stub_is_not_implemented_yet(check):
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check(stub)


# ----------------------------------------------------------------------------------------------
# Exercise 1: the batch sampler
# ----------------------------------------------------------------------------------------------


def get_batch(data, batch_size, context_len, generator):
    starts = torch.randint(0, len(data) - context_len, (batch_size,), generator=generator)  # (B,)
    positions = starts[:, None] + torch.arange(context_len)[None, :]  # (B, T)
    return data[positions], data[positions + 1]


def get_batch_with_a_loop(data, batch_size, context_len, generator):
    starts = torch.randint(len(data) - context_len, (batch_size,), generator=generator)
    x = torch.stack([data[i : i + context_len] for i in starts])
    y = torch.stack([data[i + 1 : i + 1 + context_len] for i in starts])
    return x, y


def same_windows(data, batch_size, context_len, generator):
    x, _ = get_batch(data, batch_size, context_len, generator)
    return x, x.clone()


def starts_one_short(data, batch_size, context_len, generator):
    starts = torch.randint(0, len(data) - context_len - 1, (batch_size,), generator=generator)
    positions = starts[:, None] + torch.arange(context_len)[None, :]
    return data[positions], data[positions + 1]


def starts_one_long(data, batch_size, context_len, generator):
    starts = torch.randint(0, len(data) - context_len + 1, (batch_size,), generator=generator)
    positions = starts[:, None] + torch.arange(context_len)[None, :]
    return data[positions], data[positions + 1]


def two_starts(data, batch_size, context_len, generator):
    x, _ = get_batch(data, batch_size, context_len, generator)
    _, y = get_batch(data, batch_size, context_len, generator)
    return x, y


def global_rng(data, batch_size, context_len, generator):
    return get_batch(data, batch_size, context_len, None)


def crashes_with_one_window(data, batch_size, context_len, generator):
    if len(data) == context_len + 1:
        torch.randint(0, 0, (1,))
    return get_batch(data, batch_size, context_len, generator)


def float_windows(data, batch_size, context_len, generator):
    x, y = get_batch(data, batch_size, context_len, generator)
    return x.float(), y.float()


def returns_three(data, batch_size, context_len, generator):
    return (*get_batch(data, batch_size, context_len, generator), None)


def calls_the_reference(data, batch_size, context_len, generator):
    return tfcourse.data.get_batch(data, batch_size, context_len, generator)


@pytest.mark.parametrize("learner", [get_batch, get_batch_with_a_loop])
def test_get_batch_right_answers_pass(learner, capfd):
    assert_passes(check_get_batch, learner, capfd)


@pytest.mark.parametrize(("learner", "message"), [
    (same_windows, "x and y being the same windows"),
    (starts_one_short, r"\[0, len\(data\) - T - 1\)"),
    (starts_one_long, r"\[0, len\(data\) - T \+ 1\)"),
    (two_starts, "two different random starts"),
    (global_rng, "same seed gave different batches"),
    (crashes_with_one_window, "exactly one window"),
    (float_windows, "expected dtype torch.int64"),
    (returns_three, r"expected a tuple \(x, y\)"),
])
def test_get_batch_mistakes_are_named(learner, message):
    with pytest.raises(CheckFailed, match=message):
        check_get_batch(learner, hidden=True)


def test_get_batch_reference_is_off_limits():
    with pytest.raises(OffLimitsError, match="tfcourse.data.get_batch"):
        check_get_batch(calls_the_reference)


# ----------------------------------------------------------------------------------------------
# Exercise 2: AdamW's update, by hand
# ----------------------------------------------------------------------------------------------


def adamw_step(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    beta1, beta2 = betas
    for p, g, m, v in zip(params, grads, exp_avg, exp_avg_sq):
        p.mul_(1 - lr * weight_decay)
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        m_hat = m / (1 - beta1 ** step)
        v_hat = v / (1 - beta2 ** step)
        p.sub_(lr * m_hat / (v_hat.sqrt() + eps))


def adamw_step_as_in_the_paper(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    """θ ← θ − η(m̂/(√v̂ + ε) + λθ), new tensors copied back; the state by lerp_."""
    beta1, beta2 = betas
    for p, g, m, v in zip(params, grads, exp_avg, exp_avg_sq):
        m.lerp_(g, 1 - beta1)
        v.copy_(beta2 * v + (1 - beta2) * g ** 2)
        m_hat = m / (1 - beta1 ** step)
        v_hat = v / (1 - beta2 ** step)
        p.copy_(p - lr * (m_hat / (torch.sqrt(v_hat) + eps) + weight_decay * p))


def _adamw_variant(*, l2=False, decay="before", correct_m=True, correct_v=True, offset=0, eps_inside=False,
                   swap=False):
    def learner(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
        beta1, beta2 = reversed(betas) if swap else betas
        t = step + offset
        for p, g, m, v in zip(params, grads, exp_avg, exp_avg_sq):
            if l2:
                g = g + weight_decay * p
            if decay == "before":
                p.mul_(1 - lr * weight_decay)
            elif decay == "no_lr":
                p.mul_(1 - weight_decay)
            elif decay == "step_size":
                p.mul_(1 - lr / (1 - beta1 ** t) * weight_decay)
            m.mul_(beta1).add_(g, alpha=1 - beta1)
            v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
            m_hat = m / (1 - beta1 ** t) if correct_m else m
            v_hat = v / (1 - beta2 ** t) if correct_v else v
            denominator = (v_hat + eps).sqrt() if eps_inside else v_hat.sqrt() + eps
            p.sub_(lr * m_hat / denominator)
            if decay == "after":
                p.mul_(1 - lr * weight_decay)
    return learner


def returns_new_tensors(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    beta1, beta2 = betas
    new = []
    for p, g, m, v in zip(params, grads, exp_avg, exp_avg_sq):
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        m_hat, v_hat = m / (1 - beta1 ** step), v / (1 - beta2 ** step)
        new.append(p * (1 - lr * weight_decay) - lr * m_hat / (v_hat.sqrt() + eps))
    return new


def rebinds_the_parameter(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    beta1, beta2 = betas
    for p, g, m, v in zip(params, grads, exp_avg, exp_avg_sq):
        m.mul_(beta1).add_(g, alpha=1 - beta1)
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)
        p = p * (1 - lr * weight_decay) - lr * (m / (1 - beta1 ** step)) / ((v / (1 - beta2 ** step)).sqrt() + eps)


def replaces_list_items(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    beta1, beta2 = betas
    for i, (p, g) in enumerate(zip(params, grads)):
        exp_avg[i] = beta1 * exp_avg[i] + (1 - beta1) * g
        exp_avg_sq[i] = beta2 * exp_avg_sq[i] + (1 - beta2) * g * g
        m_hat = exp_avg[i] / (1 - beta1 ** step)
        v_hat = exp_avg_sq[i] / (1 - beta2 ** step)
        params[i] = p * (1 - lr * weight_decay) - lr * m_hat / (v_hat.sqrt() + eps)


def state_not_kept(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    beta1, beta2 = betas
    for p, g, m, v in zip(params, grads, exp_avg, exp_avg_sq):
        m = beta1 * m + (1 - beta1) * g  # a new tensor: the caller's exp_avg stays 0
        v = beta2 * v + (1 - beta2) * g * g
        p.mul_(1 - lr * weight_decay)
        p.sub_(lr * (m / (1 - beta1 ** step)) / ((v / (1 - beta2 ** step)).sqrt() + eps))


def stores_the_corrected_averages(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    adamw_step(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay)
    beta1, beta2 = betas
    for m, v in zip(exp_avg, exp_avg_sq):
        m.div_(1 - beta1 ** step)
        v.div_(1 - beta2 ** step)


def zeroes_the_gradients(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    adamw_step(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay)
    for g in grads:
        g.zero_()


def calls_torch_adamw(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    optimizer = torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)
    for p, g in zip(params, grads):
        p.grad = g
    optimizer.step()


_PREBUILT = {}


def steps_a_prebuilt_adamw(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    optimizer = _PREBUILT["optimizer"]
    optimizer.step()


def calls_torch_adam_with_l2(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    torch.optim.Adam(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay)


def calls_the_course_optimizer(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay):
    tfcourse.training.loop.configure_optimizer(torch.nn.Linear(2, 2), tfcourse.training.loop.TrainConfig())


@pytest.mark.parametrize("learner", [adamw_step, adamw_step_as_in_the_paper])
def test_adamw_step_right_answers_pass(learner, capfd):
    assert_passes(check_adamw_step, learner, capfd)


@pytest.mark.parametrize(("learner", "message"), [
    (_adamw_variant(l2=True, decay="none"), "Adam with L2 regularisation: λ·p added to the gradient"),
    (_adamw_variant(correct_m=False, correct_v=False), r"without bias correction"),
    (_adamw_variant(correct_v=False), "bias correction of m only"),
    (_adamw_variant(correct_m=False), "bias correction of v only"),
    (_adamw_variant(decay="after"), r"weight decay applied after the Adam update"),
    (_adamw_variant(decay="no_lr"), r"not scaled by the learning rate, p·\(1 − λ\)"),
    (_adamw_variant(decay="step_size"), "scaled by the bias-corrected step size"),
    (_adamw_variant(decay="none"), r"without weight decay"),
    (_adamw_variant(eps_inside=True), "ε inside the square root"),
    (_adamw_variant(offset=1), "step \\+ 1: step already counts from 1"),
    (_adamw_variant(offset=-1), "step − 1 is 1 − β⁰ = 0 at the first update"),
    (_adamw_variant(swap=True), "β₁ and β₂ swapped"),
    (returns_new_tensors, "returned list; this adamw_step updates params, exp_avg and exp_avg_sq in place"),
    (rebinds_the_parameter, r"'p = p - \.\.\.' makes a new tensor"),
    (replaces_list_items, r"new tensors into the lists \(params\[i\] = \.\.\.\)"),
    (state_not_kept, "exp_avg is still all zeros"),
    (stores_the_corrected_averages, "exp_avg differs from torch.optim.AdamW's state"),
    (zeroes_the_gradients, "modified grads in place"),
])
def test_adamw_step_mistakes_are_named(learner, message):
    with pytest.raises(CheckFailed, match=message):
        check_adamw_step(learner)


def test_adamw_step_every_mistake_is_told_apart_on_the_visible_cases():
    """The first visible case separates every named mistake from the right answer and from each other."""
    from tfcourse.checks.training import _adamw_mistakes, _adamw_reference

    gen = torch.Generator().manual_seed(0)
    start = [torch.randn(3, 4, generator=gen, dtype=torch.float64), torch.randn(5, generator=gen, dtype=torch.float64)]
    grads = [[0.01 * torch.randn_like(p) for p in start] for _ in range(4)]
    expected = torch.cat([p.reshape(-1) for p in _adamw_reference(start, grads, 0.05, (0.9, 0.99), 1e-3, 0.5)[0][-1]])
    finals = {name: torch.cat([p.reshape(-1) for p in trajectory[-1]])
              for name, trajectory in _adamw_mistakes(start, grads, 0.05, (0.9, 0.99), 1e-3, 0.5).items()}
    for name, final in finals.items():
        assert (final - expected).abs().max() > 1e-4, name
    names = list(finals)
    for i, a in enumerate(names):
        for b in names[i + 1:]:
            assert (finals[a] - finals[b]).abs().max() > 1e-6, (a, b)


def test_adamw_step_leaves_the_learners_random_state_alone():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    check_adamw_step(adamw_step)
    assert torch.equal(torch.rand(3), expected)


def test_adamw_step_answers_are_off_limits():
    for learner, name in [(calls_torch_adamw, "torch.optim.AdamW"), (calls_torch_adam_with_l2, "torch.optim.Adam"),
                          (calls_the_course_optimizer, "configure_optimizer")]:
        with pytest.raises(OffLimitsError, match=name):
            check_adamw_step(learner)
    _PREBUILT["optimizer"] = torch.optim.AdamW([torch.nn.Parameter(torch.zeros(2))])  # made before the check
    with pytest.raises(OffLimitsError, match="off-limits in this exercise"):
        check_adamw_step(steps_a_prebuilt_adamw)


# ----------------------------------------------------------------------------------------------
# Exercise 3: the learning-rate schedule
# ----------------------------------------------------------------------------------------------


def lr_at(step, config):
    if step < config.warmup_steps:
        return config.lr * step / config.warmup_steps
    if step >= config.max_steps:
        return config.min_lr
    progress = (step - config.warmup_steps) / (config.max_steps - config.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))
    return config.min_lr + cosine * (config.lr - config.min_lr)


def _schedule(warmup, decay, after=lambda step, c: c.min_lr):
    def learner(step, c):
        if step < c.warmup_steps:
            return warmup(step, c)
        if step >= c.max_steps:
            return after(step, c)
        return decay(step, c)
    return learner


def _cosine(progress, c, floor=None):
    floor = c.min_lr if floor is None else floor
    return floor + 0.5 * (c.lr - floor) * (1 + math.cos(math.pi * progress))


def _progress(step, c):
    return (step - c.warmup_steps) / (c.max_steps - c.warmup_steps)


RAMP = lambda step, c: c.lr * step / c.warmup_steps  # noqa: E731
DECAY = lambda step, c: _cosine(_progress(step, c), c)  # noqa: E731


def lr_as_tensor(step, config):
    return torch.tensor(lr_at(step, config))


def no_warmup_at_all(step, c):
    return _cosine(min(step, c.max_steps) / c.max_steps, c)


def calls_the_reference_lr(step, config):
    return tfcourse.training.loop.lr_at(step, config)


def uses_torch_scheduler(step, config):
    optimizer = torch.optim.SGD([torch.zeros(1, requires_grad=True)], lr=config.lr)
    scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(optimizer, config.max_steps, config.min_lr)
    for _ in range(step):
        scheduler.step()
    return optimizer.param_groups[0]["lr"]


@pytest.mark.parametrize("learner", [lr_at, lr_as_tensor])
def test_lr_schedule_right_answers_pass(learner, capfd):
    assert_passes(check_lr_schedule, learner, capfd)


@pytest.mark.parametrize(("learner", "message"), [
    (no_warmup_at_all, r"without warm-up"),
    (_schedule(lambda s, c: _cosine(_progress(s, c), c), DECAY), r"without warm-up \(the cosine formula"),
    (_schedule(lambda s, c: c.lr, DECAY), r"without warm-up \(the full rate lr from step 0\)"),
    (_schedule(RAMP, lambda s, c: _cosine(_progress(s, c), c, 0.0)), "decays to 0 instead of min_lr"),
    (_schedule(RAMP, lambda s, c: _cosine(_progress(s, c), c, 0.0), lambda s, c: 0.0), r"and 0 after max_steps"),
    (_schedule(RAMP, lambda s, c: _cosine((s - c.warmup_steps) / c.max_steps, c)), "has not reached min_lr"),
    (_schedule(RAMP, lambda s, c: _cosine(s / c.max_steps, c)), "decay must start at the end of warm-up"),
    (_schedule(lambda s, c: c.lr * (s + 1) / c.warmup_steps, DECAY), r"off-by-one warm-up, lr·\(step \+ 1\)/warmup_steps"),
    (_schedule(lambda s, c: c.lr * (s + 1) / (c.warmup_steps + 1), DECAY), r"\(warmup_steps \+ 1\)"),
    (_schedule(lambda s, c: c.lr * s / (c.warmup_steps - 1), DECAY), r"\(warmup_steps − 1\)"),
    (_schedule(RAMP, lambda s, c: c.lr - (c.lr - c.min_lr) * _progress(s, c)), "linear decay"),
    (_schedule(RAMP, DECAY, DECAY), "rises again after max_steps"),
])
def test_lr_schedule_mistakes_are_named(learner, message):
    with pytest.raises(CheckFailed, match=message):
        check_lr_schedule(learner)


def test_lr_schedule_strict_end_of_run_fails_only_where_warmup_is_the_whole_run():
    def strict(step, c):  # `step > max_steps` divides by zero when warmup_steps == max_steps
        if step < c.warmup_steps:
            return RAMP(step, c)
        if step > c.max_steps:
            return c.min_lr
        return DECAY(step, c)

    check_lr_schedule(strict)
    with pytest.raises(CheckFailed, match="ZeroDivisionError"):
        check_lr_schedule(strict, hidden=True)


def test_lr_schedule_returning_text_is_refused():
    with pytest.raises(CheckFailed, match="expected a number, got str"):
        check_lr_schedule(lambda step, config: "0.001")


@pytest.mark.parametrize(("learner", "name"), [
    (calls_the_reference_lr, "tfcourse.training.loop.lr_at"),
    (uses_torch_scheduler, "CosineAnnealingLR"),
])
def test_lr_schedule_answers_are_off_limits(learner, name):
    with pytest.raises(OffLimitsError, match=name):
        check_lr_schedule(learner)


# ----------------------------------------------------------------------------------------------
# Exercise 4: one training step
# ----------------------------------------------------------------------------------------------


def _loss(model, x, y):
    logits = model(x)  # (B, T, V)
    B, T, V = logits.shape
    return F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))


def train_step(model, batch, optimizer, grad_clip):
    x, y = batch
    loss = _loss(model, x, y)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


def zero_grad_first(model, batch, optimizer, grad_clip):
    model.zero_grad()
    loss = _loss(model, *batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.item()


def no_zero_grad(model, batch, optimizer, grad_clip):
    loss = _loss(model, *batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    return loss.item()


def clip_after_step(model, batch, optimizer, grad_clip):
    loss = _loss(model, *batch)
    loss.backward()
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.zero_grad()
    return loss.item()


def clip_after_step_zero_first(model, batch, optimizer, grad_clip):
    optimizer.zero_grad()
    loss = _loss(model, *batch)
    loss.backward()
    optimizer.step()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    return loss.item()


def no_clipping(model, batch, optimizer, grad_clip):
    loss = _loss(model, *batch)
    loss.backward()
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def zero_grad_before_step(model, batch, optimizer, grad_clip):
    loss = _loss(model, *batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.zero_grad()
    optimizer.step()
    return loss.item()


def zero_grad_to_zeros_before_step(model, batch, optimizer, grad_clip):
    loss = _loss(model, *batch)
    loss.backward()
    optimizer.zero_grad(set_to_none=False)
    optimizer.step()
    return loss.item()


def clip_values(model, batch, optimizer, grad_clip):
    loss = _loss(model, *batch)
    loss.backward()
    torch.nn.utils.clip_grad_value_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def fixed_threshold(model, batch, optimizer, grad_clip):
    return train_step(model, batch, optimizer, 0.5)


def returns_the_tensor(model, batch, optimizer, grad_clip):
    train_step(model, batch, optimizer, grad_clip)
    return torch.tensor(0.0)


def summed_loss(model, batch, optimizer, grad_clip):
    x, y = batch
    logits = model(x)
    B, T, V = logits.shape
    loss = F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T), reduction="sum")
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


def two_steps(model, batch, optimizer, grad_clip):
    train_step(model, batch, optimizer, grad_clip)
    return train_step(model, batch, optimizer, grad_clip)


def no_step(model, batch, optimizer, grad_clip):
    return _loss(model, *batch).item()


def calls_the_reference_step(model, batch, optimizer, grad_clip):
    config = tfcourse.training.loop.TrainConfig(grad_clip=grad_clip, amp=False)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    return tfcourse.training.loop.train_step(model, batch, optimizer, scaler, config)


def uses_default_loss(model, batch, optimizer, grad_clip):
    loss = tfcourse.training.loop.default_loss(model, *batch)
    loss.backward()
    torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip)
    optimizer.step()
    optimizer.zero_grad()
    return loss.item()


@pytest.mark.parametrize("learner", [train_step, zero_grad_first])
def test_train_step_right_answers_pass(learner, capfd):
    assert_passes(check_train_step, learner, capfd)


@pytest.mark.parametrize(("learner", "message"), [
    (no_zero_grad, r"without zero_grad\(\)"),
    (clip_after_step, r"clipping after the optimizer step"),
    (clip_after_step_zero_first, r"clipping after the optimizer step"),
    (no_clipping, "gradients were not clipped"),
    (zero_grad_before_step, r"zero_grad\(\) ran between backward\(\) and optimizer.step\(\)"),
    (zero_grad_to_zeros_before_step, r"zero_grad\(\) ran between backward\(\) and optimizer.step\(\)"),
    (clip_values, "clip_grad_value_ instead of clip_grad_norm_"),
    (fixed_threshold, r"was still 0.5 > grad_clip=0.05 at step\(\): clip the norm of all gradients together, to grad_clip"),
    (returns_the_tensor, "returned a tensor"),
    (summed_loss, r"sum of the per-token losses"),
    (two_steps, r"called optimizer.step\(\) 2 times"),
    (no_step, r"never called optimizer.step\(\)"),
])
def test_train_step_mistakes_are_named(learner, message):
    with pytest.raises(CheckFailed, match=message):
        check_train_step(learner)


@pytest.mark.parametrize(("learner", "name"), [
    (calls_the_reference_step, "tfcourse.training.loop.train_step"),
    (uses_default_loss, "tfcourse.training.loop.default_loss"),
])
def test_train_step_answers_are_off_limits(learner, name):
    with pytest.raises(OffLimitsError, match=name):
        check_train_step(learner)


# ----------------------------------------------------------------------------------------------
# Exercise 5: the evaluation loop
# ----------------------------------------------------------------------------------------------


@torch.no_grad()
def estimate_loss(model, batches):
    was_training = model.training
    model.eval()
    losses = [_loss(model, x, y).item() for x, y in batches]
    model.train(was_training)
    return sum(losses) / len(losses)


def estimate_loss_as_tensor(model, batches):
    model.eval()
    with torch.inference_mode():
        loss = torch.stack([_loss(model, x, y) for x, y in batches]).mean()
    model.train()
    return loss


@torch.no_grad()
def dropout_active(model, batches):
    return sum(_loss(model, x, y).item() for x, y in batches) / len(batches)


def gradients_tracked(model, batches):
    model.eval()
    losses = [_loss(model, x, y).item() for x, y in batches]
    model.train()
    return sum(losses) / len(losses)


@torch.no_grad()
def left_in_eval_mode(model, batches):
    model.eval()
    return sum(_loss(model, x, y).item() for x, y in batches) / len(batches)


@torch.no_grad()
def summed(model, batches):
    model.eval()
    total = sum(_loss(model, x, y).item() for x, y in batches)
    model.train()
    return total


@torch.no_grad()
def last_batch_only(model, batches):
    model.eval()
    for x, y in batches:
        loss = _loss(model, x, y).item()
    model.train()
    return loss


def calls_the_reference_estimate(model, batches):
    iterator = iter(batches * 2)
    losses = tfcourse.training.loop.estimate_loss(model, lambda split, g: next(iterator), len(batches),
                                          tfcourse.training.loop.default_loss, torch.device("cpu"))
    return losses["val"]


@pytest.mark.parametrize("learner", [estimate_loss, estimate_loss_as_tensor])
def test_estimate_loss_right_answers_pass(learner, capfd):
    assert_passes(check_estimate_loss, learner, capfd)


@pytest.mark.parametrize(("learner", "message"), [
    (dropout_active, "dropout was active during evaluation"),
    (gradients_tracked, "tracked gradients"),
    (left_in_eval_mode, "left in eval mode"),
    (summed, r"sum of the batch losses"),
    (last_batch_only, "last batch only"),
])
def test_estimate_loss_mistakes_are_named(learner, message):
    with pytest.raises(CheckFailed, match=message):
        check_estimate_loss(learner)


def test_estimate_loss_reference_is_off_limits():
    with pytest.raises(OffLimitsError, match="tfcourse.training.loop.estimate_loss"):
        check_estimate_loss(calls_the_reference_estimate)


# ----------------------------------------------------------------------------------------------
# The previous-token score of every head
# ----------------------------------------------------------------------------------------------


def previous_token_score(weights):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean(dim=-1)  # entries [t, t-1]


def previous_token_score_by_loops(weights):
    n_heads, length, _ = weights.shape
    return torch.tensor([sum(weights[h, t, t - 1].item() for t in range(1, length)) / (length - 1)
                         for h in range(n_heads)])


def previous_token_score_with_a_mask(weights):
    below = torch.ones(weights.shape[-2:]).tril(diagonal=-1) - torch.ones(weights.shape[-2:]).tril(diagonal=-2)
    return (weights * below).sum(dim=(-2, -1)) / (weights.shape[-1] - 1)


def divided_by_t(weights):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).sum(dim=-1) / weights.shape[-1]


def the_diagonal(weights):
    return weights.diagonal(dim1=-2, dim2=-1).mean(dim=-1)


def axes_swapped(weights):
    return weights.diagonal(offset=1, dim1=-2, dim2=-1).mean(dim=-1)


def the_largest(weights):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).max(dim=-1).values


def over_heads_too(weights):
    return weights.diagonal(offset=-1, dim1=-2, dim2=-1).mean()


def calls_the_reference_score(weights):
    import tfcourse.heads

    return tfcourse.heads.previous_token_score(weights)


@pytest.mark.parametrize("learner", [previous_token_score, previous_token_score_by_loops,
                                     previous_token_score_with_a_mask])
def test_previous_token_score_right_answers_pass(learner, capfd):
    assert_passes(check_previous_token_score, learner, capfd)


@pytest.mark.parametrize(("learner", "message"), [
    (divided_by_t, r"sum over positions divided by T: position 0 has no token before it"),
    (the_diagonal, r"weight on the token itself \(the diagonal\)"),
    (axes_swapped, r"the row is the query, the column the key"),
    (the_largest, r"largest weight on the token before"),
    (over_heads_too, r"expected shape \(4\), got \(\)"),  # one number per head, not one in all
])
def test_previous_token_score_mistakes_are_named(learner, message):
    with pytest.raises(CheckFailed, match=message):
        check_previous_token_score(learner)


def test_previous_token_score_reference_is_off_limits():
    with pytest.raises(OffLimitsError, match="tfcourse.heads.previous_token_score"):
        check_previous_token_score(calls_the_reference_score)


# ----------------------------------------------------------------------------------------------
# The success lines and messages the runner must keep
# ----------------------------------------------------------------------------------------------


def test_adamw_step_success_line_counts_the_steps_of_every_case(capfd):
    check_adamw_step(adamw_step)
    assert capfd.readouterr().out == "✔ adamw_step matches torch.optim.AdamW over 7 steps on 2 cases\n"
    check_adamw_step(adamw_step, hidden=True)
    assert capfd.readouterr().out == ("✔ adamw_step matches torch.optim.AdamW over 24 steps on 5 cases "
                                      "(hidden cases included)\n")


def test_get_batch_judges_x_and_y_each_as_a_tensor():
    def y_missing(data, batch_size, context_len, generator):
        return get_batch(data, batch_size, context_len, generator)[0], None

    with pytest.raises(CheckFailed, match=r"context_len=8\): y: expected a torch.Tensor, got NoneType"):
        check_get_batch(y_missing)


def test_estimate_loss_runs_the_learners_code_with_autograd_on():
    """The check must not switch autograd off itself: switching it off is the learner's part."""
    with pytest.raises(CheckFailed, match="tracked gradients"):
        check_estimate_loss(gradients_tracked)
