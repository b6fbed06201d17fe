"""Checks for lesson 08: training a GPT on Tiny Shakespeare.

The batch sampler (against tfcourse.data.get_batch with the same generator), AdamW's update by hand
(against torch.optim.AdamW over several steps), the learning-rate schedule (against
tfcourse.training.loop.lr_at), one training step (against tfcourse.training.loop.train_step on a tiny
GPT: the same parameters afterwards) and the evaluation loop (against
tfcourse.training.loop.estimate_loss, watching the model's mode and autograd while it runs), and the
previous-token score of the trained model's heads (against tfcourse.heads.previous_token_score).
Every check runs @isolated (the learner's random state and defaults are left as they were) on one thread.
A case may call the learner's code several times (a batch drawn twice, a schedule step by step, several
optimizer steps): its `call` makes those calls and its `inspect` judges what they gave.
"""

from __future__ import annotations

import copy
import functools
import math
from collections.abc import Callable
from typing import Any, NamedTuple

import torch
from torch import Tensor, nn

from ..data.batching import get_batch as reference_get_batch
from ..models import GPT, GPTConfig
from ..training.loop import TrainConfig, default_loss, estimate_loss as reference_estimate_loss
from ..training.loop import lr_at as reference_lr_at
from ..training.loop import train_step as reference_train_step
from .core import Case, CheckFailed, Exercise, call_learner, compare, isolated, one_thread, run, seeded
from .debugging import PlantedBug, debug_exercise

# no_grad=False where the learner's code runs with autograd on, as in the notebook: train_step needs it,
# and estimate_loss is judged on turning it off itself.
GET_BATCH_OFF_LIMITS = ["tfcourse.data.get_batch"]
GET_BATCH = Exercise("the batch sampler", GET_BATCH_OFF_LIMITS,
                     "get_batch draws the same windows as tfcourse.data.get_batch on {n} cases", no_grad=False)
LR_OFF_LIMITS = [
    "tfcourse.training.loop.lr_at",
    "torch.optim.lr_scheduler.CosineAnnealingLR",
    "torch.optim.lr_scheduler.CosineAnnealingWarmRestarts",
    "torch.optim.lr_scheduler.OneCycleLR",
    "torch.optim.lr_scheduler.LinearLR",
    "torch.optim.lr_scheduler.SequentialLR",
]
LR_SCHEDULE = Exercise("the learning-rate schedule", LR_OFF_LIMITS,
                       "lr_at matches tfcourse.training.loop.lr_at on {n} schedules", no_grad=False)
TRAIN_STEP_OFF_LIMITS = ["tfcourse.training.loop.train_step", "tfcourse.training.loop.plain_train_step",
                         "tfcourse.training.loop.default_loss"]
TRAIN_STEP = Exercise("one training step", TRAIN_STEP_OFF_LIMITS,
                      "train_step leaves the same parameters as tfcourse.training.loop.train_step on {n} cases",
                      no_grad=False)
ESTIMATE_LOSS_OFF_LIMITS = ["tfcourse.training.loop.estimate_loss", "tfcourse.training.loop.mean_loss",
                            "tfcourse.training.loop.default_loss"]
ESTIMATE_LOSS = Exercise("the evaluation loop", ESTIMATE_LOSS_OFF_LIMITS,
                         "estimate_loss matches tfcourse.training.loop.estimate_loss on {n} cases, in eval mode, "
                         "without gradients, and leaves the model training", no_grad=False)
ADAMW_OFF_LIMITS = [
    "torch.optim.AdamW",
    "torch.optim.Adam",
    "torch.optim.AdamW.step",  # also an optimizer built before the check started
    "torch.optim.Adam.step",
    "torch.optim.adamw.adamw",
    "torch.optim.adam.adam",
    "tfcourse.training.loop.train",
    "tfcourse.training.loop.train_step",
    "tfcourse.training.loop.configure_optimizer",
    "tfcourse.training.loop.adamw_step",
    "tfcourse.training.loop.plain_train_step",
]
# Under torch.no_grad(), as optimizer.step() runs it. {steps}: every case's steps together.
ADAMW_STEP = Exercise("AdamW's update", ADAMW_OFF_LIMITS,
                      "adamw_step matches torch.optim.AdamW over {steps} steps on {n} cases")


def _as_float(value: Any, what: str) -> float:
    """A number the learner returned, as a Python float; one clear line if it is something else."""
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise CheckFailed(f"{what}: expected one number, got a tensor of shape {tuple(value.shape)}")
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CheckFailed(f"{what}: expected a number, got {type(value).__name__}")
    return float(value)


# ----------------------------------------------------------------------------------------------
# 1. The batch sampler
# ----------------------------------------------------------------------------------------------


def _windows(data: Tensor, starts: Tensor, context_len: int) -> tuple[Tensor, Tensor]:
    positions = starts[:, None] + torch.arange(context_len)[None, :]  # (B, T)
    return data[positions], data[positions + 1]


def _batch_mistakes(data: Tensor, batch_size: int, context_len: int, seed: int) -> dict[str, tuple[Tensor, Tensor]]:
    """The (x, y) that the usual mistakes give with the same generator."""
    n = data.shape[0]
    mistakes: dict[str, tuple[Tensor, Tensor]] = {}
    starts = torch.randint(0, n - context_len, (batch_size,), generator=seeded(seed))
    x, y = _windows(data, starts, context_len)
    mistakes["x and y being the same windows: y must be x shifted one token ahead"] = (x, x.clone())
    if n - context_len - 1 > 0:
        short = torch.randint(0, n - context_len - 1, (batch_size,), generator=seeded(seed))
        mistakes["windows whose starts are drawn from [0, len(data) - T - 1): the last possible window is never "
                  "drawn (randint's upper bound is already exclusive)"] = _windows(data, short, context_len)
    long_ = torch.randint(0, n - context_len + 1, (batch_size,), generator=seeded(seed))
    if int(long_.max()) < n - context_len:  # otherwise that mistake would have crashed
        mistakes["windows whose starts are drawn from [0, len(data) - T + 1): a window starting at len(data) - T "
                 "has no next token for its last position"] = _windows(data, long_, context_len)
    generator = seeded(seed)
    first = torch.randint(0, n - context_len, (batch_size,), generator=generator)
    second = torch.randint(0, n - context_len, (batch_size,), generator=generator)
    mistakes["x and y cut at two different random starts (randint called twice): y must come from x's own "
             "windows"] = (_windows(data, first, context_len)[0], _windows(data, second, context_len)[1])
    return mistakes


