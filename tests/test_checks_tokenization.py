"""The checks of lesson 01 (tokenization): right answers pass with one line, every named mistake is
recognised, the reference is off-limits, and a stub says it is not implemented yet."""

from __future__ import annotations

import math
from collections import Counter

import pytest

from tfcourse import tokenizers as tk
from tfcourse.checks.core import CheckFailed, OffLimitsError
from tfcourse.checks.tokenization import (
    EOT,
    check_bpe_decode,
    check_bpe_encode,
    check_char_tokenizer,
    check_count_pairs,
    check_merge_word,
    check_train_bpe,
)
from check_helpers import assert_passes, stub


# ----------------------------------------------------------------------------------------------
# Correct learner code, written independently of the package
# ----------------------------------------------------------------------------------------------


class GoodChar:
    def __init__(self, text):
        self.itos = sorted(set(text))
        self.stoi = {c: i for i, c in enumerate(self.itos)}
        self.vocab_size = len(self.itos)

    def encode(self, text):
        return [self.stoi[c] for c in text]

    def decode(self, ids):
        return "".join(self.itos[i] for i in ids)


def good_count_pairs(word_freqs):
    counts = Counter()
    for word, freq in word_freqs.items():
        for i in range(len(word) - 1):
            counts[word[i], word[i + 1]] += freq
    return counts


def good_merge_word(word, pair):
    out, i = [], 0
    while i < len(word):
        if tuple(word[i : i + 2]) == pair:
            out.append(pair[0] + pair[1])
            i += 2
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def make_train(tie=max, count_specials=True, cut_specials=True, stop=True, layout="bytes-merges-specials"):
    def train(text, vocab_size, special_tokens=()):
        words = tk.count_pretokens(text, special_tokens if cut_specials else ())
        merges = []
        while len(merges) < vocab_size - 256 - (len(special_tokens) if count_specials else 0):
            counts = good_count_pairs(words)
            if not counts and stop:
                break
            top = max(counts.values())
            best = tie(p for p, n in counts.items() if n == top)
            words = {good_merge_word(w, best): f for w, f in words.items()}
            merges.append(best)
        byte_tokens = [bytes([i]) for i in range(256)]
        merged = [a + b for a, b in merges]
        specials = [s.encode() for s in special_tokens]
        tokens = {"bytes-merges-specials": byte_tokens + merged + specials,
                  "bytes-specials-merges": byte_tokens + specials + merged,
                  "merges-first": merged + byte_tokens + specials}[layout]
        return dict(enumerate(tokens)), merges

    return train


def make_encode(choose="earliest", pretokenized=True, cut_specials=True, merge=True):
    def encode(text, vocab, merges, special_tokens=()):
        rank = {p: r for r, p in enumerate(merges)}
        id_of = {t: i for i, t in vocab.items()}
        ids = []
        for piece in tk.split_on_special_tokens(text, special_tokens if cut_specials else []):
            if cut_specials and piece in special_tokens:
                ids.append(id_of[piece.encode()])
                continue
            for pre in tk.pretokenize(piece) if pretokenized else [piece]:
                word = [bytes([b]) for b in pre.encode()]
                while merge and len(word) > 1:
                    pairs = [(word[i], word[i + 1]) for i in range(len(word) - 1)]
                    if choose == "earliest":
                        best = min(pairs, key=lambda p: rank.get(p, math.inf))
                    elif choose == "latest":
                        best = max(pairs, key=lambda p: rank.get(p, -1))
                    else:
                        best = next((p for p in pairs if p in rank), pairs[0])
                    if best not in rank:
                        break
                    word = list(good_merge_word(tuple(word), best))
                ids += [id_of[t] for t in word]
        return ids

    return encode


def good_decode(ids, vocab):
    return b"".join(vocab[i] for i in ids).decode("utf-8", errors="replace")


# ----------------------------------------------------------------------------------------------
# Right answers pass; stubs are "not implemented yet"
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "check, obj",
    [
        (check_char_tokenizer, GoodChar),
        (check_count_pairs, good_count_pairs),
        (check_merge_word, good_merge_word),
        (check_train_bpe, make_train()),
        (check_bpe_encode, make_encode()),
        (check_bpe_decode, good_decode),
    ],
)
def test_correct_code_passes_with_one_line(check, obj, capfd):
    assert_passes(check, obj, capfd, hidden=False)
    assert_passes(check, obj, capfd, hidden=True)


