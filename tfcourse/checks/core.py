"""The machinery behind every exercise check: run the learner's code safely, compare it with the
reference, name the usual mistake, and say so in one line.

A check is a function `check_<exercise>(learner_object, hidden=False)`, written as data for one runner:
1. an `Exercise`: the name the off-limits message uses, the off-limits list (the reference and the
   matching torch built-in), the ✔ line;
2. its `Case`s, built *before* the learner's code runs: each call, the reference output and the
   outputs the usual mistakes give (`mistakes`), and structural checks where the exercise needs them;
3. `run(exercise, learner, cases, hidden)`: under the off-limits guard (`off_limits`), warnings
   silenced (nbgrader scores a cell that writes to stderr as failed), each call (`call_learner`),
   inputs left unchanged (`expect_unchanged`), shape, dtype, finiteness and values (`compare`, which
   names the mistake the output matches), then one success line, or CheckFailed with one clear message.
`hidden=True` runs the extra cases of the hidden tests (other shapes, seeds, edge cases). A composite
(an exercise built on earlier ones) is declared with `@composite` and judged with their references
in place; `@isolated` keeps a check from changing the learner's random state, dtype or device.
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import os
import random
import re
import sys
import traceback
import types
import warnings
from collections.abc import Callable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import torch
from torch import Tensor, nn
from torch.overrides import TorchFunctionMode

from ..messages import plain_text, say
from ..validation import shape_str


class CheckFailed(AssertionError):
    """An exercise check failed; the message says why in one line (or a few), in plain text.

    In a notebook it shows as that message alone (see `show_check_failures`), not as a traceback
    through the checker's code."""

    def __init__(self, message: str = "") -> None:
        super().__init__(say(plain_text(str(message))))  # in the lesson's language (tfcourse.messages)


class OffLimitsError(CheckFailed):
    """The learner's code called the reference answer or the torch built-in it is meant to replace."""


def passed(message: str) -> None:
    """The one success line a check prints (to stdout: stderr would cost the cell its points)."""
    restore_streams()
    print(f"✔ {say(message)}")


# ----------------------------------------------------------------------------------------------
# Running the learner's code
# ----------------------------------------------------------------------------------------------

# IPython shows a failing test cell's error through these methods; nbgrader sees the error output
# and gives 0 points. A notebook that replaces them would hide every failure, so checks put the
# originals back (captured here, when the lesson's setup cell imports tfcourse).
_ERROR_DISPLAY = ("showtraceback", "_showtraceback", "showsyntaxerror")


def _ipython_shell() -> Any:
    ipython = sys.modules.get("IPython")
    return ipython.get_ipython() if ipython is not None else None


def _capture_error_display() -> dict:
    shell = _ipython_shell()
    if shell is None:
        return {}
    return {(klass, name): klass.__dict__[name]
            for klass in type(shell).__mro__ for name in _ERROR_DISPLAY if name in klass.__dict__}


_ORIGINAL_ERROR_DISPLAY = _capture_error_display()
# The kernel's output streams as they were when the lesson's setup cell imported tfcourse: a
# learner's cell that replaces or closes them must not silence (or hang) every check after it.
_ORIGINAL_STREAMS = (sys.stdout, sys.stderr)


def _broken(stream: Any) -> bool:
    """None, closed, unable to write, or (a replacement's) flush() raises: the kernel flushes the
    streams after every cell, and a flush that raises there stops the kernel from finishing any."""
    if stream is None or not callable(getattr(stream, "write", None)) or bool(getattr(stream, "closed", False)):
        return True
    if any(stream is original for original in _ORIGINAL_STREAMS):
        return False  # the kernel's own: flushing it here would only wait for the output thread
    try:
        stream.flush()
    except Exception:  # noqa: BLE001 - any error from flush() breaks the kernel the same way
        return True
    return False


def _new_kernel_stream(name: str) -> Any:
    """A new stream to the notebook's output, for when the kernel's own was closed; None outside a kernel."""
    shell = _ipython_shell()
    kernel = getattr(shell, "kernel", None)
    iopub = getattr(kernel, "iopub_thread", None)
    if iopub is None:
        return None
    from ipykernel.iostream import OutStream

    stream = OutStream(kernel.session, iopub, name, watchfd=False)
    stream.set_parent(shell.parent_header)  # its output belongs to the cell that is running
    return stream


def restore_streams() -> None:
    """Put back sys.stdout / sys.stderr where a learner's cell broke them (None, closed, or an object
    that cannot write): the originals, or new streams to the notebook where the originals were
    closed. A working replacement (a capture, a redirect) is left alone."""
    global _ORIGINAL_STREAMS
    out, err = _ORIGINAL_STREAMS
    if _broken(sys.stdout):
        out = out if not _broken(out) else _new_kernel_stream("stdout") or out
        sys.stdout = out
    if _broken(sys.stderr):
        err = err if not _broken(err) else _new_kernel_stream("stderr") or err
        sys.stderr = err
    _ORIGINAL_STREAMS = (out, err)


def keep_streams_working() -> None:
    """Restore broken output streams after every cell, not only when a check runs. For grading
    kernels: a cell that sets sys.stdout = None or closes it would otherwise leave the kernel unable
    to finish a cell, so every later cell waits for its timeout and the whole notebook scores 0."""
    shell = _ipython_shell()
    if shell is None:
        return
    for event in ("post_execute", "post_run_cell"):
        callbacks = shell.events.callbacks[event]
        if _restore_after_cell not in callbacks:
            # First in line: the inline plotting backend's own post_execute callback (registered
            # later) publishes figures, which flushes sys.stdout and kills the kernel if it is None.
            callbacks.insert(0, _restore_after_cell)


def _restore_after_cell(result: Any = None) -> None:
    restore_streams()


def _learner_frames(error: BaseException | None) -> list[str]:
    """The frames of `error`'s traceback that are the learner's own code (a notebook cell, or a
    lesson imported with import_from_notebook): not the package, not torch, not Python's library."""
    if error is None or error.__traceback__ is None:
        return []
    return traceback.format_list(_learner_frames_only(traceback.extract_tb(error.__traceback__)))