def _batch_case(learner_fn: Callable, n: int, batch_size: int, context_len: int, vocab: int, seed: int,
                repeat: bool) -> Case:
    """One batch to draw, its reference and usual mistakes computed first. `repeat`: draw it once more after
    another global seed, to see that `generator` alone decides the windows."""
    data = torch.randint(0, vocab, (n,), generator=seeded(100 + seed))
    expected = reference_get_batch(data, batch_size, context_len, generator=seeded(seed))
    mistakes = _batch_mistakes(data, batch_size, context_len, seed)
    what = f"get_batch(data of {len(data)} tokens, batch_size={batch_size}, context_len={context_len})"

    def draw(learner: Callable, global_seed: int) -> tuple[Any, Any]:
        torch.manual_seed(global_seed)  # the global stream: a learner who ignores `generator` draws from it
        result = call_learner(what, learner, data, batch_size, context_len, seeded(seed))
        if not isinstance(result, tuple) or len(result) != 2:
            got = f"a tuple of {len(result)}" if isinstance(result, tuple) else type(result).__name__
            raise CheckFailed(f"{what}: expected a tuple (x, y), got {got}")
        return result

    def first_draw(learner: Callable) -> tuple[Any, Any]:
        try:
            return draw(learner, 1)
        except CheckFailed as failure:
            if len(data) == context_len + 1:
                raise CheckFailed(f"{failure} — with len(data) = context_len + 1 there is exactly one window, "
                                  "starting at 0: randint(0, len(data) - context_len, ...) must still work") from None
            raise

    def judge(pair: tuple[Any, Any]) -> None:
        x, y = pair
        if repeat:  # the same seed must give the same batch, whatever the global RNG did
            again = draw(learner_fn, 2)
            if isinstance(x, Tensor) and isinstance(again[0], Tensor) and x.shape == again[0].shape \
                    and not torch.equal(x, again[0]):
                raise CheckFailed(f"{what}: two generators with the same seed gave different batches: draw the "
                                  "starts with torch.randint(..., generator=generator), not from the global RNG")
        if isinstance(x, Tensor) and isinstance(y, Tensor) and x.shape == y.shape == expected[0].shape:
            actual = torch.stack([x, y]).long()  # (2, B, T)
            if not torch.equal(actual, torch.stack(expected)):
                for description, (mx, my) in mistakes.items():
                    if torch.equal(actual, torch.stack([mx, my]).long()):
                        raise CheckFailed(f"{what}: your batch equals {description}")
        compare(x, expected[0], f"{what}: x", atol=0, rtol=0)
        compare(y, expected[1], f"{what}: y", atol=0, rtol=0)

    return Case(what, call=first_draw, inspect=judge, unchanged=[data])


