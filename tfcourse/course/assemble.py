"""Your own Transformer: the components you wrote in lessons 02–07, put together into a GPT and an
encoder–decoder that lessons 06, 08 and 09 build, train and decode with; and a lesson's own exercises
(`this_lessons_parts`: lesson 08's training loop, lesson 09's loss and decoding, lesson 11's layers in
`modern_gpt`), each yours where it passes its check.

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
generation cache. Your `MultiHeadAttention(d_model, n_heads)` of lesson 03 has no key/value cache of
its own; while generating, your forward runs as it is, and only its `w_k` and `w_v` are served from a
cache: they project the new positions alone and hand back the keys and values computed at the earlier
steps, as lesson 07's cache does. (With one fused `w_qkv`, which projects queries, keys and values of
the same rows together, the layer's *inputs* are kept instead: the same outputs, the earlier positions'
projections computed again at each step.)
"""

from __future__ import annotations

import contextlib
import functools
import importlib
import io
import json
import os
import time
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
from ..layouts import attention_layout
from ..models import GPT, GPTConfig, Transformer, TransformerConfig, attention_class, layer_options
from ..checks.adapters import called_like_the_lessons
from ..messages import in_language, say
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
    saved: float | None = None  # when the notebook read was last saved (its mtime), if one was read

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

    # In English, whatever the lesson's language: the composite's ✔ line is read here, and the
    # table says what it found in the learner's language (say).

    module_name, _, function = component.check.rpartition(".")
    check = getattr(importlib.import_module(f"tfcourse.checks.{module_name}"), function)
    output = io.StringIO()
    try:
        with in_language("en"), contextlib.redirect_stdout(output):
            check(obj)  # the check's ✔ line is not news here
    except CheckFailed as failure:
        return str(failure).splitlines()[0], ""
    except Exception as error:  # noqa: BLE001 - any crash means: not usable, say why in one line
        return f"{type(error).__name__}: {error}", ""
    composite = COMPOSITE_LINE.search(output.getvalue())
    if composite:
        references, exercises = composite.groups()
        return None, say(f"its check passed with the reference {references} in place (fix {exercises} first)")
    return None, say("its check passed")


def _find(component: Component, folder: Path) -> Source:
    notebook = folder / component.lesson / f"{component.lesson}.ipynb"
    reference = component.reference()
    if not notebook.is_file():
        return Source(component, reference, REFERENCE, say(f"no notebook at {_shown(notebook, folder)}"))
    saved = notebook.stat().st_mtime  # what is read is the notebook as last saved
    try:
        obj = import_from_notebook(notebook, component.name)
    except NotebookImportError as error:  # (its message names the notebook: by the path the table shows)
        message = str(error).replace(str(notebook), _shown(notebook, folder))
        return Source(component, reference, REFERENCE, say(f"unfinished: {message}"), saved)
    problem, passed = _run_check(component, obj)
    if problem is not None:
        return Source(component, reference, REFERENCE, say(f"fails its check: {problem}"), saved)
    return Source(component, obj, _shown(notebook, folder), passed, saved)


def _saved_when(mtime: float | None, now: float | None = None) -> str:
    """When a notebook was last saved, for the table: "14:05, 3 min ago"; "-" where none was read."""
    if mtime is None:
        return "-"
    minutes = ((time.time() if now is None else now) - mtime) / 60
    clock = time.strftime("%H:%M" if minutes < 24 * 60 else "%Y-%m-%d %H:%M", time.localtime(mtime))
    if minutes < 1:
        return say(f"{clock}, just now")
    return say(f"{clock}, {minutes:.0f} min ago") if minutes < 120 else say(f"{clock}, {minutes / 60:.0f} h ago")


