"""Tests of tfcourse.tokenizers: character, word and byte-level BPE tokenizers."""

from __future__ import annotations

import io
import random
from collections import Counter

import pytest

from tfcourse.tokenizers import (
    BPETokenizer,
    CharTokenizer,
    WordTokenizer,
    count_pairs,
    count_pretokens,
    merge_word,
    pretokenize,
    split_on_special_tokens,
    train_bpe,
)

EOT = "<|endoftext|>"


def generated_text(seed: int, n_words: int = 400) -> str:
    """A small, varied, reproducible text: repeated words, numbers, punctuation, runs of
    spaces, blank lines, contractions, Chinese and emoji."""
    rng = random.Random(seed)
    syllables = ["lo", "w", "er", "new", "est", "wid", "th", "e", "an", "d", "ing", "s"]
    extras = ["42", "2024", "!", "?!", "...", "don't", "we'll"]
    extras += ["今天", "天气真好", "🙂", "👍🏽", "é"]
    lines, line = [], []
    for _ in range(n_words):
        if rng.random() < 0.1:
            line.append(rng.choice(extras))
        else:
            line.append("".join(rng.choice(syllables) for _ in range(rng.randint(1, 3))))
        if rng.random() < 0.12:
            lines.append(rng.choice([" ", "  ", "\t"]).join(line))
            line = []
            if rng.random() < 0.3:
                lines.append("")  # a blank line
    lines.append(" ".join(line))
    return "\n".join(lines)


# --------------------------------------------------------------------------------------
# Characters
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("text", ["The cat sits on the mat", "今天天气真好"])
def test_char_round_trip(text):
    tok = CharTokenizer.from_text(text)
    assert tok.decode(tok.encode(text)) == text
    assert tok.itos == sorted(set(text))
    assert tok.vocab_size == len(set(text))


def test_char_ids_follow_sorted_characters():
    tok = CharTokenizer.from_text("baca")
    assert tok.stoi == {"a": 0, "b": 1, "c": 2}
    assert tok.encode("cab") == [2, 0, 1]


def test_char_unknown_character_is_named():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match=r"'z' was not in the training text"):
        tok.encode("abz")


def test_char_decode_out_of_range_names_id_and_range():
    tok = CharTokenizer.from_text("abc")
    with pytest.raises(ValueError, match=r"id 7 .*\[0, 3\)"):
        tok.decode([0, 7])


# --------------------------------------------------------------------------------------
# Words
# --------------------------------------------------------------------------------------


def test_word_vocabulary_order_and_special_ids():
    tok = WordTokenizer.from_texts(["The cat sits on the mat", "the cat"])
    # Counts: cat 2, the 2, then The, mat, on, sits once each (ties alphabetical; "T" < "m").
    specials = ["<pad>", "<unk>", "<bos>", "<eos>"]
    assert tok.itos == specials + ["cat", "the", "The", "mat", "on", "sits"]
    assert (tok.pad_id, tok.unk_id, tok.bos_id, tok.eos_id) == (0, 1, 2, 3)
    assert tok.vocab_size == 10


def test_word_encode_decode_with_bos_eos_and_unk():
    tok = WordTokenizer.from_texts(["The cat sits on the mat"])
    ids = tok.encode("The cat sits on the mat", add_bos=True, add_eos=True)
    assert ids[0] == tok.bos_id and ids[-1] == tok.eos_id
    assert tok.decode(ids) == "The cat sits on the mat"
    assert tok.decode(ids, skip_specials=False) == "<bos> The cat sits on the mat <eos>"
    assert tok.encode("The dog") == [tok.stoi["The"], tok.unk_id]
    assert tok.decode(tok.encode("The dog")) == "The <unk>"


def test_word_tokenize_splits_punctuation_and_accepts_pre_split_chinese():
    assert WordTokenizer.tokenize("Hello, world!") == ["Hello", ",", "world", "!"]
    tokens = ["今天", "天气", "真好"]
    tok = WordTokenizer.from_texts([tokens])
    ids = tok.encode(tokens)
    assert [tok.itos[i] for i in ids] == tokens
    assert tok.unk_id not in ids
    assert tok.decode(ids) == "今天 天气 真好"


