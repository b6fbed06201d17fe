"""Predict, then run: the comparison, and every lesson 01-12 asks for at least two predictions."""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
import torch

from tfcourse import manifest
from tfcourse.course.demos import GUESS as PREDICTION  # a prediction line: `NAME = None  # your guess ...`
from tfcourse.course.predict import compare_prediction

ROOT = Path(__file__).resolve().parents[1]
LESSONS = [lesson.folder for lesson in manifest.lessons() if lesson.folder != "00_big_picture"]


@pytest.mark.parametrize(("predicted", "measured", "verdict"), [
    (100, 104, "✔ right (within 10%)"), (256, 256, "✔ right"), (10, 40, "✘ too low, by a factor of 4"),
    (3.0, 2.5, "✘ too high, by 20%"), (-1, 2, "✘ off by 3"), ((2, 8), torch.Size([2, 8]), "✔ right"),
    ([2, 8], (8, 2), "✘ not that"), ("LSTM", "Transformer layer", "✘ not that"), ("lstm ", "LSTM", "✔ right"),
    (4.0, torch.tensor(4.0), "✔ right"),
])
def test_a_prediction_is_compared_with_the_measurement(predicted, measured, verdict, capsys):
    line = compare_prediction(predicted, measured, "the thing")
    assert line.endswith(verdict) and capsys.readouterr().out == line + "\n"


def test_no_prediction_shows_the_measurement_and_invites_a_guess():
    assert compare_prediction(None, 7, "the answer").startswith("the answer: 7  (no prediction written: next time")


@pytest.mark.parametrize(("predicted", "measured", "line"), [
    (100, 104, "the thing：你预测 100，实测 104：✔ 对了（误差在 10% 以内）"),
    (10, 40, "the thing：你预测 10，实测 40：✘ 太低，差了 4 倍"),
    ("LSTM", "Transformer layer", "the thing：你预测 'LSTM'，实际是 'Transformer layer'：✘ 不是这个"),
])
def test_a_chinese_lesson_compares_in_chinese(predicted, measured, line, monkeypatch):
    monkeypatch.setenv("TFCOURSE_LANGUAGE", "zh")
    assert compare_prediction(predicted, measured, "the thing") == line
    assert compare_prediction(None, 7, "the answer").startswith("the answer：7  （没有写下预测")


def predict_cells(folder: str) -> list[str]:
    """The code cells that compare a prediction variable, set to None in the same cell, with a measurement."""
    notebook = nbformat.read(ROOT / "solutions" / folder / f"{folder}.ipynb", as_version=4)
    cells = []
    for cell in notebook.cells:
        if cell.cell_type != "code" or "compare_prediction(" not in cell.source:
            continue
        names = PREDICTION.findall(cell.source)
        if any(re.search(rf"compare_prediction\(\s*{name}\b", cell.source) for name in names):
            assert not cell.metadata.get("nbgrader", {}).get("grade"), f"{folder}: a prediction is never graded"
            cells.append(cell.source)
    return cells


@pytest.mark.parametrize("folder", LESSONS)
def test_each_lesson_asks_for_two_predictions_before_it_measures(folder):
    assert len(predict_cells(folder)) >= 2, f"{folder}: fewer than two predict-then-run cells"