def check_failure_lines(error: CheckFailed) -> list[str]:
    """What a failed check shows: its message in red and, when the learner's code raised, the
    learner's own frames of that error (where it happened), never the checker's."""
    lines = [f"\x1b[0;31m✘ {error}\x1b[0m"]
    frames = _learner_frames(error.__cause__)
    if frames:
        lines.append("\n" + say("Where your code raised it:") + "\n" + "".join(frames).rstrip())
    return lines


def unfinished_exercise(error: BaseException) -> str | None:
    """The name of the learner's function that raised NotImplementedError (an exercise still at its
    stub), when that is where `error` comes from; None otherwise."""
    if not isinstance(error, NotImplementedError) or error.__traceback__ is None:
        return None
    innermost = traceback.extract_tb(error.__traceback__)[-1]
    return innermost.name if _learner_frames_only([innermost]) and innermost.name != "<module>" else None


# Where code that is not the learner's lives: this package, and Python's library with its packages.
_NOT_THE_LEARNERS = tuple({os.path.dirname(os.path.dirname(os.path.abspath(__file__))),
                           *(os.path.abspath(p) for p in (sys.prefix, sys.base_prefix, sys.exec_prefix))})


def _learner_frames_only(frames: list[traceback.FrameSummary]) -> list[traceback.FrameSummary]:
    return [f for f in frames if not os.path.abspath(f.filename).startswith(_NOT_THE_LEARNERS)]


# The learner's objects by name -> whether the last check of each passed, in this process (a test cell,
# or your_parts()). A demo cell that fails while it uses an exercise not passing says so (_show_error).
CHECKED: dict[str, bool] = {}
_check_depth = [0]  # checks running inside a check (a composite's probes) decide nothing here


def _note_check(args: tuple, passed_it: bool) -> None:
    if _check_depth[0] == 0:
        for learner in args:
            name = getattr(learner, "__name__", None)
            if callable(learner) and isinstance(name, str):
                CHECKED[name] = passed_it


def _close_figures() -> None:
    """No half-drawn figure after a cell that stopped on an unfinished exercise."""
    pyplot = sys.modules.get("matplotlib.pyplot")
    if pyplot is not None:
        pyplot.close("all")


def exercises_not_passing(shell: Any) -> list[str]:
    """The exercises ("Exercise 6 — MultiHeadAttention") the running cell uses, directly or through what an
    earlier cell made with them, that have not passed their check in this kernel; [] for a test cell, or
    outside a lesson's folder."""
    from .. import manifest

    folder = os.path.basename(os.getcwd())
    history = list(shell.user_ns.get("In") or [])
    if not history or folder not in {lesson.folder for lesson in manifest.lessons()} or "tfcourse.checks" in history[-1]:
        return []
    uses = manifest.exercise_dependencies(history, folder)[-1]
    return [e.title for e in manifest.lesson(folder).exercises
            if e.grade_id in uses and not all(CHECKED.get(name) for name in e.arguments)]


def _quietly(find: Callable[[Any], list[str]], shell: Any) -> list[str]:
    """`find(shell)`, or [] if it fails: reading the cells must never hide the learner's own error."""
    try:
        return find(shell)
    except Exception:  # noqa: BLE001
        return []


def _show_error(shell: Any, etype: type, value: BaseException, tb: Any, tb_offset: Any = None) -> list[str] | None:
    if isinstance(value, CheckFailed):
        lines = check_failure_lines(value)
    elif (name := unfinished_exercise(value)) is not None:
        # A demo cell that uses an exercise not written yet: one line, and no half-drawn figure.
        _close_figures()
        lines = ["\x1b[0;33m✘ " + say(f"finish the exercise '{name}' first (it still raises NotImplementedError), "
                                       "then run this cell again") + "\x1b[0m"]
    elif blocked := _quietly(exercises_not_passing, shell):
        # It uses an exercise whose check fails (or has not run): its error, an assert or a stale variable
        # is that exercise's, not this cell's.
        _close_figures()
        lines = ["\x1b[0;33m✘ " + say(f"this cell uses {' and '.join(blocked)}, which does not pass its check yet "
                                       f"({etype.__name__} here): fix it, run its check cell, then run this cell "
                                       "again") + "\x1b[0m"]
    else:  # any other error: Python's usual traceback
        shell.showtraceback((etype, value, tb), tb_offset=tb_offset)
        return None
    shell._showtraceback(etype, value, lines)  # an error output all the same: nbgrader gives 0 points
    return lines


def show_check_failures() -> None:
    """In IPython, a CheckFailed shows as its one-line message (and the learner's own frames), not
    as a traceback through the checker; a cell that calls an exercise still at its stub says which
    one to finish, and so does one that fails while it uses an exercise whose check does not pass.
    Any other error keeps its usual traceback."""
    shell = _ipython_shell()
    if shell is not None:  # every time: a learner's cell may have put its own handler there
        shell.set_custom_exc((Exception,), _show_error)


def restore_error_display() -> None:
    """Undo any replacement of IPython's traceback display, on the shell or on its classes."""
    shell = _ipython_shell()
    if shell is None:
        return
    show_check_failures()  # (and a learner's own handler, which could swallow errors, is gone)
    for name in _ERROR_DISPLAY:
        if name in vars(shell):
            delattr(shell, name)
    for (klass, name), original in _ORIGINAL_ERROR_DISPLAY.items():
        if klass.__dict__.get(name) is not original:
            setattr(klass, name, original)


