"""Turning next-token probabilities into text, one token at a time.

Training sees the whole target at once (teacher forcing); generation must feed each chosen token
back in. How to choose:
- greedy: the most probable token (temperature 0);
- temperature: divide logits by T before softmax (T < 1 sharper, T > 1 flatter), then sample;
- top-k: sample only among the k most probable tokens;
- top-p (nucleus): sample among the smallest set of tokens whose probability adds up to p;
- beam search: keep the `beam_size` best partial sequences by total log-probability.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import Tensor

from .validation import expect_tensor


def _check_filter_args(top_k: int | None, top_p: float | None) -> None:
    if top_k is not None and top_k < 1:
        raise ValueError(f"top_k must be >= 1, got {top_k}")
    if top_p is not None and not 0.0 < top_p <= 1.0:
        raise ValueError(f"top_p must be in (0, 1], got {top_p}")


def filter_logits(logits: Tensor, top_k: int | None = None, top_p: float | None = None) -> Tensor:
    """Set to -inf every logit outside the top-k and/or the top-p nucleus. logits: (B, V)."""
    _check_filter_args(top_k, top_p)
    if top_k is not None:
        kth_best = torch.topk(logits, min(top_k, logits.shape[-1]), dim=-1).values[:, -1:]  # (B, 1)
        logits = logits.masked_fill(logits < kth_best, float("-inf"))  # exp(-inf) = 0: never sampled
    if top_p is not None:
        sorted_logits, order = torch.sort(logits, dim=-1, descending=True)  # (B, V), best first
        probs = torch.softmax(sorted_logits, dim=-1)  # (B, V)
        mass_above = probs.cumsum(dim=-1) - probs  # (B, V): probability of the tokens ranked above
        # Drop a token when the tokens ranked above it already reach p: the token that crosses p
        # stays, and so does the best token (nothing is ranked above it).
        drop_sorted = mass_above >= top_p  # (B, V)
        drop = drop_sorted.scatter(-1, order, drop_sorted)  # back to vocabulary order
        logits = logits.masked_fill(drop, float("-inf"))
    return logits


def _check_temperature(logits: Tensor, temperature: float) -> None:
    expect_tensor(logits, "logits", ndim=2, expected="(B, V)")
    if temperature < 0:
        raise ValueError(f"temperature must be >= 0, got {temperature}")


def sample_next_token(logits: Tensor, temperature: float = 1.0, top_k: int | None = None,
                      top_p: float | None = None, generator: torch.Generator | None = None) -> Tensor:
    """logits (B, V) for the next position -> chosen token ids (B,). temperature 0 means greedy."""
    _check_temperature(logits, temperature)
    if temperature == 0:
        return logits.argmax(dim=-1)  # greedy: the limit of T -> 0
    # Temperature first: top-p must measure the probabilities that will actually be sampled.
    logits = filter_logits(logits.float() / temperature, top_k, top_p)  # (B, V)
    probs = torch.softmax(logits, dim=-1)  # (B, V)
    return torch.multinomial(probs, num_samples=1, generator=generator).squeeze(-1)  # (B,)


@torch.no_grad()
def generate(model, ids: Tensor, max_new_tokens: int, temperature: float = 1.0, top_k: int | None = None,
             top_p: float | None = None, use_cache: bool = True, eos_id: int | None = None,
             generator: torch.Generator | None = None) -> Tensor:
    """Extend prompts ids (B, T) by up to max_new_tokens tokens with a GPT; returns (B, T + new).

    With the cache, the prompt is read once and every later step feeds only the newest token: the
    keys and values of earlier positions are reused instead of recomputed.
    Stops early once every row has produced eos_id (rows that finished keep emitting eos_id).
    """
    expect_tensor(ids, "ids", ndim=2, expected="(B, T)")
    max_len = model.config.max_len
    if use_cache and ids.shape[1] + max_new_tokens > max_len:
        raise ValueError(
            f"prompt ({ids.shape[1]}) + max_new_tokens ({max_new_tokens}) exceeds max_len={max_len}; "
            "the cache cannot slide past the context window: use use_cache=False or fewer tokens"
        )
    was_training = model.training
    model.eval()
    caches = model.make_caches() if use_cache else None
    finished = torch.zeros(ids.shape[0], dtype=torch.bool, device=ids.device)
    prompt_length = ids.shape[1]
    out = ids.new_empty(ids.shape[0], prompt_length + max_new_tokens)  # (B, T + new), filled as we go
    out[:, :prompt_length] = ids
    length, new_input = prompt_length, ids
    for _ in range(max_new_tokens):
        if not use_cache:
            new_input = out[:, max(0, length - max_len) : length]  # the last max_len tokens (the context window)
        logits = model(new_input, caches)[:, -1]  # (B, V): the prediction after the last token
        next_id = sample_next_token(logits, temperature, top_k, top_p, generator)  # (B,)
        if eos_id is not None:
            next_id = next_id.masked_fill(finished, eos_id)
            finished |= next_id == eos_id
        out[:, length] = next_id
        length += 1
        new_input = out[:, length - 1 : length]  # (B, 1): with a cache, only the new token goes in
        if eos_id is not None and finished.all():
            break
    model.train(was_training)
    return out[:, :length]


def length_penalty(length: int, alpha: float) -> float:
    """GNMT's ((5 + length) / 6) ** alpha. Dividing log-probabilities by it stops beam search from
    preferring short outputs just because every extra token makes the log-probability smaller."""
    return ((5 + length) / 6) ** alpha


def _check_beam_args(prefix: Tensor, beam_size: int) -> None:
    expect_tensor(prefix, "prefix", ndim=1, expected="(T,)")
    if beam_size < 1:
        raise ValueError(f"beam_size must be >= 1, got {beam_size}")


def beam_search(log_probs_fn: Callable[[Tensor], Tensor], prefix: Tensor, max_new_tokens: int,
                beam_size: int = 4, alpha: float = 0.6, eos_id: int | None = None) -> Tensor:
    """Beam search for one sequence. prefix (T,) -> best continuation (T + n,), n <= max_new_tokens.

    log_probs_fn maps a batch of sequences (beams, t) to next-token log-probabilities (beams, V);
    this makes the same search serve the GPT and the encoder-decoder.
    Hypotheses that end in eos_id are finished; the best finished or surviving hypothesis by
    length-normalised score wins.
    """
    _check_beam_args(prefix, beam_size)
    beams = prefix[None, :]  # (1, T): one hypothesis to start with
    scores = torch.zeros(1, device=prefix.device)  # total log-probability of each beam
    finished: list[tuple[float, Tensor]] = []
    for step in range(1, max_new_tokens + 1):
        log_probs = log_probs_fn(beams)  # (beams, V)
        vocab = log_probs.shape[-1]
        candidates = (scores[:, None] + log_probs).reshape(-1)  # (beams * V,) every one-token extension
        top_scores, top_index = candidates.topk(min(beam_size, candidates.numel()))
        beam_index, token = top_index // vocab, top_index % vocab
        beams = torch.cat([beams[beam_index], token[:, None]], dim=1)  # (k, T + step)
        scores = top_scores
        if eos_id is not None:
            ended = token == eos_id
            for seq, score in zip(beams[ended], scores[ended]):
                finished.append((score.item() / length_penalty(step, alpha), seq))
            beams, scores = beams[~ended], scores[~ended]
            if len(finished) >= beam_size or beams.shape[0] == 0:
                break
    survivors = [(s.item() / length_penalty(beams.shape[1] - prefix.shape[0], alpha), b)
                 for s, b in zip(scores, beams)]
    return max(finished + survivors, key=lambda pair: pair[0])[1]


@torch.no_grad()
def beam_search_gpt(model, prompt: Tensor, max_new_tokens: int, beam_size: int = 4, alpha: float = 0.6,
                    eos_id: int | None = None) -> Tensor:
    """Beam search with a GPT: prompt (T,) -> (T + n,)."""
    model.eval()

    def log_probs_fn(beams: Tensor) -> Tensor:
        logits = model(beams[:, -model.config.max_len:])[:, -1]  # (beams, V)
        return torch.log_softmax(logits.float(), dim=-1)

    return beam_search(log_probs_fn, prompt, max_new_tokens, beam_size, alpha, eos_id)


@torch.no_grad()
def translate(model, src: Tensor, bos_id: int, eos_id: int, max_new_tokens: int, temperature: float = 0.0,
              top_k: int | None = None, top_p: float | None = None,
              generator: torch.Generator | None = None) -> Tensor:
    """Encoder-decoder decoding, greedy by default. src (B, S) -> (B, 1 + n) target ids starting with bos_id.

    The source is encoded once; the decoder runs step by step with its key/value caches.
    temperature > 0 samples instead (with optional top-k / top-p), as for the GPT.
    """
    model.eval()
    memory, src_mask = model.encode(src)  # (B, S, d_model), (B, 1, 1, S)
    caches = model.make_caches()
    out = torch.full((src.shape[0], 1), bos_id, dtype=torch.long, device=src.device)  # (B, 1)
    finished = torch.zeros(src.shape[0], dtype=torch.bool, device=src.device)
    new_input = out
    for _ in range(max_new_tokens):
        logits = model.decode(new_input, memory, src_mask, caches)[:, -1]  # (B, V)
        next_id = sample_next_token(logits, temperature, top_k, top_p, generator)  # (B,)
        next_id = next_id.masked_fill(finished, eos_id)  # finished rows keep emitting eos
        finished |= next_id == eos_id
        out = torch.cat([out, next_id[:, None]], dim=1)  # (B, 1 + steps)
        new_input = next_id[:, None]  # (B, 1): only the new token goes in
        if finished.all():
            break
    return out


@torch.no_grad()
def translate_beam(model, src: Tensor, bos_id: int, eos_id: int, max_new_tokens: int,
                   beam_size: int = 4, alpha: float = 0.6) -> Tensor:
    """Encoder-decoder beam search for one source sentence src (S,) -> (1 + n,) target ids."""
    model.eval()
    memory, src_mask = model.encode(src[None, :])  # (1, S, d_model), (1, 1, 1, S)

    def log_probs_fn(beams: Tensor) -> Tensor:
        n = beams.shape[0]
        logits = model.decode(beams, memory.expand(n, -1, -1), src_mask.expand(n, -1, -1, -1))[:, -1]
        return torch.log_softmax(logits.float(), dim=-1)  # (beams, V)

    start = torch.tensor([bos_id], device=src.device)
    return beam_search(log_probs_fn, start, max_new_tokens, beam_size, alpha, eos_id)


__all__ = [
    "filter_logits", "sample_next_token", "generate", "length_penalty", "beam_search",
    "beam_search_gpt", "translate", "translate_beam",
]