@isolated
@one_thread
def check_get_batch(learner_fn: Callable, hidden: bool = False) -> None:
    """get_batch(data, batch_size, context_len, generator) -> (x, y), both (B, T) of torch.long, with
    x[b] = data[i : i + T] and y[b] = data[i + 1 : i + T + 1], i drawn by torch.randint(0, len(data) - T,
    (B,), generator=generator): the same windows as tfcourse.data.get_batch for the same seed."""
    # (tokens in data, batch_size, context_len, vocabulary, seed)
    sizes = [(200, 4, 8, 65, 0), (6, 3, 5, 65, 1), (40, 1, 1, 11, 2)]  # general; one window only; B = T = 1
    if hidden:
        sizes += [(5000, 16, 32, 65, 3), (50, 2, 48, 7, 4), (1000, 64, 16, 1000, 5)]
    cases = [_batch_case(learner_fn, *size, repeat=index == 0) for index, size in enumerate(sizes)]
    run(GET_BATCH, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# 2. AdamW's update, by hand
# ----------------------------------------------------------------------------------------------


def _adamw_by_hand(params: list[Tensor], grads_per_step: list[list[Tensor]], lr: float, betas: tuple[float, float],
                   eps: float, weight_decay: float, *, decay: str = "before", l2: bool = False,
                   correct_m: bool = True, correct_v: bool = True, step_offset: int = 0, eps_inside: bool = False,
                   swap_betas: bool = False) -> list[list[Tensor]]:
    """AdamW written out, with one ingredient changeable: the parameters after every step.

    decay: "before" (AdamW: p·(1 − lr·λ), then the Adam step), "after" (the Adam step, then the decay),
    "no_lr" (p·(1 − λ)), "step_size" (p·(1 − lr/(1 − β₁ᵗ)·λ)) or "none". l2: λ·p added to the gradient.
    step_offset: the bias corrections use step + step_offset.
    """
    beta1, beta2 = (betas[1], betas[0]) if swap_betas else betas
    params = [p.detach().clone() for p in params]
    m = [torch.zeros_like(p) for p in params]
    v = [torch.zeros_like(p) for p in params]
    trajectory = []
    for step, grads in enumerate(grads_per_step, start=1):
        t = step + step_offset
        with torch.no_grad():
            for p, g, m_, v_ in zip(params, grads, m, v):
                if l2:
                    g = g + weight_decay * p
                correction1 = 1 - beta1 ** t if correct_m else 1.0
                correction2 = 1 - beta2 ** t if correct_v else 1.0
                if decay == "before":
                    p.mul_(1 - lr * weight_decay)
                elif decay == "no_lr":
                    p.mul_(1 - weight_decay)
                elif decay == "step_size":
                    p.mul_(1 - lr / correction1 * weight_decay)
                m_.mul_(beta1).add_(g, alpha=1 - beta1)
                v_.mul_(beta2).addcmul_(g, g, value=1 - beta2)
                m_hat, v_hat = m_ / correction1, v_ / correction2
                denominator = (v_hat + eps).sqrt() if eps_inside else v_hat.sqrt() + eps
                p.sub_(lr * m_hat / denominator)
                if decay == "after":
                    p.mul_(1 - lr * weight_decay)
        trajectory.append([p.clone() for p in params])
    return trajectory


def _adamw_mistakes(params: list[Tensor], grads_per_step: list[list[Tensor]], lr: float, betas: tuple[float, float],
                    eps: float, weight_decay: float) -> dict[str, list[list[Tensor]]]:
    """What the usual mistakes give, step by step (description -> parameters after each step)."""
    by_hand = functools.partial(_adamw_by_hand, params, grads_per_step, lr, betas, eps, weight_decay)
    return {
        "Adam with L2 regularisation: λ·p added to the gradient, so it goes through m and v and is divided by "
        "√v̂ like the rest; AdamW's decay is decoupled: shrink the weights by lr·λ directly, outside m and v":
            by_hand(decay="none", l2=True),
        "AdamW *without* bias correction: m and v start at 0, so the first steps are too small; divide m by "
        "(1 − β₁ᵗ) and v by (1 − β₂ᵗ)": by_hand(correct_m=False, correct_v=False),
        "AdamW with the bias correction of m only: v also needs its own, v / (1 − β₂ᵗ)": by_hand(correct_v=False),
        "AdamW with the bias correction of v only: m also needs its own, m / (1 − β₁ᵗ)": by_hand(correct_m=False),
        "the weight decay applied *after* the Adam update: decay the weights as they were before this step, "
        "p·(1 − lr·λ), then take the Adam step": by_hand(decay="after"),
        "a weight decay not scaled by the learning rate, p·(1 − λ): the decay is p·(1 − lr·λ)": by_hand(decay="no_lr"),
        "a weight decay scaled by the bias-corrected step size lr/(1 − β₁ᵗ): the decay is p·(1 − lr·λ), "
        "with the plain lr": by_hand(decay="step_size"),
        "AdamW *without* weight decay: shrink the weights by p·(1 − lr·λ) before the Adam step":
            by_hand(decay="none"),
        "ε inside the square root, √(v̂ + ε): AdamW adds it outside, √v̂ + ε": by_hand(eps_inside=True),
        "bias corrections computed with step + 1: step already counts from 1 (it is 1 at the first update)":
            by_hand(step_offset=1),
        "β₁ and β₂ swapped: m averages with β₁, v with β₂": by_hand(swap_betas=True),
    }


def _adamw_reference(params: list[Tensor], grads_per_step: list[list[Tensor]], lr: float, betas: tuple[float, float],
                     eps: float, weight_decay: float) -> tuple[list[list[Tensor]], ...]:
    """torch.optim.AdamW, step by step: (parameters, exp_avg, exp_avg_sq) after each step."""
    params = [nn.Parameter(p.detach().clone()) for p in params]
    optimizer = torch.optim.AdamW(params, lr=lr, betas=betas, eps=eps, weight_decay=weight_decay, foreach=False,
                                  fused=False)
    trajectory, averages, squares = [], [], []
    for grads in grads_per_step:
        for p, g in zip(params, grads):
            p.grad = g.clone()
        optimizer.step()
        trajectory.append([p.detach().clone() for p in params])
        averages.append([optimizer.state[p]["exp_avg"].clone() for p in params])
        squares.append([optimizer.state[p]["exp_avg_sq"].clone() for p in params])
    return trajectory, averages, squares


def _stacked(tensors: list[Tensor]) -> Tensor:
    return torch.cat([t.detach().reshape(-1) for t in tensors])


def _matches(actual: Tensor, wrong: list[Tensor], atol: float, rtol: float) -> bool:
    wrong_flat = _stacked(wrong)
    return actual.shape == wrong_flat.shape and bool(torch.isfinite(wrong_flat).all()) and bool(
        torch.allclose(actual.double(), wrong_flat.double(), atol=atol, rtol=rtol))


class _AdamwStep(NamedTuple):
    """One call of the learner's adamw_step, as it is judged afterwards (tensors flattened)."""

    what: str
    returned: Any
    replaced: bool  # the lists given hold new tensors afterwards (params[i] = ...)
    before: Tensor  # the parameters before the step
    after: Tensor
    exp_avg: Tensor
    exp_avg_sq: Tensor
    grads_before: list[Tensor]
    grads: list[Tensor]


def _adamw_steps(learner_fn: Callable, shapes: list[tuple[int, ...]], start: list[Tensor],
                 grads_per_step: list[list[Tensor]], lr: float, betas: tuple[float, float], eps: float,
                 weight_decay: float) -> list[_AdamwStep]:
    """The learner's adamw_step, step after step, on the tensors an optimizer would hold."""
    # Parameters are leaves that need grad; the state starts at 0.
    ours = ([nn.Parameter(p.clone()) for p in start], [torch.zeros_like(p) for p in start],
            [torch.zeros_like(p) for p in start])
    records = []
    for step, grads in enumerate(grads_per_step, start=1):
        given = tuple(list(tensors) for tensors in ours)  # new lists, our tensors
        grads = [g.clone() for g in grads]
        grads_before = [g.clone() for g in grads]
        params_before = _stacked(ours[0]).clone()
        what = (f"adamw_step (step {step}, lr={lr:g}, betas={betas}, eps={eps:g}, "
                f"weight_decay={weight_decay:g}, tensors of shapes {', '.join(str(s) for s in shapes)})")
        returned = call_learner(what, learner_fn, given[0], grads, given[1], given[2], step, lr, betas, eps,
                                weight_decay)
        replaced = any(a is not b for new, old in zip(given, ours) for a, b in zip(new, old))
        records.append(_AdamwStep(what, returned, replaced, params_before, *(_stacked(t).clone() for t in ours),
                                  grads_before, grads))
    return records


def _expect_updated(record: _AdamwStep, step: int) -> None:
    """The parameters moved, in place, to finite values."""
    what = record.what
    if torch.equal(record.after, record.before):
        if record.replaced:
            raise CheckFailed(f"{what}: params are unchanged because you put new tensors into the lists "
                              "(params[i] = ...); the optimizer keeps the old ones: update each tensor in "
                              "place (p.sub_(...), p.mul_(...) or p.copy_(...))")
        if record.returned is not None:
            raise CheckFailed(f"{what}: params are unchanged and the function returned "
                              f"{type(record.returned).__name__}; this adamw_step updates params, exp_avg and "
                              "exp_avg_sq in place (p.sub_(...), p.mul_(...) or p.copy_(...)) and returns None")
        raise CheckFailed(f"{what}: params are unchanged; `p = p - ...` makes a new tensor and drops it: "
                          "update the tensors themselves in place (p.sub_(...), p.mul_(...) or p.copy_(...))")
    if not torch.isfinite(record.after).all():
        hint = (" — a bias correction with step − 1 is 1 − β⁰ = 0 at the first update, a division by zero: "
                "step counts from 1 here" if step == 1 else "")
        raise CheckFailed(f"{what}: your parameters contain NaN or inf{hint}")


def _expect_adamw_params(record: _AdamwStep, expected: list[Tensor], mistakes: dict[str, list[Tensor]],
                         explained: str | None, atol: float, rtol: float) -> None:
    """The parameters after this step are torch.optim.AdamW's; else the mistake they equal is named."""
    reference = _stacked(expected)
    if torch.allclose(record.after.double(), reference.double(), atol=atol, rtol=rtol):
        return
    if explained is not None:
        raise CheckFailed(f"{record.what}: your parameters equal {explained}")
    for description, wrong in mistakes.items():
        if _matches(record.after, wrong, atol, rtol):
            raise CheckFailed(f"{record.what}: your parameters equal {description}")
    worst = (record.after.double() - reference.double()).abs().max().item()
    raise CheckFailed(f"{record.what}: your parameters differ from torch.optim.AdamW's (largest difference "
                      f"{worst:.3g})")


def _expect_adamw_state(record: _AdamwStep, averages: list[Tensor], squares: list[Tensor], explained: str | None,
                        atol: float, rtol: float) -> None:
    """exp_avg and exp_avg_sq after this step are torch.optim.AdamW's state."""
    for name, actual, wanted in (("exp_avg", record.exp_avg, averages), ("exp_avg_sq", record.exp_avg_sq, squares)):
        reference = _stacked(wanted)
        if torch.allclose(actual.double(), reference.double(), atol=atol, rtol=rtol):
            continue
        if explained is not None:
            raise CheckFailed(f"{record.what}: your {name} differs from torch.optim.AdamW's state, and over all "
                              f"the steps your parameters equal {explained}")
        if not actual.any():
            raise CheckFailed(f"{record.what}: {name} is still all zeros: update the running averages in place, "
                              "so that the next step continues from them")
        raise CheckFailed(f"{record.what}: {name} differs from torch.optim.AdamW's state; it holds the running "
                          "average itself, before bias correction (the correction is recomputed at each step)")


def _judge_adamw_steps(records: list[_AdamwStep], expected: list[list[Tensor]], averages: list[list[Tensor]],
                       squares: list[list[Tensor]], mistakes: dict[str, list[list[Tensor]]], atol: float,
                       rtol: float) -> None:
    trajectory = [record.after for record in records]
    # A mistake that gives the learner's parameters at every step: two mistakes may agree on one step, and
    # some (β₁, β₂ swapped) agree with AdamW at step 1 and show only in the state.
    explained = next((description for description, wrong in mistakes.items()
                      if all(_matches(mine, theirs, atol, rtol) for mine, theirs in zip(trajectory, wrong))), None)
    for step, record in enumerate(records, start=1):
        _expect_updated(record, step)
        _expect_adamw_params(record, expected[step - 1], {k: wrong[step - 1] for k, wrong in mistakes.items()},
                             explained, atol, rtol)
        _expect_adamw_state(record, averages[step - 1], squares[step - 1], explained, atol, rtol)
        if any(not torch.equal(old, new) for old, new in zip(record.grads_before, record.grads)):
            raise CheckFailed(f"{record.what}: your code modified grads in place; they belong to the caller: compute "
                              "with them without changing them")


def _adamw_case(index: int, shapes: list[tuple[int, ...]], n_steps: int, lr: float, betas: tuple[float, float],
                eps: float, weight_decay: float, scale: float, dtype: torch.dtype) -> Case:
    """`n_steps` calls of adamw_step in a row, on seeded parameters and gradients; AdamW's trajectory and
    the usual mistakes' computed first."""
    gen = seeded(30 + index)
    start = [torch.randn(shape, generator=gen, dtype=torch.float64).to(dtype) for shape in shapes]
    grads_per_step = [[(scale * torch.randn(shape, generator=gen, dtype=torch.float64)).to(dtype)
                       for shape in shapes] for _ in range(n_steps)]
    expected, averages, squares = _adamw_reference(start, grads_per_step, lr, betas, eps, weight_decay)
    mistakes = _adamw_mistakes(start, grads_per_step, lr, betas, eps, weight_decay)
    atol, rtol = (1e-10, 1e-8) if dtype == torch.float64 else (1e-6, 1e-5)
    return Case("adamw_step",
                call=functools.partial(_adamw_steps, shapes=shapes, start=start, grads_per_step=grads_per_step,
                                       lr=lr, betas=betas, eps=eps, weight_decay=weight_decay),
                inspect=functools.partial(_judge_adamw_steps, expected=expected, averages=averages, squares=squares,
                                          mistakes=mistakes, atol=atol, rtol=rtol))


@isolated
@one_thread
def check_adamw_step(learner_fn: Callable, hidden: bool = False) -> None:
    """adamw_step(params, grads, exp_avg, exp_avg_sq, step, lr, betas, eps, weight_decay) -> None: one AdamW update
    of every tensor in `params`, in place, with the running averages exp_avg (m) and exp_avg_sq (v) updated in
    place too; `step` counts from 1. Called under torch.no_grad() for several steps in a row, it must give the
    parameters and state of torch.optim.AdamW."""
    # (shapes, steps, lr, betas, eps, weight_decay, gradient scale, dtype)
    settings = [
        # Large lr, decay and ε next to small gradients: every usual mistake moves the weights visibly.
        ([(3, 4), (5,)], 4, 0.05, (0.9, 0.99), 1e-3, 0.5, 0.01, torch.float64),
        ([(2, 3, 4), (1,)], 3, 1e-2, (0.8, 0.95), 1e-8, 0.1, 1.0, torch.float32),  # float32 stays float32
    ]
    if hidden:
        settings += [
            ([(7,), (1,)], 5, 3e-3, (0.9, 0.999), 1e-8, 0.0, 1.0, torch.float64),  # the no-decay group
            ([(4, 4)], 6, 0.05, (0.0, 0.9), 1e-6, 0.2, 0.1, torch.float64),  # β₁ = 0: no momentum
            ([(16, 8), (8,)], 6, 1e-3, (0.9, 0.99), 1e-8, 0.1, 3.0, torch.float32),
        ]
    cases = [_adamw_case(index, *setting) for index, setting in enumerate(settings)]
    run(ADAMW_STEP, learner_fn, cases, hidden, fields={"steps": sum(n_steps for _, n_steps, *_ in settings)})


# ----------------------------------------------------------------------------------------------
# 3. The learning-rate schedule
# ----------------------------------------------------------------------------------------------


def _schedule_mistakes(steps: list[int], c: TrainConfig) -> dict[str, Tensor]:
    lr, low, warm, total = c.lr, c.min_lr, c.warmup_steps, c.max_steps

    def cosine(progress: float, floor: float = low) -> float:
        return floor + 0.5 * (lr - floor) * (1 + math.cos(math.pi * progress))

    def schedule(warmup: Callable[[int], float], decay: Callable[[int], float], after: Callable[[int], float]):
        return torch.tensor([warmup(s) if s < warm else (after(s) if s >= total else decay(s)) for s in steps],
                            dtype=torch.float64)

    ramp = lambda s: lr * s / warm  # noqa: E731 - the right warm-up, reused by the mistakes below
    span = max(total - warm, 1)
    right_decay = lambda s: cosine((s - warm) / span)  # noqa: E731
    floor = lambda s: low  # noqa: E731
    mistakes = {
        "a schedule *without* warm-up: the rate must climb linearly from 0 to lr over the first "
        "warmup_steps steps": torch.tensor([cosine(min(s, total) / total) for s in steps], dtype=torch.float64),
        "a schedule *without* warm-up (the cosine formula used for the first steps too): the rate must climb "
        "linearly from 0 to lr first": schedule(lambda s: cosine((s - warm) / span), right_decay, floor),
        "a schedule *without* warm-up (the full rate lr from step 0): the rate must climb linearly from 0 to "
        "lr over the first warmup_steps steps": schedule(lambda s: lr, right_decay, floor),
        "a cosine that decays to 0 instead of min_lr: use min_lr + ½(lr − min_lr)(1 + cos(π·progress))":
            schedule(ramp, lambda s: cosine((s - warm) / span, 0.0), floor),
        "a cosine that decays to 0 instead of min_lr (and 0 after max_steps)":
            schedule(ramp, lambda s: cosine((s - warm) / span, 0.0), lambda s: 0.0),
        "a cosine whose progress is (step − warmup_steps) / max_steps: it has not reached min_lr when the run "
        "ends; divide by (max_steps − warmup_steps)": schedule(ramp, lambda s: cosine((s - warm) / total), floor),
        "a cosine whose progress is step / max_steps: the decay must start at the end of warm-up":
            schedule(ramp, lambda s: cosine(s / total), floor),
        "an off-by-one warm-up, lr·(step + 1)/warmup_steps: steps count from 1 here, so the rate is "
        "lr·step/warmup_steps and reaches lr exactly at step warmup_steps":
            schedule(lambda s: lr * (s + 1) / warm, right_decay, floor),
        "an off-by-one warm-up, lr·(step + 1)/(warmup_steps + 1): steps count from 1 here, so the rate is "
        "lr·step/warmup_steps": schedule(lambda s: lr * (s + 1) / (warm + 1), right_decay, floor),
        "an off-by-one warm-up, lr·step/(warmup_steps − 1): the rate passes lr before the warm-up ends":
            schedule(lambda s: lr * s / max(warm - 1, 1), right_decay, floor),
        "a linear decay from lr to min_lr: the decay is half a cosine wave":
            schedule(ramp, lambda s: lr - (lr - low) * (s - warm) / span, floor),
        "a cosine that rises again after max_steps (cos goes back up past π): return min_lr from max_steps on":
            schedule(ramp, right_decay, lambda s: cosine((s - warm) / span)),
    }
    return mistakes


def _schedule_case(config: TrainConfig) -> Case:
    """The learner's rate at every step of a short run (the interesting steps of a long one, and a few in
    between), as one vector; the reference's and the usual mistakes' computed first."""
    w, s = config.warmup_steps, config.max_steps
    steps = list(range(0, s + 6)) if s <= 200 else sorted(
        {0, 1, 2, w // 2, w - 1, w, w + 1, (w + s) // 2, s // 3, s - 1, s, s + 1, s + 50})
    expected = torch.tensor([reference_lr_at(step, config) for step in steps], dtype=torch.float64)
    mistakes = _schedule_mistakes(steps, config)
    settings = (f"lr={config.lr:g}, min_lr={config.min_lr:g}, warmup_steps={config.warmup_steps}, "
                f"max_steps={config.max_steps}")
    what = f"the schedule for {settings}"

    def rates(learner: Callable) -> Tensor:
        values = []
        for step in steps:
            call = f"lr_at({step}, config) with {settings}"
            values.append(_as_float(call_learner(call, learner, step, config), call))
        return torch.tensor(values, dtype=torch.float64)

    def judge(actual: Tensor) -> None:
        # Not `compare`: a wrong schedule is named as a whole, or by the first step where it strays.
        if torch.allclose(actual, expected, atol=1e-12, rtol=1e-6):
            return
        for description, wrong in mistakes.items():
            if torch.allclose(actual, wrong, atol=1e-12, rtol=1e-6):
                raise CheckFailed(f"{what}: your rates equal {description}")
        worst = int((actual - expected).abs().argmax())
        raise CheckFailed(f"{what}: at step {steps[worst]} your rate is {actual[worst].item():.6g}, the reference "
                          f"is {expected[worst].item():.6g}")

    return Case(what, call=rates, inspect=judge)


@isolated
@one_thread
def check_lr_schedule(learner_fn: Callable, hidden: bool = False) -> None:
    """lr_at(step, config): linear warm-up from 0 to config.lr over config.warmup_steps steps, then half a
    cosine down to config.min_lr at config.max_steps, and min_lr afterwards; the same as tfcourse.training.loop.lr_at."""
    configs = [
        TrainConfig(max_steps=100, warmup_steps=10, lr=1e-3, min_lr=1e-4),
        TrainConfig(max_steps=2000, warmup_steps=100, lr=1e-3, min_lr=1e-4),
    ]
    if hidden:
        configs += [
            TrainConfig(max_steps=50, warmup_steps=0, lr=3e-3, min_lr=0.0),  # no warm-up at all, decay to 0
            TrainConfig(max_steps=20, warmup_steps=20, lr=6e-4, min_lr=6e-5),  # warm-up is the whole run
            TrainConfig(max_steps=5000, warmup_steps=200, lr=6e-4, min_lr=6e-5),
            TrainConfig(max_steps=7, warmup_steps=3, lr=0.5, min_lr=0.5),  # a constant rate after warm-up
        ]
    run(LR_SCHEDULE, learner_fn, [_schedule_case(config) for config in configs], hidden)


# ----------------------------------------------------------------------------------------------
# 4. One training step
# ----------------------------------------------------------------------------------------------


def _grad_norm(parameters) -> float | None:
    """The total L2 norm of the gradients, or None when no parameter has one."""
    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return None
    return torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(g.double()) for g in grads])).item()