def call_learner(what: str, fn: Callable, *args: Any, **kwargs: Any) -> Any:
    """Call the learner's `fn`; turn a crash into a CheckFailed that names `what` was being done."""
    restore_error_display()
    restore_streams()
    try:
        # nbgrader gives 0 points to a test cell that writes to stderr: a library warning, or a
        # stray print(..., file=sys.stderr) in the learner's code, must not cost the exercise.
        with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
            warnings.simplefilter("ignore")
            result = fn(*args, **kwargs)
        if _broken(sys.stdout):
            restore_streams()
            raise CheckFailed(f"{what}: your code broke sys.stdout (set it to None, closed it, or replaced it "
                              "by a stream that cannot write or flush), so the notebook shows no output; "
                              "leave the output streams alone")
        return result
    except CheckFailed:
        raise
    except NotImplementedError as error:
        if str(error):  # torch's own, e.g. "Cannot copy out of meta tensor": not the exercise's empty stub
            raise CheckFailed(f"{what}: your code raised NotImplementedError: {error}") from error
        raise CheckFailed(f"{what}: not implemented yet — replace `raise NotImplementedError()` with your code") from None
    except SystemExit as exit_:
        raise CheckFailed(f"{what}: your code called sys.exit({exit_.code}); return a value instead") from None
    except KeyboardInterrupt:
        raise CheckFailed(f"{what}: your code raised KeyboardInterrupt (an interrupt, or `raise KeyboardInterrupt` "
                          "in your code); return a value instead") from None
    except Exception as error:  # noqa: BLE001 - any learner error becomes one clear line
        raise CheckFailed(f"{what}: your code raised {type(error).__name__}: {error}") from error


def build_module(what: str, learner_cls: Any, *args: Any, hint: str = "class ...(nn.Module) with "
                 "super().__init__() first", **kwargs: Any) -> nn.Module:
    """Construct the learner's module (`what` names the call in a message); it must be an nn.Module
    (`hint`, in brackets after the message, says what the exercise expects)."""
    module = call_learner(what, learner_cls, *args, **kwargs)
    if not isinstance(module, nn.Module):
        raise CheckFailed(f"{getattr(learner_cls, '__name__', learner_cls)} must be an nn.Module subclass"
                          + (f" ({hint})" if hint else ""))
    return module


def load_reference_weights(module: nn.Module, reference: nn.Module, names_hint: str) -> None:
    """Copy the reference's weights into the learner's module; explain a naming mismatch in one line."""
    expected, actual = set(reference.state_dict()), set(module.state_dict())
    missing, unexpected = sorted(expected - actual), sorted(actual - expected)
    if missing or unexpected:
        parts = []
        if missing:
            parts.append(f"missing {missing[:4]}" + (" ..." if len(missing) > 4 else ""))
        if unexpected:
            parts.append(f"unexpected {unexpected[:4]}" + (" ..." if len(unexpected) > 4 else ""))
        raise CheckFailed(f"parameter names differ from the reference ({'; '.join(parts)}): {names_hint}")
    load_state(module, reference.state_dict(), "the reference weights do not fit your module")


def load_state(module: nn.Module, state: Mapping[str, Tensor], what: str, hint: str = "",
               strict: bool = True) -> None:
    """module.load_state_dict(state), where a structural mistake (a layer built with the wrong
    in/out features) is one line naming the parameter, its shape and the expected one, not
    torch's size-mismatch traceback. strict=False leaves extra tensors of the learner's alone."""
    own = module.state_dict()
    for name, tensor in state.items():
        if name in own and tuple(own[name].shape) != tuple(tensor.shape):
            raise CheckFailed(f"{what}: {name} has shape {shape_str(own[name])}, expected {shape_str(tensor)}"
                              + (f" ({hint})" if hint else ""))
    try:
        module.load_state_dict(state, strict=strict)
    except RuntimeError as error:  # e.g. a parameter replaced by a plain attribute
        first = str(error).strip().splitlines()[-1].strip()
        raise CheckFailed(f"{what}: {first}") from None


# ----------------------------------------------------------------------------------------------
# Device and dtype: a module that passes on the CPU must also run on a GPU
# ----------------------------------------------------------------------------------------------


def unregistered_tensors(module: nn.Module) -> list[str]:
    """Tensor attributes that .to(device) would leave behind: neither parameters nor buffers."""
    found = []
    for prefix, submodule in module.named_modules():
        for name, value in vars(submodule).items():
            if isinstance(value, Tensor) and not name.startswith("_"):
                found.append(f"{prefix}.{name}" if prefix else name)
    return found


def _to(value: Any, **kwargs: Any) -> Any:
    if isinstance(value, Tensor) and value.is_floating_point():
        return value.to(**kwargs)
    return value.to(kwargs["device"]) if isinstance(value, Tensor) and "device" in kwargs else value


def _tensors_in(value: Any) -> Iterator[Tensor]:
    """The tensors in a value, looking into lists, tuples and dicts."""
    if isinstance(value, Tensor):
        yield value
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _tensors_in(item)
    elif isinstance(value, dict):
        for item in value.values():
            yield from _tensors_in(item)


def _tensor_constructors() -> frozenset:
    """torch.ones, torch.arange, torch.tensor, ...: what `with torch.device(...)` redirects."""
    try:
        from torch.utils._device import _device_constructors
    except ImportError:  # (a torch without it: every forward is then tried on the meta device)
        return frozenset()
    return frozenset(_device_constructors())


class _DeviceScreen(TorchFunctionMode):
    """Watches the learner's forward on the CPU for the two ways a tensor gets onto the CPU when the
    module and its inputs are on a GPU: a tensor constructor (torch.ones, torch.arange, torch.tensor,
    ...; with or without device=, which on the CPU cannot tell x.device from "cpu"), or a tensor the
    forward did not get from its inputs, parameters, buffers or its own operations (a global, a
    torch.from_numpy, ...). Zero-dimensional tensors do not count: a CPU scalar mixes with any device.
    A forward with neither cannot mix devices, and needs no run on the meta device (whose first
    operation imports torch._dynamo: a second of the first check)."""

    constructors = _tensor_constructors()

    def __init__(self, known: Iterator[Tensor]):
        super().__init__()
        self._seen = list(known)  # kept alive, so that an id is never reused during the forward
        self._ids = {id(t) for t in self._seen}
        self.may_mix_devices = not self.constructors

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if not self.may_mix_devices:
            foreign = (t for t in _tensors_in((args, kwargs)) if t.dim() > 0 and id(t) not in self._ids)
            self.may_mix_devices = func in self.constructors or next(foreign, None) is not None
        result = func(*args, **kwargs)
        for tensor in _tensors_in(result):
            self._seen.append(tensor)
            self._ids.add(id(tensor))
        return result


