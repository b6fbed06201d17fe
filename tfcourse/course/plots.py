"""Plots for the lessons: positional encodings, attention maps, loss curves, BPE trade-offs.

Every function returns the matplotlib ``Figure`` it drew on, so a notebook can show it, save
it, or let a test inspect it. ``pyplot`` is imported inside the functions and no backend is
chosen here: that is the notebook's (or the test's) business.

Attention maps often label their axes with tokens in other scripts (e.g. Chinese). They are
drawn in a CJK font: Noto Sans CJK SC from the ``mplfonts`` package (the course extra installs it),
else one installed on the system. Without any, the characters no font can draw are written as code
points (``U+4ECA``) instead of empty boxes. That also keeps matplotlib from printing
"Glyph ... missing" warnings, which notebook graders count as errors.
"""

from __future__ import annotations

import functools
import importlib.util
import math
import unicodedata
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

import numpy as np

if TYPE_CHECKING:
    from matplotlib.axes import Axes
    from matplotlib.figure import Figure

# Fonts that can draw Chinese (and mostly Japanese/Korean), most common first,
# across Linux, macOS and Windows.
CJK_FONT_FAMILIES = (
    "Noto Sans CJK SC",
    "Noto Sans CJK JP",
    "Noto Sans CJK TC",
    "Noto Sans CJK KR",
    "Source Han Sans SC",
    "Source Han Sans CN",
    "WenQuanYi Zen Hei",
    "WenQuanYi Micro Hei",
    "SimHei",
    "Microsoft YaHei",
    "PingFang SC",
    "Heiti SC",
    "Hiragino Sans GB",
    "AR PL UMing CN",
    "AR PL UKai CN",
    "Droid Sans Fallback",
)


def _as_array(values: Any, name: str) -> np.ndarray:
    """A float NumPy copy of a tensor (any device, with or without grad), array or list."""
    if hasattr(values, "detach"):  # a torch.Tensor
        values = values.detach().float().cpu().numpy()
    array = np.asarray(values, dtype=float)
    if array.size == 0:
        raise ValueError(f"{name} is empty (shape {array.shape})")
    return array


def _figure_and_axes(ax: Axes | None, figsize: tuple[float, float]) -> tuple[Figure, Axes]:
    """Draw on ``ax`` if given (e.g. a panel of a bigger figure), else on a new figure."""
    if ax is not None:
        return ax.figure, ax
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=figsize, layout="constrained")
    return fig, ax


# ---------------------------------------------------------------------------------------------
# Fonts for token labels
# ---------------------------------------------------------------------------------------------


# The font file the `mplfonts` package ships for Simplified Chinese (SIL Open Font License). The
# package ships others too; this one is all the course registers.
BUNDLED_CJK_FONT = Path("fonts") / "NotoSansCJKsc-Regular.otf"


@functools.cache
def register_bundled_cjk_font() -> Path | None:
    """Register Noto Sans CJK SC from the ``mplfonts`` package with matplotlib; its path, or ``None``.

    ``fontManager.addfont`` adds the file to this process's font list directly, so matplotlib's
    font cache (which lists only the fonts present when it was built) cannot hide it. The package
    is found without importing it: importing it would change nothing we need.
    """
    spec = importlib.util.find_spec("mplfonts")
    if spec is None or not spec.submodule_search_locations:
        return None
    path = Path(next(iter(spec.submodule_search_locations))) / BUNDLED_CJK_FONT
    if not path.is_file():
        return None
    from matplotlib import font_manager

    font_manager.fontManager.addfont(str(path))
    return path


def find_cjk_font() -> str | None:
    """Name of a font family that can draw Chinese, or ``None`` if there is none."""
    from matplotlib import font_manager

    register_bundled_cjk_font()
    installed = {entry.name for entry in font_manager.fontManager.ttflist}
    return next((family for family in CJK_FONT_FAMILIES if family in installed), None)


def use_cjk_fallback_font() -> str | None:
    """Let every plot draw Chinese: a CJK font after the default one in ``font.family``.

    matplotlib (3.6+) takes each character from the first family that has it, so Latin text keeps
    the default font. Returns the CJK family used, or ``None`` when there is none.
    """
    import matplotlib

    cjk_family = find_cjk_font()
    families = list(matplotlib.rcParams["font.family"])
    if cjk_family is not None and cjk_family not in families:
        matplotlib.rcParams["font.family"] = families + [cjk_family]
    return cjk_family


