"""Tokenizers: turning text into the integer ids a Transformer reads, and back.

Three granularities are built here, from coarse to fine. Characters: a tiny vocabulary,
but long sequences. Words: short sequences, but a huge vocabulary in which every unseen
word becomes <unk>. Bytes merged by BPE (byte-pair encoding, as in GPT-2): it starts from
the 256 byte values, so any text can be encoded, and learns merges of frequent byte pairs
so that common words become one token; the vocabulary size is a dial between the two.
"""

from __future__ import annotations

import heapq
import itertools
import json
import math
import os
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from functools import lru_cache
from pathlib import Path

import regex

__all__ = [
    "CharTokenizer",
    "WordTokenizer",
    "GPT2_SPLIT_PATTERN",
    "pretokenize",
    "split_on_special_tokens",
    "count_pretokens",
    "count_pairs",
    "merge_word",
    "train_bpe",
    "BPETokenizer",
    "bytes_to_unicode",
    "GPT2_SPECIAL_TOKENS",
]

Word = tuple[bytes, ...]  # a pre-token as its current sequence of tokens (each token is bytes)
Pair = tuple[bytes, bytes]  # two adjacent tokens that BPE may merge into one


def _require_str(text: object, what: str = "text") -> str:
    """Return `text` unchanged, or raise a TypeError naming the type that was passed instead."""
    if not isinstance(text, str):
        raise TypeError(f"{what} must be a str, got {type(text).__name__}")
    return text


# --------------------------------------------------------------------------------------
# 1. Characters
# --------------------------------------------------------------------------------------


class CharTokenizer:
    """One token per character; the vocabulary is the sorted set of characters seen in training."""

    def __init__(self, chars: Sequence[str]) -> None:
        self.itos: list[str] = list(chars)
        self.stoi: dict[str, int] = {ch: i for i, ch in enumerate(self.itos)}
        if len(self.stoi) != len(self.itos):
            raise ValueError("characters of a CharTokenizer must be unique")

    @classmethod
    def from_text(cls, text: str) -> CharTokenizer:
        """Build the vocabulary from the distinct characters of `text`, sorted: reproducible ids."""
        return cls(sorted(set(_require_str(text))))

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(self, text: str) -> list[int]:
        ids = []
        for ch in _require_str(text):
            if ch not in self.stoi:
                raise ValueError(f"character {ch!r} was not in the training text, so it has no id")
            ids.append(self.stoi[ch])
        return ids

    def decode(self, ids: Iterable[int]) -> str:
        chars = []
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"id {i} is out of range: valid ids are [0, {self.vocab_size})")
            chars.append(self.itos[i])
        return "".join(chars)


# --------------------------------------------------------------------------------------
# 2. Words
# --------------------------------------------------------------------------------------

# A word is a run of letters/digits/underscore; every punctuation mark is a token of its own.
_WORD_PATTERN = regex.compile(r"\w+|[^\w\s]")
DEFAULT_SPECIALS = ("<pad>", "<unk>", "<bos>", "<eos>")


