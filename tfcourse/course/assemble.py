"""Your own Transformer: the components you wrote in lessons 02–07, put together into a GPT and an
encoder–decoder that lessons 06, 08 and 09 build, train and decode with.

    parts = your_parts()               # reads your lesson notebooks, checks each component
    print(parts.table())               # where each component came from, and why
    gpt = parts.gpt(your_gpt_config(vocab_size=65))
    translator = parts.transformer(your_transformer_config(src_vocab, tgt_vocab))

Each component comes from your notebook when it is finished and passes its exercise check, and
from the `tfcourse` reference otherwise (the table says which check failed, in one line). The
models are the reference `GPT` and `Transformer` with your parts inside, so they keep the
reference's interface: `model(ids)`, `model(ids, caches)` for generation, `make_caches()`.

Your classes are called the way the reference calls its own: small adapters (subclasses of your
classes, so parameter names do not change) translate the arguments and let your attention serve a
generation cache. Your `MultiHeadAttention(d_model, n_heads)` of lesson 03 has no key/value cache;
while generating it keeps the layer's *inputs* so far and attends from the new positions to all of
them, which gives exactly the outputs of a key/value cache, recomputing the projections of the
earlier positions at each step.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import os
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from .. import attention as reference_attention
from .. import blocks as reference_blocks
from .. import ffn as reference_ffn
from .. import manifest
from ..attention import KVCache
from ..models import GPT, GPTConfig, Transformer, TransformerConfig, layer_options
from ..checks.adapters import called_like_the_lessons
from .notebook_import import NotebookImportError, import_from_notebook

REFERENCE = "tfcourse reference"


@dataclass(frozen=True)
class Component:
    """One component the learner writes: where, under which name, and the check that judges it."""

    key: str  # how the table names it
    lesson: str  # the lesson folder, e.g. "03_attention"
    name: str  # the class or function in that notebook
    check: str  # "module.function" in tfcourse.checks
    reference: Callable[[], Any]  # the tfcourse object used when the learner's is not ready


def _reference(dotted: str | None) -> Callable[[], Any]:
    """A function returning the tfcourse object `dotted` names ("tfcourse.ffn.PositionwiseFeedForward"),
    or None where there is none (without yours, lessons use tfcourse.decoding.generate)."""
    def resolve() -> Any:
        if dotted is None:
            return None
        module, _, name = dotted.rpartition(".")
        return getattr(importlib.import_module(module), name)

    return resolve


# The components the lessons supply, in course order: the manifest's exercises that name one.
COMPONENTS = tuple(Component(e.supplies, e.lesson, e.argument, e.check, _reference(e.reference))
                   for e in manifest.exercises() if e.supplies)


@dataclass
class Source:
    """Where one component came from: the learner's notebook or the reference, and why."""

    component: Component
    obj: Any  # the learner's class/function, or the reference's
    origin: str  # the notebook's path, or REFERENCE
    why: str  # "its check passed", "unfinished", "fails its check: ..."

    @property
    def is_yours(self) -> bool:
        return self.origin != REFERENCE


def _namespace(obj: Any) -> dict[str, Any]:
    """The global namespace `obj` looks names up in: its notebook's definitions."""
    return (obj.__init__ if isinstance(obj, type) else obj).__globals__


def _run_check(component: Component, obj: Any) -> tuple[str | None, str]:
    """(None, how it passed) when `obj` passes its exercise check (the visible cases), else
    (the check's message, "").

    A composite (a layer, the stack) is judged by its check with the references of the earlier
    exercises in place, so a bug in your LayerNorm is charged to your LayerNorm only; the table
    then says so, as the check's own line does.
    """
    from ..checks.core import COMPOSITE_LINE, CheckFailed

    module_name, _, function = component.check.rpartition(".")
    check = getattr(importlib.import_module(f"tfcourse.checks.{module_name}"), function)
    output = io.StringIO()
    try:
        with contextlib.redirect_stdout(output):
            check(obj)  # the check's ✔ line is not news here
    except CheckFailed as failure:
        return str(failure).splitlines()[0], ""
    except Exception as error:  # noqa: BLE001 - any crash means: not usable, say why in one line
        return f"{type(error).__name__}: {error}", ""
    composite = COMPOSITE_LINE.search(output.getvalue())
    return None, "its check passed" + (f" {composite.group(1)} ({composite.group(2)})" if composite else "")