class ConstructorScreen(TorchFunctionMode):
    """Watches a learner's function that is asked for a tensor on `device`: `all_given` stays True only
    if every tensor constructor it calls (torch.ones, torch.arange, ...) is handed exactly that device.
    Ask for torch.device("cpu", 0), which no default and no hard-coded "cpu" equals: then a function that
    passes its `device` on needs no run on the meta device (whose first operation imports
    torch._dynamo: a second or more of the first check); any other gets one."""

    def __init__(self, device: torch.device):
        super().__init__()
        self.device = device
        self.all_given = bool(_DeviceScreen.constructors)  # (a torch without the list: always try meta)

    def __torch_function__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        if func in _DeviceScreen.constructors:
            given = kwargs.get("device")
            self.all_given = self.all_given and given is not None and torch.device(given) == self.device
        elif func in self.moves:  # a tensor moved (perhaps to the CPU): only the meta device can tell
            self.all_given = False
        return func(*args, **kwargs)

    moves = frozenset({Tensor.to, Tensor.cpu, Tensor.cuda, Tensor.type})


def expect_portable(what: str, module: nn.Module, inputs: Sequence[Any]) -> None:
    """The learner's module works on any device and dtype, as a GPU run needs: `.to()` moves every
    tensor it holds, its forward creates no tensor on the CPU, and its output follows the input's
    dtype. Tested on the CPU: `.to(torch.float64)`, and, when the forward makes or brings in a tensor
    of its own (_DeviceScreen), `.to("meta")` (a device with no data, where mixing in a CPU tensor
    raises). `module` is a fresh instance; it is moved, so do not reuse it."""
    stray = unregistered_tensors(module)
    if stray:
        raise CheckFailed(
            f"{what}: self.{stray[0]} is a plain tensor attribute, which .to(device) does not move to the GPU; "
            f"register it with self.register_buffer({stray[0].rpartition('.')[2]!r}, tensor), or make it an nn.Parameter"
        )
    module.eval()
    module = module.to(torch.float64)
    inputs64 = [_to(x, dtype=torch.float64) for x in inputs]
    screen = _DeviceScreen([*module.parameters(), *module.buffers(), *_tensors_in(inputs64)])

    def screened_forward(*args: Any) -> Any:
        with screen:
            return module(*args)

    with torch.no_grad():
        output = call_learner(f"{what} in float64", screened_forward, *inputs64)
        out = output[0] if isinstance(output, tuple) else output
        if isinstance(out, Tensor) and out.is_floating_point() and out.dtype != torch.float64:
            raise CheckFailed(f"{what}: after .to(torch.float64) with float64 input your output is {out.dtype}; "
                              "let the dtype follow the input (no .float() or dtype=torch.float32 inside forward)")
        if not screen.may_mix_devices:
            return
        try:
            # Not through call_learner: only a device mismatch is news here. Warnings and stderr stay
            # out of the cell (nbgrader scores a cell with stderr 0).
            with warnings.catch_warnings(), contextlib.redirect_stderr(io.StringIO()):
                warnings.simplefilter("ignore")
                module.to("meta")(*[_to(x, device="meta") for x in inputs])
        except Exception as error:  # noqa: BLE001 - e.g. an `if` on a value: meta tensors have none
            if not isinstance(error, RuntimeError) or "device" not in str(error):
                return  # an error only the data-less meta device provokes says nothing about a GPU
            raise CheckFailed(
                f"{what}: your forward creates a tensor on the CPU, so on a GPU it fails with a device "
                f"mismatch; create it where the input is, e.g. torch.arange(T, device=x.device)"
            ) from None


# ----------------------------------------------------------------------------------------------
# The guard: the answer is off-limits while a check runs
# ----------------------------------------------------------------------------------------------


def _same_code(ours: types.CodeType, reference: types.CodeType) -> bool:
    """Is `ours` the reference's code, or compiled from the same source text (a copy made with
    inspect.getsource and exec, or pasted from the package)? The same names, local variables and
    constants, the reference's docstring among them: code written independently does not repeat
    the package's docstring. (Not the bytecode itself: it varies with the context the same text is
    compiled in.)"""
    if ours is reference:
        return True
    if not _is_docstring(reference.co_consts[0] if reference.co_consts else None):
        return False  # without a docstring, equal names and constants may well be the learner's own
    return _same_names_and_constants(ours, reference)


def _is_docstring(value: Any) -> bool:
    return isinstance(value, str) and bool(value.strip())


def _same_names_and_constants(ours: types.CodeType, reference: types.CodeType) -> bool:
    if (ours.co_names, ours.co_varnames, ours.co_freevars, len(ours.co_consts)) != \
            (reference.co_names, reference.co_varnames, reference.co_freevars, len(reference.co_consts)):
        return False
    return all(_same_names_and_constants(a, b) if isinstance(a, types.CodeType) and isinstance(b, types.CodeType)
               else type(a) is type(b) and a == b
               for a, b in zip(ours.co_consts, reference.co_consts))


def _function_inside(obj: Any) -> Any:
    """The plain function behind a partial, a bound method, a staticmethod or a functools.wraps wrapper."""
    for _ in range(10):  # (a bounded unwrap: a learner's object may point at itself)
        try:
            inner = obj.func if isinstance(obj, functools.partial) else \
                getattr(obj, "__func__", None) or getattr(obj, "__wrapped__", None)
        except Exception:  # noqa: BLE001 - an object whose attribute lookup misbehaves is not a wrapper
            inner = None
        if inner is None or inner is obj:
            break
        obj = inner
    return obj


def _is_copy(obj: Any, target: Any) -> bool:
    """`obj` is the reference `target` itself, or a copy of its code (functions), or a class with the
    reference class's docstring whose methods are copies of the reference class's methods."""
    obj = _function_inside(obj)
    if obj is target:
        return True
    if isinstance(target, type):
        if not isinstance(obj, type) or issubclass(obj, target):  # (a subclass inherits the refusals)
            return False
        methods = [name for name, value in vars(target).items() if isinstance(value, types.FunctionType)]
        return _is_docstring(target.__doc__) and obj.__doc__ == target.__doc__ and all(
            isinstance(vars(obj).get(name), types.FunctionType)
            and _same_names_and_constants(vars(obj)[name].__code__, vars(target)[name].__code__) for name in methods)
    return (isinstance(obj, types.FunctionType) and isinstance(target, types.FunctionType)
            and _same_code(obj.__code__, target.__code__))