class WordTokenizer:
    """One token per word or punctuation mark; words outside the vocabulary become <unk>.

    Text is split with a simple regex and is NOT lower-cased. Languages written without
    spaces (e.g. Chinese) cannot be split by that regex, so every method that takes text
    also accepts a list of tokens that was split beforehand: ["今天", "天气", "真好"].
    """

    def __init__(self, itos: Sequence[str], specials: Sequence[str] = DEFAULT_SPECIALS) -> None:
        self.itos: list[str] = list(itos)
        self.stoi: dict[str, int] = {tok: i for i, tok in enumerate(self.itos)}
        self.specials: tuple[str, ...] = tuple(specials)
        if len(self.stoi) != len(self.itos):
            raise ValueError("tokens of a WordTokenizer vocabulary must be unique")
        missing = [s for s in self.specials if s not in self.stoi]
        if missing:
            raise ValueError(f"special tokens {missing} are not in the vocabulary")

    @classmethod
    def from_texts(
        cls,
        texts: Iterable[str | Sequence[str]],
        specials: Sequence[str] = DEFAULT_SPECIALS,
        min_freq: int = 1,
    ) -> WordTokenizer:
        """Build a vocabulary: specials first (in the given order), then words by frequency.

        Words seen fewer than `min_freq` times are left out (they will encode to <unk>).
        Ties in frequency are broken alphabetically, so the same texts always give the same ids.
        """
        if len(set(specials)) != len(specials):
            raise ValueError(f"special tokens must be unique, got {list(specials)}")
        counts = Counter(tok for text in texts for tok in cls.tokenize(text))
        words = [w for w, n in counts.items() if n >= min_freq and w not in specials]
        words.sort(key=lambda w: (-counts[w], w))
        return cls([*specials, *words], specials)

    @staticmethod
    def tokenize(text: str | Sequence[str]) -> list[str]:
        """Split text into words and punctuation; a list of tokens is returned as it is."""
        if isinstance(text, str):
            return _WORD_PATTERN.findall(text)
        if isinstance(text, Sequence) and all(isinstance(tok, str) for tok in text):
            return list(text)
        raise TypeError(f"text must be a str or a list of str tokens, got {type(text).__name__}")

    def _special_id(self, token: str) -> int:
        if token not in self.stoi:
            raise ValueError(f"this tokenizer has no {token} token; include it in specials")
        return self.stoi[token]

    @property
    def pad_id(self) -> int:
        return self._special_id("<pad>")

    @property
    def unk_id(self) -> int:
        return self._special_id("<unk>")

    @property
    def bos_id(self) -> int:
        return self._special_id("<bos>")

    @property
    def eos_id(self) -> int:
        return self._special_id("<eos>")

    @property
    def vocab_size(self) -> int:
        return len(self.itos)

    def encode(
        self, text: str | Sequence[str], add_bos: bool = False, add_eos: bool = False
    ) -> list[int]:
        tokens = self.tokenize(text)
        ids = [self.stoi[tok] if tok in self.stoi else self.unk_id for tok in tokens]
        if add_bos:
            ids.insert(0, self.bos_id)
        if add_eos:
            ids.append(self.eos_id)
        return ids

    def decode(self, ids: Iterable[int], skip_specials: bool = True) -> str:
        """Join the tokens with spaces (the original spacing is not recorded).

        With `skip_specials`, padding and sequence markers are dropped, but <unk> is kept:
        it stands for a real word of the text, and hiding it would silently shorten the sentence.
        """
        skipped = set(self.specials) - {"<unk>"} if skip_specials else set()
        tokens = []
        for i in ids:
            if not 0 <= i < self.vocab_size:
                raise ValueError(f"id {i} is out of range: valid ids are [0, {self.vocab_size})")
            if self.itos[i] not in skipped:
                tokens.append(self.itos[i])
        return " ".join(tokens)


# --------------------------------------------------------------------------------------
# 3. Bytes + BPE (GPT-2 conventions)
# --------------------------------------------------------------------------------------

# GPT-2's pre-tokenizer. Merges never cross the boundaries it draws, so a token can hold a
# word with its leading space (" cat"), a number, a run of punctuation or of whitespace,
# but never e.g. the end of one word and the start of the next.
GPT2_SPLIT_PATTERN = r"""'(?:[sdmt]|ll|ve|re)| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)|\s+"""
_GPT2_SPLIT = regex.compile(GPT2_SPLIT_PATTERN)
# The same pattern for ASCII text, where a letter (\p{L}) is [A-Za-z], a number (\p{N}) is [0-9] and
# whitespace is the six characters below: Python's own `re` runs it about twice as fast as `regex`
# runs the Unicode pattern, with the same pre-tokens (tests/test_tokenizers.py compares every ASCII
# character). Text with any other character takes the full pattern.
_ASCII_SPACE = "\t\n\x0b\x0c\r "
_GPT2_SPLIT_ASCII = re.compile(
    rf"""'(?:[sdmt]|ll|ve|re)| ?[A-Za-z]+| ?[0-9]+| ?[^{_ASCII_SPACE}A-Za-z0-9]+"""
    rf"""|[{_ASCII_SPACE}]+(?![^{_ASCII_SPACE}])|[{_ASCII_SPACE}]+"""
)
# A non-space followed by whitespace: no GPT-2 pre-token spans this spot (see _safe_cut).
_NON_SPACE_BEFORE_SPACE = regex.compile(r"\S(?=\s)")