def _label_font_families() -> list[str] | None:
    """Font families for token labels: the default font, then a CJK font to fall back on.

    ``None`` means "no CJK font installed: keep matplotlib's default font".
    Only installed families are ever named, so matplotlib never logs "font not found".
    """
    from matplotlib import font_manager

    cjk_family = find_cjk_font()
    if cjk_family is None:
        return None
    return [font_manager.FontProperties().get_name(), cjk_family]


def _fonts_for(families: list[str] | None) -> list[Any]:
    """The font files matplotlib will use for ``families`` (``None``: the default font)."""
    from matplotlib import font_manager

    if families is None:
        paths = [font_manager.findfont(font_manager.FontProperties())]
    else:
        # family=[name] (a list): a plain string would be parsed as a fontconfig pattern.
        paths = [
            font_manager.findfont(font_manager.FontProperties(family=[family]))
            for family in families
        ]
    return [font_manager.get_font(path) for path in paths]


def _can_draw(character: str, fonts: Sequence[Any]) -> bool:
    if character == " ":
        return True
    # Control characters such as "\n" would break the label's layout even if a font had them.
    return character.isprintable() and any(font.get_char_index(ord(character)) for font in fonts)


def drawable_label(text: str, fonts: Sequence[Any]) -> str:
    """``text`` with every character that none of ``fonts`` can draw replaced by ``U+XXXX``.

    ``"猫"`` stays ``"猫"`` with a CJK font and becomes ``"U+732B"`` without one;
    ``"\\n"`` becomes ``"U+000A"``. Code points are separated from other text by spaces.
    """
    if all(_can_draw(character, fonts) for character in text):
        return text
    pieces: list[str] = []
    drawable_run = ""
    for character in text:
        if _can_draw(character, fonts):
            drawable_run += character
            continue
        if drawable_run.strip():
            pieces.append(drawable_run.strip())
        drawable_run = ""
        pieces.append(f"U+{ord(character):04X}")
    if drawable_run.strip():
        pieces.append(drawable_run.strip())
    return " ".join(pieces)


class _LabelStyle:
    """Turns tokens into labels the chosen fonts can draw, and the text kwargs to draw them."""

    def __init__(self) -> None:
        self.families = _label_font_families()
        self.fonts = _fonts_for(self.families)

    def text_kwargs(self) -> dict[str, Any]:
        # parse_math=False: a token such as "$x$" must be shown as typed, not as mathtext.
        kwargs: dict[str, Any] = {"parse_math": False}
        if self.families is not None:
            kwargs["fontfamily"] = self.families
        return kwargs

    def labels(self, tokens: Sequence[Any]) -> list[str]:
        return [drawable_label(str(token), self.fonts) for token in tokens]


def _label_width_in_ems(label: str) -> float:
    """Rough width of a label: a wide (CJK) character is one em, any other about 0.6 em."""
    return sum(1.0 if unicodedata.east_asian_width(c) in "WF" else 0.6 for c in label)


def _key_label_rotation(labels: Sequence[str], width_inches: float, fontsize_points: float = 10.0) -> int:
    """0 (upright) when every key label fits the width of its column, else 45 degrees."""
    column_points = width_inches * 72 / max(len(labels), 1)
    widest = max((_label_width_in_ems(label) for label in labels), default=0.0)
    return 0 if widest * fontsize_points <= 0.9 * column_points else 45


# ---------------------------------------------------------------------------------------------
# Positional encoding
# ---------------------------------------------------------------------------------------------


def plot_positional_encoding(pe: Any, ax: Axes | None = None) -> Figure:
    """Heatmap of a positional-encoding table: one row per position, one column per dimension.

    ``pe`` is ``(max_len, d_model)`` (a leading batch axis of size 1 is also accepted).
    The sinusoidal encoding shows fast waves in the first dimensions and slow ones in the last.
    """
    values = _as_array(pe, "pe")
    if values.ndim == 3 and values.shape[0] == 1:
        values = values[0]  # (1, max_len, d_model) -> (max_len, d_model)
    if values.ndim != 2:
        raise ValueError(f"pe must have shape (max_len, d_model), got {values.shape}")

    fig, ax = _figure_and_axes(ax, figsize=(8, 4))
    limit = float(np.abs(values).max()) or 1.0  # symmetric colours: 0 is white
    image = ax.imshow(
        values, aspect="auto", cmap="RdBu_r", vmin=-limit, vmax=limit, interpolation="nearest"
    )
    fig.colorbar(image, ax=ax, label="value")
    ax.set_title(f"Positional encoding ({values.shape[0]} positions × {values.shape[1]} dims)")
    ax.set_xlabel("embedding dimension")
    ax.set_ylabel("position")
    return fig