def test_word_min_freq_sends_rare_words_to_unk():
    tok = WordTokenizer.from_texts(["a a b"], min_freq=2)
    assert "b" not in tok.stoi
    assert tok.encode("a b") == [tok.stoi["a"], tok.unk_id]


def test_word_decode_out_of_range():
    tok = WordTokenizer.from_texts(["a"])
    with pytest.raises(ValueError, match=r"id 99 .*\[0, 5\)"):
        tok.decode([99])


# --------------------------------------------------------------------------------------
# BPE building blocks
# --------------------------------------------------------------------------------------


@pytest.mark.parametrize("seed", range(5))
def test_the_ascii_fast_path_splits_as_the_unicode_pattern_does(seed):
    """ASCII text is split by Python's `re` with ASCII classes: the same pre-tokens as GPT-2's pattern,
    for every ASCII character (control characters, the \\x1c-\\x1f separators, apostrophes, runs of
    spaces and newlines)."""
    from tfcourse import tokenizers
    rng = random.Random(seed)
    alphabet = [chr(c) for c in range(128)] + [" "] * 20 + ["'", "'s", "'ll", "\n", "  ", "ab", "42"] * 5
    text = "".join(rng.choice(alphabet) for _ in range(3000))
    assert text.isascii()
    assert tokenizers._GPT2_SPLIT_ASCII.findall(text) == tokenizers._GPT2_SPLIT.findall(text)
    assert pretokenize(text) == tokenizers._GPT2_SPLIT.findall(text)


def test_pretokenize_follows_gpt2_conventions():
    assert pretokenize("Hi there, we'll go  now!\n\n") == [
        "Hi", " there", ",", " we", "'ll", " go", " ", " now", "!", "\n\n"
    ]


def test_split_on_special_tokens_keeps_them_as_pieces():
    assert split_on_special_tokens(f"a{EOT}b{EOT}", [EOT]) == ["a", EOT, "b", EOT]
    assert split_on_special_tokens("", [EOT]) == []


def test_merge_word_is_left_to_right_and_non_overlapping():
    assert merge_word((b"l", b"o", b"w"), (b"l", b"o")) == (b"lo", b"w")
    assert merge_word((b"a", b"a", b"a"), (b"a", b"a")) == (b"aa", b"a")
    assert merge_word((b"a", b"b", b"a", b"b"), (b"a", b"b")) == (b"ab", b"ab")
    assert merge_word((b"x",), (b"a", b"b")) == (b"x",)


def test_count_pairs_weights_by_word_frequency():
    counts = count_pairs({(b"a", b"b", b"a", b"b"): 2, (b"b", b"a"): 5})
    assert counts == {(b"a", b"b"): 4, (b"b", b"a"): 7}


def test_count_pretokens_skips_special_tokens():
    freqs = count_pretokens(f"hi{EOT} hi", [EOT])
    assert freqs == {(b"h", b"i"): 1, (b" ", b"h", b"i"): 1}


# --------------------------------------------------------------------------------------
# BPE training
# --------------------------------------------------------------------------------------

CLASSIC = (
    "low low low low low lower lower widest widest widest "
    "newest newest newest newest newest newest"
)


def test_first_merges_on_the_classic_corpus_match_hand_derivation():
    # GPT-2 pre-tokens keep the leading space ("␣" below), so the words and their counts are
    #   low 1, ␣low 4, ␣lower 2, ␣widest 3, ␣newest 6.
    # Pair counts: es 9, st 9, we 8, lo 7, ow 7, ␣l 6, ␣n 6, ne 6, ew 6, ␣w 3, wi 3, ...
    #  1. es and st tie at 9 -> the greater pair, (s, t).
    #  2. (e, st) 9, the only 9.     words: ␣ w i d est, ␣ n e w est (we fell to 2)
    #  3. lo and ow tie at 7 -> (o, w).
    #  4. (l, ow) 7.                 words: low, ␣ low, ␣ low e r
    #  5. five pairs tie at 6: (␣, low) (␣, n) (n, e) (e, w) (w, est) -> "w" first: (w, est).
    #  6. tie (␣, low) (␣, n) (n, e) (e, west) -> (n, e).
    #  7. tie (␣, low) (␣, ne) (ne, west) -> (ne, west).
    #  8. tie (␣, low) (␣, newest) -> b"newest" > b"low": (␣, newest).
    #  9. (␣, low) 6.
    # 10. (␣, w) (w, i) (i, d) (d, est) tie at 3 (the pairs of ␣low e r have 2) -> (w, i).
    expected = [
        (b"s", b"t"),
        (b"e", b"st"),
        (b"o", b"w"),
        (b"l", b"ow"),
        (b"w", b"est"),
        (b"n", b"e"),
        (b"ne", b"west"),
        (b" ", b"newest"),
        (b" ", b"low"),
        (b"w", b"i"),
    ]
    vocab, merges = train_bpe(CLASSIC, 256 + len(expected))
    assert merges == expected
    assert vocab[256] == b"st" and vocab[263] == b" newest"
    assert len(vocab) == 256 + len(expected)


