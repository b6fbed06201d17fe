"""Grading kernels forked from one process that has already imported torch.

nbgrader grades every notebook in a fresh kernel, and a fresh Python spends about 2.5 s of CPU
importing ipykernel and torch before the notebook's first cell runs: a class of 30 submissions pays
that 30 times. Here one *template* process imports them once; each grading kernel is then a fork of
it. A fork is a new process (its own memory, pid, session, working folder and environment), started
from a copy of the template's memory, so the kernel begins where a fresh one would be after its imports,
with nothing of any earlier notebook in it: the template never runs a notebook.

    ForkedExecute        nbgrader's Execute preprocessor, its kernels forked (nbgrader_config.py uses it)
    StartsKernelAgain    a kernel that dies as it starts (its port taken meanwhile) is started again
    ForkedKernelManager  jupyter_client's AsyncKernelManager that launches through the template
    warm_up()            start the template now, while the caller does other work (it imports on another CPU)

A kernel is forked only on Linux, when it is the ordinary Python kernel (`python -m ipykernel_launcher ...`) of
this very interpreter, asked for with the environment variables that decide what an import does equal to
the template's (PYTHONPATH and the like, see COMPATIBLE); otherwise, or when TFCOURSE_FORK_KERNELS=0, or
when the template cannot be started, the kernel is started as a new process, as jupyter_client does.

The template is `python -m tfcourse.course.forked_kernels`: it reads one request a line on stdin
(JSON: the kernel's argv, environment and working folder), forks, and answers the child's pid.
"""

from __future__ import annotations

import atexit
import functools
import json
import os
import signal
import subprocess
import sys
import threading
import time
from pathlib import Path

# Imported by the template before any fork: what every grading kernel would import first anyway.
# (torch._dynamo: a check that runs the learner's module on the `meta` device imports it, 1.4 s; pyplot,
# which every lesson imports, 0.7 s: its backend is chosen in the kernel, see _become_kernel.)
PRELOAD = ("ipykernel.kernelapp", "ipykernel.ipkernel", "numpy", "torch", "torch._dynamo", "matplotlib.pyplot")
# Environment variables that change what those imports do: a kernel asked for with other values than
# the template's is not forked from it (another template is started for those values).
COMPATIBLE = ("PYTHON", "TORCH", "PYTORCH", "OMP_", "MKL_", "OPENBLAS", "KMP_", "GOTO", "LD_", "CUDA", "MPLCONFIGDIR",
              "HOME", "XDG_")
SWITCH = "TFCOURSE_FORK_KERNELS"  # "0": start every kernel as a new process
_TEMPLATE_CWD = os.getcwd()  # in the template: the folder `python -m` put first on sys.path


def enabled() -> bool:
    """Forking is for Linux: macOS's system libraries are not safe to use in a forked child (Python's own
    multiprocessing spawns there), and Windows has no fork."""
    return sys.platform.startswith("linux") and os.environ.get(SWITCH, "1") != "0"


def _import_environment(env: dict[str, str]) -> tuple[tuple[str, str], ...]:
    return tuple(sorted((k, v) for k, v in env.items() if k.startswith(COMPATIBLE)))


def _is_this_python_kernel(argv: list[str]) -> bool:
    return (len(argv) >= 3 and argv[1:3] == ["-m", "ipykernel_launcher"]
            and Path(argv[0]).resolve() == Path(sys.executable).resolve())


# --- the side that asks: a Popen-like handle on a forked kernel ----------------------------------


class ForkedProcess:
    """What jupyter_client's provisioner needs of a kernel process (pid, poll, wait, signals).
    The kernel is the template's child, not ours, so it is watched through its pid; the template
    reaps it when it ends (its exit status is not seen here: poll() then answers 0)."""

    stdin = stdout = stderr = None

    def __init__(self, pid: int):
        self.pid = pid
        self.returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            try:
                os.kill(self.pid, 0)
            except ProcessLookupError:
                self.returncode = 0
            except PermissionError:  # another user's process has this pid now: ours has ended
                self.returncode = 0
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        deadline = None if timeout is None else time.monotonic() + timeout
        while self.poll() is None:
            if deadline is not None and time.monotonic() > deadline:
                raise subprocess.TimeoutExpired(f"kernel {self.pid}", timeout)
            time.sleep(0.05)
        return self.returncode

    def send_signal(self, signum: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, signum)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)


