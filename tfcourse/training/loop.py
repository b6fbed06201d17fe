"""Train a language model: one readable loop that knows nothing about the model inside.

Each step: set the learning rate from the schedule, draw a batch, take one optimizer step.
Every `eval_interval` steps (and at the last one), estimate the train and val loss.
Every `checkpoint_interval` steps (and at the end), save everything needed to resume exactly.
`clip_gradients` is the clipping of each step, written out; checkpoints go to a path or a file object.
`train()` returns a history of losses and learning rates, ready to plot.
"""

from __future__ import annotations

import contextlib
import dataclasses
import functools
import io
import math
import numbers
import os
import pickle
import random
import tempfile
import time
import warnings
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from typing import Any, BinaryIO

import torch
import torch.nn.functional as F
from torch import nn
from torch.nn.parallel import DistributedDataParallel
from tqdm.auto import tqdm

from . import distributed

# get_batch(split, generator) -> (x, y): the caller's data. `split` is "train" or "val".
GetBatch = Callable[[str, torch.Generator], tuple[torch.Tensor, torch.Tensor]]
# loss_fn(model, x, y) -> scalar loss tensor.
LossFn = Callable[[nn.Module, torch.Tensor, torch.Tensor], torch.Tensor]
# on_step(step, history): called after every optimizer step (timing, logging, early stopping...).
StepHook = Callable[[int, dict[str, Any]], None]
# Where a checkpoint goes: a path (written atomically) or a binary file object (io.BytesIO, open(path, "wb")).
CheckpointFile = str | os.PathLike[str] | BinaryIO

# What save_checkpoint writes; load_checkpoint reads the same keys back.
CHECKPOINT_KEYS = (
    "model",  # the parameters (and buffers)
    "optimizer",  # AdamW's running averages of gradients: without them the next steps differ
    "scaler",  # the fp16 loss scale (empty unless training in fp16)
    "step",  # how many optimizer steps are done
    "history",  # the losses so far, so the curves continue
    "batch_generator",  # where the data order stands
    "torch_rng",  # the CPU random stream that dropout draws from
    "cuda_rng",  # the same for each GPU (empty list without CUDA)
    "python_rng",  # Python's `random` module
    "config",  # the TrainConfig as a dict, to see later how the run was made
)
# The parts save_checkpoint stores only when given (its scaler, history and generator): a checkpoint
# without them still loads. Every other key must be there, or the file is not a training checkpoint.
OPTIONAL_CHECKPOINT_KEYS = ("scaler", "history", "batch_generator")


# --------------------------------------------------------------------------- setup


def pick_device(preferred: str | None = None) -> torch.device:
    """The fastest available device (cuda, then mps, then cpu), or `preferred` if given.

    Raises ValueError when `preferred` is not a device name, RuntimeError when that device
    is not available on this computer.
    """
    if preferred is None:
        if torch.cuda.is_available():
            return torch.device("cuda")
        if torch.backends.mps.is_available():
            return torch.device("mps")
        return torch.device("cpu")

    try:
        device = torch.device(preferred)
    except RuntimeError as error:
        raise ValueError(
            f"device {preferred!r} is not a device name; use 'cpu', 'cuda', 'cuda:1' or 'mps'"
        ) from error
    if device.type == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError(
                f"device {preferred!r} was requested but CUDA is not available here; "
                "use device=None to pick the best available device"
            )
        if device.index is not None and device.index >= torch.cuda.device_count():
            raise RuntimeError(
                f"device {preferred!r} was requested but there are only "
                f"{torch.cuda.device_count()} CUDA device(s)"
            )
    if device.type == "mps" and not torch.backends.mps.is_available():
        raise RuntimeError(
            f"device {preferred!r} was requested but MPS (Apple GPU) is not available here; "
            "use device=None to pick the best available device"
        )
    return device


def set_seed(seed: int) -> None:
    """Seed Python's `random` and torch, so that a run can be repeated exactly."""
    random.seed(seed)
    # torch.manual_seed seeds the CPU generator and every CUDA device's generator.
    torch.manual_seed(seed)


