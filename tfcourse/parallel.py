"""Data parallelism with torch.distributed, small enough to read (lesson 13).

N workers each hold a full copy of the model. Each computes the gradient of the loss on its own
shard of the batch; an all-reduce averages the N gradients; every copy then takes the same
optimizer step, so the copies stay identical:

    g = (1/N) * sum_r g_r,   g_r = gradient of the mean loss on worker r's B/N examples

With equal shards that average is exactly the gradient of the mean loss on the whole batch of B.

    launch("tfcourse.parallel:hello", world_size=2)   # run a function in 2 processes, one gloo group
    shard_batch(x, y, rank, world_size)               # this worker's contiguous slice of the batch
    average_gradients(model)                          # all-reduce every .grad, divide by N
    simulate_ring_all_reduce(tensors)                 # the ring algorithm, step by step, counting bytes
    ring_bytes_sent(n_bytes, n_workers)               # what each worker sends: 2 (N - 1) / N * n_bytes
    accumulate_gradients(model, loss_fn, x, y, k)     # k micro-batches give one batch's gradient
    memory_per_gpu(n_params, n_gpus, strategy)        # bytes per GPU: DDP, ZeRO-1, FSDP

`launch` starts new processes that hold nothing of the caller: it works from a notebook, whose
functions cannot be pickled by reference (a function travels by name or in a file), and under
nbgrader, where a child's output must not reach the grading kernel's stderr (each worker writes its
output and its result to files). On Linux they are forked from one server process that has imported
torch once, so a worker starts in milliseconds instead of seconds; elsewhere, or with
TFCOURSE_FORK_WORKERS=0, each is a fresh `python -m tfcourse.parallel`.
"""

from __future__ import annotations

import contextlib
import importlib
import importlib.util
import inspect
import multiprocessing
import os
import socket
import statistics
import subprocess
import sys
import tempfile
import textwrap
import time
import types
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import torch
import torch.distributed as dist
from torch import Tensor, nn

from .validation import expect_tensor

STRATEGIES = ("ddp", "zero1", "fsdp")  # what memory_per_gpu knows
BYTES_PER_VALUE = 4  # fp32: parameters, gradients and AdamW's two states each take 4 bytes per parameter


class WorkerFailed(RuntimeError):
    """A worker of `launch` raised, exited with an error, or did not finish in time."""


# ----------------------------------------------------------------------------------------------
# Launching a process group from anywhere (a notebook included)
# ----------------------------------------------------------------------------------------------


def free_port() -> int:
    """A TCP port nobody listens on right now: where rank 0 waits for the others (MASTER_PORT)."""
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def _worker_environment(rank: int, world_size: int, port: int, threads: int) -> dict[str, str]:
    """What torchrun would set for each worker, on one machine: who it is and where rank 0 listens."""
    environment = dict(os.environ)
    environment.update(RANK=str(rank), LOCAL_RANK=str(rank), WORLD_SIZE=str(world_size),
                       LOCAL_WORLD_SIZE=str(world_size), MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port),
                       OMP_NUM_THREADS=str(threads))  # N workers on a few cores: do not oversubscribe them
    environment.pop("MPLBACKEND", None)  # a notebook's inline backend means nothing in a child process
    return environment


def _tail(path: Path, lines: int = 12) -> str:
    text = path.read_text(encoding="utf-8", errors="replace") if path.exists() else ""
    return "\n".join(text.strip().splitlines()[-lines:])