def save_first() -> str:
    """The table's first line: it reads files, and an edit the learner has not saved is not in them."""
    return say("Read from your notebooks as saved on disk: save a lesson (Ctrl+S) before running this cell, "
               "or its latest changes are not seen.")


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
        # Whether your forward projects keys and values by calling self.w_k and self.w_v (learnt at its first
        # cached step): then it is served a real key/value cache, else the inputs cache.
        calls_its_projections: bool | None = None

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
            if cache is None or memory is not None:
                return super().forward(x, memory, mask)
            # Self-attention while generating.
            if attention_layout(self) == "separate" and self.calls_its_projections is not False:
                return self._forward_with_kv_cache(x, mask, cache)
            # One fused w_qkv projects queries, keys and values of the same rows together: keep the layer's
            # inputs so far instead, (B, 1, T, d_model) shaped like one head of a KV cache (the same outputs,
            # the earlier positions' projections computed again at each step).
            past = cache.k
            memory = x if past is None else torch.cat([past[:, 0], x], dim=1)  # (B, T_past + T, d_model)
            cache.k = cache.v = memory[:, None]
            return super().forward(x, memory, mask)

        def _forward_with_kv_cache(self, x: Tensor, mask: Tensor | None, cache: KVCache) -> Tensor:
            """Your forward on the new positions, with keys and values from a real cache: while it runs, w_k
            and w_v project the new positions and hand back the cached projections of the earlier ones
            before them, so your attention sees every position's key and value, each computed once."""
            past_k, past_v = (None, None) if cache.k is None else (cache.k[:, 0], cache.v[:, 0])  # (B, T_past, d)
            keys, values = _WithCachedRows(self.w_k, past_k), _WithCachedRows(self.w_v, past_v)
            with _swapped(self, {"w_k": keys, "w_v": values}):
                out = super().forward(x, None, mask)  # self-attention on the new positions x
            if keys.projected is None or values.projected is None:
                # Your forward reads w_k's and w_v's weights itself (x @ self.w_k.weight.T ...). At the first
                # step (no past) its output is right all the same; from now on, keep the inputs instead.
                self.calls_its_projections = False
                cache.k = cache.v = x[:, None]  # (B, 1, T, d_model): the inputs cache
                return out
            self.calls_its_projections = True
            cache.k, cache.v = keys.projected[:, None], values.projected[:, None]  # (B, 1, T_past + T, d_model)
            return out

    return YourAttention


class _WithCachedRows:
    """Stands in for your w_k or w_v during one cached step: projects the new positions it is given and
    returns the cached projections of the earlier positions before them, as lesson 07's cache does
    (each position's key and value computed once). A plain callable, not a module: it is made at every
    step, and lives only while your forward runs."""

    def __init__(self, linear: nn.Module, past: Tensor | None):
        self.linear, self.past = linear, past
        self.projected: Tensor | None = None

    def __call__(self, new_positions: Tensor) -> Tensor:
        new = self.linear(new_positions)  # (B, T_new, d_model)
        self.projected = new if self.past is None else torch.cat([self.past, new], dim=1)  # (B, T, d_model)
        return self.projected

    def __getattr__(self, name: str) -> Any:  # .weight, .bias, ...: the projection's own
        return getattr(self.linear, name)


@contextlib.contextmanager
def _swapped(module: nn.Module, stand_ins: dict[str, Callable[[Tensor], Tensor]]) -> Iterator[None]:
    """`module.<name>` answered by a stand-in for the duration, the original put back after. (Straight into
    the submodule table: nn.Module's setattr would refuse a stand-in that is not a module.)"""
    originals = {name: module._modules[name] for name in stand_ins}
    module._modules.update(stand_ins)
    try:
        yield
    finally:
        module._modules.update(originals)


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


# With TFCOURSE_TRACE_PARTS set to a folder, every part a lesson shows in a table and every part handed to its
# code is noted in <folder>/<lesson folder>.jsonl: the tests check that a lesson's tables list exactly the
# parts its code uses.
TRACE = "TFCOURSE_TRACE_PARTS"


def _trace(event: str, key: str) -> None:
    folder = os.environ.get(TRACE)
    if folder:
        try:
            Path(folder).mkdir(parents=True, exist_ok=True)
            with open(Path(folder) / f"{Path.cwd().name}.jsonl", "a", encoding="utf-8") as log:
                log.write(json.dumps({"event": event, "part": key}) + "\n")
        except OSError:  # a trace is for the tests: it never stops a lesson
            pass


def _builds_on(name: str) -> tuple[str, ...]:
    return next(tuple(e.builds_on) for e in manifest.exercises() if e.name == name)