@dataclass
class TrainConfig:
    """Every knob of `train()`. Invalid combinations are refused when the config is made."""

    max_steps: int = 2000  # optimizer steps in the whole run; the lr schedule ends here
    lr: float = 1e-3  # peak learning rate, reached at the end of warm-up
    min_lr: float = 1e-4  # the cosine decays to this, so late steps still learn a little
    warmup_steps: int = 100  # start gently while AdamW's running averages are still unsettled
    weight_decay: float = 0.1  # pulls weight matrices towards 0, a mild guard against overfitting
    betas: tuple[float, float] = (0.9, 0.99)  # AdamW's averaging; 0.99 adapts fast to small batches
    grad_clip: float = 1.0  # cap on the gradient norm, so one bad batch cannot wreck the weights
    eval_interval: int = 250  # steps between loss estimates: often enough to see the curve
    eval_steps: int = 20  # batches averaged per estimate: one batch alone is too noisy
    checkpoint_path: str | None = None  # where to save (and resume from); None: never save
    checkpoint_interval: int | None = None  # steps between saves; None: save at the end only
    seed: int = 1337  # same seed, same run: initial dropout masks and data order
    device: str | None = None  # e.g. "cpu" or "cuda"; None picks the fastest available
    amp: bool = True  # mixed precision (bf16/fp16), GPU only: faster steps, less memory
    compile: bool = False  # torch.compile the model: faster steps after a slow first one
    progress: bool = True  # show a progress bar; False keeps the output silent
    log_interval: int = 10  # steps between reading the losses back (each read makes the CPU wait for a GPU)
    best_checkpoint_path: str | None = None  # where to keep the weights of the best val loss; None: nowhere
    schedule: str = "cosine"  # "cosine": warm-up, then half a cosine to min_lr (lr_at); "inverse_sqrt": the paper's
    #                          eq. 3 shape, warm-up, then lr * sqrt(warmup_steps / step) with no end (min_lr unused)

    def __post_init__(self) -> None:
        problems = []
        if self.max_steps < 1:
            problems.append(f"max_steps must be at least 1, got {self.max_steps}")
        if not 0 <= self.warmup_steps <= self.max_steps:
            problems.append(
                f"warmup_steps must be between 0 and max_steps ({self.max_steps}), "
                f"got {self.warmup_steps}"
            )
        if self.lr <= 0:
            problems.append(f"lr must be positive, got {self.lr}")
        if not 0 <= self.min_lr <= self.lr:
            problems.append(
                f"min_lr must be between 0 and lr ({self.lr}), got {self.min_lr}"
            )
        if self.weight_decay < 0:
            problems.append(f"weight_decay must be >= 0, got {self.weight_decay}")
        if len(self.betas) != 2 or not all(0 <= beta < 1 for beta in self.betas):
            problems.append(f"betas must be two numbers in [0, 1), got {self.betas}")
        if self.grad_clip <= 0:
            problems.append(f"grad_clip must be positive, got {self.grad_clip}")
        if self.eval_interval < 1:
            problems.append(f"eval_interval must be at least 1, got {self.eval_interval}")
        if self.eval_steps < 1:
            problems.append(f"eval_steps must be at least 1, got {self.eval_steps}")
        if self.log_interval < 1:
            problems.append(f"log_interval must be at least 1, got {self.log_interval}")
        if self.schedule not in SCHEDULES:
            problems.append(f"schedule must be one of {sorted(SCHEDULES)}, got {self.schedule!r}")
        elif self.schedule == "inverse_sqrt" and self.warmup_steps < 1:
            problems.append("schedule 'inverse_sqrt' needs warmup_steps >= 1: its decay sqrt(warmup_steps / step) "
                            "starts where the warm-up ends")
        if self.checkpoint_interval is not None:
            if self.checkpoint_interval < 1:
                problems.append(
                    f"checkpoint_interval must be at least 1 (or None), "
                    f"got {self.checkpoint_interval}"
                )
            if self.checkpoint_path is None:
                problems.append(
                    "checkpoint_interval is set but checkpoint_path is None: "
                    "there is nowhere to save the checkpoints"
                )
        if problems:
            raise ValueError("invalid TrainConfig: " + "; ".join(problems))


# --------------------------------------------------------------------------- learning rate


def lr_at(step: int, config: TrainConfig) -> float:
    r"""The learning rate for optimizer step `step` (steps are counted from 1).

    With peak rate \eta_max = config.lr, floor \eta_min = config.min_lr,
    W = config.warmup_steps and S = config.max_steps:

        \eta(s) = \eta_max \cdot s / W                                   if s < W
        \eta(s) = \eta_min + \frac{1}{2} (\eta_max - \eta_min)
                             (1 + \cos(\pi \cdot (s - W) / (S - W)))      if W <= s <= S
        \eta(s) = \eta_min                                               if s > S

    So the rate climbs linearly from 0 to \eta_max, then follows half a cosine wave
    down to \eta_min at the last step.
    """
    if step < config.warmup_steps:
        return config.lr * step / config.warmup_steps
    if step >= config.max_steps:
        return config.min_lr
    progress = (step - config.warmup_steps) / (config.max_steps - config.warmup_steps)
    cosine = 0.5 * (1.0 + math.cos(math.pi * progress))  # goes from 1 down to 0
    return config.min_lr + cosine * (config.lr - config.min_lr)


def paper_lr_at(step: int, d_model: int, warmup_steps: int) -> float:
    r"""The original Transformer's schedule (its eq. 3), for optimizer step `step` >= 1:

        \eta(s) = d_model^{-0.5} \cdot \min(s^{-0.5}, s \cdot W^{-1.5})

    a linear climb for W warm-up steps, to a peak of (d_model \cdot W)^{-0.5} at s = W, then a decay as
    1/\sqrt{s} with no end (the paper: d_model 512, W = 4000, peak 7.0e-4)."""
    if step < 1:
        raise ValueError(f"steps are counted from 1 (the formula has s^-0.5), got step={step}")
    return d_model ** -0.5 * min(step ** -0.5, step * warmup_steps ** -1.5)


def inverse_sqrt_lr_at(step: int, config: TrainConfig) -> float:
    r"""The paper's schedule (eq. 3) with its peak given as config.lr: a linear climb over W = warmup_steps
    steps, then a decay as 1/\sqrt{s}:

        \eta(s) = \eta_max \cdot \min(s / W, \sqrt{W / s})

    With \eta_max = (d_model \cdot W)^{-0.5} this is paper_lr_at(s, d_model, W) exactly."""
    return config.lr * min(step / config.warmup_steps, math.sqrt(config.warmup_steps / step))


# TrainConfig.schedule -> the function train() takes its learning rate from, step by step.
SCHEDULES = {"cosine": lr_at, "inverse_sqrt": inverse_sqrt_lr_at}


def scheduled_lr(step: int, config: TrainConfig) -> float:
    """The learning rate of step `step` under config.schedule."""
    return SCHEDULES[config.schedule](step, config)


def set_lr(optimizer: torch.optim.Optimizer, lr: float) -> None:
    """Use learning rate `lr` for every parameter group from the next step on."""
    for group in optimizer.param_groups:
        group["lr"] = lr