def _find(component: Component, folder: Path) -> Source:
    notebook = folder / component.lesson / f"{component.lesson}.ipynb"
    reference = component.reference()
    if not notebook.is_file():
        return Source(component, reference, REFERENCE, f"no notebook at {notebook}")
    try:
        obj = import_from_notebook(notebook, component.name)
    except NotebookImportError as error:
        return Source(component, reference, REFERENCE, f"unfinished: {error}")
    problem, passed = _run_check(component, obj)
    if problem is not None:
        return Source(component, reference, REFERENCE, f"fails its check: {problem}")
    return Source(component, obj, _shown(notebook, folder), passed)


def _shown(notebook: Path, folder: Path) -> str:
    """The notebook's path from the course folder (e.g. notebooks/03_attention/03_attention.ipynb)."""
    try:
        return str(notebook.resolve().relative_to(folder.resolve().parent))
    except ValueError:  # not under the folder's parent: the full path
        return str(notebook)


def default_folder() -> Path:
    """The folder that holds the lesson folders: the parent of the running lesson's folder."""
    return Path(os.environ.get("TFCOURSE_LESSONS_DIR", Path.cwd().parent))


# ----------------------------------------------------------------------------------------------
# Adapters: your classes, called the way the reference calls its parts
# ----------------------------------------------------------------------------------------------


@contextlib.contextmanager
def _generation_cache(attention: nn.Module, cache: KVCache | None) -> Iterator[None]:
    """Hand `cache` to an attention module whose caller (your layer) does not pass one. A stack
    hands each layer's cache down this way; a layer called without one leaves it in place."""
    if cache is None:
        yield
        return
    attention.active_cache = cache
    try:
        yield
    finally:
        attention.active_cache = None


def _attention_class(cls: type) -> type:
    """`cls`, callable as attention(d_model, n_heads, dropout, fused=...), serving a cache."""
    if issubclass(cls, reference_attention.MultiHeadAttention):

        class ReferenceAttention(cls):
            active_cache: KVCache | None = None

            def forward(self, x: Tensor, memory: Tensor | None = None, mask: Tensor | None = None,
                        cache: KVCache | None = None, return_weights: bool = False, is_causal: bool = False) -> Any:
                cache = cache if cache is not None else self.active_cache
                return super().forward(x, memory, mask, cache, return_weights, is_causal)

        return ReferenceAttention

    class YourAttention(cls):
        active_cache: KVCache | None = None

        def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, **_reference_options: Any):
            # Your attention has no dropout of its own: the paper drops sub-layer outputs, which your
            # layers do; attention-weight dropout came later.
            super().__init__(d_model, n_heads)

        def forward(self, x: Tensor, memory: Tensor | None = None, mask: Tensor | None = None,
                    cache: KVCache | None = None, return_weights: bool = False, is_causal: bool = False) -> Tensor:
            # is_causal is only a hint for fused kernels: your attention uses the mask itself.
            if return_weights:
                raise NotImplementedError("your MultiHeadAttention returns no weights; use the reference's")
            cache = cache if cache is not None else self.active_cache
            if cache is not None and memory is None:  # self-attention while generating
                # The layer's inputs so far, (B, 1, T, d_model): shaped like one head of a KV cache.
                past = cache.k
                memory = x if past is None else torch.cat([past[:, 0], x], dim=1)  # (B, T_past + T, d_model)
                cache.k = cache.v = memory[:, None]
            return super().forward(x, memory, mask)

    return YourAttention


def _feed_forward_class(cls: type) -> Callable[..., nn.Module]:
    if issubclass(cls, reference_ffn.PositionwiseFeedForward):
        return cls

    class YourFeedForward(cls):
        def __init__(self, d_model: int, d_ff: int | None = None, dropout: float = 0.0, *,
                     activation: str = "relu", **_reference_options: Any):
            if activation != "relu":
                raise ValueError(f"your FeedForward uses ReLU; the config asks for {activation!r}")
            super().__init__(d_model, d_ff)  # no dropout inside: the layer drops the FFN's output

    return YourFeedForward


def _patch_namespace(cls: type, **names: Any) -> None:
    """Your class looks its parts up by name in its notebook's namespace: point those names at
    the chosen parts (yours, or the reference where yours is not ready)."""
    _namespace(cls).update(names)