@pytest.mark.parametrize(
    "text, first_merge",
    [
        ("est", (b"s", b"t")),  # (e, s) and (s, t) once each: "s" > "e"
        ("ab ac", (b"a", b"c")),  # same first token: decided by the second
        ("zz ab ab", (b"a", b"b")),  # a more frequent pair beats a greater one; then ab beats " a"
    ],
)
def test_ties_go_to_the_lexicographically_greatest_pair(text, first_merge):
    _, merges = train_bpe(text, 257)
    assert merges == [first_merge]


def test_tie_break_compares_pairs_as_tuples_not_as_joined_bytes():
    # Words (special tokens only separate them): "abc" 2, "az" 2, "ab" 1.
    # (a, b) 3 is merged first; then (ab, c) and (a, z) tie at 2. As tuples, b"ab" > b"a"
    # decides: (ab, c). Comparing the joined bytes instead would pick b"az" > b"abc".
    text = "<s>".join(["abc", "abc", "az", "az", "ab"])
    _, merges = train_bpe(text, 256 + 3 + 1, ["<s>"])
    assert merges == [(b"a", b"b"), (b"ab", b"c"), (b"a", b"z")]


def naive_train_bpe(text: str, vocab_size: int, special_tokens=()) -> list[tuple[bytes, bytes]]:
    """Reference: recount every pair in every word after every merge (slow but obviously right)."""
    words = Counter()
    for piece in split_on_special_tokens(text, special_tokens):
        if piece not in special_tokens:
            for pretoken in pretokenize(piece):
                words[tuple(bytes([b]) for b in pretoken.encode())] += 1
    merges = []
    while 256 + len(merges) + len(special_tokens) < vocab_size:
        pairs = Counter()
        for word, freq in words.items():
            for pair in zip(word, word[1:]):
                pairs[pair] += freq
        if not pairs:
            break
        best = max(pairs, key=lambda p: (pairs[p], p))
        merges.append(best)
        new_words = Counter()
        for word, freq in words.items():
            out, i = [], 0
            while i < len(word):
                if word[i : i + 2] == best:
                    out.append(best[0] + best[1])
                    i += 2
                else:
                    out.append(word[i])
                    i += 1
            new_words[tuple(out)] += freq
        words = new_words
    return merges


@pytest.mark.parametrize("seed, vocab_size", [(0, 260), (1, 320), (2, 420)])
def test_incremental_training_equals_full_recount(seed, vocab_size):
    text = generated_text(seed)
    assert train_bpe(text, vocab_size, [EOT])[1] == naive_train_bpe(text, vocab_size, [EOT])


def repetitive_text(seed: int, alphabet: str, n_words: int = 300) -> str:
    """Words of few letters, so that runs (aaaa), repeats (abab) and ties are everywhere."""
    rng = random.Random(seed)
    return " ".join("".join(rng.choice(alphabet) for _ in range(rng.randint(1, 9))) for _ in range(n_words))


@pytest.mark.parametrize("text", [
    "aaa aaaa aaaaa aaaaaa a aa",  # overlapping occurrences of (a, a)
    "abab ababab aba bab abababab",  # a merge whose neighbours are its own pair
    repetitive_text(0, "ab"),
    repetitive_text(1, "abc"),
    repetitive_text(2, "aé今"),  # multi-byte characters: merges inside one character first
    "今天天气真好" * 30 + " 今天天气真好，明天呢？" * 7,
])
def test_training_on_runs_repeats_and_ties_equals_full_recount(text):
    for vocab_size in (258, 275, 330):
        assert train_bpe(text, vocab_size, [EOT])[1] == naive_train_bpe(text, vocab_size, [EOT]), vocab_size