# --------------------------------------------------------------------------- optimizer


def configure_optimizer(model: nn.Module, config: TrainConfig) -> torch.optim.AdamW:
    """AdamW with weight decay on the weight matrices only.

    Matrices (linear layers, embeddings) hold what the model has learned and can grow
    large to memorize the training text, so decay pulls them back. Biases and LayerNorm
    gains are 1-D: they only shift and scale, there are few of them, and pulling a gain
    towards 0 would just switch its layer off. So they are not decayed.
    """
    groups = weight_groups(model, config.weight_decay)
    if not groups:
        raise ValueError("the model has no trainable parameters (none with requires_grad=True)")

    # The fused kernel updates all parameters in one go. It is faster on a CPU too: for the CPU recipe,
    # 1 ms a step against 5-6 ms for torch's default (a few kernels per weight; torch 2.13, 2 cores).
    # Where torch has no fused AdamW for these parameters (a CPU before torch 2.4, say), it says so
    # when the optimizer is made, and the default update is used instead.
    try:
        return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas, fused=True)
    except RuntimeError:
        return torch.optim.AdamW(groups, lr=config.lr, betas=config.betas)


def adamw_step(params: list[torch.Tensor], grads: list[torch.Tensor], exp_avg: list[torch.Tensor],
               exp_avg_sq: list[torch.Tensor], step: int, lr: float, betas: tuple[float, float], eps: float,
               weight_decay: float) -> None:
    """One AdamW update of every weight in `params`, in place, with its running averages `exp_avg` (m)
    and `exp_avg_sq` (v); `step` counts from 1. torch.optim.AdamW's update, written out: lesson 08's
    exercise 2 (the solution mirrors it), which `StepwiseAdamW` calls, under torch.no_grad()."""
    beta1, beta2 = betas
    # m and v started at 0: after `step` updates they hold only this fraction of what they estimate.
    correction1 = 1 - beta1 ** step
    correction2 = 1 - beta2 ** step
    for p, g, m, v in zip(params, grads, exp_avg, exp_avg_sq):
        p.mul_(1 - lr * weight_decay)  # decoupled decay, on the weights as they were before this step
        m.mul_(beta1).add_(g, alpha=1 - beta1)  # m <- beta1 m + (1 - beta1) g
        v.mul_(beta2).addcmul_(g, g, value=1 - beta2)  # v <- beta2 v + (1 - beta2) g^2
        denominator = (v / correction2).sqrt() + eps  # sqrt(v_hat) + eps: eps outside the root
        p.addcdiv_(m / correction1, denominator, value=-lr)  # p <- p - lr m_hat / (sqrt(v_hat) + eps)


AdamWUpdate = Callable[..., None]  # adamw_step's signature


class StepwiseAdamW(torch.optim.Optimizer):
    """torch's optimizer bookkeeping (parameter groups, state, zero_grad, state_dict) around an update
    function with `adamw_step`'s signature: lesson 08's optimizer, made of a learner's own update."""

    def __init__(self, groups: Any, lr: float, betas: tuple[float, float] = (0.9, 0.99), eps: float = 1e-8,
                 weight_decay: float = 0.0, update: AdamWUpdate = adamw_step):
        super().__init__(groups, dict(lr=lr, betas=betas, eps=eps, weight_decay=weight_decay))
        self.update = update

    @torch.no_grad()
    def step(self, closure: None = None) -> None:
        for group in self.param_groups:
            params = [p for p in group["params"] if p.grad is not None]
            if not params:
                continue
            states = [self.state[p] for p in params]
            for p, state in zip(params, states):
                if not state:  # before the first step: m = v = 0
                    state.update(step=0, exp_avg=torch.zeros_like(p), exp_avg_sq=torch.zeros_like(p))
                state["step"] += 1
            self.update(params, [p.grad for p in params], [s["exp_avg"] for s in states],
                        [s["exp_avg_sq"] for s in states], states[0]["step"], group["lr"], group["betas"],
                        group["eps"], group["weight_decay"])


def weight_groups(model: nn.Module, weight_decay: float) -> list[dict[str, Any]]:
    """configure_optimizer's two groups: decay on the matrices, none on biases and norm gains."""
    parameters = [p for p in model.parameters() if p.requires_grad]
    groups = [{"params": [p for p in parameters if p.dim() >= 2], "weight_decay": weight_decay},
              {"params": [p for p in parameters if p.dim() < 2], "weight_decay": 0.0}]
    return [group for group in groups if group["params"]]


# --------------------------------------------------------------------------- mixed precision


def amp_dtype(device: torch.device, enabled: bool) -> torch.dtype | None:
    """The low-precision dtype for mixed precision on `device`, or None for full fp32.

    Only CUDA gains from it. bf16 has fp32's range, so it needs no loss scaling; older
    GPUs without bf16 fall back to fp16, whose small range needs a GradScaler.
    """
    if not enabled or device.type != "cuda":
        return None
    return torch.bfloat16 if torch.cuda.is_bf16_supported() else torch.float16


def autocast_context(
    device: torch.device, enabled: bool
) -> contextlib.AbstractContextManager[Any]:
    """Run the forward pass in mixed precision on CUDA; do nothing elsewhere."""
    dtype = amp_dtype(device, enabled)
    if dtype is None:
        return contextlib.nullcontext()
    return torch.autocast(device_type=device.type, dtype=dtype)


def make_grad_scaler(device: torch.device, enabled: bool) -> torch.amp.GradScaler:
    """A GradScaler that is active only for fp16, the one dtype whose gradients underflow.

    A disabled scaler passes everything through unchanged, so `train_step` has one code
    path for every device.
    """
    needs_scaling = amp_dtype(device, enabled) == torch.float16
    return torch.amp.GradScaler(device.type, enabled=needs_scaling)