# ---------------------------------------------------------------------------------------------
# Attention
# ---------------------------------------------------------------------------------------------


def _attention_heads(weights: Any) -> np.ndarray:
    """Attention weights as ``(n_heads, T_q, T_k)``."""
    values = _as_array(weights, "weights")
    if values.ndim == 4:
        if values.shape[0] != 1:
            raise ValueError(
                f"weights has a batch of {values.shape[0]} examples (shape {values.shape}); "
                f"plot one example at a time, e.g. weights[0]"
            )
        values = values[0]  # (1, n_heads, T_q, T_k) -> (n_heads, T_q, T_k)
    elif values.ndim == 2:
        values = values[None]  # (T_q, T_k) -> (1, T_q, T_k)
    if values.ndim != 3:
        raise ValueError(
            f"weights must have shape (T_q, T_k), (n_heads, T_q, T_k) or "
            f"(1, n_heads, T_q, T_k), got {values.shape}"
        )
    return values


def _check_tokens(tokens: Sequence[Any] | None, expected: int, name: str, axis: str) -> None:
    if tokens is not None and len(tokens) != expected:
        raise ValueError(
            f"{name} has {len(tokens)} tokens but the weights have {expected} {axis} "
            f"positions; pass one label per {axis} position"
        )


def plot_attention(
    weights: Any,
    query_tokens: Sequence[Any] | None = None,
    key_tokens: Sequence[Any] | None = None,
    head: int | None = None,
    title: str | None = None,
) -> Figure:
    """Heatmap(s) of attention weights: row ``i`` is how query ``i`` spreads over the keys.

    ``weights`` is ``(T_q, T_k)``, ``(n_heads, T_q, T_k)`` or ``(1, n_heads, T_q, T_k)``.
    With several heads, ``head=None`` draws every head in a grid and ``head=i`` only head ``i``.
    ``query_tokens`` / ``key_tokens`` label the rows / columns (one label per position); key
    labels stand upright when they fit their column. ``title`` may use mathtext (``"$W^Q$"``);
    token labels are drawn exactly as given.
    """
    heads = _attention_heads(weights)  # (n_heads, T_q, T_k)
    n_heads, n_queries, n_keys = heads.shape
    _check_tokens(query_tokens, n_queries, "query_tokens", "query")
    _check_tokens(key_tokens, n_keys, "key_tokens", "key")

    if head is None:
        head_indices = list(range(n_heads))
    elif not -n_heads <= head < n_heads:
        raise IndexError(f"head={head} is out of range: the weights have {n_heads} head(s)")
    else:
        head_indices = [head % n_heads]

    import matplotlib.pyplot as plt

    n_cols = min(len(head_indices), 4)
    n_rows = math.ceil(len(head_indices) / n_cols)
    title = title or "Attention weights"
    cell = min(max(2.5, 0.3 * max(n_queries, n_keys)), 8.0)  # room for a label per token
    # Wide enough for the title too (about 0.1 inch per character at the title's size).
    width = max(cell * n_cols + 1, 0.1 * len(title) + 0.5)
    fig, grid = plt.subplots(
        n_rows, n_cols, figsize=(width, cell * n_rows + 0.6),
        squeeze=False, layout="constrained",
    )
    style = _LabelStyle()
    text_kwargs = style.text_kwargs()
    for ax in grid.flat[len(head_indices):]:
        ax.remove()  # empty cells at the end of the grid

    for ax, index in zip(grid.flat, head_indices):
        # Softmax weights lie in [0, 1]; a fixed scale makes heads comparable.
        image = ax.imshow(heads[index], cmap="viridis", vmin=0.0, vmax=1.0)
        if key_tokens is not None:
            key_labels = style.labels(key_tokens)
            rotation = _key_label_rotation(key_labels, width_inches=cell - 0.6)
            ax.set_xticks(range(n_keys), key_labels, rotation=rotation,
                          ha="right" if rotation else "center", rotation_mode="anchor", **text_kwargs)
        if query_tokens is not None:
            ax.set_yticks(range(n_queries), style.labels(query_tokens), **text_kwargs)
        ax.set_xlabel("key")
        ax.set_ylabel("query")
        if n_heads > 1:
            ax.set_title(f"head {index}")
    fig.colorbar(image, ax=grid.flat[: len(head_indices)], label="attention weight")
    # The title is the author's text, not tokens: mathtext allowed (parse_math left on).
    title_kwargs = {key: value for key, value in text_kwargs.items() if key != "parse_math"}
    fig.suptitle(style.labels([title])[0], **title_kwargs)
    return fig


