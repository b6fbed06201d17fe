"""The generated Chinese→English corpus (tfcourse.data.zh_en): the grammar's phenomena, determinism, and the
translation pipeline reading Chinese one character per token."""

from __future__ import annotations

import pytest

from tfcourse.data import CHINESE_WORDS, make_chinese_english_pairs
from tfcourse.data.zh_en import ANIMALS, PRONOUNS, VERBS, NounPhrase, action_pair, location_pair, weather_pair
from tfcourse.training.translation import CORPORA, TranslationRecipe, build_vocabularies, train_translator, words

CAT, DOG, HORSE, MOUSE = (next(a for a in ANIMALS if a.english == name) for name in ("cat", "dog", "horse", "mouse"))
I, YOU, HE, SHE = PRONOUNS
CHASE, BITE = VERBS[0], VERBS[1]


@pytest.mark.parametrize("pair, expected", [
    (action_pair("", NounPhrase(CAT), CHASE, NounPhrase(DOG)), ("猫追狗", "the cat chases the dog")),
    (action_pair("", NounPhrase(DOG), CHASE, NounPhrase(CAT)), ("狗追猫", "the dog chases the cat")),
    (action_pair("", NounPhrase(CAT, 2), CHASE, NounPhrase(DOG)), ("两只猫追狗", "two cats chase the dog")),
    (action_pair("", NounPhrase(HORSE, 3, "白"), CHASE, NounPhrase(MOUSE, 2)),
     ("三匹白马追两只老鼠", "three white horses chase two mice")),
    (action_pair("昨天", NounPhrase(CAT), CHASE, NounPhrase(DOG)), ("昨天猫追了狗", "yesterday the cat chased the dog")),
    (action_pair("昨天", NounPhrase(CAT), BITE, NounPhrase(DOG), negated=True),
     ("昨天猫没咬狗", "yesterday the cat did not bite the dog")),
    (action_pair("明天", NounPhrase(CAT, 1), CHASE, NounPhrase(DOG)), ("明天一只猫会追狗", "tomorrow a cat will chase the dog")),
    (action_pair("", NounPhrase(YOU), VERBS[3], NounPhrase(I)), ("你打我", "you hit me")),
    (action_pair("", NounPhrase(HE), CHASE, NounPhrase(SHE), negated=True), ("他不追她", "he does not chase her")),
    (location_pair("", NounPhrase(CAT), "桌子", "上"), ("猫在桌子上", "the cat is on the table")),
    (location_pair("昨天", NounPhrase(I), "树", "上"), ("昨天我在树上", "yesterday I was in the tree")),
    (location_pair("", NounPhrase(I), "床", "下", negated=True), ("我不在床下", "I am not under the bed")),
    (weather_pair("今天", "真", "好"), ("今天天气真好", "today the weather is really nice")),
    (weather_pair("明天", "不", "冷"), ("明天天气不会冷", "tomorrow the weather will not be cold")),
])
def test_the_grammar_marks_in_english_what_chinese_leaves_unmarked(pair, expected):
    assert pair == expected


def test_pairs_are_distinct_and_deterministic():
    pairs = make_chinese_english_pairs(500, seed=1)
    assert pairs == make_chinese_english_pairs(500, seed=1) != make_chinese_english_pairs(500, seed=2)
    assert len({chinese for chinese, _ in pairs}) == 500
    assert all(" " not in chinese and english == english.strip() for chinese, english in pairs)
    with pytest.raises(ValueError, match="n must be >= 0"):
        make_chinese_english_pairs(-1)


def test_words_reads_chinese_one_character_at_a_time_and_the_rest_at_spaces():
    assert words("今天天气真好") == ["今", "天", "天", "气", "真", "好"]
    assert words("le chat est assis près de l'arbre") == "le chat est assis près de l'arbre".split()
    source, target = build_vocabularies(make_chinese_english_pairs(300))
    assert "猫" in source.stoi and "老鼠" not in source.stoi and "cats" in target.stoi


def test_a_recipe_names_its_corpus_and_rejects_an_unknown_one():
    assert set(CORPORA) == {"en-fr", "zh-en"}
    with pytest.raises(ValueError, match="corpus must be one of"):
        train_translator(TranslationRecipe(corpus="xx-yy"))


def _can_segment(sentence: str, vocabulary: frozenset[str]) -> bool:
    """Can `sentence` be cut into words of `vocabulary`? (dynamic programming over its prefixes)"""
    reachable = [True] + [False] * len(sentence)
    for end in range(1, len(sentence) + 1):
        reachable[end] = any(reachable[start] and sentence[start:end] in vocabulary for start in range(end))
    return reachable[-1]


def test_every_sentence_is_made_of_the_listed_words():
    # Lesson 01 tells a token inside one word from one across words with CHINESE_WORDS: a word the
    # grammar writes but the list lacks would count its tokens as crossing.
    sentences = [chinese for chinese, _ in make_chinese_english_pairs(3000, seed=0)]
    assert all(_can_segment(sentence, CHINESE_WORDS) for sentence in sentences)
    assert not _can_segment("今天猫追球", CHINESE_WORDS)  # 球 is no word of the grammar
    assert {"老鼠", "天气", "只", "了"} <= CHINESE_WORDS and "只猫" not in CHINESE_WORDS