def _flat(model: nn.Module) -> Tensor:
    return torch.cat([p.detach().reshape(-1) for p in model.parameters()])


def _optimizer(model: nn.Module) -> torch.optim.Optimizer:
    # A large rate, so that each mistake moves the parameters visibly.
    return torch.optim.AdamW(model.parameters(), lr=1e-2, betas=(0.9, 0.99), weight_decay=0.1)


def _manual_steps(model: nn.Module, batches, clip: float, *, zero_grad: bool = True,
                  clip_fn: Callable | None = None, seeds=()) -> Tensor:
    """Train a copy of `model` by hand with one ingredient changed; returns its parameters."""
    model = copy.deepcopy(model)
    optimizer = _optimizer(model)
    for seed, (x, y) in zip(seeds, batches):
        torch.manual_seed(seed)
        default_loss(model, x, y).backward()
        if clip_fn is not None:
            clip_fn(model.parameters(), clip)
        optimizer.step()
        if zero_grad:
            optimizer.zero_grad(set_to_none=True)
    return _flat(model)


class _StepSpy:
    """Watches an optimizer: the gradient norm when step() starts, and when zero_grad() is called."""

    def __init__(self, model: nn.Module, optimizer: torch.optim.Optimizer):
        self.events: list[tuple[str, float | None]] = []
        parameters = list(model.parameters())
        self.handle = optimizer.register_step_pre_hook(
            lambda opt, args, kwargs: self.events.append(("step", _grad_norm(parameters))))
        for owner in (optimizer, model):  # optimizer.zero_grad() or model.zero_grad()
            original = owner.zero_grad

            def spying(*args, _original=original, **kwargs):
                self.events.append(("zero_grad", _grad_norm(parameters)))
                return _original(*args, **kwargs)

            owner.zero_grad = spying

    def take(self) -> list[tuple[str, float | None]]:
        events, self.events = self.events, []
        return events


