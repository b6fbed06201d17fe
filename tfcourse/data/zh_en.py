"""A generated Chinese→English parallel corpus: the translation lesson's second language pair.

A small grammar writes Chinese sentences (猫追狗, 今天天气真好) with their English translations (the cat
chases the dog, today the weather is really nice). Chinese marks neither number, nor tense, nor case on
its words; English marks all three, so the decoder must fetch them from elsewhere in the source:

* number: 两只猫追狗 → two cats chase the dog (the noun *and* the verb change); 猫 → the cat, 一只猫 → a cat;
* tense: 昨天猫追了狗 → yesterday the cat chased the dog, 明天猫会追狗 → tomorrow the cat will chase the dog,
  昨天猫没追狗 → yesterday the cat did not chase the dog (咬: bit, irregular);
* case and agreement: 我打你 → I hit you, 你打我 → you hit me, 他追她 → he chases her;
* reordering: 猫在桌子上 → the cat is on the table (the place word 上 follows the noun in Chinese, "on"
  precedes it in English); 鸟在树上 → the bird is in the tree;
* measure words English has no word for: 两只猫, 两匹马, 两头牛 → two cats, two horses, two cows.

Chinese is written as it is, without spaces; the lesson reads it one character per token
(`tfcourse.training.translation.words`). English is lower-case but for "I", words separated by single spaces.
"""

from __future__ import annotations

import random
from dataclasses import dataclass


@dataclass(frozen=True)
class Noun:
    chinese: str
    measure: str  # the measure word after a number: 只 (animals), 匹 (horses), 头 (cattle)
    english: str
    english_plural: str


@dataclass(frozen=True)
class Pronoun:
    chinese: str
    subject: str  # "I"
    object: str  # "me"
    person: int  # 1, 2 or 3: decides "am / are / is" and "chase / chases"


@dataclass(frozen=True)
class Verb:
    chinese: str
    english: str  # "chase"
    third_person: str  # "chases"
    past: str  # "chased"


@dataclass(frozen=True)
class NounPhrase:
    """`number` 0 for a bare noun (→ "the"), else 1, 2 or 3; pronouns take neither number nor adjective."""

    head: Noun | Pronoun
    number: int = 0
    adjective: str = ""  # Chinese, a key of ADJECTIVES

    @property
    def plural(self) -> bool:
        return self.number > 1

    @property
    def person(self) -> int:
        return self.head.person if isinstance(self.head, Pronoun) else 3


ANIMALS = (
    Noun("猫", "只", "cat", "cats"),
    Noun("狗", "只", "dog", "dogs"),
    Noun("鸟", "只", "bird", "birds"),
    Noun("老鼠", "只", "mouse", "mice"),
    Noun("马", "匹", "horse", "horses"),
    Noun("牛", "头", "cow", "cows"),
)
PRONOUNS = (
    Pronoun("我", "I", "me", 1),
    Pronoun("你", "you", "you", 2),
    Pronoun("他", "he", "him", 3),
    Pronoun("她", "she", "her", 3),
)
ADJECTIVES = {"黑": "black", "白": "white", "大": "big", "小": "small"}
NUMBERS = {"一": 1, "两": 2, "三": 3}
ENGLISH_NUMBERS = {1: "a", 2: "two", 3: "three"}
VERBS = (
    Verb("追", "chase", "chases", "chased"),
    Verb("咬", "bite", "bites", "bit"),
    Verb("看", "watch", "watches", "watched"),
    Verb("打", "hit", "hits", "hit"),
)
# A place and the words after it: 桌子上 "on the table", 树上 "in the tree" (a bird sits *in* a tree).
PLACES = {
    "桌子": ("table", {"上": "on", "下": "under"}),
    "床": ("bed", {"上": "on", "下": "under"}),
    "树": ("tree", {"上": "in", "下": "under"}),
    "房子": ("house", {"里": "in"}),
    "花园": ("garden", {"里": "in"}),
}
TIMES = {"": "", "今天": "today", "昨天": "yesterday", "明天": "tomorrow"}
TENSES = {"": "present", "今天": "present", "昨天": "past", "明天": "future"}
WEATHER = {"好": "nice", "冷": "cold", "热": "hot"}
DEGREES = {"真": "really", "很": "very"}
# The words the sentences are made of (the grammar writes them without spaces): lesson 01 uses them to
# tell a token inside one word (老鼠, 天气) from one that runs across words (只猫, 今天天气).
FUNCTION_WORDS = ("了", "没", "不", "会", "在")
CHINESE_WORDS = frozenset(
    [noun.chinese for noun in ANIMALS] + [noun.measure for noun in ANIMALS]
    + [pronoun.chinese for pronoun in PRONOUNS] + list(ADJECTIVES) + list(NUMBERS)
    + [verb.chinese for verb in VERBS] + list(FUNCTION_WORDS)
    + list(PLACES) + [side for _, sides in PLACES.values() for side in sides]
    + [time for time in TIMES if time] + ["天气"] + list(WEATHER) + list(DEGREES))