def _resolve(dotted: str) -> tuple[Any, str, Any]:
    """'torch.nn.functional.softmax' -> (owner object, attribute name, the object)."""
    module_name, _, attribute = dotted.rpartition(".")
    try:
        owner: Any = importlib.import_module(module_name)
    except ModuleNotFoundError:  # an attribute of a class, e.g. torch.Tensor.softmax
        owner_module, _, owner_name = module_name.rpartition(".")
        owner = getattr(importlib.import_module(owner_module), owner_name)
    return owner, attribute, getattr(owner, attribute)


def _called_by_the_package() -> bool:
    """True when the function that called the refusal is the package's own code (tfcourse.*)."""
    return sys._getframe(2).f_globals.get("__name__", "").startswith("tfcourse.")


def _refuser(name: str, exercise: str, original: Callable | None = None) -> Callable:
    """A stand-in that refuses to run. With `original` (a torch function), the package's own reference
    code still gets it: the reference parts that stand in for unfinished exercises (e.g. LayerNorm,
    fused by torch.layer_norm) run inside the checks of later exercises, where the learner may not."""
    def refuse(*args: Any, **kwargs: Any) -> Any:
        if original is not None and _called_by_the_package():
            return original(*args, **kwargs)
        raise OffLimitsError(
            f"`{name}` is off-limits in this exercise ({exercise}): the point is to write it yourself"
        )

    return refuse


class _Patches:
    """Attribute replacements that are undone in reverse order."""

    def __init__(self) -> None:
        self._undo: list[Callable[[], None]] = []

    def set(self, owner: Any, attribute: str, value: Any) -> None:
        if isinstance(owner, types.ModuleType):  # through the dict: a check module refuses setattr
            namespace, old = vars(owner), vars(owner)[attribute]
            namespace[attribute] = value
            self._undo.append(lambda: namespace.__setitem__(attribute, old))
            return
        had_own = isinstance(owner, type) and attribute in owner.__dict__
        old = owner.__dict__[attribute] if isinstance(owner, type) and had_own else getattr(owner, attribute)
        setattr(owner, attribute, value)
        if isinstance(owner, type) and not had_own:
            self._undo.append(lambda: delattr(owner, attribute))  # it was inherited: remove our shadow
        else:
            self._undo.append(lambda: setattr(owner, attribute, old))

    def undo(self) -> None:
        while self._undo:
            self._undo.pop()()


@contextlib.contextmanager
def off_limits(names: Sequence[str], exercise: str, learner_namespaces: Sequence[dict] = ()) -> Iterator[None]:
    """While active, each object named in `names` raises OffLimitsError when used.

    Classes (e.g. torch.nn.LayerNorm) get a refusing __init__ and forward, which also catches
    instances built earlier. Functions are replaced wherever a module or the learner's namespace
    holds them, so `from torch.nn.functional import softmax as s` is caught too. Methods of
    torch.Tensor (e.g. 'torch.Tensor.softmax') are shadowed on the class. With `learner_namespaces`
    from `learner_namespaces(obj)`, the learner's own object is refused when it is the reference or
    a copy of its code (`inspect.getsource` + `exec`, or pasted from the package), and so are such
    copies held in the learner's namespace.
    """
    patches = _Patches()
    learner_objects = getattr(learner_namespaces, "objects", [])
    try:
        classes, functions = [], []  # (target, refuse) pairs, looked for in the namespaces below
        for name in names:
            owner, attribute, target = _resolve(name)
            torch_function = not name.startswith("tfcourse.") and not isinstance(target, type)
            refuse = _refuser(name, exercise, target if torch_function else None)
            if isinstance(owner, type) and not isinstance(target, type):  # a torch.Tensor method
                patches.set(owner, attribute, refuse)
                continue
            # The reference (or a copy of it) handed to the check as the learner's own answer.
            for obj in (obj for obj in learner_objects if _is_copy(obj, target)):
                if not isinstance(target, type):
                    raise OffLimitsError(f"`{name}` is off-limits in this exercise ({exercise}): what you handed in "
                                         "is the reference itself, or a copy of its code; write your own")
                _refuse_class(patches, obj, refuse)
            if isinstance(target, type):
                _refuse_class(patches, target, refuse)  # patched on the class: every name for it refuses
                classes.append((target, refuse))
            else:
                functions.append((target, refuse))
        _replace_in_namespaces(patches, functions, classes, learner_namespaces)
        yield
    finally:
        patches.undo()


# id(module) -> (the module, the size of its namespace then, {id(callable): the names it is held by}).
_MODULE_INDEX: dict[int, tuple[types.ModuleType, int, dict[int, list[str]]]] = {}


def _callables_in(module: types.ModuleType) -> dict[int, list[str]]:
    """Where a module holds each function: {id(function): names}. Indexed once per module and kept
    while its namespace keeps its size (module namespaces hardly change after import), so each check
    looks names up instead of walking the hundreds of thousands of names that torch and Jupyter load.
    (A module that rebinds an existing name to an off-limits function is seen once its size changes;
    the learner's own namespaces are always read in full.)"""
    namespace = vars(module)
    known = _MODULE_INDEX.get(id(module))
    if known is not None and known[0] is module and known[1] == len(namespace):
        return known[2]
    index: dict[int, list[str]] = {}
    for key, value in list(namespace.items()):
        if callable(value) and not isinstance(value, type):
            index.setdefault(id(value), []).append(key)
    _MODULE_INDEX[id(module)] = (module, len(namespace), index)
    return index