@dataclass
class Parts:
    """The chosen component of each kind, with its provenance."""

    sources: dict[str, Source] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Source:
        return self.sources[key]

    # --- the table -------------------------------------------------------------------------

    def rows(self) -> list[tuple[str, str, str]]:
        return [(key, s.origin, s.why) for key, s in self.sources.items()]

    def table(self, markdown: bool = False) -> str:
        """One row per component: component | where it came from | why."""
        if markdown:
            lines = ["| component | from | why |", "| --- | --- | --- |"]
            lines += [f"| {k} | `{o}` | {w.replace('|', '/')} |" for k, o, w in self.rows()]
            return "\n".join(lines)
        width = max(len(k) for k, _, _ in self.rows())
        return "\n".join(f"{k:<{width}}  {o}  ({w})" for k, o, w in self.rows())

    def _repr_markdown_(self) -> str:
        return self.table(markdown=True)

    # --- the parts, callable the reference's way ---------------------------------------------

    def attention(self) -> type:
        return _attention_class(self["multi-head attention"].obj)

    def feed_forward(self) -> Callable[..., nn.Module]:
        return _feed_forward_class(self["feed-forward network"].obj)

    def norm(self) -> type:
        return self["LayerNorm"].obj

    def _layer(self, key: str) -> Callable[..., nn.Module]:
        source = self[key]
        attention, feed_forward, norm = self.attention(), self.feed_forward(), self.norm()
        is_decoder = key == "decoder layer"
        if not source.is_yours:
            return called_like_the_lessons(source.obj, attention=attention, feed_forward=feed_forward, norm=norm)
        _patch_namespace(source.obj, MultiHeadAttention=attention, PositionwiseFeedForward=feed_forward,
                         LayerNorm=norm, sublayer_connection=self["residual + LayerNorm"].obj)

        class YourLayer(source.obj):
            def __init__(self, d_model: int, n_heads: int, d_ff: int | None = None, dropout: float = 0.1,
                         norm_first: bool = False, **_reference_options: Any):
                super().__init__(d_model, n_heads, d_ff, dropout, norm_first)

            if is_decoder:
                def forward(self, x: Tensor, memory: Tensor, self_mask: Tensor | None = None,
                            memory_mask: Tensor | None = None, cache: Any = None) -> Tensor:
                    with _generation_cache(self.self_attn, cache.self_attn if cache is not None else None):
                        return super().forward(x, memory, self_mask, memory_mask)
            else:
                def forward(self, x: Tensor, mask: Tensor | None = None, cache: KVCache | None = None,
                            is_causal: bool = False) -> Tensor:
                    with _generation_cache(self.self_attn, cache):
                        return super().forward(x, mask)

        return YourLayer

    def encoder_layer(self) -> Callable[..., nn.Module]:
        return self._layer("encoder layer")

    def decoder_layer(self) -> Callable[..., nn.Module]:
        return self._layer("decoder layer")

    def encoder(self) -> Callable[..., nn.Module]:
        source, layer, norm = self["encoder stack"], self.encoder_layer(), self.norm()
        if not source.is_yours:
            def build_reference(n_layers: int, d_model: int, n_heads: int, d_ff: int | None = None,
                                **options: Any) -> nn.Module:
                return source.obj(n_layers, d_model, n_heads, d_ff, layer=layer, norm=norm, **options)

            return build_reference
        _patch_namespace(source.obj, EncoderLayer=layer, LayerNorm=norm)

        class YourEncoder(source.obj):
            def __init__(self, n_layers: int, d_model: int, n_heads: int, d_ff: int | None = None, *,
                         dropout: float = 0.1, norm_first: bool = False, **_reference_options: Any):
                super().__init__(n_layers, d_model, n_heads, d_ff, dropout, norm_first)

            def forward(self, x: Tensor, mask: Tensor | None = None, caches: list | None = None,
                        is_causal: bool = False) -> Tensor:
                with contextlib.ExitStack() as stack:
                    for i, layer_ in enumerate(self.layers):
                        cache = caches[i] if caches is not None else None
                        stack.enter_context(_generation_cache(layer_.self_attn, cache))
                    return super().forward(x, mask)

        return YourEncoder

    def decoder(self) -> Callable[..., nn.Module]:
        layer, norm = self.decoder_layer(), self.norm()

        def build(n_layers: int, d_model: int, n_heads: int, d_ff: int | None = None, **options: Any) -> nn.Module:
            # You wrote no decoder stack: the reference's stacks your decoder layers.
            return reference_blocks.Decoder(n_layers, d_model, n_heads, d_ff, layer=layer, norm=norm, **options)

        return build

    def input_layer(self, vocab_size: int, d_model: int, max_len: int, dropout: float) -> nn.Module:
        source = self["input layer"]
        if source.is_yours:
            return source.obj(vocab_size, d_model, max_len, dropout)
        return source.obj(vocab_size, d_model, max_len, dropout, positional="sinusoidal", scale=True)

    @property
    def cross_entropy(self) -> Callable[[Tensor, Tensor], Tensor]:
        return self["cross-entropy"].obj

    @property
    def generate_cached(self) -> Callable | None:
        """Your greedy_generate_cached(model, ids, max_new_tokens), or None if it is not ready."""
        return self["cached generation"].obj

    # --- whole models ------------------------------------------------------------------------

    def gpt(self, config: GPTConfig) -> GPT:
        """The reference GPT with your input layer, attention, FFN, LayerNorm, layers and stack inside.

        Your input layer is the paper's (sinusoidal positions, embeddings x sqrt(d_model)) and your
        FFN uses ReLU: build `config` with `your_gpt_config`, which sets these.
        """
        _expect_paper_style(config)
        embed = self.input_layer(config.vocab_size, config.d_model, config.max_len, config.dropout)
        blocks = self.encoder()(config.n_layers, config.d_model, config.n_heads, config.d_ff, **layer_options(config))
        return GPT(config, embed=embed, blocks=blocks)  # built once: GPT ties and initialises them as its own

    def transformer(self, config: TransformerConfig) -> Transformer:
        """The reference encoder–decoder with your parts inside (see `gpt`)."""
        _expect_paper_style(config)
        c, options = config, layer_options(config)
        return Transformer(config,  # built once: it shares, ties and initialises them as its own
                           src_embed=self.input_layer(c.src_vocab_size, c.d_model, c.max_len, c.dropout),
                           tgt_embed=self.input_layer(c.tgt_vocab_size, c.d_model, c.max_len, c.dropout),
                           encoder=self.encoder()(c.n_layers, c.d_model, c.n_heads, c.d_ff, **options),
                           decoder=self.decoder()(c.n_layers, c.d_model, c.n_heads, c.d_ff, **options))