# --------------------------------------------------------------------------- loss and steps


def default_loss(model: nn.Module, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Cross-entropy of the model's next-token predictions: `model(x)` must return logits."""
    logits = model(x)  # (B, T, V): a score for every vocabulary entry at every position
    if not isinstance(logits, torch.Tensor) or logits.dim() != 3:
        got = tuple(logits.shape) if isinstance(logits, torch.Tensor) else type(logits).__name__
        raise ValueError(
            f"default_loss expects model(x) to return logits of shape (B, T, V), got {got}; "
            "pass your own loss_fn(model, x, y) to train() if your model returns something else"
        )
    B, T, V = logits.shape
    # cross_entropy wants one row per prediction: (B*T, V) scores against (B*T,) targets.
    return F.cross_entropy(logits.reshape(B * T, V), y.reshape(B * T))


@torch.no_grad()  # scaling the gradients is not part of any computation to differentiate
def clip_gradients(parameters: Iterable[torch.Tensor] | torch.Tensor, max_norm: float) -> torch.Tensor:
    """Scale all gradients together so that their global L2 norm is at most `max_norm`, in place;
    returns the norm before clipping (a 0-dim tensor, on the first gradient's device). What
    torch.nn.utils.clip_grad_norm_(parameters, max_norm) does. The parameters may have any shapes.

    The global norm treats all the gradients as one long vector: with g_p the gradient of parameter p,

        norm = sqrt(sum over p of ||g_p||^2)        every g_p <- g_p * min(max_norm / (norm + 1e-6), 1)

    So every gradient keeps its direction and only the whole step gets shorter; below max_norm
    nothing changes. Parameters without a gradient (p.grad is None) are skipped. A non-finite norm
    is returned as it is (checking it would make the CPU wait for the GPU).
    """
    if isinstance(parameters, nn.Module):
        raise TypeError("clip_gradients expects parameters, e.g. model.parameters(), not the model itself")
    if isinstance(max_norm, bool) or not isinstance(max_norm, numbers.Real):
        raise TypeError(f"max_norm must be a number, got {type(max_norm).__name__}")
    max_norm = float(max_norm)  # a NumPy number divided by a tensor would read the tensor back
    if not max_norm >= 0:  # also refuses NaN
        raise ValueError(f"max_norm must be >= 0, got {max_norm}")
    if isinstance(parameters, torch.Tensor):
        parameters = [parameters]
    parameters = list(parameters)  # model.parameters() is a generator: it can be read only once
    not_tensors = sorted({type(p).__name__ for p in parameters if not isinstance(p, torch.Tensor)})
    if not_tensors:
        raise TypeError(f"clip_gradients expects tensors (parameters), got {', '.join(not_tensors)}")

    grads = [p.grad for p in parameters if p.grad is not None]
    if not grads:
        return torch.tensor(0.0)  # nothing to clip
    # The norm of each gradient, then the norm of those norms: the same as the norm of all of them
    # laid end to end, without building that long vector.
    norms = torch.stack([torch.linalg.vector_norm(g).to(grads[0].device) for g in grads])
    total_norm = torch.linalg.vector_norm(norms)
    # clamp, not `if norm > max_norm`: an `if` on a GPU number would make the CPU wait for it.
    # The 1e-6 keeps the division finite when every gradient is 0.
    coefficient = torch.clamp(max_norm / (total_norm + 1e-6), max=1.0)
    for g in grads:
        g.mul_(coefficient.to(g.device))
    return total_norm


def train_step(
    model: nn.Module,
    batch: tuple[torch.Tensor, torch.Tensor],
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler,
    config: TrainConfig,
    loss_fn: LossFn = default_loss,
) -> torch.Tensor:
    """One optimizer step on one batch; returns the batch's loss as a 0-dim tensor.

    The loss stays where it was computed: reading it as a number (`.item()`) would make the CPU
    wait for the GPU to finish the step, so `train()` reads the losses of many steps at once.
    """
    x, y = batch

    # 1. Forward: compute the loss (in mixed precision on GPU when config.amp is on).
    with autocast_context(x.device, config.amp):
        loss = loss_fn(model, x, y)

    # 2. Backward: gradients of the loss. The scaler multiplies the loss first so small
    #    fp16 gradients do not round to zero (a disabled scaler leaves it alone).
    scaler.scale(loss).backward()

    # 3. Clip: divide the scale back out, so the clip sees the true gradient norm.
    scaler.unscale_(optimizer)
    clip_gradients(model.parameters(), config.grad_clip)

    # 4. Update the weights. The scaler skips the step if fp16 gradients overflowed,
    #    and adjusts its scale for the next step.
    scaler.step(optimizer)
    scaler.update()

    # 5. Forget the gradients: backward() adds to .grad, it does not overwrite it.
    #    set_to_none frees their memory until the next backward.
    optimizer.zero_grad(set_to_none=True)

    return loss.detach()


Batch = tuple[torch.Tensor, torch.Tensor]


def plain_train_step(model: nn.Module, batch: Batch, optimizer: torch.optim.Optimizer, grad_clip: float) -> float:
    """`train_step` in the form of lesson 08's exercise 4: no scaler, no loss function to choose (the
    cross-entropy of next-token logits), the loss returned as a float."""
    x, y = batch
    loss = default_loss(model, x, y)
    loss.backward()
    clip_gradients(model.parameters(), grad_clip)  # between backward (makes them) and step (uses them)
    optimizer.step()
    optimizer.zero_grad(set_to_none=True)
    return loss.item()


@torch.no_grad()
def mean_loss(model: nn.Module, batches: list[Batch]) -> float:
    """`estimate_loss` in the form of lesson 08's exercise 5: the mean cross-entropy over a list of
    (x, y) batches, in eval mode; the model's mode is restored afterwards."""
    was_training = model.training
    model.eval()
    try:
        return sum(default_loss(model, x, y).item() for x, y in batches) / len(batches)
    finally:
        model.train(was_training)


@dataclass(frozen=True)
class LoopFunctions:
    """The loop's moves in the form lesson 08's exercises write them. `train(..., functions=...)` calls
    these instead of its own; its checkpoints, evaluation schedule, best weights and history stay.

    lr_at(step, config) -> float; make_optimizer(model, config) -> an optimizer;
    train_step(model, (x, y), optimizer, grad_clip) -> the batch's loss as a float;
    estimate_loss(model, [(x, y), ...]) -> the mean loss, as a float.
    """

    lr_at: Callable[[int, TrainConfig], float] = lr_at
    make_optimizer: Callable[[nn.Module, TrainConfig], torch.optim.Optimizer] = (
        lambda model, config: StepwiseAdamW(weight_groups(model, config.weight_decay), config.lr, config.betas))
    train_step: Callable[[nn.Module, Batch, torch.optim.Optimizer, float], float] = plain_train_step
    estimate_loss: Callable[[nn.Module, list[Batch]], float] = mean_loss


@torch.no_grad()
def estimate_loss(
    model: nn.Module,
    get_batch: GetBatch,
    eval_steps: int,
    loss_fn: LossFn,
    device: torch.device,
    *,
    amp: bool = False,
    seed: int = 0,
) -> dict[str, float]:
    """Mean loss over `eval_steps` batches of each split: {"train": ..., "val": ...}.

    The model is in eval mode meanwhile (no dropout), then goes back to its previous mode.
    The batches come from a generator of their own, seeded with `seed`: every estimate
    scores the same batches, so estimates compare fairly, and evaluating never changes
    the order of the training data.
    """
    was_training = model.training
    model.eval()
    try:
        losses = {}
        for split in ("train", "val"):
            generator = torch.Generator().manual_seed(seed)
            total = torch.zeros((), device=device)  # summed where the losses are: no wait per batch
            for _ in range(eval_steps):
                x, y = get_batch(split, generator)
                x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
                with autocast_context(device, amp):
                    total += loss_fn(model, x, y).float()
            losses[split] = total.item() / eval_steps  # one read per split
        return losses
    finally:
        model.train(was_training)


# --------------------------------------------------------------------------- checkpoints


def save_checkpoint(
    file: CheckpointFile,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None = None,
    step: int | None = None,
    history: dict[str, Any] | None = None,
    generator: torch.Generator | None = None,
    config: TrainConfig | None = None,
) -> None:
    """Save everything needed to continue training exactly where it stopped (CHECKPOINT_KEYS).

    `file` is a path or a binary file object. A path is written under a temporary name and then
    renamed over it, so a crash while saving leaves the last good checkpoint untouched; a file
    object (io.BytesIO, open(path, "wb")) is written where it stands and left open.
    `step` and `config` are needed. `scaler`, `history` and `generator` (the batch order) are
    optional: left out, the checkpoint neither stores nor restores them. The old positional order
    (file, model, optimizer, scaler, step, history, generator, config) still works.
    """
    if step is None or config is None:
        raise TypeError("save_checkpoint needs step and config, e.g. "
                        "save_checkpoint(file, model, optimizer, step=step, config=config)")
    checkpoint = {
        "model": model.state_dict(),
        "optimizer": optimizer.state_dict(),
        "scaler": scaler.state_dict() if scaler is not None else None,
        "step": step,
        "history": history,
        "batch_generator": generator.get_state() if generator is not None else None,
        "torch_rng": torch.get_rng_state(),
        "cuda_rng": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
        "python_rng": random.getstate(),
        "config": dataclasses.asdict(config),
    }
    # An optional part that was not given is not stored at all: a load can tell it was never saved.
    checkpoint = {key: value for key, value in checkpoint.items() if value is not None}
    if _is_path(file):
        _save_atomically(checkpoint, file)
    else:
        _expect_binary_file(file, "write")
        torch.save(checkpoint, file)


def _is_path(file: Any) -> bool:
    return isinstance(file, (str, os.PathLike))


def _describe(file: Any) -> str:
    """How an error message names a checkpoint file: its path, or what the file object is."""
    if _is_path(file):
        return os.fspath(file)
    name = getattr(file, "name", None)
    return repr(name) if isinstance(name, str) else f"the {type(file).__name__}"


def _expect_binary_file(file: Any, use: str) -> None:
    """A clear error for what torch.save / torch.load cannot use: a text-mode file, or no file at all.
    `use` is "write" or "read", the method the file object needs."""
    if isinstance(file, io.TextIOBase):  # open(path, "w"), io.StringIO: they take str, torch writes bytes
        mode = "wb" if use == "write" else "rb"
        raise TypeError(f"the checkpoint file {_describe(file)} is open in text mode; a checkpoint is bytes: "
                        f"open it with open(path, {mode!r}), or use io.BytesIO")
    if not callable(getattr(file, use, None)):
        raise TypeError(f"a checkpoint goes to a path (str or os.PathLike) or a binary file object with "
                        f".{use}(), got {type(file).__name__}")


def _save_atomically(obj: Any, path: str | os.PathLike[str]) -> None:
    """torch.save(obj) to a temporary file next to `path`, then rename it over `path`: a crash while
    saving leaves the last good file untouched."""
    path = os.fspath(path)
    # The temporary file sits next to the target: os.replace is only atomic within one disk.
    directory = os.path.dirname(os.path.abspath(path))
    os.makedirs(directory, exist_ok=True)
    handle, temporary_path = tempfile.mkstemp(
        dir=directory, prefix=os.path.basename(path) + ".", suffix=".tmp"
    )
    try:
        with os.fdopen(handle, "wb") as file:
            torch.save(obj, file)
            file.flush()
            os.fsync(file.fileno())  # on disk for real before the rename
        os.replace(temporary_path, path)
    except BaseException:  # also Ctrl-C / a stopped kernel: leave no half-written file
        if os.path.exists(temporary_path):
            os.remove(temporary_path)
        raise


def _read_checkpoint(file: CheckpointFile) -> dict[str, Any]:
    """The checkpoint dict in `file` (a path or a binary file object), on the CPU; a ValueError if
    the file is not a training checkpoint."""
    if not _is_path(file):
        _expect_binary_file(file, "read")
    where = _describe(file)
    try:
        # weights_only=False lets pickle rebuild Python's random state, and pickle can run
        # code: load only checkpoints you made yourself.
        checkpoint = torch.load(os.fspath(file) if _is_path(file) else file, map_location="cpu",
                                weights_only=False)
    except (pickle.UnpicklingError, EOFError, RuntimeError) as error:  # not something torch.save wrote
        hint = "" if _is_path(file) else " (a file object is read from where it stands: seek(0) after saving)"
        raise ValueError(f"{where} is not a training checkpoint: torch.load cannot read it "
                         f"({type(error).__name__}: {error}){hint}") from error
    required = [key for key in CHECKPOINT_KEYS if key not in OPTIONAL_CHECKPOINT_KEYS]
    if not isinstance(checkpoint, dict):
        raise ValueError(f"{where} is not a training checkpoint: it holds a {type(checkpoint).__name__}, "
                         f"not a dict with {required}")
    missing = [key for key in required if key not in checkpoint]
    if missing:
        raise ValueError(f"{where} is not a training checkpoint: it lacks {missing}")
    return checkpoint


def load_checkpoint(
    file: CheckpointFile,
    model: nn.Module,
    optimizer: torch.optim.Optimizer,
    scaler: torch.amp.GradScaler | None = None,
    generator: torch.Generator | None = None,
) -> tuple[int, dict[str, Any] | None]:
    """Restore a checkpoint from `save_checkpoint`; returns (step, history), history None if not stored.

    `file` is a path or a binary file object (read from where it stands: seek(0) after saving
    into an io.BytesIO). Loads into `model` and `optimizer` in place, and also restores the
    global random states (torch, CUDA, Python's `random`) to where they were. `scaler` and
    `generator` are restored when given and stored; given None, a stored state is ignored;
    not stored, they are left as they are.
    """
    checkpoint = _read_checkpoint(file)

    model.load_state_dict(checkpoint["model"])
    # The checkpoint's param groups also carry the kernel choice of the machine that saved them (one
    # whose torch has no fused AdamW says fused=False): keep this machine's choice.
    kernels = [{k: group[k] for k in ("fused", "foreach") if k in group} for group in optimizer.param_groups]
    optimizer.load_state_dict(checkpoint["optimizer"])  # moves its state to the model's device
    for group, kernel in zip(optimizer.param_groups, kernels):
        group.update(kernel)
    if scaler is not None and checkpoint.get("scaler"):  # empty when saved without fp16 (e.g. on a CPU)
        scaler.load_state_dict(checkpoint["scaler"])
    if generator is not None and "batch_generator" in checkpoint:
        generator.set_state(checkpoint["batch_generator"])
    torch.set_rng_state(checkpoint["torch_rng"])
    cuda_states = checkpoint["cuda_rng"]
    # Only on the same number of GPUs; elsewhere dropout just continues from a fresh stream.
    if cuda_states and torch.cuda.is_available() and len(cuda_states) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda_states)
    random.setstate(checkpoint["python_rng"])
    return checkpoint["step"], checkpoint.get("history")


