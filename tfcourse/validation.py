"""Input checks shared by the modules: bad input fails early, naming the problem and the expected shape/type."""

from __future__ import annotations

import os

import torch
from torch import Tensor


def shape_str(t: Tensor) -> str:
    """`(2, 5, 64)`-style text for error messages."""
    return "(" + ", ".join(str(s) for s in t.shape) + ")"


def expect_tensor(x: object, name: str, ndim: int | None = None, expected: str = "") -> Tensor:
    """Fail unless `x` is a tensor with `ndim` dimensions; `expected` names the shape, e.g. '(B, T)'."""
    if not isinstance(x, Tensor):
        raise TypeError(f"{name} must be a torch.Tensor {expected}, got {type(x).__name__}")
    if ndim is not None and x.dim() != ndim:
        raise ValueError(f"{name} must have {ndim} dimensions {expected}, got shape {shape_str(x)}")
    return x


def debug_mode() -> bool:
    """TFCOURSE_DEBUG=1 turns on the checks that would stall a GPU (see expect_token_ids)."""
    return os.environ.get("TFCOURSE_DEBUG", "") not in ("", "0")


def expect_token_ids(ids: object, vocab_size: int, name: str = "token ids") -> Tensor:
    """Token ids: an integer (B, T) tensor, B >= 1, every id in [0, vocab_size).

    The range check needs the ids' smallest and largest value on the host. For ids on the CPU
    that costs one pass over the batch; for ids on a GPU it would make the CPU wait for the GPU
    (a sync) on every forward pass, so there it runs only in debug mode (TFCOURSE_DEBUG=1).
    Ids made by a tokenizer are in range by construction; a stray id on a GPU fails in the
    embedding lookup with CUDA's "device-side assert", and TFCOURSE_DEBUG=1 names it instead.
    """
    ids = expect_tensor(ids, name, ndim=2, expected="(B, T)")
    if ids.dtype.is_floating_point or ids.dtype == torch.bool or ids.is_complex():
        raise TypeError(f"{name} must be an integer tensor (torch.long), got dtype {ids.dtype}")
    if ids.shape[0] == 0 or ids.shape[1] == 0:
        raise ValueError(f"{name} is an empty batch: shape {shape_str(ids)}; expected (B, T) with B, T >= 1")
    checkable = ids.device.type == "cpu" or debug_mode()
    if checkable and not torch.compiler.is_compiling():  # a data-dependent check cannot be traced
        expect_ids_in_vocabulary(ids, vocab_size, name)
    return ids


def expect_ids_in_vocabulary(ids: Tensor, vocab_size: int, name: str = "token ids") -> None:
    """Every id in [0, vocab_size): one pass for the smallest and largest id."""
    low, high = (int(v) for v in torch.aminmax(ids))
    if low < 0 or high >= vocab_size:
        bad = low if low < 0 else high
        raise ValueError(f"{name} contain {bad}, outside the vocabulary [0, {vocab_size})")


def expect_features(x: object, d_model: int, name: str = "x") -> Tensor:
    """x must be a tensor (..., d_model): what every layer that works feature-wise takes."""
    expect_tensor(x, name, expected="(..., d_model)")
    if x.dim() == 0 or x.shape[-1] != d_model:
        raise ValueError(f"{name} must end in d_model={d_model}, got shape {shape_str(x)}")
    return x


def expect_divisible(d_model: int, n_heads: int) -> None:
    """Multi-head attention splits d_model into n_heads equal slices of d_head = d_model / n_heads."""
    if n_heads < 1 or d_model % n_heads != 0:
        raise ValueError(
            f"d_model ({d_model}) must be divisible by n_heads ({n_heads}): "
            f"each head gets d_head = d_model / n_heads dimensions"
        )