def launch(function: str, world_size: int = 2, args: Sequence[Any] = (), timeout: float = 120.0,
           threads: int = 1) -> list[Any]:
    """Run `function(rank, world_size, *args)` in `world_size` new processes that form one gloo
    process group; return what each returned, rank 0 first.

    `function` is "package.module:name" or "/path/to/file.py:name". `args` and the results travel
    through torch.save files (tensors, numbers, lists and dicts of them). A worker that raises, or a
    group that has not finished after `timeout` seconds (a collective one worker never joined waits
    forever), raises WorkerFailed with the end of the worker's error output. A group whose rendezvous
    fails before `function` runs anywhere (rank 0's port taken by another program in the meantime, a
    connection the machine dropped) is started once more, on a new port, as torchrun's restarts would.
    """
    if not isinstance(world_size, int) or world_size < 1:
        raise ValueError(f"world_size must be a positive int, got {world_size!r}")
    if ":" not in function:
        raise ValueError(f"function must be 'module:name' or 'file.py:name', got {function!r}")
    try:
        return _run_group(function, world_size, args, timeout, threads)
    except _RendezvousFailed:
        return _run_group(function, world_size, args, timeout, threads)


def _joined(folder: str | Path, rank: int) -> Path:
    """The file worker `rank` leaves once it has joined the group."""
    return Path(folder) / f"joined{rank}"


def _wait_for_workers(workers: list, work: Path, deadline: float) -> set[int]:
    """Wait until every worker has exited, or one has failed before joining the group (the others can then
    never form it, and would wait until the deadline). The ranks that exited by themselves; none at the
    deadline."""
    while True:
        exited = {rank for rank, worker in enumerate(workers) if worker.poll() is not None}
        if len(exited) == len(workers):
            return exited
        if any(workers[rank].returncode != 0 and not _joined(work, rank).exists() for rank in exited):
            return exited
        if time.monotonic() > deadline:
            return set()
        time.sleep(0.005)


class _RendezvousFailed(WorkerFailed):
    """A worker failed while the group was forming: nothing of the caller's function had run."""


def _run_group(function: str, world_size: int, args: Sequence[Any], timeout: float, threads: int) -> list[Any]:
    """One attempt of `launch`: start the workers, wait for them, read their results."""
    with tempfile.TemporaryDirectory(prefix="tfcourse-workers-") as folder:
        work = Path(folder)
        torch.save(list(args), work / "args.pt")
        port = free_port()
        start = _fork_worker if _fork_workers() else _start_worker_process
        workers = [start(function, work, _worker_environment(rank, world_size, port, threads), work / f"out{rank}.txt")
                   for rank in range(world_size)]
        try:
            finished = _wait_for_workers(workers, work, time.monotonic() + timeout)
        finally:
            for worker in workers:
                if worker.poll() is None:
                    worker.kill()
                    worker.wait()
        if not finished:
            raise WorkerFailed(f"the {world_size} workers of {function} had not finished after {timeout:g} s: "
                               "a collective (all_reduce, barrier...) that one worker calls and another "
                               "does not waits forever")
        for rank, worker in enumerate(workers):
            if rank in finished and worker.returncode != 0:
                output = _tail(work / f"out{rank}.txt")
                if not _joined(work, rank).exists():
                    raise _RendezvousFailed(f"worker {rank} of {function} could not join the group "
                                            f"(exit code {worker.returncode}): {output}")
                if "closed by peer" in output or "reset by peer" in output:  # gloo's words for it
                    output = ("another worker had finished while this one waited in a collective (all_reduce, "
                              "barrier...): every worker must call the same collectives, in the same order\n" + output)
                raise WorkerFailed(f"worker {rank} of {function} failed (exit code {worker.returncode}): {output}")
        return [torch.load(work / f"result{rank}.pt", weights_only=False) for rank in range(world_size)]


FORK_SWITCH = "TFCOURSE_FORK_WORKERS"  # "0": every worker a fresh Python process, as on macOS and Windows


def _fork_workers() -> bool:
    """Forking is for Linux (macOS's system libraries are not safe in a forked child; Windows has no fork)."""
    return sys.platform.startswith("linux") and os.environ.get(FORK_SWITCH, "1") != "0"


def _start_worker_process(function: str, folder: Path, environment: dict[str, str], output: Path) -> subprocess.Popen:
    """A fresh `python -m tfcourse.parallel` (it imports torch itself), its output in `output`."""
    with open(output, "wb") as out:
        return subprocess.Popen([sys.executable, "-m", "tfcourse.parallel", function, str(folder)],
                                env=environment, stdout=out, stderr=subprocess.STDOUT)