# --------------------------------------------------------------------------- the loop


def new_history(device: torch.device) -> dict[str, Any]:
    """An empty history: what `train()` records and returns."""
    return {
        "step": [],  # every optimizer step, counted from 1 ...
        "train_loss": [],  # ... the loss of its batch (read back every log_interval steps) ...
        "lr": [],  # ... and its learning rate
        "eval_step": [],  # the steps at which the loss was estimated (0: before training) ...
        "eval_train_loss": [],  # ... the estimate on training data ...
        "val_loss": [],  # ... and on validation data
        "best_val_loss": math.inf,  # the lowest val loss so far ...
        "best_step": None,  # ... and the step it was reached at
        "tokens_per_sec": 0.0,  # training speed during the last call to train()
        "seconds": 0.0,  # wall-clock time of the last call to train()
        # ... and the part of it the loop spent on its own work, not on training steps: drawing batches,
        # loss estimates, checkpoints (on a GPU the first may overlap the device's work: an upper bound)
        "overhead_seconds": {"data": 0.0, "evaluation": 0.0, "checkpoints": 0.0},
        "device": str(device),
    }


def record_estimate(history: dict[str, Any], step: int, losses: dict[str, float]) -> bool:
    """Append one loss estimate (from `estimate_loss`) to `history`; True if it is the best val so far."""
    history["eval_step"].append(step)
    history["eval_train_loss"].append(losses["train"])
    history["val_loss"].append(losses["val"])
    if losses["val"] < history["best_val_loss"]:
        history["best_val_loss"], history["best_step"] = losses["val"], step
        return True
    return False


