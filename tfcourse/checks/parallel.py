"""Checks for lesson 13, data-parallel training with torch.distributed.

    check_shard_batch(shard_batch)                  each worker's contiguous, equal slice of the batch
    check_average_gradients(average_gradients)      run in a real 2-process gloo group (3 in the hidden
                                                    run): 2 workers x B equal 1 worker x 2B
    check_ring_bytes_sent(ring_bytes_sent)          the ring all-reduce's traffic, against a simulation
    check_accumulate_gradients(accumulate_gradients)  k micro-batches equal one batch of k times the size
    check_memory_per_gpu(memory_per_gpu)            DDP, ZeRO-1 and FSDP, against the formula and, for
                                                    ZeRO-1, against bytes measured on a 2-process group

A function judged in worker processes travels as its source: `tfcourse.parallel.function_file` writes
it to a file below the lesson's usual imports, and each worker imports that file. Nothing a worker prints reaches
the notebook (`tfcourse.parallel.launch` keeps it in a file), so a test cell writes nothing to stderr.
"""

from __future__ import annotations

import tempfile
from collections.abc import Callable
from pathlib import Path
from typing import Any

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..parallel import (STRATEGIES, WorkerFailed, function_file, launch, load_function,
                        simulate_ring_all_reduce)
from .core import (Case, CheckFailed, Exercise, call_learner, compare, isolated, learner_namespaces, off_limits,
                   one_thread, run, seeded)

SHARD_OFF_LIMITS = ["tfcourse.parallel.shard_batch", "torch.utils.data.DistributedSampler"]
SHARD_BATCH = Exercise("sharding the batch", SHARD_OFF_LIMITS,
                       "shard_batch gives each worker its own equal, contiguous slice on {n} cases")
AVERAGE_OFF_LIMITS = ["tfcourse.parallel.average_gradients", "torch.nn.parallel.DistributedDataParallel"]
AVERAGE_GRADIENTS = Exercise("averaging the gradients", AVERAGE_OFF_LIMITS,
                             "average_gradients: on {workers} workers, each worker's gradient equals one worker's "
                             "on the whole batch")
RING_OFF_LIMITS = ["tfcourse.parallel.ring_bytes_sent", "tfcourse.parallel.simulate_ring_all_reduce"]
RING_BYTES = Exercise("the ring all-reduce's traffic", RING_OFF_LIMITS,
                      "ring_bytes_sent equals the bytes each worker sends in a simulated ring on {n} cases")
ACCUMULATE_OFF_LIMITS = ["tfcourse.parallel.accumulate_gradients"]
ACCUMULATE = Exercise("gradient accumulation", ACCUMULATE_OFF_LIMITS,
                      "accumulate_gradients: k micro-batches leave one batch's gradient on {n} cases", no_grad=False)
MEMORY_OFF_LIMITS = ["tfcourse.parallel.memory_per_gpu"]
MEMORY = Exercise("memory per GPU", MEMORY_OFF_LIMITS,
                  "memory_per_gpu matches the formula on {n} configurations and the bytes a ZeroRedundancyOptimizer "
                  "holds on each of 2 workers")

WORKER_TIMEOUT = 90.0  # seconds: two fresh Pythons import torch, then a few small all-reduces


# ----------------------------------------------------------------------------------------------
# Exercise 1: sharding the batch
# ----------------------------------------------------------------------------------------------