def pretokenize(text: str) -> list[str]:
    """Split text into GPT-2 pre-tokens, e.g. "Hi there!" -> ["Hi", " there", "!"].

    Special tokens are not handled here: cut them out first with `split_on_special_tokens`.
    """
    return _split_pretokens(_require_str(text))


def _split_pretokens(text: str) -> list[str]:
    return (_GPT2_SPLIT_ASCII if text.isascii() else _GPT2_SPLIT).findall(text)


def _check_special_tokens(special_tokens: Iterable[str]) -> list[str]:
    special_tokens = list(special_tokens)
    for token in special_tokens:
        _require_str(token, "a special token")
        if token == "":
            raise ValueError("a special token cannot be the empty string")
    duplicates = sorted({t for t in special_tokens if special_tokens.count(t) > 1})
    if duplicates:
        raise ValueError(f"duplicate special tokens: {duplicates}")
    return special_tokens


def _special_token_regex(special_tokens: Sequence[str]) -> regex.Pattern | None:
    """A regex matching any special token, or None when there are none.

    The alternatives are tried in order and the first one that matches wins, so the longest
    specials come first: "<|endoftext|><|endoftext|>" must beat its prefix "<|endoftext|>".
    Escaping makes characters such as "|" match literally instead of meaning "or".
    """
    if not special_tokens:
        return None
    longest_first = sorted(special_tokens, key=len, reverse=True)
    return regex.compile("|".join(regex.escape(token) for token in longest_first))


def _split_with(pattern: regex.Pattern | None, text: str) -> list[str]:
    """Split text into ordinary pieces and special tokens, keeping both, dropping empty pieces."""
    if pattern is None:
        return [text] if text else []
    pieces, start = [], 0
    for match in pattern.finditer(text):
        pieces += [text[start : match.start()], match.group()]
        start = match.end()
    pieces.append(text[start:])
    return [piece for piece in pieces if piece]


def split_on_special_tokens(text: str, special_tokens: Sequence[str]) -> list[str]:
    """Cut special tokens out of the text first, so that they are never merged with anything.

    "a<|endoftext|>b" -> ["a", "<|endoftext|>", "b"]. A piece equal to a special token is
    that special token: an ordinary piece cannot contain one, or it would have been cut.
    """
    special_tokens = _check_special_tokens(special_tokens)
    return _split_with(_special_token_regex(special_tokens), _require_str(text))


def count_pretokens(text: str, special_tokens: Sequence[str] = ()) -> dict[Word, int]:
    """Count each distinct pre-token once, as a tuple of single bytes -> frequency.

    " the" occurs thousands of times but is stored once with its count, so training works
    on the (small) set of distinct words instead of the (large) text. Special tokens only
    act as boundaries here: they are added to the vocabulary whole, never learned.
    """
    counts = _count_pretoken_strings(text, special_tokens)
    return {tuple(bytes([b]) for b in pre.encode("utf-8")): n for pre, n in counts.items()}


def _count_pretoken_strings(text: str, special_tokens: Sequence[str]) -> Counter[str]:
    """Each distinct pre-token (a str) -> how often it occurs, the special tokens cut out."""
    specials = set(_check_special_tokens(special_tokens))
    counts: Counter[str] = Counter()
    for piece in split_on_special_tokens(text, special_tokens):
        if piece not in specials:
            counts.update(_split_pretokens(piece))
    return counts


