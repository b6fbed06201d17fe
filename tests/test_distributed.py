"""The training script under torchrun, on the CPU (gloo): N workers train the run one process trains,
on one machine and as two "machines" (two torchrun agents on 127.0.0.1), and a checkpoint resumes
with another number of workers. Every run is a few steps of the CPU recipe on a small generated text."""

from __future__ import annotations

import json
import os
import random
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import torch

from tfcourse.parallel import free_port
from tfcourse.training import distributed

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
TORCHRUN = [sys.executable, "-m", "torch.distributed.run"]  # torchrun itself, with this interpreter
SCRIPT = ["-m", "tfcourse.training.shakespeare", "--recipe", "cpu", "--eval-steps", "2", "--sample-chars", "0",
          "--quiet"]
STEPS, MORE_STEPS = 4, 6


def _text() -> str:
    rnd = random.Random(0)
    words = "to be or not that is the question 今天天气真好 my lord good night sweet prince".split()
    return "\n".join(" ".join(rnd.choice(words) for _ in range(12)) for _ in range(2_000))


def _start(command: list[str]) -> subprocess.Popen:
    """Start a run whose output goes to files: runs started together never wait on each other's pipes."""
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    out, err = tempfile.TemporaryFile("w+"), tempfile.TemporaryFile("w+")
    process = subprocess.Popen(command, cwd=ROOT, stdout=out, stderr=err, text=True, env=environment)
    process.output = (out, err)
    return process


def _read(file) -> str:
    file.seek(0)
    return file.read()


def _finish(*started: subprocess.Popen, timeout: float = 300) -> str:
    """Wait for runs started together (their imports overlap): what they printed, after each exited 0."""
    printed = []
    for process in started:
        try:
            process.wait(timeout=timeout)
            out, err = (_read(file) for file in process.output)
        finally:
            for file in process.output:
                file.close()
        assert process.returncode == 0, out[-2000:] + err[-3000:]
        printed.append(out)
    return "".join(printed)


def _history(out: Path) -> dict:
    return json.loads((out / "history.json").read_text(encoding="utf-8"))["history"]


@pytest.fixture(scope="module")
def runs(tmp_path_factory):
    """The same 4 steps: in one process (batch 12), on 2 workers (6 each), and on 2 single-worker 'machines'."""
    folder = tmp_path_factory.mktemp("ddp")
    text = folder / "text.txt"
    text.write_text(_text(), encoding="utf-8")
    data = ["--data", str(text), "--steps", str(STEPS)]
    outputs = {name: folder / name for name in ("one", "two", "nodes")}
    port = free_port()
    # The three runs at once: most of each is starting Pythons that import torch.
    one = _start([sys.executable, *SCRIPT, *data, "--out", str(outputs["one"])])
    two = _start([*TORCHRUN, "--nproc_per_node", "2", *SCRIPT, *data, "--out", str(outputs["two"])])
    agents = [_start([*TORCHRUN, "--nnodes", "2", "--nproc_per_node", "1", "--rdzv-backend", "c10d",
                      "--rdzv-endpoint", f"127.0.0.1:{port}", "--rdzv-id", "test", *SCRIPT, *data,
                      "--out", str(outputs["nodes"])]) for _ in range(2)]
    printed = {"one": _finish(one), "two": _finish(two), "nodes": _finish(*agents)}
    return folder, text, outputs, printed


def test_two_workers_train_the_run_of_one_process_with_the_whole_batch(runs):
    _, _, outputs, printed = runs
    one, two = _history(outputs["one"]), _history(outputs["two"])
    assert len(one["train_loss"]) == STEPS
    for key in ("train_loss", "val_loss", "eval_train_loss"):
        torch.testing.assert_close(torch.tensor(two[key]), torch.tensor(one[key]), rtol=1e-5, atol=1e-5)
    assert one["train_loss"][-1] < one["train_loss"][0]  # it trained
    assert "data-parallel: 2 workers, 6 of the batch's 12 windows each (backend gloo)" in printed["two"]
    assert printed["two"].count("best val loss") == 1  # rank 0 reports, rank 1 keeps quiet
    assert "data-parallel" not in printed["one"]


