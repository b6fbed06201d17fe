"""Checks for lesson 01, tokenization: a character tokenizer, byte-pair counting and merging,
BPE training, and encoding / decoding with the learned merges.

Tokenizers work on Python objects (str, bytes, tuples, dicts), not tensors, so the comparisons
here are exact equality: each case's `inspect`, made by `_equal_to`, plays the role `compare`
plays for tensors, and also checks the inputs were left alone (`run` watches only tensors). Each
usual mistake is *computed* by a small wrong implementation below, and a learner whose output
equals one of them is told which.
"""

from __future__ import annotations

import copy
import random
from collections import Counter
from collections.abc import Callable, Mapping
from typing import Any

from ..tokenizers import BPETokenizer, CharTokenizer, count_pairs, count_pretokens, merge_word, pretokenize
from ..tokenizers import split_on_special_tokens, train_bpe
from .core import Case, CheckFailed, Exercise, OffLimitsError, call_learner, composite, isolated, run

EOT = "<|endoftext|>"

CHAR_TOKENIZER = Exercise("character tokenizer", [
    "tfcourse.tokenizers.CharTokenizer",
    "tfcourse.tokenizers.CharTokenizer.encode",
    "tfcourse.tokenizers.CharTokenizer.decode",
], "CharTokenizer matches the reference on {n} texts")
COUNT_PAIRS = Exercise("count_pairs", ["tfcourse.tokenizers.count_pairs", "tfcourse.tokenizers._PairStatistics"],
                       "count_pairs matches the reference on {n} inputs")
MERGE_WORD = Exercise("merge_word", ["tfcourse.tokenizers.merge_word"], "merge_word matches the reference on {n} words")
TRAIN_BPE = Exercise("train_bpe", [
    "tfcourse.tokenizers.train_bpe",
    "tfcourse.tokenizers._PairStatistics",
    "tfcourse.tokenizers._build_vocab",
    "tfcourse.tokenizers.BPETokenizer",
], "train_bpe learns the same merges and vocabulary as the reference on {n} texts")
BPE_ENCODE = Exercise("bpe_encode", [
    "tfcourse.tokenizers.BPETokenizer",
    "tfcourse.tokenizers.BPETokenizer.encode",
    "tfcourse.tokenizers.BPETokenizer.encode_iterable",
    "tfcourse.tokenizers.BPETokenizer._merge_pretoken",
    "tfcourse.tokenizers._PretokenCache",
], "bpe_encode matches BPETokenizer.encode on {n} texts")
BPE_DECODE = Exercise("bpe_decode", ["tfcourse.tokenizers.BPETokenizer", "tfcourse.tokenizers.BPETokenizer.decode"],
                      "bpe_decode matches BPETokenizer.decode on {n} id sequences")


# ----------------------------------------------------------------------------------------------
# Helpers: short descriptions, exact comparison, inputs left alone
# ----------------------------------------------------------------------------------------------


def _short(value: Any, limit: int = 60) -> str:
    text = repr(value)
    return text if len(text) <= limit else text[: limit - 3] + "..."


def _expect_equal(actual: Any, expected: Any, what: str, mistakes: Mapping[str, Any] | None = None,
                  explain: Callable[[], str] | None = None) -> None:
    """Fail with one line unless actual == expected: name the first mistake whose output it equals (one
    that gives the right answer here names nothing), else say `explain()` or what was expected."""
    if actual == expected:
        return
    for description, wrong in (mistakes or {}).items():
        if wrong != expected and actual == wrong:
            raise CheckFailed(f"{what}: your output equals {description}")
    raise CheckFailed(explain() if explain else f"{what}: expected {_short(expected)}, got {_short(actual)}")