@pytest.mark.parametrize(
    "check", [check_count_pairs, check_merge_word, check_train_bpe, check_bpe_encode, check_bpe_decode]
)
def test_stub_is_not_implemented_yet(check):
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check(stub)


def test_stub_class_is_not_implemented_yet():
    class Stub:
        def __init__(self, text):
            raise NotImplementedError()

    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_char_tokenizer(Stub)


# ----------------------------------------------------------------------------------------------
# Exercise 1: the character tokenizer
# ----------------------------------------------------------------------------------------------


class FirstSeen(GoodChar):
    def __init__(self, text):
        self.itos = list(dict.fromkeys(text))
        self.stoi = {c: i for i, c in enumerate(self.itos)}
        self.vocab_size = len(self.itos)


class FromOne(GoodChar):
    def encode(self, text):
        return [self.stoi[c] + 1 for c in text]


class WithRepeats(GoodChar):
    def __init__(self, text):
        super().__init__(text)
        self.stoi = {c: i for i, c in enumerate(sorted(text))}


class DecodeToList(GoodChar):
    def decode(self, ids):
        return [self.itos[i] for i in ids]


class NoVocabSize(GoodChar):
    def __init__(self, text):
        super().__init__(text)
        del self.vocab_size


class InventsIds(GoodChar):
    def encode(self, text):
        return [self.stoi.get(c, 0) for c in text]


@pytest.mark.parametrize(
    "cls, message",
    [
        (FirstSeen, "first appear"),
        (FromOne, "counted from 1"),
        (WithRepeats, r"sorted\(text\), which keeps repeated"),
        (DecodeToList, "expected a str, got list"),
        (NoVocabSize, "vocab_size: expected"),
        (InventsIds, "raise an error"),
    ],
)
def test_char_mistakes_are_named(cls, message):
    with pytest.raises(CheckFailed, match=message):
        check_char_tokenizer(cls, hidden=True)


def test_char_reference_is_off_limits():
    class Delegates(tk.CharTokenizer):
        def __init__(self, text):
            super().__init__(sorted(set(text)))

    with pytest.raises(OffLimitsError, match="off-limits"):
        check_char_tokenizer(Delegates)

    prebuilt = tk.CharTokenizer.from_text("The cat sits on the mat")

    class UsesPrebuilt(GoodChar):
        def encode(self, text):
            return prebuilt.encode(text)  # an instance built before the check started

    with pytest.raises(OffLimitsError, match="off-limits"):
        check_char_tokenizer(UsesPrebuilt)


# ----------------------------------------------------------------------------------------------
# Exercise 2: count_pairs
# ----------------------------------------------------------------------------------------------


def count_ignoring_freq(word_freqs):
    return Counter(p for w in word_freqs for p in zip(w, w[1:]))


def count_once_per_word(word_freqs):
    counts = Counter()
    for w, f in word_freqs.items():
        for p in set(zip(w, w[1:])):
            counts[p] += f
    return counts


def count_non_overlapping(word_freqs):
    counts = Counter()
    for w, f in word_freqs.items():
        i = 0
        while i < len(w) - 1:
            counts[w[i], w[i + 1]] += f
            # jumps past a repeated token, as str.count does: "aaaa".count("aa") == 2
            i += 2 if w[i] == w[i + 1] else 1
    return counts


def count_without_last(word_freqs):
    counts = Counter()
    for w, f in word_freqs.items():
        for i in range(len(w) - 2):
            counts[w[i], w[i + 1]] += f
    return counts


def count_joined_keys(word_freqs):
    return Counter({a + b: n for (a, b), n in good_count_pairs(word_freqs).items()})


@pytest.mark.parametrize(
    "fn, message",
    [
        (count_ignoring_freq, "without the word frequencies"),
        (count_once_per_word, "at most once per word"),
        (count_non_overlapping, "non-overlapping counts"),
        (count_without_last, "without the last pair"),
        (count_joined_keys, "tuple \\(left, right\\) of two bytes"),
    ],
)
def test_count_pairs_mistakes_are_named(fn, message):
    with pytest.raises(CheckFailed, match=message):
        check_count_pairs(fn)


def test_count_pairs_must_not_modify_its_input():
    def pops(word_freqs):
        counts = good_count_pairs(word_freqs)
        word_freqs.clear()
        return counts

    with pytest.raises(CheckFailed, match="modified its input 'word_freqs'"):
        check_count_pairs(pops)


