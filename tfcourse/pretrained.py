"""Real GPT-2 weights in the course's GPT.

GPT-2 is the course's decoder-only GPT with a few fixed choices: pre-LN blocks with one final
LayerNorm, learned position vectors, GELU in its tanh approximation, biases everywhere, and the
output layer tied to the token table. `GPTConfig.gpt2_small()` (or `gpt2_config` for any GPT-2
config) sets them; then only the checkpoint's *layout* differs. A Hugging Face `GPT2LMHeadModel`
state dict maps onto the course's parameter names like this ({i}: the block):

    GPT-2 checkpoint                              course GPT (tfcourse.models.GPT)
    transformer.wte.weight          (V, d)        embed.token.weight  (and output.weight: tied)
    transformer.wpe.weight          (max_len, d)  embed.position.weight
    transformer.h.{i}.ln_1.*        (d,)          blocks.layers.{i}.norm1.*
    transformer.h.{i}.attn.c_attn.* (d, 3d) (3d,) blocks.layers.{i}.self_attn.w_q.*, w_k.*, w_v.*
    transformer.h.{i}.attn.c_proj.* (d, d)  (d,)  blocks.layers.{i}.self_attn.w_o.*
    transformer.h.{i}.ln_2.*        (d,)          blocks.layers.{i}.norm2.*
    transformer.h.{i}.mlp.c_fc.*    (d, 4d)       blocks.layers.{i}.ffn.linear1.*
    transformer.h.{i}.mlp.c_proj.*  (4d, d)       blocks.layers.{i}.ffn.linear2.*
    transformer.ln_f.*              (d,)          blocks.norm.*
    lm_head.weight                  (V, d)        output.weight (the token table again)

Two things change on the way. GPT-2's linear layers are `Conv1D` modules, which compute
x @ W + b with W stored as (in, out); nn.Linear computes x @ W.T + b and stores (out, in), so
every matrix is transposed. And GPT-2 computes q, k and v with one fused layer, `c_attn`, whose
3d outputs are q, then k, then v side by side; the course has three layers, so it is split.

The loader takes any model whose parameter names follow tfcourse's GPT (the reference, the GPT of
lesson 06 or one built from your own parts) and says which parameters are missing, unexpected or
of the wrong shape. Nothing here downloads unless asked to (`find_gpt2(allow_download=True)`), and
`transformers` / `huggingface_hub` are imported only by the functions that need them.
"""

from __future__ import annotations

import importlib.util
import os
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .layouts import in_layout_of
from .models import GPTConfig
from .validation import expect_tensor, shape_str

# GPT-2's activation names (config.activation_function) -> the course's.
_ACTIVATIONS = {"gelu_new": "gelu_tanh", "gelu_pytorch_tanh": "gelu_tanh", "gelu": "gelu", "relu": "relu"}
# Per-block tensors of a GPT-2 checkpoint that are not weights: the causal mask as a buffer (older files).
_NOT_WEIGHTS = re.compile(r"^h\.\d+\.attn\.(bias|masked_bias)$")


def _field(config: Any, name: str, default: Any = None) -> Any:
    if isinstance(config, Mapping):
        return config.get(name, default)
    return getattr(config, name, default)


def gpt2_config(config: Any, **options: Any) -> GPTConfig:
    """The course's GPTConfig for a GPT-2 config (a `transformers.GPT2Config` or its dict / config.json).

    Dropout is 0 unless `options` says otherwise: a loaded checkpoint is for inference first.
    """
    activation = _field(config, "activation_function", "gelu_new")
    if activation not in _ACTIVATIONS:
        raise ValueError(f"GPT-2 activation_function {activation!r} is not supported; "
                         f"expected one of {sorted(_ACTIVATIONS)}")
    eps = _field(config, "layer_norm_epsilon", 1e-5)
    if abs(eps - 1e-5) > 1e-12:
        raise ValueError(f"the course's LayerNorm uses eps=1e-5, this GPT-2 config has layer_norm_epsilon={eps}")
    if not _field(config, "tie_word_embeddings", True):
        raise ValueError("this GPT-2 config has an untied output layer; the loader expects GPT-2's tied one")
    names = dict(vocab_size="vocab_size", max_len="n_positions", d_model="n_embd", n_heads="n_head",
                 n_layers="n_layer")  # ours -> GPT-2's
    missing = [theirs for theirs in names.values() if _field(config, theirs) is None]
    if missing:
        raise ValueError(f"the GPT-2 config lacks {missing} (expected vocab_size, n_positions, n_embd, n_head, n_layer)")
    settings = {ours: _field(config, theirs) for ours, theirs in names.items()}
    settings.update(d_ff=_field(config, "n_inner"), dropout=0.0)  # n_inner None: 4 * n_embd, as ours
    return GPTConfig.gpt2_small(**{**settings, "activation": _ACTIVATIONS[activation], **options})