class _ForkedWorker:
    """A worker forked from the server, with the part of subprocess.Popen's interface that `launch` uses."""

    def __init__(self, process: multiprocessing.process.BaseProcess) -> None:
        self.process = process

    @property
    def returncode(self) -> int | None:  # like Popen's: minus the signal's number for a killed worker
        return self.process.exitcode

    def poll(self) -> int | None:
        return self.process.exitcode

    def wait(self) -> int:
        self.process.join()
        return self.process.exitcode

    def kill(self) -> None:
        self.process.kill()


def _server() -> multiprocessing.context.BaseContext:
    """The server: a process that has imported torch and this module once (the first forked worker
    starts it, in about the time of one `import torch`), then forks every worker. Unlike a fork of the
    caller, a fork of it has no threads of the caller's (a kernel's, torch's) to inherit half-way through
    their work. (Asked for only where workers are forked: Windows has no such context.)"""
    context = multiprocessing.get_context("forkserver")
    context.set_forkserver_preload([__name__])
    return context


def _fork_worker(function: str, folder: Path, environment: dict[str, str], output: Path) -> _ForkedWorker:
    """A worker forked from the server: the environment, folder and output a fresh `python -m
    tfcourse.parallel` would have, then `_run_worker`."""
    process = _server().Process(target=_forked_worker_main, args=(function, str(folder), environment, output),
                                name=f"tfcourse worker {environment['RANK']}")
    # multiprocessing would run the caller's script again in the worker, before `target` (its __main__):
    # a script without `if __name__ == "__main__"` would launch again from there. A worker needs only
    # this module, so it is shown an empty __main__ while it starts.
    caller_main = sys.modules["__main__"]
    sys.modules["__main__"] = types.ModuleType("__main__")
    try:
        process.start()
    finally:
        sys.modules["__main__"] = caller_main
    return _ForkedWorker(process)


def _forked_worker_main(function: str, folder: str, environment: dict[str, str], output: Path) -> None:
    """The forked worker's first steps: its output to its file, its own environment, then `_run_worker`."""
    with open(output, "wb") as out:  # fds 1 and 2 are the server's, i.e. the caller's: never write there
        os.dup2(out.fileno(), 1)
        os.dup2(out.fileno(), 2)
    sys.stdout = sys.stderr = open(1, "w", buffering=1, encoding="utf-8", errors="replace", closefd=False)
    os.environ.clear()
    os.environ.update(environment)
    _run_worker(function, folder)


def load_function(function: str) -> Callable:
    """"module:name" or "file.py:name" -> the function."""
    where, _, name = function.rpartition(":")
    if where.endswith(".py"):
        spec = importlib.util.spec_from_file_location(Path(where).stem, where)
        module = importlib.util.module_from_spec(spec)
        sys.modules[spec.name] = module  # so pickle and dataclasses can find what it defines
        spec.loader.exec_module(module)
    else:
        module = importlib.import_module(where)
    return getattr(module, name)


def _worker_main(function: str, folder: str) -> None:
    """One worker of `launch`: join the group (rank, world size and rank 0's address come from the
    environment, as under torchrun), call the function, save its result, leave the group."""
    torch.set_num_threads(int(os.environ.get("OMP_NUM_THREADS", "1")))
    dist.init_process_group("gloo")  # env:// rendezvous: MASTER_ADDR, MASTER_PORT, RANK, WORLD_SIZE
    # Past the rendezvous: from here on, a failure is the function's (launch starts a group again only before).
    _joined(folder, dist.get_rank()).touch()
    try:
        args = torch.load(Path(folder) / "args.pt", weights_only=False)
        result = load_function(function)(dist.get_rank(), dist.get_world_size(), *args)
        torch.save(result, Path(folder) / f"result{dist.get_rank()}.pt")
    finally:
        dist.destroy_process_group()