def _pairs(word: Word) -> Iterator[Pair]:
    """The adjacent pairs of a word: (a, b, c) -> (a, b), (b, c)."""
    return zip(word, word[1:])


def count_pairs(word_freqs: dict[Word, int]) -> Counter[Pair]:
    """How often each adjacent pair occurs, counting every word as often as it appears."""
    counts: Counter[Pair] = Counter()
    for word, freq in word_freqs.items():
        for pair in zip(word, word[1:]):  # adjacent pairs: (a, b, c) -> (a, b), (b, c)
            counts[pair] += freq
    return counts


def merge_word(word: Word, pair: Pair) -> Word:
    """Replace every occurrence of `pair` in `word` by one token, scanning left to right.

    merge_word((b"l", b"o", b"w"), (b"l", b"o")) == (b"lo", b"w"). Occurrences cannot
    overlap: (a, a, a) merged on (a, a) gives (aa, a).
    """
    merged, i = [], 0
    while i < len(word):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            merged.append(word[i] + word[i + 1])
            i += 2
        else:
            merged.append(word[i])
            i += 1
    return tuple(merged)


def _min_vocab_size(special_tokens: Sequence[str]) -> int:
    return 256 + len(special_tokens)


def _check_vocab_size(vocab_size: int, special_tokens: Sequence[str]) -> None:
    minimum = _min_vocab_size(special_tokens)
    if vocab_size < minimum:
        raise ValueError(
            f"vocab_size must be at least {minimum}, got {vocab_size}: the 256 byte values are the "
            f"base vocabulary, plus one id per special token ({len(special_tokens)})"
        )


def _descending(token: bytes) -> tuple[int, ...]:
    """A sort key that orders tokens from the greatest to the smallest.

    Each byte b becomes 255 - b, and a final 256 puts a prefix after the longer tokens that
    start with it (b"ab" > b"a", so b"a" must sort later): _descending(x) < _descending(y)
    exactly when x > y.
    """
    return (*(255 - b for b in token), 256)


def _token_char(token_id: int) -> str:
    """The one character that stands for a token while training: byte b is chr(b), merge k is
    chr(256 + k), skipping the surrogates (U+D800-U+DFFF), which a str can hold but not print."""
    return chr(token_id if token_id < 0xD800 else token_id + 0x800)