# ---------------------------------------------------------------------------------------------
# Training curves and tokenizer trade-offs
# ---------------------------------------------------------------------------------------------


def _series(history: Mapping[str, Sequence[float]], key: str, x_key: str) -> tuple[list, list]:
    """``(history[x_key], history[key])`` after checking they line up."""
    if x_key not in history:
        raise KeyError(f"history has {key!r} but no {x_key!r} to plot it against")
    xs, ys = list(history[x_key]), list(history[key])
    if len(xs) != len(ys):
        raise ValueError(
            f"history[{x_key!r}] has {len(xs)} values but history[{key!r}] has {len(ys)}; "
            f"they must have one value each per logged step"
        )
    return xs, ys


def plot_loss_curves(history: Mapping[str, Sequence[float]], ax: Axes | None = None) -> Figure:
    """Training (and validation) loss against step; the learning rate on a second axis.

    ``history`` holds lists: ``"step"`` and ``"train_loss"`` (every logged step), and
    optionally ``"eval_step"`` with ``"val_loss"`` / ``"eval_train_loss"`` (evaluations),
    and ``"lr"`` (one per ``"step"``).
    """
    if "train_loss" not in history:
        raise KeyError(f"history needs a 'train_loss' list; it has keys {sorted(history)}")
    fig, ax = _figure_and_axes(ax, figsize=(8, 4))

    lines = ax.plot(*_series(history, "train_loss", "step"), label="train loss", alpha=0.6)
    if "eval_train_loss" in history:
        lines += ax.plot(
            *_series(history, "eval_train_loss", "eval_step"), "o--", label="train loss (eval)"
        )
    if "val_loss" in history:
        lines += ax.plot(*_series(history, "val_loss", "eval_step"), "o-", label="validation loss")
    ax.set_xlabel("step")
    ax.set_ylabel("loss (cross-entropy)")
    ax.grid(alpha=0.3)

    top_ax = ax
    if "lr" in history:
        top_ax = ax.twinx()  # the learning rate has its own scale, on the right
        lines += top_ax.plot(
            *_series(history, "lr", "step"), color="grey", linestyle=":", label="learning rate"
        )
        top_ax.set_ylabel("learning rate")
    # One legend for both axes, on the axes drawn last so that no curve hides it.
    top_ax.legend(lines, [line.get_label() for line in lines], loc="upper right")
    ax.set_title("Loss curves")
    return fig


def plot_sequence_length_vs_vocab(
    vocab_sizes: Sequence[int], lengths: Sequence[int], ax: Axes | None = None
) -> Figure:
    """Tokenised length of a text against BPE vocabulary size.

    The lesson's trade-off: more merges make the vocabulary (and the embedding table) bigger,
    but the same text becomes fewer tokens, so attention has shorter sequences to process.
    """
    if len(vocab_sizes) != len(lengths):
        raise ValueError(
            f"vocab_sizes has {len(vocab_sizes)} values but lengths has {len(lengths)}; "
            f"pass one tokenised length per vocabulary size"
        )
    if len(vocab_sizes) == 0:
        raise ValueError("vocab_sizes and lengths are empty: nothing to plot")
    fig, ax = _figure_and_axes(ax, figsize=(6, 4))
    ax.plot(vocab_sizes, lengths, "o-")
    if min(vocab_sizes) > 0:
        ax.set_xscale("log", base=2)  # vocabulary sizes usually double: 256, 512, 1024...
    ax.set_xlabel("vocabulary size")
    ax.set_ylabel("tokens in the text")
    ax.set_title("Bigger vocabulary, shorter sequences")
    ax.grid(alpha=0.3)
    return fig
