"""Grading kernels forked from a template that has imported torch (tfcourse/course/forked_kernels.py):
a forked kernel must be what a freshly started one is, seen from the notebook, and be stopped and
interrupted as one is."""

from __future__ import annotations

import asyncio
import atexit
import json
import os
import socket
import sys

import nbformat
import pytest
from jupyter_client.manager import AsyncKernelManager
from nbclient import NotebookClient

from tfcourse.course import forked_kernels, run_solutions
from tfcourse.course.forked_kernels import ForkedKernelManager, ForkedProcess

pytestmark = pytest.mark.slow  # starts kernels

# What a notebook can see of the process it runs in (pids apart).
PROBE = """
import json, os, sys, random
import matplotlib, numpy, torch
print(json.dumps({
    "cwd": os.getcwd(), "probe": os.environ.get("TFCOURSE_PROBE"), "path": sys.path,
    "argv0": os.path.basename(sys.argv[0]), "backend": matplotlib.get_backend(),
    "torch_seed": torch.initial_seed(), "torch_first": torch.rand(1).item(),
    "random": random.random(), "numpy": float(numpy.random.rand()),
    "session_leader": os.getsid(0) == os.getpid(), "pid": os.getpid(), "parent": os.getppid(),
}))
"""


async def _run(manager_class, code: str, cwd, env: dict[str, str], timeout: float = 60) -> tuple[dict, str]:
    """Start a kernel with `manager_class` in `cwd` with `env`, run `code`: (the execute reply, stdout)."""
    manager = manager_class(kernel_name="python3")
    await manager.start_kernel(cwd=str(cwd), env=env)
    client = manager.client()
    client.start_channels()
    try:
        await client.wait_for_ready(timeout=timeout)
        output: list[str] = []

        def keep(message):
            if message["msg_type"] == "stream":
                output.append(message["content"]["text"])

        reply = await client.execute_interactive(code, timeout=timeout, output_hook=keep)
        return reply, "".join(output)
    finally:
        client.stop_channels()
        await manager.shutdown_kernel(now=True)


def _probe(manager_class, cwd, env) -> dict:
    reply, output = asyncio.run(_run(manager_class, PROBE, cwd, env))
    assert reply["content"]["status"] == "ok", reply["content"]
    return json.loads(output)


@pytest.fixture
def kernel_env():
    return {**os.environ, "TFCOURSE_PROBE": "asked-for", "MPLBACKEND": "Agg"}


def test_a_forked_kernel_sees_what_a_freshly_started_one_sees(tmp_path, kernel_env):
    fresh = _probe(AsyncKernelManager, tmp_path, kernel_env)
    forked = _probe(ForkedKernelManager, tmp_path, kernel_env)
    assert forked["parent"] != fresh["parent"] == os.getpid()  # it really came from the template
    for seen in (fresh, forked):
        seen.pop("pid"), seen.pop("parent")
    # every generator is seeded from the OS in each process
    for name in ("random", "numpy", "torch_seed", "torch_first"):
        assert fresh.pop(name) != forked.pop(name)
    assert forked == fresh
    assert forked["cwd"] == str(tmp_path) and forked["probe"] == "asked-for" and forked["backend"] == "Agg"


def test_two_forked_kernels_are_two_processes_with_their_own_random_state(tmp_path, kernel_env):
    first, second = (_probe(ForkedKernelManager, tmp_path, kernel_env) for _ in range(2))
    assert first["pid"] != second["pid"] and first["parent"] == second["parent"]  # one template, two kernels
    assert all(first[name] != second[name] for name in ("random", "numpy", "torch_seed", "torch_first"))
    assert first["session_leader"] and second["session_leader"]


def test_without_mplbackend_a_forked_kernel_draws_inline_as_a_fresh_one_does(tmp_path, kernel_env):
    env = {k: v for k, v in kernel_env.items() if k != "MPLBACKEND"}
    assert _probe(ForkedKernelManager, tmp_path, env)["backend"] == _probe(AsyncKernelManager, tmp_path, env)["backend"]


def test_a_forked_kernel_is_interrupted_and_killed_like_a_started_one(tmp_path, kernel_env):
    async def scenario():
        manager = ForkedKernelManager(kernel_name="python3")
        await manager.start_kernel(cwd=str(tmp_path), env=kernel_env)
        process = manager.provisioner.process
        assert isinstance(process, ForkedProcess)
        client = manager.client()
        client.start_channels()
        await client.wait_for_ready(timeout=60)
        msg_id = client.execute("while True: pass")
        await asyncio.sleep(1)
        await manager.interrupt_kernel()  # SIGINT to the kernel's process group
        while True:
            reply = await client.get_shell_msg(timeout=30)
            if reply["parent_header"].get("msg_id") == msg_id:
                break
        assert reply["content"]["status"] == "error" and reply["content"]["ename"] == "KeyboardInterrupt"
        assert await manager.is_alive()
        client.stop_channels()
        await manager.shutdown_kernel(now=True)  # SIGKILL
        assert process.poll() is not None and not await manager.is_alive()

    asyncio.run(scenario())


