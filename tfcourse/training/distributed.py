"""The training loop's data-parallel mode: what changes when `torchrun` starts N copies of the script.

    torchrun --nproc_per_node 2 -m tfcourse.training.shakespeare --recipe cpu

torchrun sets RANK, LOCAL_RANK, WORLD_SIZE, MASTER_ADDR and MASTER_PORT in each process; `start()` reads
them and joins the process group (NCCL between GPUs, gloo on CPUs). Then `train()`:

- draws every batch at the recipe's size (the *global* batch) from the one generator all workers share,
  and gives each worker its contiguous 1/N of it (`sharded`): N workers see exactly the examples one
  process would, whatever N is, so a checkpoint resumes with another N;
- wraps the model in DistributedDataParallel, which averages the gradients during backward();
- averages the logged losses and the loss estimates over the workers (`mean_over_workers`);
- writes checkpoints, progress and reports from rank 0 only (`is_main`).

Without torchrun none of this happens and the script runs as one process.
"""

from __future__ import annotations

import datetime
import os
from dataclasses import dataclass

import torch
import torch.distributed as dist

from ..parallel import exit_without_teardown, shard_batch

TORCHRUN_VARIABLES = ("RANK", "LOCAL_RANK", "WORLD_SIZE")


@dataclass(frozen=True)
class Worker:
    """This process's place in the group, as torchrun numbered it."""

    rank: int  # 0 .. world_size - 1 over all machines
    local_rank: int  # 0 .. nproc_per_node - 1 on this machine: which GPU it drives
    world_size: int


def under_torchrun() -> bool:
    return all(name in os.environ for name in TORCHRUN_VARIABLES)


def start(device_type: str) -> Worker | None:
    """Join torchrun's process group (None when not started by torchrun): NCCL when training on CUDA,
    gloo otherwise. A worker on CUDA drives GPU number LOCAL_RANK."""
    if not under_torchrun():
        return None
    worker = Worker(int(os.environ["RANK"]), int(os.environ["LOCAL_RANK"]), int(os.environ["WORLD_SIZE"]))
    if device_type == "cuda":
        torch.cuda.set_device(worker.local_rank)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device_type == "cuda" else "gloo",
                                timeout=datetime.timedelta(minutes=10))  # env:// rendezvous, as torchrun set it up
    return worker


def stop() -> None:
    if dist.is_initialized():
        dist.destroy_process_group()


def exit_script(code: int) -> None:
    """How the training script ends: under torchrun without the interpreter's shutdown, which can abort
    in gloo's teardown after the run is done and saved (torchrun would then report the run failed);
    otherwise as usual."""
    if under_torchrun():
        exit_without_teardown(code)
    raise SystemExit(code)


def current() -> Worker | None:
    """This process's Worker while a process group is up, else None (one process)."""
    if not (dist.is_available() and dist.is_initialized()):
        return None
    return Worker(dist.get_rank(), int(os.environ.get("LOCAL_RANK", 0)), dist.get_world_size())


def is_main() -> bool:
    """True in rank 0, and in a run of one process: the one that writes files and prints."""
    worker = current()
    return worker is None or worker.rank == 0


def sharded(get_batch, worker: Worker):
    """get_batch(split, generator) that draws the global batch, as one process would, and keeps this
    worker's rows of it (the batch size must be a multiple of the number of workers)."""

    def get_shard(split: str, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
        x, y = get_batch(split, generator)  # (B, T) each, the same on every worker
        return shard_batch(x, y, worker.rank, worker.world_size)  # (B / N, T) each

    return get_shard


def mean_over_workers(values: torch.Tensor) -> torch.Tensor:
    """The mean of `values` over the workers (itself in a single process). The workers' shards are
    equal, so the mean of their mean losses is the mean loss of the global batch."""
    worker = current()
    if worker is None:
        return values
    # NCCL reduces tensors on the GPU only; gloo, those on the CPU.
    on = torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else values.device
    total = values.detach().to(on, copy=True)
    dist.all_reduce(total, op=dist.ReduceOp.SUM)  # gloo has no AVG
    return (total / worker.world_size).to(values.device)


__all__ = ["Worker", "under_torchrun", "start", "stop", "current", "is_main", "sharded", "mean_over_workers"]
