"""What every lesson's setup cell uses: seed, device, fast mode, and the data-flow map."""

from __future__ import annotations

import os
import random
import warnings

import torch

from .. import __version__
from ..messages import LANGUAGES, _lesson_language, lesson_language, set_lesson_language  # noqa: F401 - for the lessons
from .stages import STAGES
from .plots import use_cjk_fallback_font



def fast_mode() -> bool:
    """True when heavy cells should shrink to seconds: TFCOURSE_FAST=1 (CI) or under nbgrader."""
    return os.environ.get("TFCOURSE_FAST", "") not in ("", "0") or "NBGRADER_EXECUTION" in os.environ


def data_flow_map(stage: str) -> str:
    """The pipeline as one line of Markdown, with this lesson's stage in bold."""
    if stage not in STAGES:
        raise ValueError(f"stage must be one of {list(STAGES)}, got {stage!r}")
    return " → ".join(f"**[{text}]**" if key == stage else text for key, text in STAGES.items())




def setup(seed: int = 0, language: str = "en") -> torch.device:
    """Seed everything, pick the device, print one status line; returns the device. `language` is the
    lesson's: the Chinese edition's setup cell says "zh" (see `lesson_language()`)."""
    set_lesson_language(language)
    from ..checks import core  # records IPython's error display before any learner code runs
    from ..training.loop import pick_device

    core.show_check_failures()  # a failed check shows as its one-line message, not a traceback
    use_cjk_fallback_font()  # the lessons' Chinese examples (今天天气真好) draw in every plot
    # PyTorch's warnings go to stderr, and nbgrader scores a test cell with stderr output 0.
    warnings.filterwarnings("ignore", module=r"torch(\.|$)")
    random.seed(seed)
    torch.manual_seed(seed)
    device = pick_device()
    if device.type == "cuda":
        # fp32 matmuls may use TF32 tensor cores (10 bits of mantissa: plenty for training).
        torch.set_float32_matmul_precision("high")
    if lesson_language() == "zh":
        mode = "快速模式（耗时的单元已缩小）" if fast_mode() else "完整模式"
        print(f"tfcourse {__version__} · torch {torch.__version__} · 设备 {device} · {mode} · 随机种子 {seed}")
    else:
        mode = "fast mode (heavy cells shrunk)" if fast_mode() else "full mode"
        print(f"tfcourse {__version__} · torch {torch.__version__} · device {device} · {mode} · seed {seed}")
    return device