def test_two_torchrun_agents_on_two_nodes_train_the_same_run(runs):
    _, _, outputs, printed = runs
    one, nodes = _history(outputs["one"]), _history(outputs["nodes"])
    torch.testing.assert_close(torch.tensor(nodes["train_loss"]), torch.tensor(one["train_loss"]), rtol=1e-5, atol=1e-5)
    assert "data-parallel: 2 workers" in printed["nodes"] and printed["nodes"].count("best val loss") == 1


def test_a_checkpoint_resumes_with_another_number_of_workers(runs):
    folder, text, outputs, _ = runs
    data = ["--data", str(text), "--steps", str(MORE_STEPS), "--resume"]
    from_two, from_one = folder / "from_two", folder / "from_one"
    shutil.copytree(outputs["two"], from_two)  # saved by 2 workers, continued by 1 process
    shutil.copytree(outputs["one"], from_one)  # saved by 1 process, continued by 2 workers
    _finish(_start([sys.executable, *SCRIPT, *data, "--out", str(from_two)]),
            _start([*TORCHRUN, "--nproc_per_node", "2", *SCRIPT, *data, "--out", str(from_one)]))
    continued_by_one, continued_by_two = _history(from_two), _history(from_one)
    assert len(continued_by_one["train_loss"]) == MORE_STEPS
    torch.testing.assert_close(torch.tensor(continued_by_two["train_loss"]), torch.tensor(continued_by_one["train_loss"]),
                               rtol=1e-5, atol=1e-5)


def test_your_own_gpt_trains_through_the_same_script(tmp_path):
    text = tmp_path / "text.txt"
    text.write_text(_text(), encoding="utf-8")
    printed = _finish(_start([sys.executable, "-m", "tfcourse.course.train_yours", str(ROOT / "solutions"),
                              "--recipe", "cpu", "--steps", "2", "--eval-steps", "1", "--sample-chars", "0",
                              "--quiet", "--data", str(text)]))
    assert "your GPT, from the lessons in" in printed and "its check passed" in printed
    assert "best val loss" in printed


def test_train_yours_needs_a_folder_of_lessons(tmp_path):
    finished = subprocess.run([sys.executable, "-m", "tfcourse.course.train_yours", str(tmp_path / "missing")],
                              cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert finished.returncode == 2 and "is not a folder: give the one that holds your lesson folders" in finished.stderr


def test_each_worker_keeps_its_shard_of_the_global_batch():
    def global_batch(split, generator):
        x = torch.arange(12).view(12, 1) + torch.randint(0, 1, (1,), generator=generator)
        return x, x + 100

    shards = [distributed.sharded(global_batch, distributed.Worker(rank, rank, 3))("train", torch.Generator())
              for rank in range(3)]
    assert [x.flatten().tolist() for x, _ in shards] == [[0, 1, 2, 3], [4, 5, 6, 7], [8, 9, 10, 11]]
    with pytest.raises(ValueError, match="a batch of 12 does not split into 5 equal shards"):
        distributed.sharded(global_batch, distributed.Worker(0, 0, 5))("train", torch.Generator())


def test_without_torchrun_there_is_no_group_and_everyone_is_main(monkeypatch):
    for name in distributed.TORCHRUN_VARIABLES:
        monkeypatch.delenv(name, raising=False)
    assert distributed.start("cpu") is None and distributed.current() is None and distributed.is_main()
    values = torch.tensor([1.0, 2.0])
    assert distributed.mean_over_workers(values) is values


@pytest.mark.parametrize("under_torchrun", [True, False])
def test_the_script_ends_without_the_interpreters_shutdown_only_under_torchrun(under_torchrun, tmp_path):
    # Under torchrun, gloo's teardown in that shutdown could abort (exit code -6) after a finished run,
    # and torchrun then reported it failed; an atexit handler stands in for that teardown.
    code = ("import atexit, pathlib; from tfcourse.training import distributed; "
            f"atexit.register(pathlib.Path({str(tmp_path)!r}, 'shut down').touch); distributed.exit_script(3)")
    torchrun = {"RANK": "0", "LOCAL_RANK": "0", "WORLD_SIZE": "1"}
    environment = {key: value for key, value in os.environ.items() if key not in torchrun}
    finished = subprocess.run([sys.executable, "-c", code], env={**environment, **(torchrun if under_torchrun else {})})
    assert finished.returncode == 3
    assert (tmp_path / "shut down").exists() is not under_torchrun