class Template:
    """One template process and the pipe to it."""

    def __init__(self, env: dict[str, str]):
        self.process = subprocess.Popen([sys.executable, "-m", __name__], stdin=subprocess.PIPE,
                                        stdout=subprocess.PIPE, env=env, text=True)
        self.lock = threading.Lock()

    def fork(self, argv: list[str], env: dict[str, str], cwd: str) -> ForkedProcess | None:
        request = json.dumps({"argv": argv, "env": env, "cwd": cwd})
        with self.lock:
            if self.process.poll() is not None:
                return None
            try:
                self.process.stdin.write(request + "\n")
                self.process.stdin.flush()
                answer = self.process.stdout.readline()
            except (BrokenPipeError, OSError):
                return None
        if not answer:  # the template died (it reports why on stderr)
            return None
        return ForkedProcess(json.loads(answer)["pid"])

    def close(self) -> None:
        if self.process.poll() is None:
            self.process.stdin.close()  # the template leaves when its input ends
            try:
                self.process.wait(timeout=5)
            except subprocess.TimeoutExpired:
                self.process.kill()


_templates: dict[tuple, Template] = {}
_templates_lock = threading.Lock()
_failed: set[tuple] = set()  # import environments whose template died: their kernels start as new processes


def _template_key(env: dict[str, str]) -> tuple | None:
    """The key of the template that kernels asked for with `env` fork from; None: they are not forked."""
    key = _import_environment(env)
    return key if enabled() and key not in _failed else None


def _template_for(env: dict[str, str], key: tuple) -> Template:
    with _templates_lock:
        if key not in _templates:
            _templates[key] = Template(env)
        return _templates[key]


def warm_up() -> None:
    """Start the template for this process's environment, if kernels will be forked: it imports while the
    caller goes on (on a machine with two CPUs, a grading run's set-up and the imports overlap)."""
    env = dict(os.environ)
    if (key := _template_key(env)) is not None:
        _template_for(env, key)


def fork_kernel(argv: list[str], env: dict[str, str] | None, cwd: str | None) -> ForkedProcess | None:
    """A kernel forked from the template, or None when this kernel is not to be forked."""
    env = dict(os.environ) if env is None else dict(env)
    if not _is_this_python_kernel(argv) or (key := _template_key(env)) is None:
        return None
    process = _template_for(env, key).fork(argv, env, str(cwd or os.getcwd()))
    if process is None:  # the template is gone (what it said is on stderr): not tried again
        _failed.add(key)
    return process


def close_all() -> None:
    with _templates_lock:
        for template in _templates.values():
            template.close()
        _templates.clear()


atexit.register(close_all)


# --- jupyter_client and nbgrader ------------------------------------------------------------------

@functools.cache
def _kernel_manager_class():
    from jupyter_client.manager import AsyncKernelManager
    from jupyter_client.provisioning import LocalProvisioner

    class ForkedKernelManager(AsyncKernelManager):
        """AsyncKernelManager whose Python kernels are forked from the template (see the module)."""

        async def _async_launch_kernel(self, kernel_cmd: list[str], **kw) -> None:
            local = type(self.provisioner) is LocalProvisioner  # a kernelspec may name a provisioner of its own
            process = fork_kernel(kernel_cmd, kw.get("env"), kw.get("cwd")) if local else None
            if process is None:
                return await super()._async_launch_kernel(kernel_cmd, **kw)
            provisioner = self.provisioner  # a LocalProvisioner: it drives `process` like a Popen
            provisioner.process = process
            provisioner.pid = provisioner.pgid = process.pid  # the kernel leads a session of its own
            provisioner.cwd = kw.get("cwd") or os.getcwd()
            self._reconcile_connection_info(provisioner.connection_info)

    return ForkedKernelManager


def __getattr__(name: str):
    # Imported lazily: the template itself imports this module and must not load jupyter_client for it.
    if name == "ForkedKernelManager":
        return _kernel_manager_class()
    if name == "ForkedExecute":
        return _execute_class()
    raise AttributeError(name)


KERNEL_STARTS = 3  # the kernels one notebook may start while each dies as it starts; the last death is an error


class StartsKernelAgain:
    """A mixin for nbclient's NotebookClient (and so for nbgrader's Execute): a kernel that dies before it
    answers its first request is started again, on new ports, up to KERNEL_STARTS times in all.

    jupyter_client picks free ports in the grader, and the kernel binds them a moment later. On a busy
    machine another process (a second grader, a server, a training run) can take one of them in between,
    and the kernel dies with 'Address already in use' before any cell of the notebook has run. That is no
    one's mistake, least of all the learner's, so the notebook is not failed for it."""

    async def async_start_new_kernel_client(self):
        for start in range(1, KERNEL_STARTS + 1):
            try:
                return await super().async_start_new_kernel_client()
            except RuntimeError as error:  # jupyter_client's own words for a kernel that died this early
                if start == KERNEL_STARTS or "Kernel died before replying" not in str(error):
                    raise
                self.log.warning("The kernel died as it started (%s); starting another on new ports.", error)
            # nbclient has shut the dead kernel's manager down; a new manager picks new ports. The kernel
            # starts in the notebook's folder (resources' path), as the first one did.
            self.km = self.create_kernel_manager()
            await self.async_start_new_kernel()

    def start_new_kernel_client(self):
        # nbclient's synchronous version wraps its own coroutine, not this class's
        from jupyter_core.utils import run_sync

        return run_sync(self.async_start_new_kernel_client)()