class _CompiledOrEager:
    """torch.compile(model) that falls back to the model itself, once and with one warning, when
    compiling fails (e.g. no C compiler or Python headers for Triton). Everything but the call
    goes to the model."""

    def __init__(self, model: nn.Module):
        self.model, self.compiled = model, torch.compile(model)

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        if self.compiled is not None:
            try:
                return self.compiled(*args, **kwargs)
            except Exception as error:  # noqa: BLE001 - a failing compiler must not stop the run
                self.compiled = None
                warnings.warn(f"torch.compile failed ({type(error).__name__}: {str(error).splitlines()[0][:200]}); "
                              "training continues without it", RuntimeWarning, stacklevel=2)
        return self.model(*args, **kwargs)

    def __getattr__(self, name: str) -> Any:
        return getattr(self.model, name)


def _save_best(path: str, model: nn.Module, step: int, val_loss: float) -> None:
    """The weights at the best val loss (nanoGPT keeps only these): model, step and loss."""
    _save_atomically({"model": model.state_dict(), "step": step, "val_loss": val_loss}, path)


def _averaged_over_workers(estimate: Callable[[], dict[str, float]]) -> Callable[[], dict[str, float]]:
    """estimate() whose losses are the mean over the workers: each one scored its shard of the batches."""

    def averaged() -> dict[str, float]:
        losses = estimate()
        mean = distributed.mean_over_workers(torch.tensor(list(losses.values()), dtype=torch.float64))
        return dict(zip(losses, mean.tolist()))

    return averaged