def _reference_steps(model: nn.Module, batches, seeds, clip: float) -> tuple[Tensor, Tensor, list[float | None]]:
    """tfcourse's train_step on a copy of `model`: the parameters afterwards, the losses, and the gradient
    norm each step has before clipping."""
    reference = copy.deepcopy(model)
    optimizer = _optimizer(reference)
    scaler = torch.amp.GradScaler("cpu", enabled=False)
    config = TrainConfig(grad_clip=clip, amp=False)
    losses, norms = [], []
    for seed, batch_xy in zip(seeds, batches):
        probe = copy.deepcopy(reference)  # the gradient norm this step will have before clipping
        torch.manual_seed(seed)
        default_loss(probe, *batch_xy).backward()
        norms.append(_grad_norm(probe.parameters()))
        torch.manual_seed(seed)
        losses.append(reference_train_step(reference, batch_xy, optimizer, scaler, config))
    return _flat(reference), torch.tensor(losses, dtype=torch.float64), norms


def _learner_steps(learner_fn: Callable, model: nn.Module, batches, seeds, clip: float):
    """The learner's train_step on a copy of `model`, step after step, watched by a _StepSpy: the model
    afterwards, what each step returned, and what happened during each step."""
    learner_model = copy.deepcopy(model)
    optimizer = _optimizer(learner_model)
    spy = _StepSpy(learner_model, optimizer)
    returned, events = [], []
    for step, (seed, (x, y)) in enumerate(zip(seeds, batches), start=1):
        what = f"train_step (step {step}, batch of shape {tuple(x.shape)}, grad_clip={clip})"
        torch.manual_seed(seed)
        returned.append(call_learner(what, learner_fn, learner_model, (x, y), optimizer, clip))
        events.append(spy.take() + [("returned", _grad_norm(learner_model.parameters()))])
    spy.handle.remove()
    return learner_model, returned, events