def _run_worker(function: str, folder: str) -> None:
    """`_worker_main`, then out at once (`exit_without_teardown`; the interpreter's shutdown aborted
    about one DDP run in three on 2 CPUs). A worker that raised still exits with 1 and its traceback."""
    try:
        _worker_main(function, folder)
        code = 0
    except SystemExit as stop:  # sys.exit(...) in the function: its code, as the interpreter would
        code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
    except BaseException:  # noqa: BLE001 - report anything, as the interpreter would
        import traceback

        traceback.print_exc()
        code = 1
    exit_without_teardown(code)


def exit_without_teardown(code: int) -> None:
    """End this process now with `code`, its output flushed, skipping the interpreter's shutdown: once a
    gloo process group has run here, that shutdown can abort in gloo's C++ teardown ("terminate called
    without an active exception", exit code -6), failing a process that finished its work."""
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


def hello(rank: int, world_size: int) -> dict[str, Any]:
    """The smallest collective: every worker contributes its rank, all_reduce sums them everywhere."""
    value = torch.tensor([float(rank)])
    dist.all_reduce(value)  # in place, on every worker: 0 + 1 + ... + (N - 1)
    return {"rank": rank, "world_size": world_size, "sum_of_ranks": value.item()}


# ----------------------------------------------------------------------------------------------
# The pieces of data parallelism (the lesson's exercises are these)
# ----------------------------------------------------------------------------------------------


def _check_rank(rank: int, world_size: int) -> None:
    if not (isinstance(rank, int) and isinstance(world_size, int) and 0 <= rank < world_size):
        raise ValueError(f"rank must be an int in 0..world_size - 1 and world_size a positive int, "
                         f"got rank={rank!r}, world_size={world_size!r}")


def shard_batch(x: Tensor, y: Tensor, rank: int, world_size: int) -> tuple[Tensor, Tensor]:
    """Worker `rank`'s contiguous share of a batch: rows rank * B/N up to (rank + 1) * B/N.

    The shards are equal, so the mean of the workers' mean losses is the mean loss of the batch."""
    expect_tensor(x, "x")
    expect_tensor(y, "y")
    _check_rank(rank, world_size)
    batch = x.shape[0]
    if batch % world_size != 0:
        raise ValueError(f"a batch of {batch} does not split into {world_size} equal shards")
    per_worker = batch // world_size
    rows = slice(rank * per_worker, (rank + 1) * per_worker)
    return x[rows], y[rows]  # (B/N, ...) each


def average_gradients(model: nn.Module) -> None:
    """Replace every parameter's .grad by the mean of that .grad over the workers of the group."""
    world_size = dist.get_world_size()
    for parameter in model.parameters():
        if parameter.grad is None:  # a parameter this step did not use: nothing to share
            continue
        dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)  # in place: the sum over the workers
        parameter.grad /= world_size  # the mean: gloo has no AVG, and the sum would be N times too big


def simulate_ring_all_reduce(tensors: Sequence[Tensor]) -> tuple[list[Tensor], list[int]]:
    """The ring all-reduce of N workers' tensors, one message at a time, in one process.

    Each tensor is cut into N chunks. Reduce-scatter: in N - 1 steps, worker i sends one chunk to
    worker i + 1, which adds it to its own; afterwards worker i holds the full sum of chunk i + 1.
    All-gather: in N - 1 more steps the finished chunks travel round the ring. Returns every
    worker's result (each the sum of all the tensors) and the bytes each worker sent.
    """
    n = len(tensors)
    if n == 0:
        raise ValueError("simulate_ring_all_reduce needs at least one worker's tensor")
    for r, tensor in enumerate(tensors):
        expect_tensor(tensor, f"tensors[{r}]")
        if tensor.shape != tensors[0].shape:
            raise ValueError(f"every worker's tensor must have one shape: tensors[{r}] is {tuple(tensor.shape)}, "
                             f"tensors[0] is {tuple(tensors[0].shape)}")
    chunks = [list(t.detach().flatten().clone().tensor_split(n)) for t in tensors]  # chunks[worker][c]
    sent = [0] * n
    for step in range(n - 1):  # reduce-scatter
        messages = [(i, (i - step) % n, chunks[i][(i - step) % n].clone()) for i in range(n)]
        for i, c, chunk in messages:  # all sent at once, then all received
            chunks[(i + 1) % n][c] += chunk
            sent[i] += chunk.numel() * chunk.element_size()
    for step in range(n - 1):  # all-gather: worker i starts with the finished chunk i + 1
        messages = [(i, (i + 1 - step) % n, chunks[i][(i + 1 - step) % n].clone()) for i in range(n)]
        for i, c, chunk in messages:
            chunks[(i + 1) % n][c] = chunk
            sent[i] += chunk.numel() * chunk.element_size()
    results = [torch.cat(parts).view_as(tensors[0]) for parts in chunks]  # back to the tensor's shape
    return results, sent


