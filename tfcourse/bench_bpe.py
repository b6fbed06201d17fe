"""Timing of BPE training, for the package's benchmark script (which supplies the text)."""

from __future__ import annotations

import time

from tfcourse.tokenizers import train_bpe


def bench_bpe_training(text: str, vocab_size: int = 1000) -> dict:
    """Time `train_bpe` on `text` with GPT-2's "<|endoftext|>" special token.

    Pre-tokenisation is included in the time, since it is part of what training costs.
    Returns {"seconds", "vocab_size" (reached; less if merges ran out), "n_merges", "bytes"}.
    """
    start = time.perf_counter()
    vocab, merges = train_bpe(text, vocab_size, ["<|endoftext|>"])
    seconds = time.perf_counter() - start
    return {
        "seconds": seconds,
        "vocab_size": len(vocab),
        "n_merges": len(merges),
        "bytes": len(text.encode("utf-8")),
    }