def _judge_step_events(step_events: list[tuple[str, float | None]], norm: float, clip: float, step: int,
                       where: str) -> None:
    """One optimizer.step() per train_step, with gradients there, clipped to grad_clip before it."""
    at_step = [grad for kind, grad in step_events if kind == "step"]
    if not at_step:
        raise CheckFailed(f"train_step never called optimizer.step() (step {step}, {where})")
    if len(at_step) > 1:
        raise CheckFailed(f"train_step called optimizer.step() {len(at_step)} times in one step; once is right")
    if at_step[0] is None or at_step[0] == 0.0:
        raise CheckFailed("zero_grad() ran between backward() and optimizer.step(): step() found no gradients, "
                          "so nothing was learned. Zero the gradients after step() (or before backward())")
    if norm > clip * 1.001 and clip * 1.001 < at_step[0] < norm * 0.999:
        raise CheckFailed(f"the gradients were changed but their total norm was still {at_step[0]:.3g} > "
                          f"grad_clip={clip} at step(): clip the norm of all gradients together, to grad_clip "
                          "(clip_grad_value_ instead of clip_grad_norm_, or a fixed threshold, gives this)")
    if norm > clip * 1.001 and at_step[0] > clip * 1.001:
        index = [kind for kind, _ in step_events].index("step")
        later = [grad for _, grad in step_events[index + 1:] if grad]
        if any(grad <= clip * 1.001 for grad in later):
            raise CheckFailed(f"clipping *after* the optimizer step: step() already used the unclipped "
                              f"gradients (norm {at_step[0]:.3g} > grad_clip={clip}); clip between backward() "
                              "and step()")
        raise CheckFailed(f"the gradients were not clipped: step() saw a gradient norm of {at_step[0]:.3g} with "
                          f"grad_clip={clip}; call torch.nn.utils.clip_grad_norm_(model.parameters(), grad_clip) "
                          "between backward() and step()")