def _equal_to(expected: Any, what: str, as_value: Callable[[Any, str], Any], mistakes: Mapping[str, Any] | None = None,
              untouched: Mapping[str, Any] | None = None) -> Callable[[Any], None]:
    """A case's `inspect` for an output that is a Python value: the inputs in `untouched` (name ->
    input) still as they are now, the output made a plain value by `as_value(output, what)` (which
    fails on a wrong type), then equal to `expected`, or named after the mistake it equals."""
    untouched = untouched or {}
    before = copy.deepcopy(untouched)  # now, while the cases are built: before any of the learner's code runs

    def inspect(actual: Any) -> None:
        for name, value in untouched.items():
            if before[name] != value:
                raise CheckFailed(f"{what}: your code modified its input `{name}`; work on a copy instead")
        _expect_equal(as_value(actual, what), expected, what, mistakes)

    return inspect


def _id_list(value: Any, what: str) -> list[int]:
    """The learner's ids as a list of ints (a tuple is accepted), or a clear failure."""
    if not isinstance(value, (list, tuple)):
        raise CheckFailed(f"{what}: expected a list of int ids, got {type(value).__name__}")
    for item in value:
        if isinstance(item, bool) or not isinstance(item, int):
            raise CheckFailed(f"{what}: expected a list of int ids, but it contains {_short(item)} "
                              f"({type(item).__name__})")
    return list(value)


def _text(value: Any, what: str) -> str:
    if isinstance(value, (bytes, bytearray)):
        raise CheckFailed(f"{what}: expected a str, got bytes; decode the bytes as UTF-8")
    if not isinstance(value, str):
        raise CheckFailed(f"{what}: expected a str, got {type(value).__name__}")
    return value


def _generated_text(seed: int, n_words: int = 300) -> str:
    """Seeded text from a small set of syllables: frequent pairs, ties, and multi-byte characters."""
    rng = random.Random(seed)
    syllables = ["th", "e", "an", "ca", "t", "si", "ts", "o", "n", "ma", "re", "in", "er", "今", "天", "气"]
    words = ["".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))) for _ in range(30)]
    pieces = []
    for _ in range(n_words):
        pieces.append(rng.choice(words))
        pieces.append(rng.choice([" "] * 8 + [", ", ".\n", "  "]))
    return "".join(pieces)


# ----------------------------------------------------------------------------------------------
# Exercise 1: a character tokenizer
# ----------------------------------------------------------------------------------------------


def _char_case(train: str, text: str) -> Case:
    reference = CharTokenizer.from_text(train)
    expected_ids, vocab_size = reference.encode(text), reference.vocab_size
    first_seen = list(dict.fromkeys(train))
    with_repeats = {ch: i for i, ch in enumerate(sorted(train))}  # keeps the last index of a repeat
    mistakes = {
        "the ids in the order the characters first appear in the text; sort the distinct characters "
        "(sorted(set(text))) so the same characters always get the same ids": [first_seen.index(c) for c in text],
        "the ids counted from 1; an id is a position in the sorted vocabulary, starting at 0":
            [i + 1 for i in expected_ids],
        "the ids of sorted(text), which keeps repeated characters; the vocabulary is "
        "sorted(set(text)), each character once": [with_repeats[c] for c in text],
    }
    built = f"CharTokenizer({_short(train, 30)})"
    what = f"{built}.encode({_short(text, 30)})"

    def build_encode_decode(learner_cls: Any) -> tuple[Any, Any, Any]:
        tokenizer = call_learner(built, learner_cls, train)
        ids = call_learner(what, tokenizer.encode, text)
        decoded = call_learner(f"decode({expected_ids})", tokenizer.decode, list(expected_ids))
        return tokenizer, ids, decoded

    def inspect(result: tuple[Any, Any, Any]) -> None:
        tokenizer, ids, decoded = result
        _expect_equal(_id_list(ids, what), expected_ids, what, mistakes)
        where = f"decode({_short(expected_ids, 40)})"
        _expect_equal(_text(decoded, where), text, where)
        size = getattr(tokenizer, "vocab_size", None)
        if size != vocab_size:
            raise CheckFailed(f"{built}.vocab_size: expected {vocab_size} (the number of distinct characters), "
                              f"got {_short(size)}")

    return Case(what, call=build_encode_decode, inspect=inspect)