def _replace_in_namespaces(patches: _Patches, functions: list[tuple[Any, Callable]],
                           classes: list[tuple[type, Callable]], learner_namespaces: Sequence[dict]) -> None:
    """Each name in a module that is bound to an off-limits function now refuses; in the learner's
    namespaces, so do copies of a function or class (by their code). The learner's namespaces are
    read in full every time; modules through their index."""
    for namespace in learner_namespaces:
        for key, value in list(namespace.items()):
            refuse = next((r for target, r in functions if value is target or _is_copy(value, target)), None)
            if refuse is not None:
                namespace[key] = refuse
                patches._undo.append(lambda n=namespace, k=key, o=value: n.__setitem__(k, o))
            for target, refuse_class in classes:
                if value is not target and _is_copy(value, target):
                    _refuse_class(patches, value, refuse_class)  # a copy of the class, by its code
    for module in [m for m in list(sys.modules.values()) if isinstance(m, types.ModuleType)]:
        index = _callables_in(module)
        for target, refuse in functions:
            for key in index.get(id(target), ()):
                if vars(module).get(key) is target:  # still bound to it (not rebound, not refused already)
                    patches.set(module, key, refuse)


def _refuse_class(patches: _Patches, klass: type, refuse: Callable) -> None:
    """Instances of `klass` (built before or during the check) refuse to be built or run."""
    for method in ("__init__", "forward"):
        if hasattr(klass, method):
            patches.set(klass, method, refuse)


class LearnerCode(list):
    """The global namespaces the learner's code looks names up in (a list), and, as `.objects`, the
    learner's functions or classes themselves: the guard refuses those too when they are the
    reference, or a copy of its code."""

    def __init__(self, namespaces: Sequence[dict], objects: Sequence[Any]) -> None:
        super().__init__(namespaces)
        self.objects = list(objects)

    def __add__(self, other: Sequence[dict]) -> LearnerCode:
        return LearnerCode([*self, *other], [*self.objects, *getattr(other, "objects", [])])

    def __contains__(self, namespace: Any) -> bool:  # by identity: namespaces are large dicts
        return any(namespace is ours for ours in self)


def learner_namespaces(obj: Any) -> LearnerCode:
    """The global namespace(s) the learner's function or class was defined in."""
    if isinstance(obj, type):
        namespaces = [vars(sys.modules[obj.__module__])] if obj.__module__ in sys.modules else []
    else:
        fn = _function_inside(obj)
        namespaces = [fn.__globals__] if hasattr(fn, "__globals__") else []
    return LearnerCode(namespaces, [obj])


# ----------------------------------------------------------------------------------------------
# Comparing with the reference, and naming the mistake
# ----------------------------------------------------------------------------------------------


def _close(a: Tensor, b: Tensor, atol: float, rtol: float) -> bool:
    return a.shape == b.shape and bool(torch.allclose(a.double(), b.double(), atol=atol, rtol=rtol, equal_nan=False))


def compare(actual: Any, expected: Tensor, what: str, mistakes: Mapping[str, Tensor] | None = None,
            atol: float = 1e-5, rtol: float = 1e-4, check_dtype: bool = True) -> None:
    """Fail with one line unless `actual` is a tensor equal to `expected` (shape, dtype, values).

    `mistakes` maps a description ("attention *without* the 1/sqrt(d_k) scaling") to the output
    that mistake would produce; the first one that `actual` matches is named in the message.
    """
    if not isinstance(actual, Tensor):
        raise CheckFailed(f"{what}: expected a torch.Tensor, got {type(actual).__name__}")
    if type(actual) not in (Tensor, torch.nn.Parameter):
        # A subclass can answer the comparison itself (__torch_function__): only plain tensors count.
        raise CheckFailed(f"{what}: expected a plain torch.Tensor, got the subclass {type(actual).__name__}; "
                          "return an ordinary tensor")
    if actual.shape != expected.shape:
        raise CheckFailed(f"{what}: expected shape {shape_str(expected)}, got {shape_str(actual)}")
    if check_dtype and actual.dtype != expected.dtype:
        raise CheckFailed(f"{what}: expected dtype {expected.dtype}, got {actual.dtype}")
    actual_d = actual.detach()
    if actual_d.is_floating_point() and not torch.isfinite(actual_d).all() and torch.isfinite(expected).all():
        raise CheckFailed(f"{what}: your output contains NaN or inf where the reference is finite")
    if _close(actual_d, expected, atol, rtol):
        return
    for description, wrong in (mistakes or {}).items():
        if _close(actual_d, wrong, atol, rtol):
            raise CheckFailed(f"{what}: your output equals {description}")
    worst = (actual_d.double() - expected.double()).abs().max().item()
    raise CheckFailed(f"{what}: values differ from the reference (largest difference {worst:.3g})")


def expect_unchanged(before: Sequence[Tensor], after: Sequence[Tensor], what: str) -> None:
    """Inputs must not be modified in place: the caller still needs them."""
    for i, (old, new) in enumerate(zip(before, after)):
        if not torch.equal(old, new):
            raise CheckFailed(f"{what}: your code modified input #{i + 1} in place; work on a copy instead")


# ----------------------------------------------------------------------------------------------
# The runner: an exercise is a spec and its cases
# ----------------------------------------------------------------------------------------------


@dataclass(frozen=True)
class Exercise:
    """What a check is, as data; `run` does the rest.

        RNN_FORWARD = Exercise("RNN forward pass", RNN_OFF_LIMITS, "rnn_forward equals torch's nn.RNN on {n} inputs")
    """

    name: str  # the exercise as the off-limits message names it: "RNN forward pass"
    off_limits: Sequence[str] = ()  # what the learner's code may not call while it is judged
    # The ✔ line: {n} is the number of cases, {name} the learner's class or function; `run(fields=)` fills others.
    success: str = ""
    no_grad: bool = True  # run the learner's code without autograd (a check of gradients says False)
    hidden_note: str = " (hidden cases included)"  # appended in the hidden run (where it adds to the visible cases)


