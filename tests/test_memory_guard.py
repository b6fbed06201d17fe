"""The classroom's memory guard (tfcourse/course/memory_guard.py) on real processes: it adds up one
learner's memory over all their processes and, over the limit, stops the largest that is not their
server. (tests/test_jupyterhub.py runs it as the hub's service, against real learners' kernels.)"""

from __future__ import annotations

import re
import subprocess
import sys
import time

import psutil
import pytest

from tfcourse.course.memory_guard import enforce, main, memory_of

MIB = 2**20


def _holding(mib: int, *argv: str) -> subprocess.Popen:
    """A process that holds `mib` MiB it has written to (so they are resident), until killed."""
    code = f"import sys, time; held = b'1' * {mib * MIB}; print('ready', flush=True); time.sleep(600)"
    process = subprocess.Popen([sys.executable, "-c", code, *argv], stdout=subprocess.PIPE, text=True)
    assert process.stdout.readline().strip() == "ready"
    return process


@pytest.fixture
def learner():
    """A learner's processes: their server (its command names jupyterhub-singleuser) and two kernels."""
    started = [_holding(20, "jupyterhub-singleuser"), _holding(200, "kernel"), _holding(60, "kernel")]
    try:
        yield [psutil.Process(p.pid) for p in started]
    finally:
        for process in started:
            process.kill()
            process.wait()


def test_a_learner_under_the_limit_is_left_alone(learner):
    total = sum(map(memory_of, learner))
    assert 280 * MIB <= total < 2 * 280 * MIB + 200 * MIB  # (each held, counted once or close to it)
    assert enforce(total + 200 * MIB, {"alice": learner}) == []
    assert all(process.is_running() for process in learner)


def test_over_the_limit_the_largest_process_that_is_not_the_server_is_stopped(learner):
    server, big, small = learner
    (line,) = enforce(250 * MIB, {"alice": learner})
    assert line.startswith("alice holds ") and "over the learner limit of 0.24 GiB" in line
    assert re.search(rf"pid {big.pid} \(0\.2\d GiB\)", line), line
    big.wait(timeout=10)  # stopped; the others go on
    assert server.is_running() and small.is_running()
    time.sleep(0.2)
    assert enforce(250 * MIB, {"alice": [server, small]}) == []  # back under: nothing more


def test_the_server_goes_only_when_it_alone_is_over(learner):
    server = learner[0]
    (line,) = enforce(5 * MIB, {"alice": [server]})
    assert f"pid {server.pid}" in line
    server.wait(timeout=10)


def test_each_learner_is_judged_on_their_own_processes(learner):
    server, big, small = learner
    done = enforce(150 * MIB, {"alice": [server, big], "bob": [small]})
    assert len(done) == 1 and done[0].startswith("alice ") and f"pid {big.pid}" in done[0]
    assert small.is_running()


@pytest.mark.parametrize("argv", [[], ["--limit-gb", "0"], ["--limit-gb", "2", "--every", "-1"]])
def test_the_guard_refuses_a_missing_or_meaningless_limit(argv, capsys):
    with pytest.raises(SystemExit) as stopped:
        main(argv)
    assert stopped.value.code == 2 and "--limit-gb" in capsys.readouterr().err


def test_the_guard_stops_when_the_hub_that_started_it_is_gone():
    # The hub stands in as a shell that starts the guard and exits without stopping it.
    guard_command = f"{sys.executable} -m tfcourse.course.memory_guard --limit-gb 1 --every 0.1"
    hub = subprocess.run(["sh", "-c", f"{guard_command} >/dev/null 2>&1 & echo $!; sleep 1"],
                         capture_output=True, text=True, check=True)
    guard = psutil.Process(int(hub.stdout.strip()))
    try:
        guard.wait(timeout=15)  # psutil.TimeoutExpired if the guard outlives its hub
    finally:
        if guard.is_running():
            guard.kill()