@functools.cache
def _execute_class():
    from nbgrader.preprocessors import Execute

    manager = _kernel_manager_class()

    class ForkedExecute(StartsKernelAgain, Execute):
        """nbgrader's Execute, its kernels forked from the template (see the module) and started again
        when one dies as it starts (StartsKernelAgain)."""

        def __init__(self, *args, **kwargs):
            kwargs.setdefault("kernel_manager_class", manager)
            super().__init__(*args, **kwargs)
            warm_up()  # the template imports while nbgrader prepares the first notebook

    ForkedExecute.__qualname__ = "ForkedExecute"
    return ForkedExecute


# --- the template ---------------------------------------------------------------------------------

def _become_kernel(request: dict) -> None:
    """In the forked child: become what `python -m ipykernel_launcher ARGS` is after its imports."""
    os.setsid()  # a session of its own, as jupyter_client starts kernels: signals go to its group
    signal.signal(signal.SIGCHLD, signal.SIG_DFL)  # the template ignores it; a kernel waits for its children
    signal.signal(signal.SIGINT, signal.default_int_handler)
    devnull = os.open(os.devnull, os.O_RDONLY)
    os.dup2(devnull, 0)
    os.dup2(2, 1)  # fd 1 is the template's answer pipe: the kernel's own output goes where its errors go
    os.close(devnull)
    os.chdir(request["cwd"])
    os.environ.clear()
    os.environ.update(request["env"])
    import random

    import numpy
    import torch

    # A fresh process seeds its generators from the OS; a fork would share the template's state.
    random.seed()
    numpy.random.seed()
    torch.seed()
    # matplotlib read MPLBACKEND when the template imported it; a kernel reads its own, as ipykernel sets it
    # (the inline backend unless one is asked for), before any figure chooses the backend.
    import matplotlib

    if not os.environ.get("MPLBACKEND"):
        os.environ["MPLBACKEND"] = "module://matplotlib_inline.backend_inline"
    matplotlib.rcParams["backend"] = os.environ["MPLBACKEND"]
    # `python -m` put the template's folder first on sys.path; ipykernel_launcher removes it, and IPython
    # adds the kernel's own folder back ('').
    if sys.path and Path(sys.path[0] or ".").resolve() == Path(_TEMPLATE_CWD).resolve():
        del sys.path[0]
    arguments = request["argv"][3:]
    # The kernel leaves when its parent does, as jupyter_client's launcher arranges with JPY_PARENT_PID. Its
    # parent is the template, which leaves when the grader does; ipykernel read the variable when the
    # template imported it, so it is told here.
    os.environ["JPY_PARENT_PID"] = str(os.getppid())
    arguments.append(f"--IPKernelApp.parent_handle={os.getppid()}")
    import ipykernel_launcher

    sys.argv = [ipykernel_launcher.__file__, *arguments]
    from ipykernel import kernelapp

    kernelapp.launch_new_instance(argv=arguments)


def _serve() -> None:
    for module in PRELOAD:
        __import__(module)
    signal.signal(signal.SIGCHLD, signal.SIG_IGN)  # kernels that end are reaped by the system
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C is the grader's to handle: the template leaves with it
    answers = sys.stdout
    for line in sys.stdin:
        request = json.loads(line)
        pid = os.fork()
        if pid == 0:
            code = 1
            try:
                _become_kernel(request)
                code = 0
            except SystemExit as stop:
                code = stop.code if isinstance(stop.code, int) else (0 if stop.code is None else 1)
            except BaseException:  # noqa: BLE001 - told on stderr, as a kernel that fails to start does
                import traceback

                traceback.print_exc()
            finally:
                try:
                    atexit._run_exitfuncs()
                    sys.stdout.flush()
                    sys.stderr.flush()
                finally:
                    os._exit(code)
        answers.write(json.dumps({"pid": pid}) + "\n")
        answers.flush()
    # The grader has gone (its end of the pipe closed) and waits for us: leave without the interpreter's
    # teardown of torch and the rest, which took ~1 s. (Its kernels see it gone and leave, as before.)
    sys.stderr.flush()
    os._exit(0)


if __name__ == "__main__":
    _serve()