@dataclass
class Case:
    """One call of the learner's code and what it must give, built (reference and usual mistakes
    included) before any of the learner's code runs."""

    what: str  # the call as messages name it: "rnn_forward(x, w_xh, w_hh, b)"
    args: tuple = ()
    kwargs: Mapping[str, Any] = field(default_factory=dict)
    expected: Any = None  # what `compare` holds the output to; None: `inspect`/`after` judge alone
    mistakes: Mapping[str, Tensor] = field(default_factory=dict)  # description -> the output that mistake gives
    label: str | None = None  # how the comparison names the output (default: `what`)
    inspect: Callable[[Any], Any] | None = None  # structural checks first; returns what to compare (or None: as is)
    after: Callable[[Any], None] | None = None  # checks that come after the comparison (a gradient, call counts)
    unchanged: Sequence[Tensor] | None = None  # inputs it must leave alone (default: the tensors among args)
    unchanged_what: str | None = None  # how "modified input #k in place" names the call (default: `what`)
    call: Callable[[Any], Any] | None = None  # how to call the learner (default: learner(*args, **kwargs))
    atol: float = 1e-5
    rtol: float = 1e-4


def run(exercise: Exercise, learner: Any, cases: Sequence[Case], hidden: bool,
        then: Callable[[], None] | None = None, count: int | None = None,
        fields: Mapping[str, Any] | None = None) -> None:
    """The one runner: under the off-limits guard, each case's call, its inputs left alone, its
    structural checks, the comparison that names the usual mistake, its later checks; then `then`
    (e.g. a device check), still guarded; then the ✔ line (`count` says what {n} counts, if not the
    cases) with the hidden-case note."""
    with off_limits(exercise.off_limits, exercise.name, learner_namespaces(learner)):
        for case in cases:
            run_case(exercise, learner, case)
        if then is not None:
            then()
    passed(success_line(exercise, learner, len(cases) if count is None else count, hidden, fields))


def success_line(exercise: Exercise, learner: Any, count: int, hidden: bool,
                 fields: Mapping[str, Any] | None = None) -> str:
    """The exercise's ✔ line: {n} = count, {name} = the learner's class or function, then `fields`;
    in the hidden run its hidden-case note."""
    name = getattr(learner, "__name__", "your code")
    line = say(exercise.success.format(n=count, name=name, **(fields or {})))
    return line + (say(exercise.hidden_note) if hidden else "")


def run_case(exercise: Exercise, learner: Any, case: Case) -> Any:
    """One case of `run` (the guard already on); returns the learner's output."""
    inputs = list(case.unchanged) if case.unchanged is not None else [
        a for a in (*case.args, *case.kwargs.values()) if isinstance(a, Tensor)]
    before = [t.clone() for t in inputs]
    with torch.no_grad() if exercise.no_grad else contextlib.nullcontext():
        if case.call is not None:
            actual = case.call(learner)
        else:
            actual = call_learner(case.what, learner, *case.args, **case.kwargs)
    expect_unchanged(before, inputs, case.unchanged_what or case.what)
    inspected = case.inspect(actual) if case.inspect is not None else None
    if case.expected is not None:
        compare(actual if inspected is None else inspected, case.expected, case.label or case.what,
                case.mistakes, atol=case.atol, rtol=case.rtol)
    if case.after is not None:
        case.after(actual)
    return actual


@contextlib.contextmanager
def names_replaced(namespace: dict[str, Any], values: Mapping[str, Any]) -> Iterator[None]:
    """Bind `values` in `namespace` (a notebook's globals) for a while, then put back what was there."""
    missing = object()
    saved = {name: namespace.get(name, missing) for name in values}
    namespace.update(values)
    try:
        yield
    finally:
        for name, old in saved.items():
            if old is missing:
                namespace.pop(name, None)
            else:
                namespace[name] = old


def composite(**parts: Callable[[], Any]) -> Callable[[Callable], Callable]:
    """Declare a check as a composite's: an exercise built from earlier ones, graded on its own.

        @composite(LayerNorm=lambda: LayerNorm, sublayer_connection=lambda: sublayer_connection)
        @isolated
        def check_encoder_layer(learner_cls, hidden=False): ...

    `parts` maps each name the learner's code looks up (an earlier exercise's function or class) to
    a function returning the reference. Where the learner's namespace holds their own version, the
    check runs first with the references in its place: if that fails, the composition itself is
    wrong and its message stands. Then it runs as the learner wrote it; if only that fails, the
    exercise still passes, and the line names the earlier exercises to fix (from the lesson's
    manifest): those whose own check fails.
    """

    def decorate(check: Callable) -> Callable:
        @functools.wraps(check)
        def run(learner_obj: Any, hidden: bool = False) -> None:
            _judge_composite(check, learner_obj, hidden, parts)

        judged = isolated(run)  # the runs inside are isolated too; this one puts back what they share
        judged.composite_parts = tuple(parts)  # what the manifest's builds_on is checked against
        return judged

    return decorate


def _judge_composite(check: Callable, learner_obj: Any, hidden: bool, parts: Mapping[str, Callable[[], Any]]) -> None:
    namespaces = learner_namespaces(learner_obj)
    namespace = namespaces[0] if namespaces else {}
    references = {name: make() for name, make in parts.items()}

    def is_reference(name: str) -> bool:
        reference = references[name]
        return namespace[name] is reference or namespace[name] is getattr(reference, "__wrapped__", None)

    theirs = [name for name in parts if name in namespace and not is_reference(name)]
    if not theirs:
        check(learner_obj, hidden)
        return
    stand_ins = {name: _stand_in(references[name]) for name in theirs}
    with names_replaced(namespace, stand_ins), contextlib.redirect_stdout(io.StringIO()):
        check(learner_obj, hidden)  # a CheckFailed here is the composite's own mistake
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output):
            check(learner_obj, hidden)
    except CheckFailed as failure:
        reason = str(failure).splitlines()[0]
        culprits = _culprits(check, learner_obj, hidden, namespace, theirs, stand_ins)
        exercises = _and(list(dict.fromkeys(label for _, label in culprits)))
        # The advice first: tables and feedback may cut a long line short.
        passed(f"{getattr(learner_obj, '__name__', 'your code')} is right {with_the_references(culprits)} — "
               f"fix {exercises} first: with yours it fails ({reason})")
        return
    print(output.getvalue(), end="")


def with_the_references(culprits: Sequence[tuple[str, str]]) -> str:
    """'with the reference LayerNorm in place': how a composite's line (and your_parts()' table)
    says which earlier parts stood in for the learner's."""
    return say(f"with the reference {_and([name for name, _ in culprits])} in place")