class _PairStatistics:
    """Pair counts kept up to date while merging, so that no merge has to recount the corpus.

    A word is a string with one character per token (`_token_char`), so that merging a pair
    is `str.replace` and "does this word hold the pair?" is `pair in word`, both in C. A
    pair is then a 2-character string. words[i] is the i-th distinct pre-token as it
    currently stands, freqs[i] how often it occurs, counts[pair] the total count of a pair,
    and words_with[pair] the words that held it when it was counted (a word that has lost it
    since is skipped). The best pair comes from a heap of (-count, descending key, pair): a
    merge pushes a fresh entry for every pair whose count it changed, and an entry whose
    count is no longer the pair's is dropped when it reaches the top (lazy deletion).
    """

    def __init__(self, pretoken_counts: Counter[str]) -> None:
        # UTF-8 bytes read as Latin-1 give one character per byte, chr(b): the byte tokens.
        self.words = [pretoken.encode("utf-8").decode("latin-1") for pretoken in pretoken_counts]
        self.freqs = list(pretoken_counts.values())
        self.token_bytes = {chr(b): bytes([b]) for b in range(256)}
        self.char_of = {token: char for char, token in self.token_bytes.items()}
        self._keys = {char: _descending(token) for char, token in self.token_bytes.items()}
        self.counts: defaultdict[str, int] = defaultdict(int)
        self.words_with: defaultdict[str, set[int]] = defaultdict(set)
        for i, (word, freq) in enumerate(zip(self.words, self.freqs)):
            for k in range(len(word) - 1):
                self.counts[word[k : k + 2]] += freq
                self.words_with[word[k : k + 2]].add(i)
        self.heap = [self._entry(pair) for pair in self.counts]
        heapq.heapify(self.heap)

    def _entry(self, pair: str) -> tuple[int, tuple[tuple[int, ...], tuple[int, ...]], str]:
        # The smallest entry is the most frequent pair; among equally frequent pairs, the
        # lexicographically greatest (compared as tuples of bytes: the left token first).
        return -self.counts[pair], (self._keys[pair[0]], self._keys[pair[1]]), pair

    def best_pair(self) -> str:
        """The most frequent pair; among equally frequent pairs, the lexicographically greatest."""
        while True:
            minus_count, _, pair = self.heap[0]
            if self.counts.get(pair) == -minus_count:
                return pair
            heapq.heappop(self.heap)  # stale: the pair's count has changed since this entry

    def merge(self, pair: str) -> Pair:
        """Merge `pair` in every word holding it, updating only those words' pair counts;
        returns the merge as (left bytes, right bytes)."""
        left, right = self.token_bytes[pair[0]], self.token_bytes[pair[1]]
        # Should two merges make the same bytes (ab + c and a + bc), they are one token in the words,
        # as they would be in words of bytes, so the second reuses the first one's character.
        merged = self.char_of.get(left + right) or _token_char(len(self.token_bytes))
        self.token_bytes[merged], self.char_of[left + right] = left + right, merged
        self._keys[merged] = _descending(left + right)
        change: defaultdict[str, int] = defaultdict(int)
        words, freqs, words_with = self.words, self.freqs, self.words_with  # locals: this loop is the hot one
        for i in words_with.pop(pair):
            old = words[i]
            if pair not in old:
                continue  # an earlier merge took the pair out of this word
            new = words[i] = old.replace(pair, merged)  # left to right, no overlaps
            freq = freqs[i]
            if len(new) == len(old) - 1:  # one occurrence, the usual case: only its neighbours change
                at = old.find(pair)
                if at > 0:  # (before, left) becomes (before, merged)
                    before = old[at - 1]
                    change[before + pair[0]] -= freq
                    change[before + merged] += freq
                    words_with[before + merged].add(i)
                if at + 2 < len(old):  # (right, after) becomes (merged, after)
                    after = old[at + 2]
                    change[pair[1] + after] -= freq
                    change[merged + after] += freq
                    words_with[merged + after].add(i)
                continue
            # Several occurrences: only the stretch from one token before the first to one token
            # after the last changes; the words agree before and after it. Take away the old
            # stretch's pairs and add the new stretch's: that is exactly the merge's effect.
            start, unchanged_tail = max(old.find(pair) - 1, 0), len(old) - old.rfind(pair) - 2
            old_stretch = old[start : len(old) - unchanged_tail + 1]
            new_stretch = new[start : len(new) - unchanged_tail + 1]
            for k in range(len(old_stretch) - 1):
                change[old_stretch[k : k + 2]] -= freq
            for k in range(len(new_stretch) - 1):
                new_pair = new_stretch[k : k + 2]
                change[new_pair] += freq
                if merged in new_pair:  # only pairs with the new token are new to the word
                    words_with[new_pair].add(i)
        # No occurrence is left (str.replace took every one, and an overlapping one such as the
        # second (a, a) of "aaa" went with its neighbour): the pair's count is simply gone.
        del self.counts[pair]
        change.pop(pair, None)
        for p, delta in change.items():
            if delta:
                self.counts[p] += delta
                if self.counts[p]:
                    heapq.heappush(self.heap, self._entry(p))
                else:
                    del self.counts[p]
        return left, right


def _build_vocab(merges: list[Pair], special_tokens: Sequence[str]) -> dict[int, bytes]:
    """Ids 0-255 are the single bytes, then one id per merge in order, then the specials."""
    vocab = {i: bytes([i]) for i in range(256)}
    for left, right in merges:
        vocab[len(vocab)] = left + right
    for token in special_tokens:
        vocab[len(vocab)] = token.encode("utf-8")
    return vocab


