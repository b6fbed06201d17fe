"""The classroom's memory guard: one learner's processes, together, stay under one memory limit.

deploy/jupyterhub_config.py starts it as a JupyterHub service (it runs as root, beside the hub):

    python -m tfcourse.course.memory_guard --limit-gb 3.5 --exempt instructor

Every learner's server and kernel already has its own cap (RLIMIT_DATA, set by the hub before the
server becomes its user), so one kernel that allocates past it gets a MemoryError in its own cell.
A learner with several kernels open could still hold several times that. So every few seconds this
guard adds up each learner's memory over all their processes, and when a learner is over the limit
it stops their largest process that is not their server (a kernel, usually) and says so in the
hub's log. The learner sees "the kernel died" in that notebook; the other learners notice nothing.

Memory is the proportional set size (PSS): a page shared by several processes (PyTorch's libraries,
loaded by each kernel) is split between them, so a learner's total counts it once.
"""

from __future__ import annotations

import argparse
import logging
import os
import time

import psutil

SERVER_COMMAND = "jupyterhub-singleuser"  # what each learner's server runs (c.Spawner.cmd)

log = logging.getLogger("memory-guard")


def gib(size: float) -> str:
    return f"{size / 2**30:.2f} GiB"


def is_server(process: psutil.Process) -> bool:
    try:
        return any(SERVER_COMMAND in part for part in process.cmdline())
    except psutil.Error:
        return False


def learners_processes(exempt: set[str]) -> dict[str, list[psutil.Process]]:
    """The processes of every user who has a hub server running, by user name; root and the
    `exempt` users (the instructors) left out."""
    by_user: dict[str, list[psutil.Process]] = {}
    for process in psutil.process_iter(["username"]):
        user = process.info["username"]
        if user and user != "root" and user not in exempt:
            by_user.setdefault(user, []).append(process)
    return {user: processes for user, processes in by_user.items() if any(map(is_server, processes))}


def memory_of(process: psutil.Process) -> int:
    """Bytes `process` holds: its PSS, or its RSS where the kernel reports no PSS; 0 once it has gone."""
    try:
        try:
            return process.memory_full_info().pss
        except (AttributeError, psutil.AccessDenied):
            return process.memory_info().rss
    except psutil.Error:
        return 0


def command_of(process: psutil.Process) -> str:
    try:
        return " ".join(process.cmdline())[:120] or process.name()
    except psutil.Error:
        return "?"


def enforce(limit: int, by_user: dict[str, list[psutil.Process]]) -> list[str]:
    """One pass over `by_user` (learners_processes): for each learner over `limit` bytes in all, stop
    their largest process other than their server (the server itself only when nothing else is left).
    Returns what it did, a line each."""
    done = []
    for user, processes in by_user.items():
        sizes = {process: memory_of(process) for process in processes}
        total = sum(sizes.values())
        if total <= limit:
            continue
        kernels = [process for process in processes if not is_server(process)] or processes
        largest = max(kernels, key=sizes.__getitem__)
        command = command_of(largest)
        try:
            largest.kill()
        except psutil.Error:
            continue  # it ended on its own meanwhile
        done.append(f"{user} holds {gib(total)} in {len(processes)} processes, over the learner limit of "
                    f"{gib(limit)}: stopped their largest, pid {largest.pid} ({gib(sizes[largest])}): {command}")
    return done


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m tfcourse.course.memory_guard", description=__doc__.split("\n")[0])
    parser.add_argument("--limit-gb", type=float, required=True, help="memory each learner may hold in all, GiB")
    parser.add_argument("--every", type=float, default=2.0, help="seconds between passes (default 2)")
    parser.add_argument("--exempt", default="", help="comma-separated users never stopped (the instructors)")
    options = parser.parse_args(argv)
    if options.limit_gb <= 0 or options.every <= 0:
        parser.error("--limit-gb and --every must be positive")
    logging.basicConfig(level=logging.INFO, format="[%(levelname).1s %(asctime)s %(name)s] %(message)s")
    limit, exempt = int(options.limit_gb * 2**30), {name for name in options.exempt.split(",") if name}
    log.info("each learner may hold %s in all their processes; checked every %g s; exempt: %s",
             gib(limit), options.every, ", ".join(sorted(exempt)) or "nobody")
    hub = os.getppid()  # the hub that started this service
    while os.getppid() == hub:  # a hub that stopped without stopping its services leaves none behind
        for line in enforce(limit, learners_processes(exempt)):
            log.warning(line)
        time.sleep(options.every)
    log.info("the hub (pid %d) has stopped: so does the memory guard", hub)


if __name__ == "__main__":
    main()
