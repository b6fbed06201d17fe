"""Lesson 12's masked-LM recipe with one change at a time: which of BERT's choices keeps it on the plateau?

The lesson trains its small BERT with pre-LN and sinusoidal positions, where BERT itself has post-LN and
learned positions. This script trains the lesson's model (2 layers, d_model 64, 4 heads, windows of 64
characters, batches of 32, AdamW, warm-up then cosine decay) in the four combinations of the two
choices, at the same learning rate, seed and batches, and prints each validation loss (and accuracy at
the chosen positions) on the same fixed validation batches:

    python tools/bert_ablation.py                    # 1,000 steps, lr 2e-3
    python tools/bert_ablation.py --steps 2000 --lr 1e-3
"""

from __future__ import annotations

import argparse
import itertools
import math
import time

import torch

from tfcourse.data import load_tiny_shakespeare, mlm, train_val_split
from tfcourse.data.batching import get_batch
from tfcourse.data.mlm import IGNORE_INDEX
from tfcourse.models import EncoderOnly, EncoderOnlyConfig
from tfcourse.tokenizers import CharTokenizer

CONTEXT, BATCH = 64, 32


def prepare(text: str) -> dict:
    """The lesson's data: characters, 90/10 split, [PAD] and [MASK] appended after the characters."""
    chars = CharTokenizer.from_text(text)
    train, val = train_val_split(torch.tensor(chars.encode(text), dtype=torch.long), 0.9)
    return {"train": train, "val": val, "vocab": chars.vocab_size + 2, "pad": chars.vocab_size,
            "mask": chars.vocab_size + 1, "specials": [chars.vocab_size, chars.vocab_size + 1]}


def train_and_evaluate(data: dict, norm_first: bool, positional: str, steps: int, lr: float) -> dict[str, float]:
    config = EncoderOnlyConfig.bert(data["vocab"], max_len=CONTEXT, d_model=64, n_heads=4, n_layers=2, dropout=0.0,
                                    pad_id=data["pad"], norm_first=norm_first, positional=positional)
    torch.manual_seed(0)
    model = EncoderOnly(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    warmup = max(1, steps // 10)
    schedule = torch.optim.lr_scheduler.LambdaLR(  # the lesson's: linear warm-up, then cosine decay to 10 %
        optimizer, lambda s: min(1.0, (s + 1) / warmup) * (0.55 + 0.45 * math.cos(math.pi * min(s, steps) / steps)))
    gen = torch.Generator().manual_seed(0)  # the same batches and masks for every combination
    model.train()
    for _ in range(steps):
        windows, _ = get_batch(data["train"], BATCH, CONTEXT, gen)  # (BATCH, CONTEXT)
        inputs, labels = mlm.mask_tokens(windows, data["mask"], data["vocab"], data["specials"], generator=gen)
        loss = mlm.masked_lm_loss(model(inputs), labels)
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        optimizer.step()
        schedule.step()
    return evaluate(model, data)


@torch.no_grad()
def evaluate(model: EncoderOnly, data: dict, n_batches: int = 20) -> dict[str, float]:
    model.eval()
    gen = torch.Generator().manual_seed(1234)  # the lesson's fixed validation batches
    loss_sum = correct = total = 0
    for _ in range(n_batches):
        windows, _ = get_batch(data["val"], BATCH, CONTEXT, gen)
        inputs, labels = mlm.mask_tokens(windows, data["mask"], data["vocab"], data["specials"], generator=gen)
        logits = model(inputs)  # (BATCH, CONTEXT, vocab)
        chosen = labels != IGNORE_INDEX
        loss_sum += mlm.masked_lm_loss(logits, labels).item() * int(chosen.sum())
        correct += int((logits.argmax(-1) == labels)[chosen].sum())
        total += int(chosen.sum())
    return {"loss": loss_sum / total, "accuracy": correct / total}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=1000)
    parser.add_argument("--lr", type=float, default=2e-3)
    args = parser.parse_args()
    data = prepare(load_tiny_shakespeare())
    print(f"{args.steps} steps, lr {args.lr:g}, batches of {BATCH} x {CONTEXT}; validation on 20 fixed batches")
    print(f"{'norm':<8} {'positions':<11} {'val loss':>9} {'accuracy':>9} {'time':>7}")
    for norm_first, positional in itertools.product((False, True), ("learned", "sinusoidal")):
        start = time.perf_counter()
        result = train_and_evaluate(data, norm_first, positional, args.steps, args.lr)
        print(f"{'pre-LN' if norm_first else 'post-LN':<8} {positional:<11} {result['loss']:>9.3f} "
              f"{result['accuracy']:>9.1%} {time.perf_counter() - start:>6.0f}s", flush=True)


if __name__ == "__main__":
    main()