def train_bpe(
    text: str, vocab_size: int, special_tokens: Sequence[str] = ()
) -> tuple[dict[int, bytes], list[Pair]]:
    """Learn byte-level BPE merges until bytes + merges + specials make `vocab_size` ids.

    Each step merges the most frequent adjacent pair. Ties go to the lexicographically greatest
    pair: a convention of this course (shared with other courses) that makes training
    deterministic; GPT-2's training code is not published, so its own rule is unknown.
    Training stops early when no pair is left, i.e. every pre-token is one token.
    Returns (vocab: id -> bytes, merges in the order they were learned).
    """
    _require_str(text)
    special_tokens = _check_special_tokens(special_tokens)
    _check_vocab_size(vocab_size, special_tokens)
    stats = _PairStatistics(_count_pretoken_strings(text, special_tokens))
    merges: list[Pair] = []
    for _ in range(vocab_size - _min_vocab_size(special_tokens)):
        if not stats.counts:
            break
        merges.append(stats.merge(stats.best_pair()))
    return _build_vocab(merges, special_tokens), merges


GPT2_SPECIAL_TOKENS = ("<|endoftext|>",)  # GPT-2's only special token: id 50256, between documents


@lru_cache(maxsize=1)
def bytes_to_unicode() -> dict[int, str]:
    """GPT-2's table from the 256 byte values to 256 printable characters, used to write byte
    tokens as text in vocab.json and merges.txt.

    Bytes that are printable Latin-1 characters stand for themselves ("a" -> "a"); the other 68
    (control characters, the space, 0x7F-0xA0, 0xAD) take the characters from U+0100 on, in byte
    order: the space, 0x20, becomes "Ġ" (U+0120) and the newline "Ċ". So " cat" is written "Ġcat".
    """
    printable = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for byte in range(256):
        if byte in printable:
            table[byte] = chr(byte)
        else:
            table[byte] = chr(256 + extra)
            extra += 1
    return table


# bytes([b]) for every byte value b, made once.
_SINGLE_BYTES = [bytes([b]) for b in range(256)]


class _PretokenCache(dict):
    """pre-token -> its ids, filled on first lookup: `cache[" cat"]` merges " cat" once, then
    remembers it. Past `size` entries it is emptied (BPETokenizer.CACHE_SIZE says why). Looking up
    a known pre-token is one C-level dict lookup."""

    def __init__(self, merge: Callable[[str], list[int]], size: int) -> None:
        super().__init__()
        self.merge, self.size = merge, size

    def __missing__(self, pretoken: str) -> list[int]:
        if len(self) >= self.size:
            self.clear()
        ids = self[pretoken] = self.merge(pretoken)
        return ids