def _expect_unknown_character_refused(learner_cls: Any) -> None:
    """A character that was never seen has no id: inventing one would silently corrupt the data."""
    tokenizer = call_learner("CharTokenizer('abc')", learner_cls, "abc")
    try:
        result = tokenizer.encode("abz")
    except (CheckFailed, NotImplementedError):
        raise
    except Exception:  # noqa: BLE001 - any error is the right answer here
        return
    if result is not None:
        raise CheckFailed(f"CharTokenizer('abc').encode('abz') returned {_short(result)}, but 'z' is not in the "
                          f"vocabulary: raise an error (a KeyError or ValueError) instead of inventing an id")


@isolated
def check_char_tokenizer(learner_cls, hidden: bool = False) -> None:
    """CharTokenizer(text): ids are positions in sorted(set(text)); encode -> list[int], decode -> str."""
    texts = [  # (training text, text to encode)
        ("The cat sits on the mat", "The cat sits on the mat"),
        ("今天天气真好", "今天天气真好"),
        ("baca", "cab"),
    ]
    if hidden:
        texts += [
            ("x", "xxx"),  # a vocabulary of one character
            ("x", ""),  # nothing to encode
            ("Hello, world!\n\tbye 🙂", "bye, world 🙂\n"),
            ("猫追狗，狗追猫。", "狗追猫"),
        ]
    run(CHAR_TOKENIZER, learner_cls, [_char_case(train, text) for train, text in texts], hidden,
        then=lambda: _expect_unknown_character_refused(learner_cls))


# ----------------------------------------------------------------------------------------------
# Exercise 2: counting adjacent pairs
# ----------------------------------------------------------------------------------------------


def _pairs_ignoring_frequency(word_freqs):
    return dict(Counter(pair for word in word_freqs for pair in zip(word, word[1:])))


def _pairs_once_per_word(word_freqs):
    counts: Counter = Counter()
    for word, freq in word_freqs.items():
        for pair in set(zip(word, word[1:])):
            counts[pair] += freq
    return dict(counts)


def _pairs_non_overlapping(word_freqs):
    counts: Counter = Counter()
    for word, freq in word_freqs.items():
        for pair in set(zip(word, word[1:])):
            i = 0
            while i < len(word) - 1:  # like str.count: after a match, jump past it
                if (word[i], word[i + 1]) == pair:
                    counts[pair] += freq
                    i += 2
                else:
                    i += 1
    return dict(counts)


def _pairs_without_last(word_freqs):
    counts: Counter = Counter()
    for word, freq in word_freqs.items():
        for i in range(len(word) - 2):
            counts[(word[i], word[i + 1])] += freq
    return dict(counts)


def _pair_counts(actual: Any, what: str) -> dict:
    """The learner's counts as a plain dict, once its keys are pairs of bytes and its counts ints."""
    if not isinstance(actual, Mapping):
        raise CheckFailed(f"{what}: expected a dict (or Counter) mapping pairs to counts, got {type(actual).__name__}")
    for key, value in actual.items():
        if not (isinstance(key, tuple) and len(key) == 2 and all(isinstance(t, bytes) for t in key)):
            raise CheckFailed(f"{what}: every key must be a pair of tokens, a tuple (left, right) of two bytes "
                              f"objects, got the key {_short(key)}")
        if isinstance(value, bool) or not isinstance(value, int):
            raise CheckFailed(f"{what}: counts must be ints, got {_short(value)} for the pair {key}")
    return {key: value for key, value in actual.items() if value != 0}  # a Counter may keep zeros


def _count_pairs_case(word_freqs: dict) -> Case:
    mistakes = {
        "the counts *without* the word frequencies: add `freq` for each occurrence, not 1":
            _pairs_ignoring_frequency(word_freqs),
        "the counts with each pair counted at most once per word: (a, a, a, a) contains the pair (a, a) three times":
            _pairs_once_per_word(word_freqs),
        "the non-overlapping counts: (a, a, a, a) contains (a, a) three times (at positions 0, 1 and 2), "
        "not twice": _pairs_non_overlapping(word_freqs),
        "the counts *without* the last pair of each word: a word of n tokens has n - 1 adjacent pairs":
            _pairs_without_last(word_freqs),
    }
    what = f"count_pairs({_short(word_freqs, 50)})"
    return Case(what, (word_freqs,), inspect=_equal_to(dict(count_pairs(word_freqs)), what, _pair_counts, mistakes,
                                                       untouched={"word_freqs": word_freqs}))