def _functions_estimate_and_step(functions: LoopFunctions, model: Any, optimizer: torch.optim.Optimizer,
                                 get_batch: GetBatch, config: TrainConfig, device: torch.device
                                 ) -> tuple[Callable[[], dict[str, float]], Callable[[Batch], torch.Tensor]]:
    """train()'s estimate() and step(batch) made of `functions`: the evaluation batches are drawn once,
    from the seed `estimate_loss` uses, so every estimate scores the same ones."""
    bf16 = amp_dtype(device, config.amp) == torch.bfloat16
    precision = functools.partial(autocast_context, device, bf16)  # fp16 would need a scaler in the step

    def batches(split: str) -> list[Batch]:
        generator = torch.Generator().manual_seed(config.seed)
        drawn = [get_batch(split, generator) for _ in range(config.eval_steps)]
        return [(x.to(device), y.to(device)) for x, y in drawn]

    eval_batches = {split: batches(split) for split in ("train", "val")}

    def estimate() -> dict[str, float]:
        with precision():
            return {split: float(functions.estimate_loss(model, drawn)) for split, drawn in eval_batches.items()}

    def step(batch: Batch) -> torch.Tensor:
        with precision():
            return torch.tensor(float(functions.train_step(model, batch, optimizer, config.grad_clip)))

    return estimate, step