COMPOSITE_LINE = re.compile(r"is right with the reference (.+?) in place — fix (.+?) first")  # in English


def _stand_in(reference: Any) -> Any:
    """The reference as the learner's namespace gets it while a composite is judged: a class as it is;
    a function behind a forwarding function of its own (the composite's off-limits guard refuses
    the reference itself wherever it finds it, e.g. log_softmax inside cross_entropy)."""
    if isinstance(reference, type):
        return reference

    def stand_in(*args: Any, **kwargs: Any) -> Any:
        return reference(*args, **kwargs)

    stand_in.__name__ = stand_in.__qualname__ = getattr(reference, "__name__", "reference")
    return stand_in


def _culprits(check: Callable, learner_obj: Any, hidden: bool, namespace: dict[str, Any], theirs: list[str],
              stand_ins: Mapping[str, Any]) -> list[tuple[str, str]]:
    """The learner's parts to blame, as (name, "Exercise N (name)"): those whose own exercise check
    fails; else those that alone make the composite fail; else all of them."""
    from .. import manifest  # the lesson's exercises: numbers, names, checks

    exercise = manifest.exercise_checked_by(_check_name(check))
    defining = {name: manifest.exercise_defining(exercise.lesson, name) for name in theirs}
    failing = {e.check: not _own_check_passes(e, namespace, hidden)
               for e in dict.fromkeys(e for e in defining.values() if e is not None)}  # in the order of theirs
    label = {name: e.label if e is not None else name for name, e in defining.items()}
    culprits = [name for name in theirs if defining[name] is not None and failing[defining[name].check]]
    culprits = culprits or [name for name in theirs if _passes_with(check, learner_obj, hidden, namespace,
                                                                    {name: stand_ins[name]})] or theirs
    return [(name, label[name]) for name in culprits]


def _check_name(check: Callable) -> str:
    """'blocks.check_encoder_layer' for tfcourse.checks.blocks.check_encoder_layer."""
    return f"{check.__module__.rpartition('.')[2]}.{check.__name__}"


def _own_check_passes(exercise: Any, namespace: dict[str, Any], hidden: bool) -> bool:
    """Does the learner's answer to `exercise` (from their namespace) pass its own check? (Quietly.)"""
    module, _, function = exercise.check.rpartition(".")
    own_check = getattr(importlib.import_module(f"tfcourse.checks.{module}"), function)
    if any(name not in namespace for name in exercise.arguments):
        return True
    return _passes_quietly(lambda: own_check(*(namespace[name] for name in exercise.arguments), hidden=hidden))


def _and(names: Sequence[str]) -> str:
    """'a', 'a and b', 'a, b and c'."""
    return names[0] if len(names) == 1 else ", ".join(names[:-1]) + " and " + names[-1]


def _passes_with(check: Callable, learner_obj: Any, hidden: bool, namespace: dict[str, Any],
                 values: Mapping[str, Any]) -> bool:
    """Does `check` pass with `values` bound in the learner's namespace? (Quietly.)"""
    with names_replaced(namespace, values):
        return _passes_quietly(lambda: check(learner_obj, hidden))


def _passes_quietly(judge: Callable[[], None]) -> bool:
    """Does `judge()` (a check) pass? Its ✔ line is not printed: only the verdict counts here."""
    try:
        with contextlib.redirect_stdout(io.StringIO()):
            judge()
    except CheckFailed:
        return False
    return True


class ReadOnlyModule(types.ModuleType):
    """A checks module whose names a notebook cannot rebind (`checks.check_x = ...` raises), so a test
    cell's `from tfcourse.checks.<lesson> import check_x` gets the course's check. (Replacing the whole
    module in sys.modules is not prevented here: the integrity report names it.)"""

    def __setattr__(self, name: str, value: Any) -> None:
        raise AttributeError(f"{self.__name__} is read-only: a notebook cannot replace the course's checks")

    def __delattr__(self, name: str) -> None:
        raise AttributeError(f"{self.__name__} is read-only: a notebook cannot remove the course's checks")


def read_only(module_name: str) -> None:
    """Make a loaded checks module read-only from outside (its own top-level code still runs)."""
    module = sys.modules.get(module_name)
    if module is not None and module_name.startswith("tfcourse.checks") and type(module) is types.ModuleType:
        module.__class__ = ReadOnlyModule


def isolated(check: Callable) -> Callable:
    """Run a check so that it leaves no trace and sees none: the learner's random generators (Python,
    torch CPU and CUDA) are forked, so a test cell changes no number the learner's next cells draw,
    visible and hidden runs alike; and the check runs with torch's default dtype float32 and default
    device CPU, whatever the learner set while experimenting. Both are put back afterwards."""

    @functools.wraps(check)
    def run(*args: Any, **kwargs: Any) -> Any:
        python_state = random.getstate()
        dtype, device = torch.get_default_dtype(), torch.get_default_device()
        cuda_devices = list(range(torch.cuda.device_count())) if torch.cuda.is_available() else []
        with torch.random.fork_rng(devices=cuda_devices):
            torch.set_default_dtype(torch.float32)
            if device.type != "cpu":
                torch.set_default_device("cpu")
            _check_depth[0] += 1
            try:
                result = check(*args, **kwargs)
                outcome = True
                return result
            except BaseException:
                outcome = False
                raise
            finally:
                _check_depth[0] -= 1
                _note_check(args, outcome)
                torch.set_default_dtype(dtype)
                if device.type != "cpu":
                    torch.set_default_device(device)
                random.setstate(python_state)

    read_only(check.__module__)  # the module defining a check: nothing in it can be swapped out
    return run


def one_thread(check: Callable) -> Callable:
    """Run a check on one CPU thread. Its tensors are tiny: on a busy machine, waking a thread pool
    for each small op costs far more than the op itself (seconds instead of a tenth of one)."""

    @functools.wraps(check)
    def run(*args: Any, **kwargs: Any) -> Any:
        threads = torch.get_num_threads()
        torch.set_num_threads(1)
        try:
            return check(*args, **kwargs)
        finally:
            torch.set_num_threads(threads)

    return run


def seeded(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


read_only(__name__)  # this machinery too