def ring_bytes_sent(n_bytes: int, n_workers: int) -> float:
    """Bytes each worker sends in a ring all-reduce of n_bytes: 2 (N - 1) chunks of n_bytes / N."""
    return 2 * (n_workers - 1) * n_bytes / n_workers


def accumulate_gradients(model: nn.Module, loss_fn: Callable[[nn.Module, Tensor, Tensor], Tensor],
                         x: Tensor, y: Tensor, k: int) -> float:
    """Backward through k equal micro-batches of (x, y), so that .grad ends up holding the gradient of
    the mean loss on the whole batch; returns that loss. Memory: one micro-batch's activations."""
    if x.shape[0] % k != 0:
        raise ValueError(f"a batch of {x.shape[0]} does not split into {k} equal micro-batches")
    total = 0.0
    for x_micro, y_micro in zip(x.chunk(k), y.chunk(k)):  # (B/k, ...) each
        loss = loss_fn(model, x_micro, y_micro) / k  # mean of k means = the batch's mean
        loss.backward()  # adds to .grad: the k gradients sum
        total += loss.item()
    return total


def _check_strategy(strategy: str) -> None:
    if strategy not in STRATEGIES:
        raise ValueError(f"strategy must be one of {STRATEGIES}, got {strategy!r}")


def memory_per_gpu(n_params: int, n_gpus: int, strategy: str, activation_bytes: int = 0) -> dict[str, float]:
    """Bytes one GPU holds while training n_params fp32 parameters with AdamW on n_gpus GPUs.

        ddp    every GPU keeps everything: parameters 4P, gradients 4P, AdamW's two states 8P
        zero1  the optimizer states are split over the GPUs (ZeroRedundancyOptimizer): 8P / N
        fsdp   parameters, gradients and states all split (ZeRO-3): 16P / N, plus while computing
               one layer's gathered parameters (not counted here)

    Activations belong to each GPU's own micro-batch and are never split: they are added as given.
    """
    _check_strategy(strategy)
    parameters = gradients = BYTES_PER_VALUE * n_params
    optimizer = 2 * BYTES_PER_VALUE * n_params  # exp_avg and exp_avg_sq
    if strategy in ("zero1", "fsdp"):
        optimizer /= n_gpus
    if strategy == "fsdp":
        parameters /= n_gpus
        gradients /= n_gpus
    total = parameters + gradients + optimizer + activation_bytes
    return {"parameters": parameters, "gradients": gradients, "optimizer": optimizer,
            "activations": activation_bytes, "total": total}


# ----------------------------------------------------------------------------------------------
# The lesson's experiments, each a function one worker runs (launch(...) starts them)
# ----------------------------------------------------------------------------------------------

# What a function written in a notebook sees in a worker: the lesson's imports, nothing else of the notebook.
FUNCTION_FILE_HEADER = ("from __future__ import annotations\nimport math\nimport torch\n"
                        "import torch.distributed as dist\nimport torch.nn.functional as F\nfrom torch import Tensor, nn\n\n")