def train(
    model: nn.Module,
    get_batch: GetBatch,
    config: TrainConfig,
    loss_fn: LossFn = default_loss,
    resume: bool = False,
    on_step: StepHook | None = None,
    functions: LoopFunctions | None = None,
) -> dict[str, Any]:
    """Train `model` on batches from `get_batch(split, generator)`; returns the history.

    `get_batch` must draw its randomness from `generator` only: that makes the data order
    repeatable and lets a resumed run continue it. With `resume=True`, training continues
    from `config.checkpoint_path` if that file exists (and starts fresh if not), giving
    exactly the run that would have happened without the interruption. `on_step(step, history)`,
    if given, is called after every optimizer step; `history["train_loss"]` is complete at the
    steps where the losses are read back (every `log_interval` steps, each evaluation, the end).

    On a GPU the CPU queues work ahead of the device; the loop reads numbers back (a sync) only
    every `log_interval` steps and at evaluations, so the queue stays full in between.

    Under torchrun (a process group is up: `tfcourse.training.distributed`), `get_batch` should give each
    worker its shard of the global batch (`distributed.sharded`): the model is wrapped in
    DistributedDataParallel, the logged losses and estimates are averaged over the workers, and only
    rank 0 writes checkpoints and shows progress. Every worker draws dropout from the same seeded stream.

    `functions` (a `LoopFunctions`): the schedule, optimizer, step and evaluation to run instead of the
    loop's own, e.g. lesson 08's exercises. Their train_step computes its own loss (so `loss_fn` must
    stay the default) and returns a float (one wait for the GPU per step); the mixed precision around
    them is bf16 autocast only, as an fp16 run would need the loop's gradient scaler inside the step.
    """
    if resume and config.checkpoint_path is None:
        raise ValueError("resume=True needs config.checkpoint_path: where is the checkpoint?")
    if functions is not None and not isinstance(functions, LoopFunctions):
        raise TypeError(f"functions must be a tfcourse.training.loop.LoopFunctions, got {type(functions).__name__}")
    if functions is not None and loss_fn is not default_loss:
        raise ValueError("train(functions=...) takes its loss from functions.train_step and "
                         "functions.estimate_loss: leave loss_fn out")
    resuming = resume and os.path.exists(config.checkpoint_path)
    if not resuming:
        set_seed(config.seed)

    device = pick_device(config.device)
    model.to(device)
    model.train()
    optimizer = functions.make_optimizer(model, config) if functions else configure_optimizer(model, config)
    scaler = make_grad_scaler(device, config.amp and functions is None)
    schedule = functions.lr_at if functions else scheduled_lr
    generator = torch.Generator().manual_seed(config.seed)  # the order of training batches
    # Optimizer and checkpoints use `model`; compute runs through the (maybe) data-parallel, (maybe)
    # compiled one. Under torchrun each worker trains on its shard of every batch (get_batch is then
    # distributed.sharded) and DistributedDataParallel averages the gradients during backward().
    worker = distributed.current()  # None: one process
    model_to_run = model if worker is None else DistributedDataParallel(
        model, device_ids=[device.index] if device.type == "cuda" else None)
    model_to_run = _CompiledOrEager(model_to_run) if config.compile else model_to_run
    writes = distributed.is_main()  # files and the progress bar: rank 0's (or the only process's)

    step, history = 0, new_history(device)
    if resuming:
        step, stored_history = load_checkpoint(
            config.checkpoint_path, model, optimizer, scaler, generator
        )
        if stored_history is not None:  # None: saved without one, so the curves start at the checkpoint
            history = stored_history
        history["device"] = str(device)

    # The same call every time; only the step it is recorded under changes.
    if functions is None:
        estimate = functools.partial(
            estimate_loss, model_to_run, get_batch, config.eval_steps, loss_fn, device,
            amp=config.amp, seed=config.seed,
        )
        take_step = functools.partial(train_step, model_to_run, optimizer=optimizer, scaler=scaler,
                                      config=config, loss_fn=loss_fn)
    else:
        estimate, take_step = _functions_estimate_and_step(functions, model_to_run, optimizer, get_batch, config,
                                                           device)
    if worker is not None:
        estimate = _averaged_over_workers(estimate)  # each worker scored its shard of the batches
    started = time.perf_counter()
    overhead = history["overhead_seconds"] = {"data": 0.0, "evaluation": 0.0, "checkpoints": 0.0}  # this call's
    if step == 0:
        record_estimate(history, 0, estimate())  # the untrained model: where the curves start
        overhead["evaluation"] += time.perf_counter() - started
    first_estimate_seconds = overhead["evaluation"]
    first_step, tokens_trained = step, 0
    pending: list[torch.Tensor] = []  # losses of the steps since the last read-back, on the device
    train_started = time.perf_counter()

    def read_back_losses() -> None:
        if pending:
            # One sync for many steps (and, under torchrun, one all-reduce: every worker reads back at the same steps).
            history["train_loss"].extend(distributed.mean_over_workers(torch.stack(pending)).tolist())
            pending.clear()

    with tqdm(
        total=config.max_steps, initial=step, disable=not (config.progress and writes), desc="training"
    ) as progress:
        while step < config.max_steps:
            step += 1
            lr = schedule(step, config)
            set_lr(optimizer, lr)

            data_started = time.perf_counter()
            x, y = get_batch("train", generator)
            x, y = x.to(device, non_blocking=True), y.to(device, non_blocking=True)
            overhead["data"] += time.perf_counter() - data_started
            pending.append(take_step((x, y)))
            tokens_trained += x.numel() * (1 if worker is None else worker.world_size)  # all workers' tokens
            history["step"].append(step)
            history["lr"].append(lr)

            is_last = step == config.max_steps
            evaluate_now = is_last or step % config.eval_interval == 0
            save_now = config.checkpoint_path is not None and (
                is_last or (config.checkpoint_interval and step % config.checkpoint_interval == 0)
            )
            read_now = evaluate_now or save_now or step % config.log_interval == 0
            if read_now:
                read_back_losses()  # first: the GPU has caught up before an evaluation is timed
            if evaluate_now:
                eval_started = time.perf_counter()
                losses = estimate()
                overhead["evaluation"] += time.perf_counter() - eval_started
                if record_estimate(history, step, losses) and config.best_checkpoint_path is not None and writes:
                    saved_started = time.perf_counter()
                    _save_best(config.best_checkpoint_path, model, step, losses["val"])
                    overhead["checkpoints"] += time.perf_counter() - saved_started
            if read_now:
                progress.set_postfix({"loss": f"{history['train_loss'][-1]:.4f}", "lr": f"{lr:.2e}",
                                      "val": f"{history['val_loss'][-1]:.4f}"}, refresh=False)
            if save_now and writes:  # after the estimate, so the checkpoint's history includes it
                saved_started = time.perf_counter()
                save_checkpoint(
                    config.checkpoint_path, model, optimizer, scaler,
                    step, history, generator, config,
                )
                overhead["checkpoints"] += time.perf_counter() - saved_started
            progress.update(1)  # drawn at tqdm's pace
            if on_step is not None:
                on_step(step, history)

    read_back_losses()
    history["seconds"] = time.perf_counter() - started
    # From the first step on, less the estimates in between (ends after a read-back: synced).
    train_seconds = time.perf_counter() - train_started - (overhead["evaluation"] - first_estimate_seconds)
    history["tokens_per_sec"] = tokens_trained / train_seconds if step > first_step and train_seconds > 0 else 0.0
    return history


__all__ = [
    "GetBatch", "LossFn", "StepHook", "CheckpointFile", "CHECKPOINT_KEYS", "OPTIONAL_CHECKPOINT_KEYS",
    "pick_device", "set_seed", "TrainConfig", "lr_at", "paper_lr_at", "inverse_sqrt_lr_at", "SCHEDULES",
    "scheduled_lr", "set_lr", "configure_optimizer", "amp_dtype",
    "autocast_context", "make_grad_scaler", "default_loss", "clip_gradients", "train_step", "estimate_loss",
    "adamw_step", "StepwiseAdamW", "weight_groups", "plain_train_step", "mean_loss", "LoopFunctions", "Batch",
    "save_checkpoint", "load_checkpoint", "new_history", "record_estimate", "train",
]
