"""A generated English→French parallel corpus for the encoder–decoder lesson.

A tiny grammar writes English sentences ("the cat sits on the mat") together with their French
translations ("le chat est assis sur le tapis"), with gender and number agreement, elision and
the contractions du/des/au/aux, so the translation task is real but small.
"""

from __future__ import annotations

import random
from collections.abc import Iterable, Sequence
from dataclasses import dataclass


MASCULINE, FEMININE = "m", "f"


@dataclass(frozen=True)
class Noun:
    english: str
    english_plural: str
    french: str
    french_plural: str
    gender: str  # MASCULINE or FEMININE: decides the article and the adjective's ending


@dataclass(frozen=True)
class AgreeingWord:
    """A French adjective or participle: one form per gender and number."""

    masculine: str
    feminine: str
    masculine_plural: str
    feminine_plural: str

    def form(self, gender: str, plural: bool) -> str:
        if gender == MASCULINE:
            return self.masculine_plural if plural else self.masculine
        return self.feminine_plural if plural else self.feminine


@dataclass(frozen=True)
class Verb:
    english: str  # third person singular: "sits"
    english_plural: str  # "sit"
    french: str  # "est"
    french_plural: str  # "sont"
    complement: str  # a key of COMPLEMENTS: what may follow the verb
    participle: AgreeingWord | None = None  # "assis": agrees with the subject

    def __post_init__(self) -> None:
        if self.complement not in COMPLEMENTS:
            raise ValueError(
                f"verb {self.english!r}: complement must be one of {sorted(COMPLEMENTS)}, "
                f"got {self.complement!r}"
            )

    @property
    def takes_preposition(self) -> bool:
        return self.complement in ("place", "destination")


@dataclass(frozen=True)
class NounPhrase:
    noun: Noun
    plural: bool
    adjective: str | None = None  # English adjective, a key of ADJECTIVES


def _noun(
    english: str, french: str, gender: str, english_plural: str = "", french_plural: str = ""
) -> Noun:
    # Regular plurals add "s"; irregular ones (mice, oiseaux, chevaux...) are spelled out.
    english_plural = english_plural or english + "s"
    return Noun(english, english_plural, french, french_plural or french + "s", gender)


# Who can act (subjects)...
ANIMALS = (
    _noun("cat", "chat", MASCULINE),
    _noun("dog", "chien", MASCULINE),
    _noun("cow", "vache", FEMININE),
    _noun("bird", "oiseau", MASCULINE, french_plural="oiseaux"),
    _noun("mouse", "souris", FEMININE, english_plural="mice", french_plural="souris"),
    _noun("horse", "cheval", MASCULINE, french_plural="chevaux"),
    _noun("elephant", "éléphant", MASCULINE),
)
PEOPLE = (  # the generator gives people no colour adjective
    _noun("girl", "fille", FEMININE),
    _noun("boy", "garçon", MASCULINE),
)
ANIMATE_NOUNS = (*ANIMALS, *PEOPLE)
# ...where they can be, with the prepositions that make sense for each place...
PLACES = {
    _noun("mat", "tapis", MASCULINE, french_plural="tapis"): ("on", "near"),
    _noun("table", "table", FEMININE): ("on", "under", "near"),
    _noun("chair", "chaise", FEMININE): ("on", "under", "near"),
    _noun("bed", "lit", MASCULINE): ("on", "under", "in", "near"),
    _noun("tree", "arbre", MASCULINE): ("under", "in", "near", "to"),
    _noun("house", "maison", FEMININE): ("in", "near", "to"),
    _noun("garden", "jardin", MASCULINE): ("in", "near", "to"),
}
# ...and what they eat.
FOODS = (
    _noun("apple", "pomme", FEMININE),
    _noun("carrot", "carotte", FEMININE),
    _noun("cake", "gâteau", MASCULINE, french_plural="gâteaux"),
    _noun("egg", "œuf", MASCULINE),
)
NOUNS = {noun.english: noun for noun in (*ANIMATE_NOUNS, *PLACES, *FOODS)}

# Colours, because they follow the noun in French (unlike "petit" or "grand").
ADJECTIVES = {
    "black": AgreeingWord("noir", "noire", "noirs", "noires"),
    "white": AgreeingWord("blanc", "blanche", "blancs", "blanches"),
    "green": AgreeingWord("vert", "verte", "verts", "vertes"),
    "blue": AgreeingWord("bleu", "bleue", "bleus", "bleues"),
    "grey": AgreeingWord("gris", "grise", "gris", "grises"),
    "red": AgreeingWord("rouge", "rouge", "rouges", "rouges"),
}

# What follows each kind of verb, so that generated sentences make sense.
COMPLEMENTS = {
    "place": "on/under/in/near + a place",  # "sits on the mat"
    "destination": "to + a place",  # "goes to the garden"
    "food": "a food",  # "eats the apples"
    "anything": "an animal, person or place",  # "sees the cow"
}