def test_count_pairs_reference_is_off_limits():
    with pytest.raises(OffLimitsError, match=r"tfcourse.tokenizers.count_pairs' is off-limits"):
        check_count_pairs(lambda word_freqs: tk.count_pairs(word_freqs))
    with pytest.raises(OffLimitsError, match="_PairStatistics"):
        check_count_pairs(lambda word_freqs: tk._PairStatistics(word_freqs).counts)


# ----------------------------------------------------------------------------------------------
# Exercise 3: merge_word
# ----------------------------------------------------------------------------------------------


def merge_overlapping(word, pair):
    out, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            out.append(word[i] + word[i + 1])
            if i + 2 == len(word) or (word[i + 1], word[i + 2]) != pair:
                i += 2  # ... but steps by one when the next pair matches again
            else:
                i += 1
        else:
            out.append(word[i])
            i += 1
    return tuple(out)


def merge_from_right(word, pair):
    out, i = [], len(word)
    while i > 0:
        if i >= 2 and (word[i - 2], word[i - 1]) == pair:
            out.insert(0, word[i - 2] + word[i - 1])
            i -= 2
        else:
            out.insert(0, word[i - 1])
            i -= 1
    return tuple(out)


def merge_first_only(word, pair):
    for i in range(len(word) - 1):
        if (word[i], word[i + 1]) == pair:
            return word[:i] + (word[i] + word[i + 1],) + word[i + 2 :]
    return word


@pytest.mark.parametrize(
    "fn, message",
    [
        (merge_overlapping, "overlapping occurrences"),
        (merge_from_right, "scanned from the right"),
        (merge_first_only, "only the first occurrence"),
        (lambda word, pair: list(good_merge_word(word, pair)), "return a tuple, not a list"),
        (lambda word, pair: tuple(t if t != pair[0] else pair for t in word), "every token must be a bytes"),
    ],
)
def test_merge_word_mistakes_are_named(fn, message):
    with pytest.raises(CheckFailed, match=message):
        check_merge_word(fn)


def test_merge_word_reference_is_off_limits():
    with pytest.raises(OffLimitsError, match=r"tfcourse.tokenizers.merge_word' is off-limits"):
        check_merge_word(lambda word, pair: tk.merge_word(word, pair))


# ----------------------------------------------------------------------------------------------
# Exercise 4: train_bpe
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn, message",
    [
        (make_train(tie=min), "toward the smallest pair"),
        (make_train(tie=lambda pairs: max(pairs, key=lambda p: p[0] + p[1])), "joined bytes"),
        (make_train(tie=lambda pairs: next(iter(pairs))), "whichever pair was counted first"),
        (make_train(cut_specials=False), "special tokens treated as text"),
        (make_train(count_specials=False), "left no ids for the special tokens"),
        (make_train(stop=False), "stop training early when no pair is left"),
        (make_train(layout="bytes-specials-merges"), r"vocab\[256\] should be b'ab', a merge"),
        (make_train(layout="merges-first"), r"vocab\[i\] must be bytes\(\[i\]\)"),
    ],
)
def test_train_bpe_mistakes_are_named(fn, message):
    with pytest.raises(CheckFailed, match=message):
        check_train_bpe(fn)


def test_train_bpe_unnamed_tie_mistake_is_diagnosed_at_the_merge():
    good = make_train()

    def reversed_tie_at_second_merge(text, vocab_size, special_tokens=()):
        vocab, merges = good(text, vocab_size, special_tokens)
        if len(merges) >= 5 and merges[4] == (b"w", b"est"):  # CLASSIC: five pairs tie at 6 there
            merges[4] = (b"n", b"e")
        return vocab, merges

    with pytest.raises(CheckFailed, match=r"merge #4: \(b'w', b'est'\) and \(b'n', b'e'\) are tied at 6"):
        check_train_bpe(reversed_tie_at_second_merge)


def test_train_bpe_reference_is_off_limits():
    with pytest.raises(OffLimitsError, match=r"tfcourse.tokenizers.train_bpe' is off-limits"):
        check_train_bpe(lambda text, vocab_size, special_tokens=(): tk.train_bpe(text, vocab_size, special_tokens))
    with pytest.raises(OffLimitsError, match="off-limits"):
        check_train_bpe(lambda text, vocab_size, special_tokens=(): (
            lambda t: (t.vocab, t.merges))(tk.BPETokenizer.train(text, vocab_size, special_tokens)))


