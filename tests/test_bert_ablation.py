"""tools/bert_ablation.py, the measurement behind lesson 12's "why not BERT's post-LN and learned positions"."""

from __future__ import annotations

import math
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from tools import bert_ablation  # noqa: E402

TEXT = "the cat sat on the mat. the dog ran to the cat.\n" * 40


def test_each_combination_trains_its_own_model_on_the_same_batches():
    data = bert_ablation.prepare(TEXT)
    assert data["vocab"] == len(set(TEXT)) + 2 and data["specials"] == [data["pad"], data["mask"]]
    results = {(norm_first, positional): bert_ablation.train_and_evaluate(data, norm_first, positional, 3, 2e-3)
               for norm_first in (False, True) for positional in ("learned", "sinusoidal")}
    for result in results.values():
        assert math.isfinite(result["loss"]) and 0.0 <= result["accuracy"] <= 1.0
    # Each flag reaches the model: changing only one of them changes the result.
    assert results[(False, "learned")]["loss"] != results[(True, "learned")]["loss"]
    assert results[(False, "learned")]["loss"] != results[(False, "sinusoidal")]["loss"]
    # The same combination twice gives the same figure: fixed seed, batches and masks.
    again = bert_ablation.train_and_evaluate(data, True, "sinusoidal", 3, 2e-3)
    assert again == results[(True, "sinusoidal")]