def _check_gpt2_attention(c_attn_weight: Tensor, c_attn_bias: Tensor, c_proj_weight: Tensor,
                          c_proj_bias: Tensor) -> None:
    for tensor, name, ndim, expected in ((c_attn_weight, "c_attn_weight", 2, "(d_model, 3 * d_model)"),
                                         (c_attn_bias, "c_attn_bias", 1, "(3 * d_model,)"),
                                         (c_proj_weight, "c_proj_weight", 2, "(d_model, d_model)"),
                                         (c_proj_bias, "c_proj_bias", 1, "(d_model,)")):
        expect_tensor(tensor, name, ndim=ndim, expected=expected)
    d = c_attn_weight.shape[0]
    if (c_attn_weight.shape[1], c_attn_bias.shape[0], c_proj_weight.shape, c_proj_bias.shape[0]) != (3 * d, 3 * d, (d, d), d):
        raise ValueError(f"expected c_attn_weight (d_model, 3 * d_model), c_attn_bias (3 * d_model,), c_proj_weight "
                         f"(d_model, d_model), c_proj_bias (d_model,), got {shape_str(c_attn_weight)}, "
                         f"{shape_str(c_attn_bias)}, {shape_str(c_proj_weight)}, {shape_str(c_proj_bias)}")


def convert_gpt2_attention(c_attn_weight: Tensor, c_attn_bias: Tensor, c_proj_weight: Tensor,
                           c_proj_bias: Tensor) -> dict[str, Tensor]:
    """GPT-2's attention weights (Conv1D layout) -> the course's MultiHeadAttention state dict.

    c_attn_weight (d, 3d), c_attn_bias (3d,): q, k, v side by side along the last axis.
    c_proj_weight (d, d), c_proj_bias (d,): the output projection W^O.
    Returns w_q / w_k / w_v / w_o ".weight" (d, d) and ".bias" (d,), as nn.Linear stores them.
    """
    _check_gpt2_attention(c_attn_weight, c_attn_bias, c_proj_weight, c_proj_bias)
    d_model = c_attn_weight.shape[0]
    # Conv1D computes x @ W with W (in, out); nn.Linear computes x @ weight.T: weight = W.T, here (3d, d).
    q_w, k_w, v_w = c_attn_weight.t().split(d_model, dim=0)  # each (d, d): rows are q's, then k's, then v's outputs
    q_b, k_b, v_b = c_attn_bias.split(d_model)  # each (d,)
    return {"w_q.weight": q_w, "w_q.bias": q_b, "w_k.weight": k_w, "w_k.bias": k_b,
            "w_v.weight": v_w, "w_v.bias": v_b, "w_o.weight": c_proj_weight.t(), "w_o.bias": c_proj_bias}