# ----------------------------------------------------------------------------------------------
# Exercises 5 and 6: encode and decode
# ----------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "fn, message",
    [
        (make_encode(choose="latest"), "latest-learned merge applied first"),
        (make_encode(choose="leftmost"), "leftmost mergeable pair"),
        (make_encode(merge=False), "raw UTF-8 bytes"),
        (make_encode(pretokenized=False), "across pre-token boundaries"),
        (make_encode(cut_specials=False), "encoded as ordinary text"),
    ],
)
def test_encode_mistakes_are_named(fn, message):
    with pytest.raises(CheckFailed, match=message):
        check_bpe_encode(fn)


def test_encode_reference_is_off_limits():
    with pytest.raises(OffLimitsError, match="off-limits"):
        check_bpe_encode(lambda text, vocab, merges, special_tokens=():
                         tk.BPETokenizer(vocab, merges, special_tokens).encode(text))
    prebuilt = tk.BPETokenizer.train("The cat sits on the mat", 300, [EOT])

    with pytest.raises(OffLimitsError, match=r"BPETokenizer.encode' is off-limits"):
        check_bpe_encode(lambda text, vocab, merges, special_tokens=(): prebuilt.encode(text))


def decode_each_token(ids, vocab):
    return "".join(vocab[i].decode("utf-8", errors="replace") for i in ids)


def decode_each_token_strict(ids, vocab):
    return "".join(vocab[i].decode("utf-8") for i in ids)


def decode_strict(ids, vocab):
    return b"".join(vocab[i] for i in ids).decode("utf-8")


@pytest.mark.parametrize(
    "fn, message",
    [
        (decode_each_token, "decoded token by token"),
        (decode_each_token_strict, "decoding token by token raised UnicodeDecodeError"),
        (decode_strict, "errors='replace'"),
        (lambda ids, vocab: b"".join(vocab[i] for i in ids), "expected a str, got bytes"),
    ],
)
def test_decode_mistakes_are_named(fn, message):
    with pytest.raises(CheckFailed, match=message):
        check_bpe_decode(fn)


def test_decode_reference_is_off_limits():
    with pytest.raises(OffLimitsError, match="off-limits"):
        check_bpe_decode(lambda ids, vocab: tk.BPETokenizer(vocab, []).decode(ids))
    prebuilt = tk.BPETokenizer.train("The cat sits on the mat", 300, [EOT])
    with pytest.raises(OffLimitsError, match=r"BPETokenizer.decode' is off-limits"):
        check_bpe_decode(lambda ids, vocab: prebuilt.decode(ids))


# ----------------------------------------------------------------------------------------------
# Inputs left alone, and a wrong merge explained (the checks' inspectors)
# ----------------------------------------------------------------------------------------------


def encode_then_grow_vocab(text, vocab, merges, special_tokens=()):
    ids = make_encode()(text, vocab, merges, special_tokens)
    vocab[len(vocab)] = b"new"
    return ids


def encode_then_grow_merges(text, vocab, merges, special_tokens=()):
    ids = make_encode()(text, vocab, merges, special_tokens)
    merges.append((b"q", b"q"))
    return ids


def decode_then_shrink_vocab(ids, vocab):
    text = good_decode(ids, vocab)
    vocab.pop(max(vocab))
    return text


@pytest.mark.parametrize(
    "check, fn, message",
    [
        (check_bpe_encode, encode_then_grow_vocab, "modified its input 'vocab, merges or special_tokens'"),
        (check_bpe_encode, encode_then_grow_merges, "modified its input 'vocab, merges or special_tokens'"),
        (check_bpe_decode, decode_then_shrink_vocab, "modified its input 'vocab'"),
    ],
)
def test_encode_and_decode_must_not_modify_their_inputs(check, fn, message):
    with pytest.raises(CheckFailed, match=message):
        check(fn)


@pytest.mark.parametrize(
    "replacement, message",
    [
        ((b"Q", b"Z"), r"merge #2 is \(b'Q', b'Z'\), which is not an adjacent pair of the words after the first 2"),
        ("lo", r"merge #2 must be a pair \(left, right\) of bytes tokens, got 'lo'"),
    ],
)
def test_train_bpe_wrong_merge_is_explained_from_the_counts_at_that_merge(replacement, message):
    good = make_train()

    def third_merge_replaced(text, vocab_size, special_tokens=()):
        vocab, merges = good(text, vocab_size, special_tokens)
        if len(merges) > 2:  # CLASSIC, the first case with three merges or more
            merges[2] = replacement
        return vocab, merges

    with pytest.raises(CheckFailed, match=message):
        check_train_bpe(third_merge_replaced)