def _shard_case(seed: int, batch: int, world_size: int, rank: int) -> Case:
    g = seeded(seed)
    x, y = torch.randn(batch, 3, generator=g), torch.randint(0, 9, (batch, 3), generator=g)
    n = batch // world_size
    rows = slice(rank * n, (rank + 1) * n)
    what = f"shard_batch(x, y, rank={rank}, world_size={world_size}) for a batch of {batch}"
    mistakes = {"a strided shard x[rank::world_size]: fine for training, but this exercise's layout is contiguous, "
                "as the training script's is": x[rank::world_size]}
    if rank + 1 < world_size:
        mistakes["the next worker's shard: rank r takes rows r * B/N up to (r + 1) * B/N"] = x[(rank + 1) * n:(rank + 2) * n]

    def x_shard(result: Any) -> Tensor:
        if not (isinstance(result, tuple) and len(result) == 2):
            raise CheckFailed(f"{what}: expected a tuple (x_shard, y_shard), got {type(result).__name__}")
        if world_size > 1 and isinstance(result[0], Tensor) and result[0].shape == x.shape and torch.equal(result[0], x):
            raise CheckFailed(f"{what}: your x_shard is the whole batch: every worker would train on the same "
                              "examples (the data is not sharded)")
        return result[0]

    def y_shard(result: tuple) -> None:  # after x: a mistake shows in x first, where it is named
        compare(result[1], y[rows], f"{what}: y_shard", mistakes={"the whole batch of y": y})

    return Case(what, (x, y, rank, world_size), expected=x[rows], mistakes=mistakes, label=f"{what}: x_shard",
                inspect=x_shard, after=y_shard)


def _uneven_case(batch: int, world_size: int) -> Case:
    x, y = torch.zeros(batch, 2), torch.zeros(batch, 2)
    what = f"shard_batch(x, y, rank=0, world_size={world_size}) for a batch of {batch}"

    def call(learner: Callable) -> None:
        try:
            learner(x, y, 0, world_size)
        except ValueError:
            return None
        except Exception as error:  # noqa: BLE001 - the wrong kind of error is named
            raise CheckFailed(f"{what}: expected a ValueError (the shards would not be equal), got "
                              f"{type(error).__name__}: {error}") from None
        raise CheckFailed(f"{what}: expected a ValueError, as {batch} examples do not split into {world_size} equal "
                          "shards (unequal shards would weigh some examples more than others)")

    return Case(what, call=call)