class BPETokenizer:
    """Encode text with learned byte-level BPE merges; decode ids back to text.

    Encoding: cut out special tokens, split the rest into GPT-2 pre-tokens, and inside each
    pre-token apply the merges in the order they were learned (earliest first).
    """

    # Distinct pre-tokens whose ids are remembered; past this the cache is emptied, so that
    # streaming a huge, varied text does not grow memory without bound.
    CACHE_SIZE = 100_000

    def __init__(
        self,
        vocab: dict[int, bytes],
        merges: Sequence[Pair],
        special_tokens: Sequence[str] | None = None,
    ) -> None:
        self.vocab: dict[int, bytes] = dict(vocab)
        self.merges: list[Pair] = list(merges)
        self.special_tokens: list[str] = _check_special_tokens(special_tokens or [])
        # Two merges can produce the same bytes (ab+c and a+bc); ordinary text then uses the
        # lowest id. Specials are looked up by name instead, so they never shadow text bytes.
        self._id_of_bytes: dict[bytes, int] = {}
        for i in sorted(self.vocab):
            self._id_of_bytes.setdefault(self.vocab[i], i)
        self._special_ids: dict[str, int] = {}
        for token in self.special_tokens:
            self._special_ids[token] = self._id_of_special(token)
        self._merge_rank: dict[Pair, int] = {pair: rank for rank, pair in enumerate(self.merges)}
        for rank, (left, right) in enumerate(self.merges):
            if left + right not in self._id_of_bytes:
                raise ValueError(
                    f"merge #{rank} {(left, right)} produces {left + right!r}, "
                    "which is not in the vocabulary"
                )
        self._special_regex = _special_token_regex(self.special_tokens)
        self._longest_special = max((len(t) for t in self.special_tokens), default=0)
        self._cache = _PretokenCache(self._merge_pretoken, self.CACHE_SIZE)

    def _id_of_special(self, token: str) -> int:
        """The id of a special token; one missing from the vocabulary is appended to it."""
        encoded = token.encode("utf-8")
        for i in sorted(self.vocab, reverse=True):  # specials live at the end of the vocabulary
            if self.vocab[i] == encoded:
                return i
        new_id = max(self.vocab, default=-1) + 1
        self.vocab[new_id] = encoded
        return new_id

    @classmethod
    def train(cls, text: str, vocab_size: int, special_tokens: Sequence[str] = ()) -> BPETokenizer:
        """Train merges on `text` (see `train_bpe`) and return a tokenizer that uses them."""
        vocab, merges = train_bpe(text, vocab_size, special_tokens)
        return cls(vocab, merges, list(special_tokens))

    @classmethod
    def from_gpt2_files(cls, vocab_path: str | os.PathLike[str], merges_path: str | os.PathLike[str],
                        special_tokens: Sequence[str] = GPT2_SPECIAL_TOKENS) -> BPETokenizer:
        """GPT-2's tokenizer from its `vocab.json` and `merges.txt` (see `save_gpt2_files`).

        Both files spell tokens through GPT-2's byte-to-character table (`bytes_to_unicode`), so
        "Ġcat" is the bytes b" cat"; the table is undone here and the ids are the file's own.
        """
        decoder = {char: byte for byte, char in bytes_to_unicode().items()}

        def to_bytes(token: str) -> bytes:
            try:
                return bytes(decoder[char] for char in token)
            except KeyError as error:
                raise ValueError(f"token {token!r} in {vocab_path} or {merges_path} has the character "
                                 f"{error.args[0]!r}, which GPT-2's byte table does not use") from None

        with open(vocab_path, encoding="utf-8") as file:
            token_ids = json.load(file)  # {"Ġcat": 3797, ...}
        if not isinstance(token_ids, dict):
            raise ValueError(f"{vocab_path} must hold a JSON object {{token: id}}, got {type(token_ids).__name__}")
        vocab = {int(i): to_bytes(token) for token, i in token_ids.items()}
        merges: list[Pair] = []
        with open(merges_path, encoding="utf-8") as file:
            for number, line in enumerate(file, start=1):
                line = line.rstrip("\n")
                if (number == 1 and line.startswith("#version")) or not line.strip():
                    continue
                parts = line.split(" ")
                if len(parts) != 2:
                    raise ValueError(f"{merges_path}, line {number}: expected two tokens separated by one "
                                     f"space, got {line!r}")
                merges.append((to_bytes(parts[0]), to_bytes(parts[1])))
        return cls(vocab, merges, [t for t in special_tokens if t.encode("utf-8") in vocab.values()])

    def save_gpt2_files(self, folder: str | os.PathLike[str]) -> tuple[Path, Path]:
        """Write `vocab.json` and `merges.txt` in GPT-2's format into `folder`; returns their paths."""
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        encoder = bytes_to_unicode()

        def to_text(token: bytes) -> str:
            return "".join(encoder[b] for b in token)

        vocab_path, merges_path = folder / "vocab.json", folder / "merges.txt"
        tokens = {to_text(token): i for i, token in sorted(self.vocab.items())}
        if len(tokens) != len(self.vocab):
            raise ValueError("two ids share the same bytes: GPT-2's vocab.json can hold only one of them")
        vocab_path.write_text(json.dumps(tokens, ensure_ascii=False), encoding="utf-8")
        lines = ["#version: 0.2"] + [f"{to_text(left)} {to_text(right)}" for left, right in self.merges]
        merges_path.write_text("\n".join(lines) + "\n", encoding="utf-8")
        return vocab_path, merges_path

    @property
    def vocab_size(self) -> int:
        return len(self.vocab)

    def _merge_pretoken(self, pretoken: str) -> list[int]:
        """The ids of one pre-token: its bytes, merged in the order the merges were learned."""
        word: Word = tuple(map(_SINGLE_BYTES.__getitem__, pretoken.encode("utf-8")))
        while len(word) > 1:
            # Apply the earliest-learned merge that is possible now, as training did. The ranks
            # are looked up in one C-level pass (a pair that is no merge ranks infinitely late).
            ranks = list(map(self._merge_rank.get, _pairs(word), itertools.repeat(math.inf)))
            earliest = min(ranks)
            if earliest == math.inf:
                break
            word = merge_word(word, self.merges[earliest])
        return [self._id_of_bytes[token] for token in word]

    def encode(self, text: str) -> list[int]:
        ids: list[int] = []
        for piece in _split_with(self._special_regex, _require_str(text)):
            if piece in self._special_ids:
                ids.append(self._special_ids[piece])
            else:
                # One C-level pass: the cache looks each pre-token up (merging only the ones it has
                # not seen) and chain joins their id lists.
                ids.extend(itertools.chain.from_iterable(map(self._cache.__getitem__, _split_pretokens(piece))))
        return ids

    def _safe_cut(self, buffer: str) -> int:
        """The largest k such that encode(buffer[:k]) is final, whatever text follows; 0 if none.

        A cut is safe where no pre-token or special token can straddle it:
          * between a non-space and a whitespace character: no GPT-2 pre-token contains a
            non-space followed by whitespace (" cat" has its space in front), or
          * right after a special token,
        and never inside a special token. The last characters are never cut, because the text
        still to come could complete a (longer) special token that starts there.
        """
        limit = len(buffer) - max(self._longest_special, 1)
        if limit <= 0:
            return 0
        specials = list(self._special_regex.finditer(buffer)) if self._special_regex else []
        cuts = [m.end() for m in specials if m.end() <= limit]
        cuts += [m.start() + 1 for m in _NON_SPACE_BEFORE_SPACE.finditer(buffer, endpos=limit + 1)]
        for k in sorted(cuts, reverse=True):
            if not any(m.start() < k < m.end() for m in specials):
                return k
        return 0

    def encode_iterable(self, texts: Iterable[str]) -> Iterator[int]:
        """Encode a stream of strings (e.g. a file, line by line) lazily, in bounded memory.

        Yields exactly the ids that `encode` would give for the concatenated text. The pieces
        may be cut anywhere, so the unfinished tail of each one is kept until it is safe to encode.
        Memory is bounded by the longest stretch of text without a safe cut (see `_safe_cut`).
        """
        buffer = ""
        for text in texts:
            buffer += _require_str(text)
            cut = self._safe_cut(buffer)
            if cut:
                yield from self.encode(buffer[:cut])
                buffer = buffer[cut:]
        yield from self.encode(buffer)

    def decode(self, ids: Iterable[int]) -> str:
        """Concatenate the tokens' bytes and decode them as UTF-8.

        A token can hold part of a multi-byte character (one of the 4 bytes of 🙂), so an
        arbitrary id sequence need not be valid UTF-8; invalid bytes become "\\ufffd" (�).
        """
        chunks = []
        for i in ids:
            if i not in self.vocab:
                raise ValueError(f"id {i} is not in the vocabulary ({self.vocab_size} ids)")
            chunks.append(self.vocab[i])
        return b"".join(chunks).decode("utf-8", errors="replace")