SEATED = AgreeingWord("assis", "assise", "assis", "assises")  # "est assis", "sont assises"
VERBS = (
    Verb("sits", "sit", "est", "sont", "place", participle=SEATED),
    Verb("sleeps", "sleep", "dort", "dorment", "place"),
    Verb("runs", "run", "court", "courent", "place"),
    Verb("goes", "go", "va", "vont", "destination"),
    Verb("eats", "eat", "mange", "mangent", "food"),
    Verb("sees", "see", "voit", "voient", "anything"),
)

PREPOSITIONS = {"on": "sur", "under": "sous", "in": "dans", "near": "près de", "to": "à"}

# French fuses "de" and "à" with the articles le/les; la and l' stay separate.
CONTRACTIONS = {("de", "le"): "du", ("de", "les"): "des", ("à", "le"): "au", ("à", "les"): "aux"}

_FRENCH_VOWELS = "aàâeéèêiîoôuûœ"


def _french_article(noun: Noun, plural: bool) -> str:
    if plural:
        return "les"
    if noun.french[0] in _FRENCH_VOWELS:
        return "l'"  # elision: l'oiseau, l'arbre
    return "le" if noun.gender == MASCULINE else "la"


def _french_noun_phrase(phrase: NounPhrase, preposition: str = "") -> str:
    """French for ``phrase`` after a French ``preposition`` (may be empty), with contractions."""
    noun = phrase.noun
    article = _french_article(noun, phrase.plural)
    noun_group = noun.french_plural if phrase.plural else noun.french
    if phrase.adjective is not None:
        # The adjective follows the noun and takes its gender and number: "la vache noire".
        noun_group += " " + ADJECTIVES[phrase.adjective].form(noun.gender, phrase.plural)

    if preposition:
        *first_words, last_word = preposition.split()
        if (last_word, article) in CONTRACTIONS:
            # "près de" + "le jardin" -> "près du jardin"; "à" + "les arbres" -> "aux arbres"
            preposition = " ".join([*first_words, CONTRACTIONS[(last_word, article)]])
            article = ""

    if article == "l'":
        noun_group = "l'" + noun_group  # the elided article is written without a space
    elif article:
        noun_group = f"{article} {noun_group}"
    return f"{preposition} {noun_group}".strip()


def _english_noun_phrase(phrase: NounPhrase) -> str:
    noun = phrase.noun.english_plural if phrase.plural else phrase.noun.english
    return " ".join(["the", *([phrase.adjective] if phrase.adjective else []), noun])


_ENGLISH_NOUN_FORMS = {  # "mice" -> (mouse, plural)
    form: (noun, form == noun.english_plural)
    for noun in NOUNS.values()
    for form in (noun.english, noun.english_plural)
}
_ENGLISH_VERB_FORMS = {  # "sit" -> (sit verb, plural)
    form: (verb, form == verb.english_plural)
    for verb in VERBS
    for form in (verb.english, verb.english_plural)
}


def _unexpected_word(
    words: list[str], expected: str, sentence: str, known: Iterable[str]
) -> ValueError:
    """The error for a sentence whose next word (``words[0]``) is not ``expected``."""
    found = f"found {words[0]!r}" if words else "the sentence ends there"
    return ValueError(
        f"cannot translate {sentence!r}: expected {expected} but {found}; "
        f"the grammar knows: {', '.join(sorted(known))}"
    )


def _parse_noun_phrase(words: list[str], sentence: str) -> tuple[NounPhrase, list[str]]:
    """Read ``the [adjective] noun`` from the front of ``words``; return it and the rest."""
    if not words:
        raise ValueError(f"cannot translate {sentence!r}: it ends where a noun phrase should start")
    if words[0] != "the":
        raise _unexpected_word(words, "'the'", sentence, ["the"])
    rest = words[1:]
    adjective = rest.pop(0) if rest and rest[0] in ADJECTIVES else None
    if not rest or rest[0] not in _ENGLISH_NOUN_FORMS:
        raise _unexpected_word(rest, "a noun", sentence, _ENGLISH_NOUN_FORMS)
    noun, plural = _ENGLISH_NOUN_FORMS[rest[0]]
    return NounPhrase(noun, plural, adjective), rest[1:]


def translate_english(sentence: str) -> str:
    """Translate one sentence of the toy grammar into French.

    The grammar is ``the [colour] noun verb [preposition] the [colour] noun``, e.g.
    ``"the cat sits on the mat"`` -> ``"le chat est assis sur le tapis"``.
    Only the syntax is checked ("the cake sits to the cow" translates too); the generator
    is what keeps sentences sensible. Raises ``ValueError`` naming the first unexpected word.
    """
    words = sentence.lower().split()
    subject, rest = _parse_noun_phrase(words, sentence)
    if not rest or rest[0] not in _ENGLISH_VERB_FORMS:
        raise _unexpected_word(rest, "a verb", sentence, _ENGLISH_VERB_FORMS)
    verb_word, rest = rest[0], rest[1:]
    verb, verb_is_plural = _ENGLISH_VERB_FORMS[verb_word]
    if verb_is_plural != subject.plural:
        number = "plural" if subject.plural else "singular"
        raise ValueError(
            f"cannot translate {sentence!r}: the verb {verb_word!r} does not agree with the "
            f"{number} subject"
        )

    french = [_french_noun_phrase(subject), verb.french_plural if subject.plural else verb.french]
    if verb.participle is not None:  # "est assis" / "sont assises": agrees like an adjective
        french.append(verb.participle.form(subject.noun.gender, subject.plural))

    preposition = ""
    if verb.takes_preposition:
        if not rest or rest[0] not in PREPOSITIONS:
            raise _unexpected_word(rest, "a preposition", sentence, PREPOSITIONS)
        preposition, rest = PREPOSITIONS[rest[0]], rest[1:]
    complement, rest = _parse_noun_phrase(rest, sentence)
    if rest:
        raise ValueError(
            f"cannot translate {sentence!r}: unexpected words at the end: {' '.join(rest)!r}"
        )
    french.append(_french_noun_phrase(complement, preposition))
    return " ".join(french)