@dataclass
class Parts:
    """The chosen component of each kind, with its provenance."""

    sources: dict[str, Source] = field(default_factory=dict)

    def __getitem__(self, key: str) -> Source:
        return self.sources[key]

    def _use(self, key: str) -> Source:
        """The chosen part, handed to the lesson's code: noted in the trace when one is kept (TRACE)."""
        _trace("used", key)
        return self.sources[key]

    # --- the table -------------------------------------------------------------------------

    def rows(self) -> list[tuple[str, str, str]]:
        return [(key, s.origin, s.why) for key, s in self.sources.items()]

    def only(self, *keys: str) -> Parts:
        """These components alone: the table of what a lesson really uses."""
        return Parts({key: self.sources[key] for key in keys})

    def obj(self, key: str) -> Any:
        """The chosen object: yours, or the reference in its place."""
        return self._use(key).obj

    def table(self, markdown: bool = False) -> str:
        """One row per component: component | where it came from | when that notebook was saved | why;
        under a line that says the notebooks are read as saved."""
        for key in self.sources:
            _trace("shown", key)
        saved = {key: _saved_when(s.saved) for key, s in self.sources.items()}
        note = [save_first()] if any(s.saved is not None for s in self.sources.values()) else []  # files were read
        if markdown:
            lines = [*(f"*{n}*" for n in note), *([""] if note else []), say("| component | from | saved | why |"),
                     "| --- | --- | --- | --- |"]
            lines += [f"| {k} | `{o}` | {saved[k]} | {w.replace('|', '/')} |" for k, o, w in self.rows()]
            return "\n".join(lines)
        width = max(len(k) for k, _, _ in self.rows())
        rows = [f"{k:<{width}}  {o}  ({say(f'saved {saved[k]}')}; {w})" if saved[k] != "-" else f"{k:<{width}}  {o}  ({w})"
                for k, o, w in self.rows()]
        return "\n".join([*note, *rows])

    def _repr_markdown_(self) -> str:
        return self.table(markdown=True)

    # --- the parts, callable the reference's way ---------------------------------------------

    def attention(self) -> type:
        return _attention_class(self._use("multi-head attention").obj)

    def feed_forward(self) -> Callable[..., nn.Module]:
        return _feed_forward_class(self._use("feed-forward network").obj)

    def norm(self) -> type:
        return self._use("LayerNorm").obj

    def _layer(self, key: str) -> Callable[..., nn.Module]:
        source = self._use(key)
        attention, feed_forward, norm = self.attention(), self.feed_forward(), self.norm()
        is_decoder = key == "decoder layer"
        if not source.is_yours:
            return called_like_the_lessons(source.obj, attention=attention, feed_forward=feed_forward, norm=norm)
        _patch_namespace(source.obj, MultiHeadAttention=attention, PositionwiseFeedForward=feed_forward,
                         LayerNorm=norm, sublayer_connection=self._use("residual + LayerNorm").obj)

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
        source, layer, norm = self._use("encoder stack"), self.encoder_layer(), self.norm()
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
        source = self._use("input layer")
        if source.is_yours:
            return source.obj(vocab_size, d_model, max_len, dropout)
        return source.obj(vocab_size, d_model, max_len, dropout, positional="sinusoidal", scale=True)

    @property
    def cross_entropy(self) -> Callable[[Tensor, Tensor], Tensor]:
        return self._use("cross-entropy").obj

    @property
    def generate_cached(self) -> Callable | None:
        """Your greedy_generate_cached(model, ids, max_new_tokens), or None if it is not ready."""
        return self._use("cached generation").obj

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


THIS_NOTEBOOK = "this notebook"


def this_lessons_parts(lesson: str, yours: dict[str, Any], references: dict[str, Any]) -> Parts:
    """The running lesson's own exercises as parts (e.g. lesson 09's loss pipeline): each function you
    defined in this notebook (`yours`, by exercise name) when it is finished and passes its exercise
    check, the reference in `references` otherwise, with the reason in the table."""
    exercises = {e.name: e for e in manifest.exercises() if e.lesson == lesson}
    sources: dict[str, Source] = {}
    for name, reference in references.items():
        exercise = exercises[name]
        component = Component(name, lesson, name, exercise.check, lambda reference=reference: reference)
        obj = yours.get(name)
        if obj is None:
            sources[name] = Source(component, reference, REFERENCE, say(f"no {name} in this notebook: run its cell"))
            continue
        problem, passed = _run_check(component, obj)
        # Your layer calls your earlier exercises by name (exercise 5 calls your apply_rope): it is yours only
        # when they are. (Its check judged it with the references of them in place.)
        not_ready = [part for part in exercise.builds_on if part in sources and not sources[part].is_yours]
        if problem is not None:
            unfinished = "NotImplementedError" in problem
            why = say("unfinished: finish that exercise first") if unfinished else say(f"fails its check: {problem}")
            sources[name] = Source(component, reference, REFERENCE, why)
        elif not_ready:
            sources[name] = Source(component, reference, REFERENCE, say(
                f"its check passed, but it calls your {' and '.join(not_ready)}: the reference stands in until "
                "those pass (see their rows)"))
        else:
            sources[name] = Source(component, obj, THIS_NOTEBOOK, passed)
    return Parts(sources)