@isolated
def check_shard_batch(shard_fn, hidden: bool = False) -> None:
    """shard_batch(x, y, rank, world_size) -> rows rank * B/N .. (rank + 1) * B/N of x and y; a ValueError
    when B is not a multiple of N."""
    layouts = [(8, 2, 0), (8, 2, 1), (6, 3, 2)]
    if hidden:
        layouts += [(4, 1, 0), (12, 4, 1), (5, 5, 4)]
    cases = [_shard_case(seed, *layout) for seed, layout in enumerate(layouts)] + [_uneven_case(7, 2)]
    if hidden:
        cases.append(_uneven_case(10, 4))
    run(SHARD_BATCH, shard_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 2: averaging the gradients, in a real process group
# ----------------------------------------------------------------------------------------------


class _SmallNet(nn.Module):
    """Linear -> tanh -> Linear, and (with_unused) a layer this loss never reaches: its .grad stays None."""

    def __init__(self, with_unused: bool):
        super().__init__()
        self.layer1, self.layer2 = nn.Linear(5, 7), nn.Linear(7, 3)
        self.unused = nn.Linear(2, 2) if with_unused else None

    def forward(self, x: Tensor) -> Tensor:
        return self.layer2(torch.tanh(self.layer1(x)))


def _gradient_problem(seed: int, batch: int, with_unused: bool) -> tuple[nn.Module, Tensor, Tensor]:
    """The same model and global batch in every process: the seed decides both."""
    torch.manual_seed(seed)
    model = _SmallNet(with_unused)
    g = seeded(seed)
    return model, torch.randn(batch, 5, generator=g), torch.randn(batch, 3, generator=g)


def _shard_gradients(model: nn.Module, x: Tensor, y: Tensor, rank: int, world_size: int) -> list[Tensor]:
    """The gradient of the mean squared error on worker `rank`'s rows, parameter by parameter."""
    n = x.shape[0] // world_size
    model.zero_grad(set_to_none=True)
    F.mse_loss(model(x[rank * n:(rank + 1) * n]), y[rank * n:(rank + 1) * n]).backward()
    return [p.grad.clone() for p in model.parameters() if p.grad is not None]


def _flat(tensors: list[Tensor]) -> Tensor:
    return torch.cat([t.flatten() for t in tensors])  # every parameter's gradient in one vector


def _gradients_on_worker(rank: int, world_size: int, learner: str, seed: int, batch: int,
                        with_unused: bool) -> dict[str, Any]:
    """One worker of check_average_gradients: its shard's gradient, then the learner's average_gradients
    (guarded as in the notebook); returns the gradients it leaves, or the one-line error."""
    model, x, y = _gradient_problem(seed, batch, with_unused)
    _shard_gradients(model, x, y, rank, world_size)
    try:
        average = load_function(learner)
        with off_limits(AVERAGE_OFF_LIMITS, AVERAGE_GRADIENTS.name, learner_namespaces(average)):
            call_learner("average_gradients(model)", average, model)
    except CheckFailed as error:
        return {"error": str(error)}
    except Exception as error:  # noqa: BLE001 - e.g. a SyntaxError in the file the source became
        return {"error": f"average_gradients could not be loaded in the worker: {type(error).__name__}: {error}"}
    return {"grads": [None if p.grad is None else p.grad.detach().clone() for p in model.parameters()],
            "unused_grad": None if model.unused is None else model.unused.weight.grad}


def _learner_module(fn: Callable, folder: Path) -> str:
    """The learner's function, from its source, in a module a worker can import: "file.py:name"."""
    try:
        return function_file(fn, folder)
    except (OSError, TypeError):
        raise CheckFailed(f"the source of {getattr(fn, '__name__', 'your function')} cannot be read, and the workers "
                          "run it from its source: define it with `def` in a notebook cell or a .py file") from None


def _average_case(seed: int, world_size: int, batch: int, with_unused: bool) -> Case:
    model, x, y = _gradient_problem(seed, batch, with_unused)
    whole = _flat(_shard_gradients(model, x, y, 0, 1))  # one worker, the whole batch
    own = [_flat(_shard_gradients(model, x, y, rank, world_size)) for rank in range(world_size)]
    what = f"average_gradients(model) on {world_size} workers, each with {batch // world_size} of {batch} examples"

    def call(learner: Callable) -> list[dict[str, Any]]:
        with tempfile.TemporaryDirectory(prefix="tfcourse-learner-") as folder:
            target = _learner_module(learner, Path(folder))
            try:
                return launch("tfcourse.checks.parallel:_gradients_on_worker", world_size,
                              (target, seed, batch, with_unused), timeout=WORKER_TIMEOUT)
            except WorkerFailed as error:
                raise CheckFailed(f"{what}: {error}") from None

    def judge(results: list[dict[str, Any]]) -> None:
        for rank, result in enumerate(results):
            if "error" in result:
                raise CheckFailed(f"worker {rank}: {result['error']}")
        for rank, result in enumerate(results):
            grads = [g for g in result["grads"] if g is not None]
            if len(grads) != 4:
                raise CheckFailed(f"{what}: worker {rank}'s model has {len(grads)} gradients afterwards, expected 4 "
                                  "(one per weight and bias the loss used); leave .grad where it is")
            mistakes = {"the sum of the workers' gradients, not their mean: divide by the world size":
                        world_size * whole,
                        "this worker's own gradient: nothing was all-reduced (all-reducing the loss, or a copy of "
                        ".grad, leaves .grad as it was)": own[rank],
                        "this worker's own gradient divided by the world size: the all-reduce is missing":
                        own[rank] / world_size}
            compare(_flat(grads), whole, f"{what}: worker {rank}'s gradients", mistakes)
            if with_unused and result["unused_grad"] is not None and result["unused_grad"].abs().sum() > 0:
                raise CheckFailed(f"{what}: a parameter the loss never used got a non-zero gradient")

    return Case(what, call=call, inspect=judge, unchanged=())


@isolated
@one_thread
def check_average_gradients(average_fn, hidden: bool = False) -> None:
    """average_gradients(model), called on every worker after backward(), leaves each parameter's .grad
    equal to the mean over the workers: 2 workers x B examples give the gradient of 1 worker x 2B."""
    # The hidden run: three workers, and a parameter without a gradient (its .grad is None).
    layouts = [(5, 3, 6, True)] if hidden else [(4, 2, 8, False)]
    run(AVERAGE_GRADIENTS, average_fn, [_average_case(*layout) for layout in layouts], hidden,
        fields={"workers": layouts[0][1]})


# ----------------------------------------------------------------------------------------------
# Exercise 3: the ring all-reduce's traffic
# ----------------------------------------------------------------------------------------------


def _as_number(value: Any, what: str) -> float:
    if isinstance(value, Tensor) and value.numel() == 1:
        value = value.item()
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        raise CheckFailed(f"{what}: expected a number of bytes, got {type(value).__name__}")
    return float(value)


def _ring_case(n_values: int, n_workers: int) -> Case:
    tensors = [torch.ones(n_values) for _ in range(n_workers)]  # float32: 4 bytes per value
    _, sent = simulate_ring_all_reduce(tensors)
    n_bytes = 4 * n_values
    what = f"ring_bytes_sent({n_bytes}, {n_workers})"
    expected = torch.tensor(float(max(sent)), dtype=torch.float64)
    mistakes = {"(N - 1)/N of the tensor: the reduce-scatter alone; the all-gather sends as much again":
                torch.tensor((n_workers - 1) * n_bytes / n_workers, dtype=torch.float64),
                "2 (N - 1) whole tensors: in a ring each step sends one chunk of size/N, not the tensor":
                torch.tensor(2.0 * (n_workers - 1) * n_bytes, dtype=torch.float64),
                "twice the tensor: that is the limit for many workers, 2 (N - 1)/N tends to 2":
                torch.tensor(2.0 * n_bytes, dtype=torch.float64),
                "the bytes of all workers together; the question is what each one sends":
                torch.tensor(float(sum(sent)), dtype=torch.float64)}
    return Case(what, (n_bytes, n_workers), expected=expected, mistakes=mistakes,
                label=f"{what}, against the simulated ring",
                inspect=lambda value: torch.tensor(_as_number(value, what), dtype=torch.float64))


@isolated
def check_ring_bytes_sent(ring_fn, hidden: bool = False) -> None:
    """ring_bytes_sent(n_bytes, n_workers): the bytes each worker sends in a ring all-reduce of a tensor of
    n_bytes (divisible into N equal chunks), as the simulation counts them."""
    layouts = [(3_000, 4), (1_000, 2), (4_096, 8)]  # N = 4 first: there each usual mistake gives its own number
    if hidden:
        layouts += [(600, 3), (17, 1), (2_400, 16)]
    run(RING_BYTES, ring_fn, [_ring_case(*layout) for layout in layouts], hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 4: gradient accumulation
# ----------------------------------------------------------------------------------------------


def _mse_loss(model: nn.Module, x: Tensor, y: Tensor) -> Tensor:
    return F.mse_loss(model(x), y)  # the mean over the examples it is given


def _accumulate_case(seed: int, batch: int, k: int) -> Case:
    model, x, y = _gradient_problem(seed, batch, with_unused=False)
    whole = _flat(_shard_gradients(model, x, y, 0, 1))
    micro = [_flat(_shard_gradients(model, x, y, i, k)) for i in range(k)]
    with torch.no_grad():
        loss = _mse_loss(model, x, y)
    what = f"accumulate_gradients(model, loss_fn, x, y, k={k}) with a batch of {batch}"
    mistakes = {"k times the batch's gradient: divide each micro-batch's loss by k": k * whole,
                "the last micro-batch's gradient alone, divided by k: .grad was reset between micro-batches":
                micro[-1] / k,
                "the last micro-batch's gradient alone: .grad was reset between micro-batches": micro[-1]}
    sizes: list[int] = []

    def call(learner: Callable) -> Any:
        model.zero_grad(set_to_none=True)
        sizes.clear()
        hook = model.register_forward_pre_hook(lambda _, inputs: sizes.append(inputs[0].shape[0]))
        try:
            return call_learner(what, learner, model, _mse_loss, x, y, k)
        finally:
            hook.remove()

    def gradients(_: Any) -> Tensor:
        if sizes != [batch // k] * k:
            raise CheckFailed(f"{what}: the model saw batches of sizes {sizes}, expected {k} micro-batches of "
                              f"{batch // k} (the point is never to hold the whole batch's activations)")
        grads = [p.grad for p in model.parameters()]
        if any(g is None for g in grads):
            raise CheckFailed(f"{what}: a parameter has no .grad afterwards: call backward() on each "
                              "micro-batch's loss")
        return _flat(grads)

    def returned_loss(returned: Any) -> None:  # after the gradients, the exercise's point
        compare(torch.tensor(_as_number(returned, f"{what}: the returned loss"), dtype=torch.float64),
                loss.double(), f"{what}: the returned loss",
                mistakes={"the sum of the micro-batch losses, not their mean": k * loss.double()})

    return Case(what, call=call, inspect=gradients, expected=whole, mistakes=mistakes, after=returned_loss,
                unchanged=(x, y), label=f"{what}: the gradients left in .grad")


def _accumulate_uneven_case() -> Case:
    model, x, y = _gradient_problem(9, 6, with_unused=False)
    what = "accumulate_gradients(model, loss_fn, x, y, k=4) with a batch of 6"

    def call(learner: Callable) -> None:
        try:
            learner(model, _mse_loss, x, y, 4)
        except ValueError:
            return None
        except Exception as error:  # noqa: BLE001
            raise CheckFailed(f"{what}: expected a ValueError, got {type(error).__name__}: {error}") from None
        raise CheckFailed(f"{what}: expected a ValueError: 6 examples do not make 4 equal micro-batches, and unequal "
                          "ones would not average to the batch's gradient")

    return Case(what, call=call)


@isolated
@one_thread
def check_accumulate_gradients(accumulate_fn, hidden: bool = False) -> None:
    """accumulate_gradients(model, loss_fn, x, y, k): k forward/backward passes on equal micro-batches leave
    in .grad the gradient of loss_fn on the whole batch (exact, to float tolerance) and return that loss."""
    layouts = [(20, 8, 4), (21, 6, 2)]
    if hidden:
        layouts += [(22, 5, 5), (23, 4, 1)]
    cases = [_accumulate_case(*layout) for layout in layouts]
    if hidden:
        cases.append(_accumulate_uneven_case())
    run(ACCUMULATE, accumulate_fn, cases, hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 5: memory per GPU
# ----------------------------------------------------------------------------------------------

MEMORY_KEYS = ("parameters", "gradients", "optimizer", "activations", "total")


def _memory(parameters: float, gradients: float, optimizer: float, activations: float) -> Tensor:
    """The five values a memory_per_gpu dict holds, in MEMORY_KEYS' order."""
    values = [parameters, gradients, optimizer, activations, parameters + gradients + optimizer + activations]
    return torch.tensor(values, dtype=torch.float64)


def _memory_case(n_params: int, n_gpus: int, strategy: str, activations: int) -> Case:
    p, n = 4.0 * n_params, n_gpus
    full = {"ddp": (p, p, 2 * p), "zero1": (p, p, 2 * p / n), "fsdp": (p / n, p / n, 2 * p / n)}
    expected = _memory(*full[strategy], activations)
    mistakes = {
        "AdamW's states as 4 bytes per parameter: it keeps two, exp_avg and exp_avg_sq (8 bytes)":
            _memory(full[strategy][0], full[strategy][1], full[strategy][2] / 2, activations),
        "the activations divided over the GPUs: each GPU keeps those of its own micro-batch":
            _memory(*full[strategy], activations / n),
    }
    if n > 1 and strategy == "zero1":
        mistakes["the gradients split too: that is ZeRO-2; ZeRO-1 splits only the optimizer states"] = \
            _memory(p, p / n, 2 * p / n, activations)
        mistakes["nothing split: that is plain data parallelism"] = _memory(*full["ddp"], activations)
    if n > 1 and strategy == "fsdp":
        mistakes["only the optimizer states split: FSDP splits parameters and gradients too"] = \
            _memory(*full["zero1"], activations)
        mistakes["the parameters left whole: that is ZeRO-2; FSDP splits the parameters too"] = \
            _memory(p, p / n, 2 * p / n, activations)
    if n > 1 and strategy == "ddp":
        mistakes["something split over the GPUs: plain data parallelism keeps a full copy of everything "
                 "on every GPU"] = _memory(*full["zero1"], activations)
    what = f"memory_per_gpu({n_params:,}, {n_gpus}, {strategy!r}, activation_bytes={activations:,})"
    return Case(what, (n_params, n_gpus, strategy), {"activation_bytes": activations}, expected=expected,
                mistakes=mistakes, inspect=lambda result: _memory_values(result, what))


def _memory_values(result: Any, what: str) -> Tensor:
    if not isinstance(result, dict):
        raise CheckFailed(f"{what}: expected a dict with keys {list(MEMORY_KEYS)}, got {type(result).__name__}")
    missing = [key for key in MEMORY_KEYS if key not in result]
    if missing:
        raise CheckFailed(f"{what}: the dict is missing the key(s) {missing}; expected keys {list(MEMORY_KEYS)}")
    return torch.tensor([_as_number(result[key], f"{what}[{key!r}]") for key in MEMORY_KEYS], dtype=torch.float64)


def _measured_zero1_case() -> Case:
    what = "memory_per_gpu(n_params, 2, 'zero1') against a ZeroRedundancyOptimizer(AdamW) on 2 workers"

    def call(learner: Callable) -> tuple[list[dict[str, int]], Any]:
        try:
            measured = [held["zero1"] for held in
                        launch("tfcourse.parallel:optimizer_state_bytes_on_worker", 2, timeout=WORKER_TIMEOUT)]
        except WorkerFailed as error:  # not the learner's fault: say so
            raise CheckFailed(f"{what}: the measurement itself failed: {error}") from None
        return measured, call_learner(f"memory_per_gpu({measured[0]['n_params']}, 2, 'zero1')", learner,
                                      measured[0]["n_params"], 2, "zero1")

    def judge(outcome: tuple[list[dict[str, int]], Any]) -> None:
        measured, result = outcome
        values = dict(zip(MEMORY_KEYS, _memory_values(result, what).tolist()))
        for rank, held in enumerate(measured):
            for key in ("parameters", "gradients", "optimizer"):
                if abs(values[key] - held[key]) > 0.5:
                    raise CheckFailed(f"{what}: you say {values[key]:,.0f} bytes of {key} per GPU; worker {rank} "
                                      f"measured {held[key]:,} bytes (fp32, {held['n_params']:,} parameters)")

    return Case(what, call=call, inspect=judge, unchanged=())


@isolated
@one_thread
def check_memory_per_gpu(memory_fn, hidden: bool = False) -> None:
    """memory_per_gpu(n_params, n_gpus, strategy, activation_bytes=0) -> bytes per GPU of parameters,
    gradients, optimizer (AdamW, fp32), activations and their total, for strategy 'ddp', 'zero1' or 'fsdp'."""
    layouts = [(1_000_000, 4, "ddp", 0), (1_000_000, 4, "zero1", 0), (1_000_000, 4, "fsdp", 0),
               (124_000_000, 8, "zero1", 3_000_000_000)]
    if hidden:
        layouts += [(7_000_000_000, 64, "fsdp", 10 ** 10), (10_000, 1, "fsdp", 0), (3_000, 3, "ddp", 77),
                    (5_000, 5, "zero1", 0)]
    cases = [_memory_case(*layout) for layout in layouts]
    if not hidden:  # measured once, in the visible run
        cases.append(_measured_zero1_case())
    run(MEMORY, memory_fn, cases, hidden, count=len(layouts))


assert set(STRATEGIES) == {"ddp", "zero1", "fsdp"}  # the cases above cover each