def test_what_is_not_forked(monkeypatch):
    kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", "connection.json"]
    monkeypatch.setenv(forked_kernels.SWITCH, "0")
    assert forked_kernels.fork_kernel(kernel, None, None) is None  # switched off
    monkeypatch.delenv(forked_kernels.SWITCH)
    assert forked_kernels.fork_kernel(["/usr/bin/env", "python3", "-m", "ipykernel_launcher"], None, None) is None
    assert forked_kernels.fork_kernel([sys.executable, "-m", "some_other_kernel"], None, None) is None


def test_another_import_environment_gets_a_template_of_its_own(tmp_path):
    def template(env):
        return forked_kernels._template_for(env, forked_kernels._template_key(env))

    ours = template(dict(os.environ))
    other = template({**os.environ, "PYTHONPATH": str(tmp_path)})
    assert ours is template(dict(os.environ)) and other is not ours
    assert template({**os.environ, "TFCOURSE_PROBE": "x"}) is ours  # not an import's business
    other.close()


def test_a_forked_kernel_leaves_when_its_template_does(tmp_path, kernel_env):
    """The template leaves when the grader does (its input ends); its kernels then leave too, as a started
    kernel leaves when the process that started it is gone."""
    env = {**kernel_env, "TFCOURSE_PROBE": "orphan", "PYTHONWARNINGS": "ignore::UserWarning"}  # a template of its own

    async def scenario():
        manager = ForkedKernelManager(kernel_name="python3")
        await manager.start_kernel(cwd=str(tmp_path), env=env)
        client = manager.client()
        client.start_channels()
        await client.wait_for_ready(timeout=60)
        client.stop_channels()
        return manager.provisioner.process

    kernel = asyncio.run(scenario())
    template = forked_kernels._template_for(env, forked_kernels._template_key(env))
    template.process.kill()
    template.process.wait()
    kernel.wait(timeout=20)  # ipykernel looks at its parent once a second


def test_a_template_that_cannot_start_leaves_its_kernels_to_start_as_new_processes(tmp_path):
    (tmp_path / "torch.py").write_text("raise ImportError('not the real torch')\n")  # the template's import fails
    env = {**os.environ, "PYTHONPATH": str(tmp_path), "MPLBACKEND": "Agg"}
    kernel = [sys.executable, "-m", "ipykernel_launcher", "-f", str(tmp_path / "connection.json")]
    assert forked_kernels.fork_kernel(kernel, env, str(tmp_path)) is None
    assert forked_kernels._import_environment(env) in forked_kernels._failed  # not started again for each kernel
    reply, output = asyncio.run(_run(ForkedKernelManager, "print(6 * 7)", tmp_path, env))
    assert reply["content"]["status"] == "ok" and output.strip() == "42"


def _taken_port_first(client_class):
    """`client_class` whose first kernel is told a port that another process has taken meanwhile (the
    grader picks the ports, the kernel binds them a moment later); its managers are kept in `managers`."""
    taken = socket.socket()
    taken.bind(("127.0.0.1", 0))
    taken.listen()

    class Client(client_class):
        managers = []

        def create_kernel_manager(self):
            manager = super().create_kernel_manager()
            if not self.managers:
                manager.cache_ports, manager.shell_port = False, taken.getsockname()[1]
            self.managers.append(manager)
            return manager

    return Client, taken


def _notebook():
    return nbformat.v4.new_notebook(cells=[nbformat.v4.new_code_cell("print(6 * 7)")])


def test_nbclient_alone_fails_a_notebook_whose_kernel_lost_its_port(tmp_path):
    Client, taken = _taken_port_first(NotebookClient)
    with taken:
        client = Client(_notebook(), kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}})
        try:
            with pytest.raises(RuntimeError, match="Kernel died before replying"):
                client.execute()
        finally:
            atexit.unregister(client._cleanup_kernel)  # nbclient leaves it registered when the start fails


def test_the_grader_starts_a_kernel_that_lost_its_port_again(tmp_path):
    Client, taken = _taken_port_first(forked_kernels.ForkedExecute)
    notebook = _notebook()
    with taken:
        Client(kernel_name="python3").preprocess(notebook, {"metadata": {"path": str(tmp_path)}})
        first, second = Client.managers
        assert first.shell_port == taken.getsockname()[1] != second.shell_port
    assert isinstance(second, ForkedKernelManager)  # still forked
    assert notebook.cells[0].outputs[0]["text"] == "42\n"


def test_run_solutions_starts_a_kernel_that_lost_its_port_again(tmp_path):
    Client, taken = _taken_port_first(run_solutions._Client)
    notebook = _notebook()
    with taken:
        Client(notebook, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}).execute()
    assert len(Client.managers) == 2
    assert notebook.cells[0].outputs[0]["text"] == "42\n"