def test_training_stops_early_when_no_pair_is_left():
    text = "ab ab cd"
    vocab, merges = train_bpe(text, 10_000, [EOT])
    assert merges == naive_train_bpe(text, 10_000, [EOT])
    # Pre-tokens "ab", " ab", " cd": merges ab, cd, " cd", " ab"; then each is a single token.
    assert merges == [(b"a", b"b"), (b"c", b"d"), (b" ", b"cd"), (b" ", b"ab")]
    assert vocab[256 + len(merges)] == EOT.encode()
    assert len(vocab) == 256 + len(merges) + 1


def test_vocab_layout_bytes_then_merges_then_specials():
    vocab, merges = train_bpe(CLASSIC, 256 + 3 + 2, ["<a>", "<b>"])
    assert all(vocab[i] == bytes([i]) for i in range(256))
    assert [vocab[256 + k] for k in range(3)] == [left + right for left, right in merges]
    assert (vocab[259], vocab[260]) == (b"<a>", b"<b>")


# --------------------------------------------------------------------------------------
# BPE encoding and decoding
# --------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def tokenizer() -> BPETokenizer:
    text = generated_text(3, n_words=800)
    return BPETokenizer.train(text, 400, [EOT, EOT + EOT, "<end of doc>"])


@pytest.mark.parametrize(
    "text",
    [
        "The cat sits on the mat.",
        "今天天气真好",
        "🙂👍🏽 emoji, with skin tone",
        f"first doc{EOT}second doc{EOT}",
        "  leading and trailing spaces \n\n\t",
        "",
    ],
)
def test_bpe_round_trip(tokenizer, text):
    assert tokenizer.decode(tokenizer.encode(text)) == text


def test_bpe_empty_string(tokenizer):
    assert tokenizer.encode("") == []
    assert tokenizer.decode([]) == ""


def test_bpe_uses_learned_merges(tokenizer):
    text = generated_text(3, n_words=800)
    assert len(tokenizer.encode(text)) < len(text.encode("utf-8")) / 2
    assert tokenizer.vocab_size == 400


def naive_encode(tokenizer: BPETokenizer, text: str) -> list[int]:
    """Reference: every merge, in the order learned, applied to every pre-token (slow but obviously right)."""
    ids = []
    for piece in split_on_special_tokens(text, tokenizer.special_tokens):
        if piece in tokenizer.special_tokens:
            ids.append(tokenizer.encode(piece)[0])
            continue
        for pretoken in pretokenize(piece):
            word = tuple(bytes([b]) for b in pretoken.encode("utf-8"))
            for pair in tokenizer.merges:
                word = merge_word(word, pair)
            ids += [tokenizer._id_of_bytes[token] for token in word]
    return ids


@pytest.mark.parametrize("seed", [0, 1])
def test_encode_equals_applying_every_merge_in_order(tokenizer, seed):
    text = streaming_text(seed) + " 今天天气真好 🙂 aaaaaaa abababab"
    assert tokenizer.encode(text) == naive_encode(tokenizer, text)
    assert tokenizer.encode(text) == naive_encode(tokenizer, text)  # again, from the pre-token cache


def test_the_pretoken_cache_stays_bounded_and_right():
    class SmallCache(BPETokenizer):
        CACHE_SIZE = 7

    small = SmallCache.train(generated_text(3, n_words=300), 300, [EOT])
    text = generated_text(4, n_words=200)  # far more than 7 distinct pre-tokens
    assert small.encode(text) == naive_encode(small, text)
    assert 0 < len(small._cache) <= 7


def test_bpe_decode_of_a_partial_character_is_replaced():
    tok = BPETokenizer.train("", 256)
    first_byte_of_smile = "🙂".encode()[0]
    assert tok.decode([first_byte_of_smile]) == "\ufffd"


def test_special_token_is_never_merged():
    text = ("hi" + EOT) * 200
    tok = BPETokenizer.train(text, 300, [EOT])
    eot_id = tok.vocab_size - 1
    assert tok.vocab[eot_id] == EOT.encode()
    assert tok.encode(EOT * 3) == [eot_id] * 3
    # Treated as text, pairs like (<, |) would be the most frequent; only "hi" is learned.
    assert tok.merges == [(b"h", b"i")]
    # Not declared as special, the same string is just text, made of several tokens.
    plain = BPETokenizer(tok.vocab, tok.merges)
    assert len(plain.encode(EOT)) > 1