def _expect_paper_style(config: Any) -> None:
    problems = []
    if config.positional != "sinusoidal":
        problems.append(f"positional={config.positional!r} (your input layer is sinusoidal)")
    if config.activation != "relu":
        problems.append(f"activation={config.activation!r} (your FFN uses ReLU)")
    if isinstance(config, GPTConfig) and not config.scale_embedding:
        problems.append("scale_embedding=False (your input layer multiplies by sqrt(d_model))")
    if problems:
        raise ValueError("this config does not fit your components: " + "; ".join(problems)
                         + "; build it with your_gpt_config / your_transformer_config")


def your_gpt_config(vocab_size: int, **options: Any) -> GPTConfig:
    """A GPTConfig that your components can build: the paper's input layer and FFN, pre-LN blocks."""
    settings = dict(positional="sinusoidal", scale_embedding=True, activation="relu", fused_attention=False)
    settings.update(options)
    return GPTConfig.gpt(vocab_size=vocab_size, **settings)


def your_transformer_config(src_vocab_size: int, tgt_vocab_size: int, **options: Any) -> TransformerConfig:
    """A TransformerConfig that your components can build (the paper's: post-LN, ReLU, sinusoidal)."""
    return TransformerConfig(src_vocab_size, tgt_vocab_size, **options)


def your_parts(folder: str | os.PathLike[str] | None = None) -> Parts:
    """Every component from your lesson notebooks under `folder` (default: the folder that holds
    the running lesson's folder), each checked; the reference where yours is not ready."""
    folder = Path(folder) if folder is not None else default_folder()
    return Parts({c.key: _find(c, folder) for c in COMPONENTS})


def reference_parts() -> Parts:
    """The reference for every component: the model your parts are compared with."""
    return Parts({c.key: Source(c, c.reference(), REFERENCE, "chosen") for c in COMPONENTS})


__all__ = ["COMPONENTS", "Component", "Parts", "Source", "your_parts", "reference_parts", "your_gpt_config",
           "your_transformer_config", "REFERENCE"]