def _strip_prefix(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """GPT2LMHeadModel names start with "transformer." (and have lm_head); the checkpoint file's do not."""
    return {name.removeprefix("transformer."): tensor for name, tensor in state_dict.items()
            if not _NOT_WEIGHTS.match(name.removeprefix("transformer."))}


def gpt2_to_course(state_dict: Mapping[str, Tensor]) -> dict[str, Tensor]:
    """A GPT-2 state dict (GPT2LMHeadModel's, GPT2Model's, or the checkpoint file's) renamed and
    reshaped into the course GPT's state dict (see the table at the top of this module)."""
    source = _strip_prefix(state_dict)
    used: set[str] = set()

    def take(name: str) -> Tensor:
        if name not in source:
            raise KeyError(f"the GPT-2 state dict has no {name!r}; is it a GPT-2 checkpoint?")
        used.add(name)
        return source[name]

    blocks = sorted({int(m.group(1)) for name in source if (m := re.match(r"h\.(\d+)\.", name))})
    out: dict[str, Tensor] = {"embed.token.weight": take("wte.weight"), "embed.position.weight": take("wpe.weight")}
    for i in blocks:
        gpt2, ours = f"h.{i}.", f"blocks.layers.{i}."
        for norm, our_norm in (("ln_1", "norm1"), ("ln_2", "norm2")):
            out[f"{ours}{our_norm}.weight"] = take(f"{gpt2}{norm}.weight")
            out[f"{ours}{our_norm}.bias"] = take(f"{gpt2}{norm}.bias")
        attention = convert_gpt2_attention(take(f"{gpt2}attn.c_attn.weight"), take(f"{gpt2}attn.c_attn.bias"),
                                           take(f"{gpt2}attn.c_proj.weight"), take(f"{gpt2}attn.c_proj.bias"))
        out.update({f"{ours}self_attn.{name}": tensor for name, tensor in attention.items()})
        for conv, linear in (("c_fc", "linear1"), ("c_proj", "linear2")):
            out[f"{ours}ffn.{linear}.weight"] = take(f"{gpt2}mlp.{conv}.weight").t()  # Conv1D stores (in, out)
            out[f"{ours}ffn.{linear}.bias"] = take(f"{gpt2}mlp.{conv}.bias")
    out["blocks.norm.weight"], out["blocks.norm.bias"] = take("ln_f.weight"), take("ln_f.bias")
    # GPT-2 ties its output layer to the token table; a separate lm_head in the file must equal it.
    head = source.get("lm_head.weight")
    if head is not None:
        used.add("lm_head.weight")
        if head.shape != out["embed.token.weight"].shape or not torch.equal(head, out["embed.token.weight"]):
            raise ValueError("lm_head.weight differs from wte.weight: the loader expects GPT-2's tied output layer")
    out["output.weight"] = out["embed.token.weight"]
    unknown = sorted(set(source) - used)
    if unknown:
        raise ValueError(f"the GPT-2 state dict has tensors the loader does not know: {unknown[:6]}"
                         + (f" and {len(unknown) - 6} more" if len(unknown) > 6 else ""))
    return out


def _listed(names: list[str], limit: int = 6) -> str:
    shown = ", ".join(names[:limit])
    return shown + (f" and {len(names) - limit} more" if len(names) > limit else "")


def load_gpt2_state_dict(model: nn.Module, state_dict: Mapping[str, Tensor]) -> nn.Module:
    """Copy GPT-2's weights into `model`, whose parameter names follow tfcourse's GPT; returns `model`.
    Its attention may keep q, k, v in three nn.Linear or one fused w_qkv (tfcourse.layouts).

    Every parameter of `model` must receive a tensor of its own shape, and every GPT-2 tensor must
    find a parameter: otherwise a ValueError names the missing, unexpected and mis-shaped ones.
    The values are copied (cast to the model's dtype, on the model's device); ties stay ties.
    """
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be an nn.Module, got {type(model).__name__}")
    converted = in_layout_of(model, gpt2_to_course(state_dict))  # fused where the model's attention fuses q, k, v
    ours = model.state_dict()
    parameters = {name for name, _ in model.named_parameters(remove_duplicate=False)}
    missing = sorted(parameters - set(converted))
    unexpected = sorted(set(converted) - set(ours))
    misshaped = sorted(f"{name} {shape_str(converted[name])} for {shape_str(ours[name])}"
                       for name in set(converted) & set(ours) if converted[name].shape != ours[name].shape)
    if missing or unexpected or misshaped:
        problems = []
        if missing:
            problems.append(f"missing (your model has them, GPT-2 does not): {_listed(missing)}")
        if unexpected:
            problems.append(f"unexpected (GPT-2 has them, your model does not): {_listed(unexpected)}")
        if misshaped:
            problems.append(f"mis-shaped (GPT-2's shape for yours): {_listed(misshaped)}")
        raise ValueError("cannot load GPT-2 into this model, whose parameter names must follow tfcourse's GPT: "
                         + "; ".join(problems))
    model.load_state_dict(converted, strict=False)  # strict about names above; buffers of its own may stay
    return model


def gpt2_from_state_dict(state_dict: Mapping[str, Tensor], config: Any, **options: Any) -> nn.Module:
    """A tfcourse GPT with GPT-2's weights, in eval mode, in the checkpoint's dtype.
    `config`: the GPT-2 config (see gpt2_config); `options` change fields of the course's config."""
    from .models import GPT

    dtype = next(t.dtype for t in state_dict.values() if t.is_floating_point())
    model = GPT(gpt2_config(config, **options)).to(dtype)
    return load_gpt2_state_dict(model, state_dict).eval()


# ----------------------------------------------------------------------------------------------
# The real checkpoint: found in the Hugging Face cache, downloaded only when allowed
# ----------------------------------------------------------------------------------------------

GPT2_FILES = ("config.json", "model.safetensors", "vocab.json", "merges.txt")


def transformers_available() -> bool:
    """Is Hugging Face `transformers` installed (the `pretrained` extra)?"""
    return importlib.util.find_spec("transformers") is not None


def downloads_forbidden() -> bool:
    """HF_HUB_OFFLINE=1 (Hugging Face's own switch): never touch the network."""
    return os.environ.get("HF_HUB_OFFLINE", "").lower() in ("1", "true", "yes", "on")


def find_gpt2(name: str = "gpt2", allow_download: bool = False, timeout: float = 10.0,
              cache_dir: str | os.PathLike[str] | None = None) -> Path | None:
    """The folder holding GPT-2's config.json, model.safetensors, vocab.json and merges.txt, or None.

    The local Hugging Face cache is tried first. Only when `allow_download` is true and
    HF_HUB_OFFLINE is not set is the hub asked, with a `timeout` in seconds; any failure (no network,
    no `huggingface_hub`) gives None rather than an error. `cache_dir`: another Hugging Face cache.
    """
    if importlib.util.find_spec("huggingface_hub") is None:
        return None
    from huggingface_hub import snapshot_download

    attempts = [True] + ([False] if allow_download and not downloads_forbidden() else [])
    for local_only in attempts:
        try:
            folder = Path(snapshot_download(name, allow_patterns=list(GPT2_FILES), local_files_only=local_only,
                                            etag_timeout=timeout, cache_dir=cache_dir))
        except Exception:  # noqa: BLE001 - not cached, offline, timed out: all mean "not available"
            continue
        if all((folder / file).is_file() for file in GPT2_FILES):
            return folder
    return None


__all__ = ["gpt2_config", "convert_gpt2_attention", "gpt2_to_course", "load_gpt2_state_dict", "gpt2_from_state_dict",
           "find_gpt2", "transformers_available", "downloads_forbidden", "GPT2_FILES"]