# ----------------------------------------------------------------------------------------------
# English from the parts of a sentence
# ----------------------------------------------------------------------------------------------


def _english_noun_phrase(phrase: NounPhrase, as_object: bool = False) -> str:
    if isinstance(phrase.head, Pronoun):
        return phrase.head.object if as_object else phrase.head.subject
    noun = phrase.head.english_plural if phrase.plural else phrase.head.english
    adjective = [ADJECTIVES[phrase.adjective]] if phrase.adjective else []
    return " ".join([ENGLISH_NUMBERS.get(phrase.number, "the"), *adjective, noun])


def _is_third_singular(subject: NounPhrase) -> bool:
    return subject.person == 3 and not subject.plural


def _english_verb(verb: Verb, subject: NounPhrase, tense: str, negated: bool) -> str:
    """chases / chase / does not chase / chased / did not chase / will chase / will not chase."""
    if tense == "future":
        return f"will {'not ' if negated else ''}{verb.english}"
    if tense == "past":
        return f"did not {verb.english}" if negated else verb.past
    if negated:
        return f"{'does' if _is_third_singular(subject) else 'do'} not {verb.english}"
    return verb.third_person if _is_third_singular(subject) else verb.english


def _english_be(subject: NounPhrase, tense: str, negated: bool) -> str:
    """am / is / are / was / were / will be, with "not" in its place."""
    if tense == "future":
        return "will not be" if negated else "will be"
    if tense == "past":
        form = "were" if subject.plural or subject.person == 2 else "was"
    elif subject.person == 1 and not subject.plural:
        form = "am"
    else:
        form = "is" if _is_third_singular(subject) else "are"
    return f"{form} not" if negated else form


def _with_time(time: str, clause: str) -> str:
    return f"{TIMES[time]} {clause}" if time else clause


# ----------------------------------------------------------------------------------------------
# Chinese from the parts of a sentence
# ----------------------------------------------------------------------------------------------


def _chinese_noun_phrase(phrase: NounPhrase) -> str:
    if isinstance(phrase.head, Pronoun):
        return phrase.head.chinese
    number = {v: k for k, v in NUMBERS.items()}.get(phrase.number, "")
    measure = phrase.head.measure if number else ""
    return number + measure + phrase.adjective + phrase.head.chinese


def _chinese_action(verb: Verb, tense: str, negated: bool) -> str:
    """追 / 不追 / 追了 / 没追 / 会追 / 不会追 (了 marks a completed action; 没 its negation)."""
    if tense == "future":
        return ("不会" if negated else "会") + verb.chinese
    if tense == "past":
        return "没" + verb.chinese if negated else verb.chinese + "了"
    return ("不" if negated else "") + verb.chinese


def _chinese_be_at(tense: str, negated: bool) -> str:
    """在 / 不在 / 会在 / 不会在: 在 does not take 了."""
    if tense == "future":
        return "不会在" if negated else "会在"
    return "不在" if negated else "在"


# ----------------------------------------------------------------------------------------------
# The three kinds of sentence, in both languages
# ----------------------------------------------------------------------------------------------