def function_file(fn: Callable, folder: str | os.PathLike[str]) -> str:
    """Write `fn`, from its source, to folder/notebook_code.py below the lesson's imports (torch, dist,
    F, nn, Tensor, math): a worker process imports it from there. Returns "file.py:name" for `launch`.
    A function whose source cannot be read (built by exec, say) raises OSError."""
    source = textwrap.dedent(inspect.getsource(fn))  # OSError or TypeError when there is none
    path = Path(folder) / "notebook_code.py"
    path.write_text(FUNCTION_FILE_HEADER + source, encoding="utf-8")
    return f"{path}:{fn.__name__}"


def _small_model(seed: int) -> nn.Module:
    torch.manual_seed(seed)  # the same initial weights in every worker
    return nn.Sequential(nn.Linear(8, 32), nn.Tanh(), nn.Linear(32, 4))


def train_on_worker(rank: int, world_size: int, average: str, steps: int, batch: int, seed: int = 0) -> dict[str, Any]:
    """SGD on a small regression problem, data-parallel: each step draws the global batch (the same on
    every worker), keeps this worker's shard, backward, `average` (a "module:name" such as
    "tfcourse.parallel:average_gradients", or your function's file), step. Returns the losses of this
    worker's shards and the final parameters as one vector."""
    average_gradients_fn = load_function(average)
    model = _small_model(seed)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    generator = torch.Generator().manual_seed(seed)  # the data order, shared by all workers
    target = nn.Linear(8, 4)  # the function to learn, the same everywhere (seeded with the model)
    losses = []
    for _ in range(steps):
        x = torch.randn(batch, 8, generator=generator)  # (B, 8): the global batch
        with torch.no_grad():
            y = target(x)  # (B, 4)
        x_shard, y_shard = shard_batch(x, y, rank, world_size)  # (B/N, ...)
        optimizer.zero_grad(set_to_none=True)
        loss = nn.functional.mse_loss(model(x_shard), y_shard)
        loss.backward()
        if world_size > 1:
            average_gradients_fn(model)
        optimizer.step()
        losses.append(loss.item())
    return {"losses": losses, "parameters": torch.cat([p.detach().flatten() for p in model.parameters()])}


def count_all_reduces_on_worker(rank: int, world_size: int, k: int) -> dict[str, dict[str, Any]]:
    """Gradient accumulation over k micro-batches inside DistributedDataParallel, without and with
    `no_sync()` around the first k - 1: how many bucket all-reduces ran, and the gradients left."""
    from torch.nn.parallel import DistributedDataParallel

    generator = torch.Generator().manual_seed(1)
    x, y = torch.randn(4 * k * world_size, 8, generator=generator), torch.randn(4 * k * world_size, 4, generator=generator)
    x_shard, y_shard = shard_batch(x, y, rank, world_size)  # (4k, ...) on each worker
    outcome = {}
    for no_sync in (False, True):
        model = DistributedDataParallel(_small_model(0))
        calls = []

        def counting_hook(state, bucket):  # no annotations: DDP compares them with dist.GradBucket
            calls.append(bucket.buffer().numel())
            tensor = bucket.buffer() / world_size  # DDP's default: the mean, as a sum of shares
            return dist.all_reduce(tensor, async_op=True).get_future().then(lambda fut: fut.value()[0])

        model.register_comm_hook(None, counting_hook)
        for i, (x_micro, y_micro) in enumerate(zip(x_shard.chunk(k), y_shard.chunk(k))):  # (4, ...) each
            skip = no_sync and i < k - 1  # only the last micro-batch's backward shares the gradients
            with model.no_sync() if skip else contextlib.nullcontext():
                (nn.functional.mse_loss(model(x_micro), y_micro) / k).backward()
        outcome["with no_sync" if no_sync else "without no_sync"] = {
            "all_reduces": len(calls), "gradients": torch.cat([p.grad.flatten() for p in model.parameters()])}
    return outcome