def _random_noun_phrase(rng: random.Random, nouns: Sequence[Noun]) -> NounPhrase:
    noun = rng.choice(nouns)
    wants_colour = rng.random() < 0.35 and noun not in PEOPLE
    adjective = rng.choice(sorted(ADJECTIVES)) if wants_colour else None
    return NounPhrase(noun, plural=rng.random() < 0.4, adjective=adjective)


def _random_complement(rng: random.Random, verb: Verb) -> list[str]:
    """English words after ``verb``, chosen so that the sentence makes sense."""
    if verb.complement == "food":
        return [_english_noun_phrase(_random_noun_phrase(rng, FOODS))]
    if verb.complement == "anything":
        return [_english_noun_phrase(_random_noun_phrase(rng, [*ANIMATE_NOUNS, *PLACES]))]
    if verb.complement == "destination":
        place = rng.choice([noun for noun, prepositions in PLACES.items() if "to" in prepositions])
        preposition = "to"
    else:
        place = rng.choice(list(PLACES))
        preposition = rng.choice([p for p in PLACES[place] if p != "to"])
    return [preposition, _english_noun_phrase(_random_noun_phrase(rng, [place]))]


def _random_english_sentence(rng: random.Random) -> str:
    subject = _random_noun_phrase(rng, ANIMATE_NOUNS)
    verb = rng.choice(VERBS)
    verb_word = verb.english_plural if subject.plural else verb.english
    return " ".join([_english_noun_phrase(subject), verb_word, *_random_complement(rng, verb)])


def make_translation_pairs(n: int, seed: int = 0) -> list[tuple[str, str]]:
    """Generate ``n`` (English, French) sentence pairs from a small grammar, deterministically.

    The grammar is deliberately small (about 60 English words) so that a Transformer learns it
    on a CPU in minutes, yet it has the phenomena that make translation more than
    word-for-word substitution:

    * gender and number agreement of articles, adjectives, verbs and participles:
      ``la vache noire``, ``les vaches sont assises``, ``le chien dort`` / ``les chiens dorment``;
    * reordering: English adjectives come before the noun, French colours after it
      (``the black cat`` -> ``le chat noir``);
    * irregular plurals: ``mice`` -> ``souris``, ``oiseau`` -> ``oiseaux``;
    * elision and contraction: ``l'oiseau``, ``près de le`` -> ``près du``,
      ``à les`` -> ``aux``.

    Sentences are lower-case, without final punctuation, words separated by single spaces
    (``l'`` stays attached: ``l'oiseau``), so splitting on spaces tokenises them.
    The pairs are distinct unless ``n`` is larger than the grammar can produce.
    """
    if n < 0:
        raise ValueError(f"n must be >= 0, got {n}")
    rng = random.Random(seed)
    sentences: dict[str, None] = {}  # an ordered set: keeps generation order, drops repeats
    attempts = 0
    while len(sentences) < n and attempts < 50 * n + 1000:
        sentences.setdefault(_random_english_sentence(rng))
        attempts += 1
    english = list(sentences)
    while len(english) < n:  # only when the grammar ran out of new sentences
        english.append(_random_english_sentence(rng))
    return [(sentence, translate_english(sentence)) for sentence in english]


def split_translation_pairs(
    pairs: Sequence[tuple[str, str]], test_fraction: float = 0.1, seed: int = 0
) -> tuple[list[tuple[str, str]], list[tuple[str, str]]]:
    """Split pairs into (train, test) so that no source sentence of the test set is in train.

    The split is by distinct source sentence, so a repeated pair can never land on both sides
    (which would let the test score reward memorisation). Order within each part is kept.
    """
    if not 0.0 < test_fraction < 1.0:
        raise ValueError(f"test_fraction must be strictly between 0 and 1, got {test_fraction}")
    sources = list(dict.fromkeys(source for source, _ in pairs))
    if len(sources) < 2:
        raise ValueError(
            f"need at least 2 distinct source sentences to split, got {len(sources)}"
        )
    n_test = min(max(1, round(len(sources) * test_fraction)), len(sources) - 1)
    test_sources = set(random.Random(seed).sample(sources, n_test))
    train = [pair for pair in pairs if pair[0] not in test_sources]
    test = [pair for pair in pairs if pair[0] in test_sources]
    return train, test
