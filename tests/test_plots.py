"""Tests for tfcourse.course.plots: each plot's structure, token labels in any script, clear errors."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # before pyplot: tests draw off-screen

import matplotlib.pyplot as plt  # noqa: E402
import pytest  # noqa: E402
import torch  # noqa: E402
from matplotlib.figure import Figure  # noqa: E402

from tfcourse.course import plots  # noqa: E402

CHINESE_QUERY = list("今天天气真好")
CHINESE_KEY = list("猫追狗")


@pytest.fixture(autouse=True)
def close_figures():
    yield
    plt.close("all")


def random_attention(*shape: int) -> torch.Tensor:
    return torch.softmax(torch.randn(*shape, generator=torch.Generator().manual_seed(0)), dim=-1)


def draw_and_collect_warnings(draw) -> tuple[Figure, list[str]]:
    """Build and fully render a figure (glyph warnings appear only when text is drawn)."""
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        fig = draw()
        fig.canvas.draw()
    return fig, [str(warning.message) for warning in caught]


def tick_texts(ax) -> tuple[list[str], list[str]]:
    return (
        [label.get_text() for label in ax.get_xticklabels()],
        [label.get_text() for label in ax.get_yticklabels()],
    )


def test_positional_encoding_heatmap():
    fig = plots.plot_positional_encoding(torch.randn(50, 16))
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2  # heatmap + colorbar
    image = fig.axes[0].images[0]
    assert image.get_array().shape == (50, 16)  # positions on y, dimensions on x


def test_positional_encoding_on_given_axes_and_bad_shape():
    fig, ax = plt.subplots()
    assert plots.plot_positional_encoding(torch.randn(1, 10, 8), ax=ax) is fig
    with pytest.raises(ValueError, match="max_len, d_model"):
        plots.plot_positional_encoding(torch.randn(10))


@pytest.mark.parametrize(
    ("shape", "head", "n_heatmaps"),
    [((5, 5), None, 1), ((3, 5, 5), None, 3), ((1, 6, 5, 5), None, 6), ((1, 6, 5, 5), 2, 1)],
)
def test_attention_grid_has_one_heatmap_per_head(shape, head, n_heatmaps):
    fig = plots.plot_attention(random_attention(*shape), head=head, title="self-attention")
    heatmaps = [ax for ax in fig.axes if ax.images]
    assert len(heatmaps) == n_heatmaps
    assert len(fig.axes) == n_heatmaps + 1  # + one shared colorbar, no empty grid cells


def test_attention_labels_without_cjk_font_fall_back_to_code_points(monkeypatch):
    monkeypatch.setattr(plots, "find_cjk_font", lambda: None)
    weights = random_attention(2, 6, 3)
    fig, messages = draw_and_collect_warnings(
        lambda: plots.plot_attention(weights, CHINESE_QUERY, CHINESE_KEY, title="猫 追 狗")
    )
    assert not [m for m in messages if "Glyph" in m], messages
    x_labels, y_labels = tick_texts(fig.axes[0])
    assert x_labels == ["U+732B", "U+8FFD", "U+72D7"]
    assert y_labels[0] == "U+4ECA"


def test_attention_labels_with_a_font_that_has_the_glyphs(monkeypatch):
    # Matplotlib ships "Last Resort", which has a (placeholder) glyph for every code point,
    # so it exercises the CJK-font path even on machines without a real CJK font.
    from matplotlib import font_manager

    installed = {entry.name for entry in font_manager.fontManager.ttflist}
    if "Last Resort High-Efficiency" not in installed:
        pytest.skip("this matplotlib does not ship the Last Resort font")
    monkeypatch.setattr(plots, "find_cjk_font", lambda: "Last Resort High-Efficiency")
    fig, messages = draw_and_collect_warnings(
        lambda: plots.plot_attention(random_attention(6, 3), CHINESE_QUERY, CHINESE_KEY)
    )
    assert not [m for m in messages if "Glyph" in m], messages
    assert tick_texts(fig.axes[0]) == (CHINESE_KEY, CHINESE_QUERY)


def _chinese_characters_the_course_uses() -> set[str]:
    root = Path(__file__).resolve().parents[1]
    texts = [path.read_text(encoding="utf-8") for path in root.glob("solutions/*/*.ipynb")]
    texts += [path.read_text(encoding="utf-8") for path in (root / "tfcourse").rglob("*.py")]
    return {c for text in texts for c in text if "\u4e00" <= c <= "\u9fff"}


def test_the_course_font_draws_every_chinese_character_the_course_uses():
    path = plots.register_bundled_cjk_font()
    assert path is not None, "the course extra installs mplfonts, whose Noto Sans CJK SC draws the labels"
    from matplotlib import font_manager

    font = font_manager.get_font(str(path))
    characters = _chinese_characters_the_course_uses()
    assert len(characters) > 100  # the scan found the lessons' Chinese
    missing = sorted(c for c in characters if not font.get_char_index(ord(c)))
    assert not missing, f"{len(missing)} characters have no glyph: {''.join(missing[:40])}"


def test_the_course_font_is_found_whatever_matplotlib_cached(tmp_path):
    # A fresh matplotlib config folder builds a font cache from the system's fonts only: the
    # course's font must be found anyway (it is registered at run time, not through the cache).
    code = "from tfcourse.course import plots; print(plots.find_cjk_font())"
    env = {**os.environ, "MPLCONFIGDIR": str(tmp_path), "MPLBACKEND": "Agg"}
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
    assert result.stdout.strip() == "Noto Sans CJK SC"


def test_chinese_keys_stand_upright_and_long_words_lean():
    chinese = plots.plot_attention(random_attention(6, 6), CHINESE_QUERY, CHINESE_QUERY)
    assert {label.get_rotation() for label in chinese.axes[0].get_xticklabels()} == {0.0}
    words = ["transformer", "attention", "is", "all", "you", "need"]
    english = plots.plot_attention(random_attention(6, 6), words, words)
    assert {label.get_rotation() for label in english.axes[0].get_xticklabels()} == {45.0}


def test_the_title_is_mathtext_but_tokens_are_not():
    fig = plots.plot_attention(random_attention(3, 3), ["$x$", "b", "c"], ["$x$", "b", "c"],
                               title="random $W^Q$, $W^K$")
    title = fig._suptitle
    assert title.get_text() == "random $W^Q$, $W^K$" and title._preprocess_math(title.get_text())[1]
    token = fig.axes[0].get_xticklabels()[0]
    assert token.get_text() == "$x$" and not token._preprocess_math(token.get_text())[1]


def test_drawable_label_keeps_what_the_font_can_draw(monkeypatch):
    monkeypatch.setattr(plots, "find_cjk_font", lambda: None)
    fonts = plots._fonts_for(None)
    assert plots.drawable_label("the cat", fonts) == "the cat"
    assert plots.drawable_label("猫s", fonts) == "U+732B s"
    assert plots.drawable_label("\n", fonts) == "U+000A"


def test_attention_errors():
    with pytest.raises(ValueError, match="query_tokens has 2 tokens.*6 query"):
        plots.plot_attention(random_attention(6, 3), query_tokens=["a", "b"])
    with pytest.raises(ValueError, match="key_tokens has 4 tokens.*3 key"):
        plots.plot_attention(random_attention(6, 3), key_tokens=list("abcd"))
    with pytest.raises(ValueError, match="T_q, T_k"):
        plots.plot_attention(torch.rand(5))
    with pytest.raises(ValueError, match="one example at a time"):
        plots.plot_attention(random_attention(2, 4, 3, 3))
    with pytest.raises(IndexError, match="4 head"):
        plots.plot_attention(random_attention(4, 3, 3), head=4)


def test_loss_curves_with_validation_and_learning_rate():
    history = {
        "step": [0, 10, 20, 30],
        "train_loss": [4.0, 3.0, 2.5, 2.2],
        "eval_step": [0, 30],
        "val_loss": [4.1, 2.4],
        "eval_train_loss": [4.0, 2.2],
        "lr": [0.0, 1e-3, 1e-3, 5e-4],
    }
    fig = plots.plot_loss_curves(history)
    assert isinstance(fig, Figure)
    assert len(fig.axes) == 2  # loss axes + twin learning-rate axes
    assert len(fig.axes[0].lines) == 3 and len(fig.axes[1].lines) == 1


def test_loss_curves_train_only_and_errors():
    fig = plots.plot_loss_curves({"step": [1, 2, 3], "train_loss": [3.0, 2.0, 1.5]})
    assert len(fig.axes) == 1 and len(fig.axes[0].lines) == 1
    with pytest.raises(ValueError, match="3 values.*2"):
        plots.plot_loss_curves({"step": [1, 2, 3], "train_loss": [3.0, 2.0]})
    with pytest.raises(KeyError, match="eval_step"):
        plots.plot_loss_curves({"step": [1], "train_loss": [3.0], "val_loss": [3.1]})


def test_sequence_length_vs_vocab():
    fig = plots.plot_sequence_length_vs_vocab([256, 512, 1024], [9000, 6500, 5000])
    assert isinstance(fig, Figure) and len(fig.axes) == 1
    assert list(fig.axes[0].lines[0].get_xdata()) == [256, 512, 1024]
    with pytest.raises(ValueError, match="one tokenised length per vocabulary size"):
        plots.plot_sequence_length_vs_vocab([256, 512], [9000])


def test_after_setup_any_plot_draws_chinese_without_missing_glyphs():
    with matplotlib.rc_context():
        assert plots.use_cjk_fallback_font() == "Noto Sans CJK SC"
        assert plots.use_cjk_fallback_font() == "Noto Sans CJK SC"  # twice adds it once
        assert list(matplotlib.rcParams["font.family"]).count("Noto Sans CJK SC") == 1

        def draw():
            fig, ax = plt.subplots()
            ax.set_title("今天天气真好 · The cat sits on the mat")
            return fig

        _, messages = draw_and_collect_warnings(draw)
    assert not [m for m in messages if "Glyph" in m], messages