GQA_LAYER = "GroupedQueryAttention, the layer"  # lesson 11's exercise 5, by its manifest name


def _expect_your_modern_block(config: GPTConfig) -> None:
    wanted = dict(norm_first=True, norm="rms", activation="swiglu", positional="rope", bias=False,
                  rope_layout="half", rope_base=10000.0)
    problems = [f"{name}={getattr(config, name)!r} (lesson 11's parts need {value!r})"
                for name, value in wanted.items() if getattr(config, name) != value]
    if problems:
        raise ValueError("this config does not fit lesson 11's parts: " + "; ".join(problems)
                         + "; use GPTConfig.llama")


def modern_gpt(config: GPTConfig, parts: Parts) -> GPT:
    """The config's LLaMA-style GPT with lesson 11's layers from `parts` (its this_lessons_parts: "RMSNorm",
    "SwiGLUFeedForward" and GQA_LAYER) in its blocks, each yours or the reference, called the reference's
    way. The stack, embedding, output and weight initialisation are the reference GPT's."""
    _expect_your_modern_block(config)
    rms_norm, swiglu, attention = parts.obj("RMSNorm"), parts.obj("SwiGLUFeedForward"), parts._use(GQA_LAYER)
    if attention.is_yours:  # your layer calls the exercises it builds on by name
        for part in _builds_on(GQA_LAYER):
            parts._use(part)

    def norm(d_model: int) -> nn.Module:
        return rms_norm(d_model, eps=config.norm_eps)

    def feed_forward(d_model: int, d_ff: int | None = None, dropout: float = 0.0, **_reference_options: Any):
        return swiglu(d_model, d_ff, dropout)

    make_attention = _grouped_attention_class(attention.obj, config) if attention.is_yours else attention_class(config)
    layer = functools.partial(reference_blocks.EncoderLayer, attention=make_attention, feed_forward=feed_forward,
                              norm=norm)
    blocks = reference_blocks.Encoder(config.n_layers, config.d_model, config.n_heads, config.d_ff, layer=layer,
                                      norm=norm, **layer_options(config))
    return GPT(config, blocks=blocks)  # GPT ties and initialises them as its own


def _grouped_attention_class(cls: type, config: GPTConfig) -> Callable[..., nn.Module]:
    """Your GroupedQueryAttention(d_model, n_heads, n_kv_heads), callable as attention(d_model, n_heads,
    dropout, fused=...) and called as the block calls it. It keeps its own key/value cache."""
    n_kv_heads = config.n_kv_heads or config.n_heads

    class YourGroupedAttention(cls):
        def __init__(self, d_model: int, n_heads: int, dropout: float = 0.0, **_reference_options: Any):
            super().__init__(d_model, n_heads, n_kv_heads)  # no attention dropout: the config's is 0

        def forward(self, x: Tensor, mask: Tensor | None = None, cache: KVCache | None = None,
                    is_causal: bool = False, positions: Tensor | None = None) -> Tensor:
            # The GPT always passes its causal mask, so is_causal (a hint for fused kernels) is not needed;
            # positions come from the cache's length, as yours reads them.
            return super().forward(x, mask, cache)

    return YourGroupedAttention


def reference_parts() -> Parts:
    """The reference for every component: the model your parts are compared with."""
    return Parts({c.key: Source(c, c.reference(), REFERENCE, "chosen") for c in COMPONENTS})


__all__ = ["COMPONENTS", "Component", "Parts", "Source", "your_parts", "this_lessons_parts", "reference_parts",
           "modern_gpt", "GQA_LAYER",
           "your_gpt_config", "your_transformer_config", "REFERENCE", "THIS_NOTEBOOK"]