def action_pair(time: str, subject: NounPhrase, verb: Verb, obj: NounPhrase, negated: bool = False) -> tuple[str, str]:
    """(今天)猫追狗 → (today) the cat chases the dog."""
    tense = TENSES[time]
    chinese = time + _chinese_noun_phrase(subject) + _chinese_action(verb, tense, negated) + _chinese_noun_phrase(obj)
    english = " ".join([_english_noun_phrase(subject), _english_verb(verb, subject, tense, negated),
                        _english_noun_phrase(obj, as_object=True)])
    return chinese, _with_time(time, english)


def location_pair(time: str, subject: NounPhrase, place: str, side: str, negated: bool = False) -> tuple[str, str]:
    """猫在桌子上 → the cat is on the table: the place word after the noun becomes a preposition before it."""
    tense = TENSES[time]
    place_english, sides = PLACES[place]
    chinese = time + _chinese_noun_phrase(subject) + _chinese_be_at(tense, negated) + place + side
    english = " ".join([_english_noun_phrase(subject), _english_be(subject, tense, negated), sides[side],
                        "the", place_english])
    return chinese, _with_time(time, english)


def weather_pair(time: str, degree: str, adjective: str) -> tuple[str, str]:
    """今天天气真好 → today the weather is really nice; `degree` 真, 很 or 不 (not)."""
    tense = TENSES[time]
    negated = degree == "不"
    weather = NounPhrase(Noun("天气", "", "weather", "weather"))
    if tense == "future":  # 明天天气会很冷 / 明天天气不会冷
        chinese_degree = ("不会" if negated else "会" + degree)
    else:
        chinese_degree = degree
    english_degree = [] if negated else [DEGREES[degree]]
    english = " ".join(["the weather", _english_be(weather, tense, negated), *english_degree, WEATHER[adjective]])
    return time + "天气" + chinese_degree + adjective, _with_time(time, english)


# ----------------------------------------------------------------------------------------------
# The generator
# ----------------------------------------------------------------------------------------------


def _random_noun_phrase(rng: random.Random, allow_pronoun: bool = True) -> NounPhrase:
    if allow_pronoun and rng.random() < 0.25:
        return NounPhrase(rng.choice(PRONOUNS))
    number = rng.choice([0, 0, 1, 2, 3])
    adjective = rng.choice(sorted(ADJECTIVES)) if rng.random() < 0.35 else ""
    return NounPhrase(rng.choice(ANIMALS), number, adjective)


def _random_pair(rng: random.Random) -> tuple[str, str]:
    time = rng.choice(sorted(TIMES))
    kind = rng.random()
    if kind < 0.1:
        degree = rng.choice(["很", "不"] if TENSES[time] == "future" else ["真", "很", "不"])  # not 会真好
        return weather_pair(time, degree, rng.choice(sorted(WEATHER)))
    negated = rng.random() < 0.2
    subject = _random_noun_phrase(rng)
    if kind < 0.4:
        place = rng.choice(sorted(PLACES))
        return location_pair(time, subject, place, rng.choice(sorted(PLACES[place][1])), negated)
    obj = _random_noun_phrase(rng)
    while obj.head == subject.head and isinstance(obj.head, Pronoun):  # "I hit me": not in this grammar
        obj = _random_noun_phrase(rng)
    return action_pair(time, subject, rng.choice(VERBS), obj, negated)


def make_chinese_english_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Generate ``n`` distinct (Chinese, English) sentence pairs from the grammar, deterministically.

    >>> action_pair("", NounPhrase(ANIMALS[0]), VERBS[0], NounPhrase(ANIMALS[1]))
    ('猫追狗', 'the cat chases the dog')
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    pairs: dict[str, str] = {}  # Chinese -> English, in generation order
    misses = 0  # draws in a row that gave no new sentence: many mean the grammar is used up
    while len(pairs) < n and misses < 20_000:
        chinese, english = _random_pair(rng)
        misses = misses + 1 if chinese in pairs else 0
        pairs.setdefault(chinese, english)
    if len(pairs) < n:
        raise ValueError(f"the grammar made only {len(pairs)} distinct sentences, {n} were asked for")
    return list(pairs.items())


__all__ = ["make_chinese_english_pairs", "action_pair", "location_pair", "weather_pair", "NounPhrase", "ANIMALS", "PRONOUNS", "VERBS", "PLACES", "CHINESE_WORDS"]