def _train_step_case(index: int, batch: int, length: int, clip: float, n_steps: int, dropout: float) -> Case:
    """`n_steps` calls of train_step on a tiny GPT; the reference's parameters, losses and gradient norms,
    and the usual mistakes' parameters, computed first."""
    torch.manual_seed(index)
    model = GPT(GPTConfig.gpt(vocab_size=11, max_len=8, d_model=16, n_heads=2, n_layers=1, dropout=dropout)).train()
    batches = [tuple(torch.randint(0, 11, (2, batch, length)).unbind(0)) for _ in range(n_steps)]
    seeds = [1000 * index + k for k in range(n_steps)]  # dropout masks: the same for everyone
    expected, losses, norms = _reference_steps(model, batches, seeds, clip)
    mistakes = {
        "training *without* zero_grad(): backward() adds to .grad, so each step also used the gradients of "
        "all earlier batches": _manual_steps(model, batches, clip, zero_grad=False,
                                             clip_fn=torch.nn.utils.clip_grad_norm_, seeds=seeds),
        "training with clip_grad_value_ instead of clip_grad_norm_: clip the norm of all gradients together":
            _manual_steps(model, batches, clip, clip_fn=torch.nn.utils.clip_grad_value_, seeds=seeds),
    }
    shape = tuple(batches[0][0].shape)
    where = f"batches of shape {shape}, grad_clip={clip}"

    def judge(result) -> Tensor:
        learner_model, returned, events = result
        for step, value in enumerate(returned, start=1):
            if isinstance(value, Tensor):
                raise CheckFailed(f"train_step returned a tensor at step {step}: return loss.item(), a Python "
                                  "float (a tensor would keep the step's whole graph in memory)")
            _as_float(value, f"train_step's return value at step {step}")
        for step, (step_events, norm) in enumerate(zip(events, norms), start=1):
            _judge_step_events(step_events, norm, clip, step, where)
        got = torch.tensor([float(v) for v in returned], dtype=torch.float64)
        # The first loss depends only on the starting weights: compare it before the parameters.
        compare(got[:1], losses[:1], f"the loss train_step returned at step 1 ({where})",
                {"the *sum* of the per-token losses: F.cross_entropy averages them (keep reduction='mean')":
                 losses[:1] * shape[0] * shape[1]}, atol=1e-5, rtol=1e-5)
        compare(_flat(learner_model), expected, f"the parameters after {len(batches)} steps ({where})", mistakes,
                atol=1e-6, rtol=1e-5)
        return got  # every step's loss, compared last

    return Case("train_step",
                call=functools.partial(_learner_steps, model=model, batches=batches, seeds=seeds, clip=clip),
                inspect=judge, expected=losses, label=f"the losses train_step returned ({where})", atol=1e-5,
                rtol=1e-5)