def optimizer_state_bytes_on_worker(rank: int, world_size: int) -> dict[str, dict[str, int]]:
    """Bytes this worker holds after one AdamW step on four equal layers — parameters, gradients and
    AdamW's exp_avg and exp_avg_sq (its step counters aside) — with the states whole ("ddp": plain data
    parallelism) and split over the workers by ZeroRedundancyOptimizer ("zero1")."""
    from torch.distributed.optim import ZeroRedundancyOptimizer

    held = {}
    for strategy in ("ddp", "zero1"):
        torch.manual_seed(0)
        model = nn.Sequential(*[nn.Linear(32, 32) for _ in range(4)])  # equal layers: an even split
        if strategy == "zero1":
            optimizer = ZeroRedundancyOptimizer(model.parameters(), optimizer_class=torch.optim.AdamW, lr=1e-3)
            states = optimizer.optim.state  # this worker's partition only
        else:
            optimizer = torch.optim.AdamW(model.parameters(), lr=1e-3)
            states = optimizer.state
        model(torch.randn(4, 32)).sum().backward()
        optimizer.step()
        held[strategy] = {
            "n_params": sum(p.numel() for p in model.parameters()),
            "parameters": sum(p.numel() * p.element_size() for p in model.parameters()),
            "gradients": sum(p.grad.numel() * p.grad.element_size() for p in model.parameters()),
            "optimizer": sum(state[key].numel() * state[key].element_size()
                             for state in states.values() for key in ("exp_avg", "exp_avg_sq"))}
    return held


SHARING = ("alone", "after backward", "after backward, one buffer", "ddp", "ddp small buckets")


def _average_as_one_buffer(model: nn.Module) -> None:
    """average_gradients with a single all-reduce: every gradient copied into one flat buffer and back."""
    grads = [p.grad for p in model.parameters() if p.grad is not None]
    buffer = torch.cat([g.flatten() for g in grads])  # (total parameters,)
    dist.all_reduce(buffer)
    buffer /= dist.get_world_size()
    for grad, part in zip(grads, buffer.split([g.numel() for g in grads])):
        grad.copy_(part.view_as(grad))


def time_steps_on_worker(rank: int, world_size: int, steps: int, width: int = 512, depth: int = 8
                         ) -> dict[str, float]:
    """Median seconds of one training step of a `depth`-layer MLP on this worker, for each way of
    sharing its gradients (SHARING), each one change from the one before: "alone" (no communication),
    "after backward" (average_gradients once backward is done: one all-reduce per parameter), "after
    backward, one buffer" (one all-reduce of all the gradients), "ddp" (DistributedDataParallel: a few
    buckets, each all-reduced while backward goes on) and "ddp small buckets" (1 MB buckets: more of them)."""
    from torch.nn.parallel import DistributedDataParallel

    medians = {}
    for how in SHARING:
        torch.manual_seed(0)
        model = nn.Sequential(*[layer for _ in range(depth) for layer in (nn.Linear(width, width), nn.ReLU())])
        if how.startswith("ddp"):
            model = DistributedDataParallel(model, bucket_cap_mb=1 if how == "ddp small buckets" else 25)
        optimizer = torch.optim.SGD(model.parameters(), lr=1e-3)
        x = torch.randn(64, width)  # (64, width): this worker's batch
        times = []
        for _ in range(steps + 2):  # the first two warm up
            dist.barrier()  # start together: a step takes as long as its slowest worker
            started = time.perf_counter()
            optimizer.zero_grad(set_to_none=True)
            model(x).square().mean().backward()
            if how == "after backward":
                average_gradients(model)
            elif how == "after backward, one buffer":
                _average_as_one_buffer(model)
            optimizer.step()
            times.append(time.perf_counter() - started)
        medians[how] = statistics.median(times[2:])
    return medians

__all__ = ["STRATEGIES", "BYTES_PER_VALUE", "WorkerFailed", "free_port", "launch", "load_function", "hello",
           "shard_batch", "average_gradients", "simulate_ring_all_reduce", "ring_bytes_sent",
           "accumulate_gradients", "memory_per_gpu", "FUNCTION_FILE_HEADER", "function_file", "train_on_worker",
           "count_all_reduces_on_worker", "optimizer_state_bytes_on_worker", "SHARING", "time_steps_on_worker",
           "exit_without_teardown"]


if __name__ == "__main__":
    _run_worker(sys.argv[1], sys.argv[2])