def test_overlapping_special_tokens_take_the_longest_match(tokenizer):
    single = tokenizer.encode(EOT)
    double = tokenizer.encode(EOT + EOT)
    assert len(single) == 1 and len(double) == 1 and single != double
    assert tokenizer.encode(EOT * 3) == double + single


def test_special_tokens_with_regex_metacharacters_are_literal():
    tok = BPETokenizer.train("aab a+b (.*)", 260, ["a+b", "(.*)"])
    plus_id, star_id = tok.vocab_size - 2, tok.vocab_size - 1
    assert tok.encode("a+b") == [plus_id]
    assert tok.encode("(.*)") == [star_id]
    assert plus_id not in tok.encode("aab") and star_id not in tok.encode("(xy)")


def test_special_token_missing_from_vocab_is_appended():
    vocab, merges = train_bpe("hello", 258)
    tok = BPETokenizer(vocab, merges, ["<new>"])
    assert tok.vocab_size == 259
    assert tok.encode("<new>") == [258]


# --------------------------------------------------------------------------------------
# Streaming
# --------------------------------------------------------------------------------------


def awkward_chunks(text: str, seed: int) -> list[str]:
    """Cut text into pieces of 1-7 characters, wherever that falls."""
    rng = random.Random(seed)
    chunks, i = [], 0
    while i < len(text):
        size = rng.randint(1, 7)
        chunks.append(text[i : i + size])
        i += size
    return chunks


def streaming_text(seed: int) -> str:
    rng = random.Random(seed)
    lines = generated_text(seed, n_words=300).split("\n")
    for _ in range(15):  # specials, adjacent and overlapping, dropped in at random places
        k = rng.randrange(len(lines))
        lines[k] += rng.choice([EOT, EOT + EOT, EOT * 3, "<end of doc>", "  \n\n   "])
    return "\n".join(lines) + "\n\n   "


@pytest.mark.parametrize("seed", [0, 1, 2, 3])
def test_encode_iterable_equals_encode_on_awkward_chunks(tokenizer, seed):
    text = streaming_text(seed)
    assert EOT + EOT in text and "\n\n" in text
    expected = tokenizer.encode(text)
    assert list(tokenizer.encode_iterable(awkward_chunks(text, seed))) == expected
    assert list(tokenizer.encode_iterable(io.StringIO(text))) == expected  # line by line


def test_encode_iterable_is_lazy(tokenizer):
    def lines():
        yield "hello there, " * 5 + "\n"  # longer than the longest special token
        raise AssertionError("read past the first line before the first id was needed")

    assert next(tokenizer.encode_iterable(lines())) == tokenizer.encode("hello")[0]


# --------------------------------------------------------------------------------------
# Errors
# --------------------------------------------------------------------------------------


def test_vocab_size_below_bytes_plus_specials_is_refused():
    with pytest.raises(ValueError, match=r"at least 257.*256 byte values"):
        train_bpe("hello", 256, [EOT])


def test_non_str_text_is_refused_with_its_type(tokenizer):
    with pytest.raises(TypeError, match="bytes"):
        train_bpe(b"hello", 300)
    with pytest.raises(TypeError, match="int"):
        tokenizer.encode(123)
    with pytest.raises(TypeError, match="list"):
        CharTokenizer.from_text(["a", "b"])


def test_decode_of_unknown_id_names_it(tokenizer):
    with pytest.raises(ValueError, match=r"id 99999 is not in the vocabulary"):
        tokenizer.decode([1, 99999])


def test_duplicate_special_tokens_are_refused():
    with pytest.raises(ValueError, match=r"duplicate special tokens.*<a>"):
        train_bpe("hello", 300, ["<a>", "<b>", "<a>"])
    vocab, merges = train_bpe("hello", 257, ["<a>"])
    with pytest.raises(ValueError, match="duplicate special tokens"):
        BPETokenizer(vocab, merges, ["<a>", "<a>"])


def test_word_tokenizer_without_unk_says_so():
    tok = WordTokenizer.from_texts(["a"], specials=("<pad>",))
    with pytest.raises(ValueError, match="no <unk> token"):
        tok.encode("b")