@isolated
def check_count_pairs(learner_fn, hidden: bool = False) -> None:
    """count_pairs(word_freqs) -> {(left, right): total count}, each word weighted by its frequency."""
    inputs = [
        {(b"l", b"o", b"w"): 5, (b"l", b"o", b"w", b"e", b"r"): 2, (b"a", b"a", b"a", b"a"): 1},
        count_pretokens("The cat sits on the mat"),
        {(b"x",): 3},  # one token: no pair at all
        {},
    ]
    if hidden:
        inputs += [
            count_pretokens("今天天气真好"),  # 3 bytes per character
            {(b"th", b"e"): 3, (b" ", b"th", b"e"): 4, (b"aa", b"aa", b"aa"): 2, (b"e", b"th"): 1},
            count_pretokens(_generated_text(0, 200), [EOT]),
        ]
    run(COUNT_PAIRS, learner_fn, [_count_pairs_case(word_freqs) for word_freqs in inputs], hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 3: merging one pair inside a word
# ----------------------------------------------------------------------------------------------


def _merge_overlapping(word, pair):
    """Steps one position after a merge, so the second token of a merge is used again."""
    merged = []
    for i in range(len(word)):
        if i + 1 < len(word) and (word[i], word[i + 1]) == pair:
            merged.append(word[i] + word[i + 1])
        elif not (i > 0 and (word[i - 1], word[i]) == pair):
            merged.append(word[i])
    return tuple(merged)


def _merge_from_right(word, pair):
    merged, i = [], len(word) - 1
    while i >= 0:
        if i > 0 and (word[i - 1], word[i]) == pair:
            merged.append(word[i - 1] + word[i])
            i -= 2
        else:
            merged.append(word[i])
            i -= 1
    return tuple(reversed(merged))


def _merge_first_only(word, pair):
    for i in range(len(word) - 1):
        if (word[i], word[i + 1]) == pair:
            return word[:i] + (word[i] + word[i + 1],) + word[i + 2:]
    return word


def _merged_word(actual: Any, what: str) -> tuple:
    """The learner's merged word, once it is known to be a tuple of bytes tokens."""
    if isinstance(actual, list):
        raise CheckFailed(f"{what}: return a tuple, not a list (words are dict keys, so they must be tuples)")
    if not isinstance(actual, tuple):
        raise CheckFailed(f"{what}: expected a tuple of bytes tokens, got {type(actual).__name__}")
    for token in actual:
        if not isinstance(token, bytes):
            raise CheckFailed(f"{what}: every token must be a bytes object; a merged token is left + right "
                              f"(one bytes object), got {_short(token)}")
    return actual


def _merge_word_case(word: tuple, pair: tuple) -> Case:
    mistakes = {
        "a merge of *overlapping* occurrences; after merging a pair, skip past both of its tokens: "
        "(a, a, a) becomes (aa, a)": _merge_overlapping(word, pair),
        "a merge scanned from the right; scan left to right: (a, a, a) becomes (aa, a), not (a, aa)":
            _merge_from_right(word, pair),
        "a merge of only the *first* occurrence; merge every occurrence": _merge_first_only(word, pair),
    }
    what = f"merge_word({word}, {pair})"
    return Case(what, (word, pair), inspect=_equal_to(merge_word(word, pair), what, _merged_word, mistakes))


@isolated
def check_merge_word(learner_fn, hidden: bool = False) -> None:
    """merge_word(word, pair): every occurrence of pair, left to right, without overlaps."""
    a, b = b"a", b"b"
    words = [  # (word, pair)
        ((b"l", b"o", b"w"), (b"l", b"o")),
        ((a, a, a), (a, a)),
        ((a, b, a, b), (a, b)),
        ((b"x",), (a, b)),
        ((b"c", b"a", b"t"), (b"a", b"x")),  # the pair does not occur
        ((b"th", b"e", b" ", b"th", b"e", b"n"), (b"th", b"e")),  # tokens of several bytes
    ]
    if hidden:
        words += [((a,) * 4, (a, a)), ((a,) * 5, (a, a)), ((), (a, b)), ((b, a), (a, b))]
        chinese = tuple(bytes([x]) for x in "天天".encode())  # e5 a4 a9 e5 a4 a9
        words.append((chinese, (b"\xe5", b"\xa4")))
        rng = random.Random(1)
        for _ in range(20):
            word = tuple(rng.choice([a, b]) for _ in range(rng.randint(2, 9)))
            words.append((word, rng.choice([(a, b), (b, a), (a, a), (b, b)])))
    run(MERGE_WORD, learner_fn, [_merge_word_case(word, pair) for word, pair in words], hidden)


# ----------------------------------------------------------------------------------------------
# Exercise 4: training BPE
# ----------------------------------------------------------------------------------------------

CLASSIC = "low low low low low lower lower widest widest widest newest newest newest newest newest newest"


def _variant_train_bpe(text, vocab_size, special_tokens, *, tie="greatest", specials_as_text=False,
                       count_specials=True) -> list:
    """A slow, plain BPE trainer with one knob per usual mistake; the defaults give the right merges."""
    words = count_pretokens(text, () if specials_as_text else special_tokens)
    n_merges = vocab_size - 256 - (len(special_tokens) if count_specials else 0)
    merges = []
    while len(merges) < n_merges:
        counts = count_pairs(words)
        if not counts:
            break
        top = max(counts.values())
        tied = [pair for pair, n in counts.items() if n == top]
        best = {"greatest": lambda: max(tied), "smallest": lambda: min(tied), "first": lambda: tied[0],
                "joined": lambda: max(tied, key=lambda p: p[0] + p[1])}[tie]()
        words = {merge_word(word, best): freq for word, freq in words.items()}
        merges.append(best)
    return merges


def _why_merges_differ(merges: list, expected: list, counts_before: list[Counter], what: str) -> str:
    """Why the learner's merges are not the expected ones: too many, too few, or why the first wrong
    one, merge #k, is wrong, from the pair counts it should have been chosen from."""
    k = next((k for k, (a, e) in enumerate(zip(merges, expected)) if a != e), min(len(merges), len(expected)))
    if k == len(expected):
        return (f"{what}: expected {len(expected)} merges, got {len(merges)}; 256 bytes + merges + special tokens "
                f"= vocab_size, and training stops when no pair is left")
    if k == len(merges):
        return f"{what}: expected {len(expected)} merges, got only {len(merges)} (the first {k} are right)"
    counts, right, wrong = counts_before[k], expected[k], merges[k]
    if not (isinstance(wrong, tuple) and len(wrong) == 2 and all(isinstance(t, bytes) for t in wrong)):
        return f"{what}: merge #{k} must be a pair (left, right) of bytes tokens, got {_short(wrong)}"
    if wrong not in counts:
        return (f"{what}: merge #{k} is {wrong}, which is not an adjacent pair of the words after the "
                f"first {k} merges; expected {right} (count {counts[right]})")
    if counts[wrong] == counts[right]:
        return (f"{what}: merge #{k}: {right} and {wrong} are tied at {counts[right]}; ties go to the "
                f"lexicographically greatest pair (this course's tie-break), {right}")
    return f"{what}: merge #{k} is {wrong} (count {counts[wrong]}), but {right} occurs {counts[right]} times"


def _expect_vocab(vocab: Any, expected_vocab: dict[int, bytes], n_merges: int, what: str) -> None:
    if not isinstance(vocab, dict):
        raise CheckFailed(f"{what}: vocab must be a dict id -> bytes, got {type(vocab).__name__}")
    if vocab == expected_vocab:
        return
    if any(vocab.get(i) != bytes([i]) for i in range(256)):
        raise CheckFailed(f"{what}: vocab[i] must be bytes([i]) for i in 0..255: the 256 single bytes "
                          f"come first")
    for i in sorted(expected_vocab):
        if vocab.get(i) != expected_vocab[i]:
            where = "a merge (left + right)" if i < 256 + n_merges else "a special token (UTF-8)"
            raise CheckFailed(f"{what}: vocab[{i}] should be {expected_vocab[i]!r}, {where}, got "
                              f"{_short(vocab.get(i))}; the layout is bytes, then merges in order, "
                              f"then special tokens")
    raise CheckFailed(f"{what}: vocab has {len(vocab)} ids, expected {len(expected_vocab)}")


def _train_case(text: str, vocab_size: int, specials: list[str]) -> Case:
    expected_vocab, expected = train_bpe(text, vocab_size, specials)
    mistakes = {
        "the merges with ties broken by comparing the joined bytes left + right; compare the pairs as "
        "tuples: (b'ab', b'c') > (b'a', b'z') because b'ab' > b'a'":
            _variant_train_bpe(text, vocab_size, specials, tie="joined"),
        "the merges with ties broken toward the *smallest* pair; among equally frequent pairs the "
        "lexicographically greatest wins: max over (count, pair)":
            _variant_train_bpe(text, vocab_size, specials, tie="smallest"),
        "the merges with ties broken by whichever pair was counted first; among equally frequent pairs "
        "the lexicographically greatest wins": _variant_train_bpe(text, vocab_size, specials, tie="first"),
        "the merges learned with the special tokens treated as text; pass special_tokens to "
        "count_pretokens so they are cut out first and never merged":
            _variant_train_bpe(text, vocab_size, specials, specials_as_text=True),
        "the merges of a run that left no ids for the special tokens (too many merges): "
        "256 bytes + merges + special tokens = vocab_size":
            _variant_train_bpe(text, vocab_size, specials, count_specials=False),
    }
    words, counts_before = count_pretokens(text, specials), []  # the pair counts each right merge is chosen from
    for pair in expected:
        counts_before.append(count_pairs(words))
        words = {merge_word(word, pair): freq for word, freq in words.items()}
    what = f"train_bpe({_short(text, 40)}, {vocab_size}, {specials})"

    def train(learner_fn: Any) -> Any:
        try:
            return call_learner(what, learner_fn, text, vocab_size, specials)
        except CheckFailed as error:
            # max() of the pair counts once none is left: the loop ran on after every pre-token was one token
            if isinstance(error, OffLimitsError) or not isinstance(error.__cause__, ValueError) \
                    or "empty" not in str(error.__cause__):
                raise
            raise CheckFailed(f"{error} (stop training early when no pair is left: every pre-token is then "
                              f"a single token)") from None

    def inspect(result: Any) -> None:
        if not (isinstance(result, tuple) and len(result) == 2):
            raise CheckFailed(f"{what}: return a tuple (vocab, merges), got {type(result).__name__}")
        vocab, merges = result
        if not isinstance(merges, list):
            raise CheckFailed(f"{what}: merges must be a list of pairs, got {type(merges).__name__}")
        _expect_equal(merges, expected, what, mistakes,
                      explain=lambda: _why_merges_differ(merges, expected, counts_before, what))
        _expect_vocab(vocab, expected_vocab, len(expected), what)

    return Case(what, call=train, inspect=inspect)


# Judged with the reference count_pairs and merge_word in place of the learner's (exercises 2 and 3).
@composite(count_pairs=lambda: count_pairs, merge_word=lambda: merge_word)
@isolated
def check_train_bpe(learner_fn, hidden: bool = False) -> None:
    """train_bpe(text, vocab_size, special_tokens) -> (vocab, merges), equal to the package's."""
    trainings = [  # (text, vocab_size, special_tokens)
        # Small ties first: on them the usual wrong tie-breaks give different merges, so they can be named.
        ("ab ac", 257, []),  # (a, b), (" ", a), (a, c) tie: the same first token, the second decides
        ("est", 257, []),  # (e, s) and (s, t) tie: the greater pair, (s, t)
        (CLASSIC, 256 + 10, []),  # the lesson's worked example
        ("<s>".join(["abc", "abc", "az", "az", "ab"]), 256 + 3 + 1, ["<s>"]),  # tuples, not joined bytes
        (("hi" + EOT) * 20, 300, [EOT]),  # the special token is never merged; training stops early
        ("ab ab cd", 10_000, [EOT]),  # stops when every pre-token is one token
        (CLASSIC, 256 + 6 + 2, [EOT, "<pad>"]),  # two specials: 6 merges, not 8
    ]
    if hidden:
        trainings += [
            ("今天天气真好，今天天气很好。" * 3, 280, []),
            ("aaaaaa aaaa aaa", 262, []),  # overlapping pairs
            ("", 258, [EOT, "<pad>"]),  # nothing to learn
            (_generated_text(1, 150).replace("\n", EOT), 320, [EOT]),
        ]
    run(TRAIN_BPE, learner_fn, [_train_case(*training) for training in trainings], hidden)


# ----------------------------------------------------------------------------------------------
# Exercises 5 and 6: encoding and decoding with the learned merges
# ----------------------------------------------------------------------------------------------


def _encoding_tokenizer() -> BPETokenizer:
    """A tokenizer trained on English-like text and Chinese, with <|endoftext|> as a special token."""
    indented = "\n    if x:\n        y\n" * 3  # runs of spaces, so that (" ", " ") is merged
    corpus = (_generated_text(2, 400) + "The cat sits on the mat. " * 5 + "今天天气真好。" * 6 + indented + EOT) * 2
    tokenizer = BPETokenizer.train(corpus, 256 + 120 + 1, [EOT])
    values = list(tokenizer.vocab.values())
    if len(values) != len(set(values)):  # keeps bytes -> id unambiguous for the learner's inverse map
        raise RuntimeError("the check's vocabulary has two ids for the same bytes; pick another corpus")
    return tokenizer


def _encode_with(text, vocab, merges, specials, *, order="earliest", pretokenized=True, cut_specials=True):
    """Encode with one knob per usual mistake (order: "earliest", "latest" or "leftmost" merge first);
    the defaults give the right ids."""
    rank = {pair: r for r, pair in enumerate(merges)}
    id_of = {token: i for i, token in vocab.items()}
    ids = []
    for piece in split_on_special_tokens(text, specials if cut_specials else []):
        if cut_specials and piece in specials:
            ids.append(id_of[piece.encode()])
            continue
        for pretoken in pretokenize(piece) if pretokenized else [piece]:
            word = tuple(bytes([b]) for b in pretoken.encode())
            while known := [p for p in zip(word, word[1:]) if p in rank]:
                choose = {"earliest": min, "latest": max}.get(order)
                word = merge_word(word, choose(known, key=rank.__getitem__) if choose else known[0])
            ids += [id_of[token] for token in word]
    return ids


def _encode_case(text: str, tokenizer: BPETokenizer, specials: list[str]) -> Case:
    vocab, merges = tokenizer.vocab, tokenizer.merges
    mistakes = {
        "the ids with the *latest*-learned merge applied first; apply the earliest-learned merge that is "
        "possible, as training did": _encode_with(text, vocab, merges, specials, order="latest"),
        "the ids with the *leftmost* mergeable pair merged first; merge the pair that was learned earliest, "
        "wherever it is in the word": _encode_with(text, vocab, merges, specials, order="leftmost"),
        "the raw UTF-8 bytes: no merge was applied": list(text.encode()),
        "the ids with merges across pre-token boundaries; split each piece with pretokenize first":
            _encode_with(text, vocab, merges, specials, pretokenized=False),
        f"the ids with {EOT} encoded as ordinary text; cut special tokens out first "
        f"(split_on_special_tokens) and give each its own id":
            _encode_with(text, vocab, merges, specials, cut_specials=False),
    }
    what = f"bpe_encode({_short(text, 40)}, ...)"
    inputs = {"vocab, merges or special_tokens": (vocab, merges, specials)}  # one message names all three
    return Case(what, (text, vocab, merges, specials),
                inspect=_equal_to(tokenizer.encode(text), what, _id_list, mistakes, untouched=inputs))


# Judged with the reference merge_word in place of the learner's (exercise 3).
@composite(merge_word=lambda: merge_word)
@isolated
def check_bpe_encode(learner_fn, hidden: bool = False) -> None:
    """bpe_encode(text, vocab, merges, special_tokens) -> ids, equal to BPETokenizer.encode."""
    # The order matters for naming mistakes: on the second text the two wrong merge orders differ.
    texts = ["The cat sits on the mat", "The cat sits on the mat.  今天天气真好", "今天天气真好",
             f"The cat sits.{EOT}The mat{EOT}"]
    if hidden:
        texts += ["", "x", f"{EOT}{EOT}", "🙂 ok, then?  \n\n", _generated_text(5, 60), "今天 the weather is 真好"]
    tokenizer = _encoding_tokenizer()
    run(BPE_ENCODE, learner_fn, [_encode_case(text, tokenizer, [EOT]) for text in texts], hidden)


SPLIT_CHARACTERS = ("the bytes of one character can be split across tokens (今 is 3 bytes), so join all the bytes "
                    "first and decode once")
STRICT_DECODING = ("decoding raised UnicodeDecodeError; an id sequence may end inside a character, so decode with "
                   "errors='replace' (the broken bytes become �)")


def _decode_case(ids: list[int], tokenizer: BPETokenizer) -> Case:
    vocab = tokenizer.vocab
    what = f"bpe_decode({_short(ids, 40)}, vocab)"
    try:
        b"".join(vocab[i] for i in ids).decode("utf-8")
        # The bytes together are valid UTF-8: the learner's UnicodeDecodeError comes from a token alone.
        on_decode_error = f"decoding token by token raised UnicodeDecodeError; {SPLIT_CHARACTERS}"
    except UnicodeDecodeError:
        on_decode_error = STRICT_DECODING

    def decode(learner_fn: Any) -> Any:
        try:
            return call_learner(what, learner_fn, list(ids), vocab)
        except CheckFailed as error:
            if isinstance(error.__cause__, UnicodeDecodeError):
                raise CheckFailed(f"{what}: {on_decode_error}") from None
            raise

    per_token = {f"the text decoded token by token; {SPLIT_CHARACTERS}":
                 "".join(vocab[i].decode("utf-8", errors="replace") for i in ids)}
    return Case(what, call=decode,
                inspect=_equal_to(tokenizer.decode(ids), what, _text, per_token, untouched={"vocab": vocab}))


@isolated
def check_bpe_decode(learner_fn, hidden: bool = False) -> None:
    """bpe_decode(ids, vocab) -> str: join all the tokens' bytes, then decode UTF-8 with errors='replace'."""
    tokenizer = _encoding_tokenizer()
    id_sequences = [
        tokenizer.encode("The cat sits on the mat"),
        tokenizer.encode("今天天气真好"),
        list("今".encode()),  # one character as its 3 single-byte tokens: split across tokens
        ["🙂".encode()[0]],  # the first of the 4 bytes of 🙂 alone: not valid UTF-8
    ]
    if hidden:
        id_sequences += [
            [],
            tokenizer.encode(f"The cat{EOT}今天"),
            tokenizer.encode("猫追狗 🙂 ok"),
            list("气".encode())[:2] + tokenizer.encode(" ok"),  # a character cut short, then text
        ]
    run(BPE_DECODE, learner_fn, [_decode_case(ids, tokenizer) for ids in id_sequences], hidden)


__all__ = [
    "check_char_tokenizer",
    "check_count_pairs",
    "check_merge_word",
    "check_train_bpe",
    "check_bpe_encode",
    "check_bpe_decode",
]