@isolated
@one_thread
def check_train_step(learner_fn: Callable, hidden: bool = False) -> None:
    """train_step(model, batch, optimizer, grad_clip) -> loss as a Python float: forward, cross-entropy loss,
    backward, clip the gradient norm to grad_clip, optimizer step, zero the gradients. After the same steps,
    a tiny GPT must have the same parameters as with tfcourse.training.loop.train_step."""
    # (batch, length, grad_clip, steps, dropout)
    settings = [(4, 8, 0.05, 2, 0.0), (1, 1, 0.05, 2, 0.0)]
    if hidden:
        settings += [(3, 5, 100.0, 2, 0.0), (2, 8, 1.0, 3, 0.0), (4, 6, 0.2, 3, 0.1)]
    cases = [_train_step_case(index, *setting) for index, setting in enumerate(settings)]
    run(TRAIN_STEP, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# 5. The evaluation loop
# ----------------------------------------------------------------------------------------------


class _ForwardSpy:
    """Records, for every forward pass: was the model (or any dropout) in training mode, was autograd on."""

    def __init__(self, model: nn.Module):
        self.calls: list[tuple[bool, bool]] = []
        dropouts = [m for m in model.modules() if isinstance(m, nn.Dropout)]

        def hook(module, args):
            self.calls.append((model.training or any(d.training for d in dropouts), torch.is_grad_enabled()))

        # On the first layer, not on the model: model.forward(x) called directly must be seen too.
        self.handle = model.embed.register_forward_pre_hook(hook)


def _judge_evaluation(what: str, model: nn.Module, calls: list[tuple[bool, bool]],
                      training_after: bool, parameters_before: Tensor) -> None:
    """The model ran once per batch, in eval mode, without autograd, and was left training and unchanged."""
    if not calls:
        raise CheckFailed(f"{what}: the model was never called")
    if any(training for training, _ in calls):
        raise CheckFailed(f"{what}: the model ran in training mode, so dropout was active during evaluation; call "
                          "model.eval() before the loop")
    if any(grad for _, grad in calls):
        raise CheckFailed(f"{what}: the forward passes tracked gradients; evaluate under torch.no_grad() (it "
                          "saves the memory and time autograd would spend on a graph nobody uses)")
    if not training_after:
        raise CheckFailed(f"{what}: the model was left in eval mode, so dropout stays off when training "
                          "continues; put it back with model.train()")
    if not torch.equal(_flat(model), parameters_before):
        raise CheckFailed(f"{what}: evaluation changed the model's parameters; it must only measure")


def _estimate_case(index: int, n_batches: int, batch: int, length: int, dropout: float) -> Case:
    """estimate_loss on a tiny GPT in training mode; the reference's loss and the usual mistakes' first."""
    torch.manual_seed(20 + index)
    model = GPT(GPTConfig.gpt(vocab_size=13, max_len=12, d_model=16, n_heads=2, n_layers=1, dropout=dropout)).train()
    batches = [tuple(torch.randint(0, 13, (2, batch, length)).unbind(0)) for _ in range(n_batches)]
    served = {"train": 0, "val": 0}

    def get_batch(split, generator):  # the reference's source of batches: these, in order
        served[split] += 1
        return batches[served[split] - 1]

    expected = reference_estimate_loss(model, get_batch, n_batches, default_loss, torch.device("cpu"))["val"]
    with torch.no_grad():
        per_batch = [default_loss(model.eval(), x, y).item() for x, y in batches]
    model.train()
    mistakes = {
        "the *sum* of the batch losses: return their mean": sum(per_batch),
        "the loss of the last batch only: average over all batches": per_batch[-1],
    }
    what = f"estimate_loss(model, {len(batches)} batches of shape {tuple(batches[0][0].shape)})"

    def watched(learner: Callable):
        parameters_before = _flat(model).clone()
        spy = _ForwardSpy(model)
        value = call_learner(what, learner, model, batches)
        spy.handle.remove()
        return value, spy.calls, model.training, parameters_before

    def judge(result) -> Tensor:
        value, calls, training_after, parameters_before = result
        _judge_evaluation(what, model, calls, training_after, parameters_before)
        actual = _as_float(value, what)
        if len(calls) != len(batches):
            raise CheckFailed(f"{what}: the model was called {len(calls)} times for {len(batches)} batches")
        return torch.tensor(actual, dtype=torch.float64)

    return Case(what, call=watched, inspect=judge, expected=torch.tensor(expected, dtype=torch.float64),
                mistakes={k: torch.tensor(v, dtype=torch.float64) for k, v in mistakes.items()}, atol=1e-5, rtol=1e-5)


@isolated
@one_thread
def check_estimate_loss(learner_fn: Callable, hidden: bool = False) -> None:
    """estimate_loss(model, batches) -> the mean cross-entropy over the batches (a float), computed in eval mode
    (no dropout) under torch.no_grad(); afterwards the model is back in training mode. The same number as
    tfcourse.training.loop.estimate_loss."""
    # (number of batches, batch, length, dropout)
    settings = [(3, 4, 8, 0.3), (1, 1, 1, 0.3)]
    if hidden:
        settings += [(5, 2, 12, 0.5), (2, 8, 4, 0.0)]
    cases = [_estimate_case(index, *setting) for index, setting in enumerate(settings)]
    run(ESTIMATE_LOSS, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Exercise: the previous-token score of every head
# ----------------------------------------------------------------------------------------------

PREVIOUS_TOKEN = Exercise("the previous-token score", ["tfcourse.heads.previous_token_score"],
                          "previous_token_score matches tfcourse.heads.previous_token_score on {n} sets of weights")


def _causal_weights(n_heads: int, length: int, seed: int, previous_head: int | None = None) -> Tensor:
    """(n_heads, T, T) attention weights as a causal softmax makes them; `previous_head`, if given,
    leans hard on the token before (so a score near 1 is among the cases)."""
    scores = torch.randn(n_heads, length, length, generator=seeded(seed)) * 2
    if previous_head is not None:
        scores[previous_head] += 8 * torch.eye(length).roll(-1, dims=1)  # row t: +8 on column t - 1
    scores = scores.masked_fill(torch.ones(length, length).triu(diagonal=1).bool(), float("-inf"))
    return scores.softmax(dim=-1)


def _previous_token_case(seed: int, n_heads: int, length: int, previous_head: int | None) -> Case:
    weights = _causal_weights(n_heads, length, seed, previous_head)
    before = weights.diagonal(offset=-1, dim1=-2, dim2=-1)  # (n_heads, T - 1): entries [t, t-1]
    mistakes = {
        "the sum over positions divided by T: position 0 has no token before it, so average over the "
        "T - 1 positions 1..T-1": before.sum(dim=-1) / length,
        "the weight on the token itself (the diagonal), not on the one before": weights.diagonal(dim1=-2, dim2=-1).mean(-1),
        "the mean of weights[h, t-1, t], each query's weight on the *next* token (0 under the causal mask): "
        "the row is the query, the column the key": weights.diagonal(offset=1, dim1=-2, dim2=-1).mean(-1),
        "the *largest* weight on the token before, not its mean over the positions": before.max(dim=-1).values,
    }
    what = f"previous_token_score(weights of shape {tuple(weights.shape)})"
    return Case(what, args=(weights,), expected=before.mean(dim=-1), mistakes=mistakes, label=what)


@isolated
@one_thread
def check_previous_token_score(learner_fn: Callable, hidden: bool = False) -> None:
    """previous_token_score(weights) -> (n_heads,): for weights (n_heads, T, T), the mean over positions
    t = 1..T-1 of weights[h, t, t-1]."""
    # (n_heads, T, the head that leans on the token before)
    settings = [(4, 10, 2), (2, 6, None)]
    if hidden:
        settings += [(1, 2, 0), (8, 33, 5), (3, 3, None)]
    cases = [_previous_token_case(seed, *setting) for seed, setting in enumerate(settings)]
    run(PREVIOUS_TOKEN, learner_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Debug exercise: a colleague's batch sampler with one planted mistake
# ----------------------------------------------------------------------------------------------

COLLEAGUES_GET_BATCH = PlantedBug(
    "08_training", "batch_debug_impl", "colleagues_get_batch",
    source='''def colleagues_get_batch(data: Tensor, batch_size: int, context_len: int,
                         generator: torch.Generator | None = None):
    """A colleague's batch sampler, called as yours: (x, y), both (batch_size, context_len)."""
    # Each window needs one more token after it, for the target of its last position.
    starts = torch.randint(0, len(data) - context_len - 1, (batch_size,), generator=generator)  # (B,)
    positions = starts[:, None] + torch.arange(context_len)[None, :]  # (B, 1) + (1, T) -> (B, T)
    x = data[positions]  # (B, T): the contexts
    y = data[positions + 1]  # (B, T): the same windows, one token later
    return x, y
''',
    mistake="the last possible window is never drawn",
    coarse_hint="draw many batches from a short text (the cell below the check does): which starts can come "
                "out, which ones should, and which line decides that?")
check_get_batch_debug = debug_exercise(check_get_batch, COLLEAGUES_GET_BATCH)

__all__ = ["check_get_batch", "check_adamw_step", "check_lr_schedule", "check_train_step", "check_estimate_loss",
           "check_previous_token_score", "check_get_batch_debug"]
