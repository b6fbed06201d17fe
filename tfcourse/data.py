"""Data for the course: Tiny Shakespeare, training batches, and a toy English→French corpus.

Three independent pieces live here:

* **Tiny Shakespeare** (about 1 MB of plays) for the character / BPE language-model lessons.
  :func:`load_tiny_shakespeare` looks for a local copy first and downloads the file only once,
  checking its SHA-256 so that every learner trains on exactly the same bytes.
* **Batching**: :func:`train_val_split` and :func:`get_batch` cut a long stream of token ids
  into random ``(context, next-token target)`` windows.
* **A generated parallel corpus**: :func:`make_translation_pairs` writes English sentences
  from a tiny grammar together with their French translations, for the encoder–decoder lesson.
"""

from __future__ import annotations

import hashlib
import os
import random
import tempfile
import urllib.request
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TypeVar

import torch

# ---------------------------------------------------------------------------------------------
# Tiny Shakespeare
# ---------------------------------------------------------------------------------------------

TINY_SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
TINY_SHAKESPEARE_BYTES = 1_115_394
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TINY_SHAKESPEARE_FILENAME = "tinyshakespeare.txt"

# Names accepted inside $TFCOURSE_DATA_DIR: ours, and the name the file has upstream.
_DATA_DIR_FILENAMES = (TINY_SHAKESPEARE_FILENAME, "input.txt")

DATA_DIR_ENV = "TFCOURSE_DATA_DIR"
CACHE_DIR_ENV = "TFCOURSE_CACHE_DIR"

_DOWNLOAD_CHUNK_BYTES = 64 * 1024
_DOWNLOAD_TIMEOUT_SECONDS = 60


class DatasetUnavailableError(RuntimeError):
    """No local copy of a dataset exists and it could not be downloaded (e.g. offline)."""


class ChecksumMismatchError(RuntimeError):
    """A data file's SHA-256 differs from the published one: the file is corrupt or different."""


def _env_path(name: str) -> Path | None:
    """The path held by environment variable ``name``; ``None`` when unset or empty."""
    value = os.environ.get(name, "").strip()
    return Path(value).expanduser() if value else None


def cache_dir() -> Path:
    """Folder where downloaded datasets are kept.

    ``$TFCOURSE_CACHE_DIR`` if set, else ``$XDG_CACHE_HOME/tfcourse``, else ``~/.cache/tfcourse``.
    The folder is not created here; :func:`download` creates it when it first writes a file.
    """
    explicit = _env_path(CACHE_DIR_ENV)
    if explicit is not None:
        return explicit
    xdg_cache = _env_path("XDG_CACHE_HOME")
    if xdg_cache is not None:
        return xdg_cache / "tfcourse"
    return Path.home() / ".cache" / "tfcourse"


def tiny_shakespeare_cache_path() -> Path:
    """Where :func:`load_tiny_shakespeare` keeps its downloaded copy."""
    return cache_dir() / TINY_SHAKESPEARE_FILENAME


def find_in_data_dir(data_dir: Path) -> Path:
    """The Tiny Shakespeare file in ``data_dir``, named ``tinyshakespeare.txt`` or ``input.txt``.

    Raises ``FileNotFoundError`` rather than falling back to a download: a learner who set
    ``$TFCOURSE_DATA_DIR`` wants *that* copy, and a silent download would hide a typo.
    """
    for name in _DATA_DIR_FILENAMES:
        candidate = data_dir / name
        if candidate.is_file():
            return candidate
    raise FileNotFoundError(
        f"${DATA_DIR_ENV} is set to {str(data_dir)!r}, but that folder holds neither "
        f"{' nor '.join(_DATA_DIR_FILENAMES)}. Put Tiny Shakespeare there (from "
        f"{TINY_SHAKESPEARE_URL}), or unset {DATA_DIR_ENV} to use the download cache."
    )


def sha256_of(path: str | os.PathLike[str]) -> str:
    """Hex SHA-256 digest of a file, read in chunks so large files need little memory."""
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for chunk in iter(lambda: file.read(_DOWNLOAD_CHUNK_BYTES), b""):
            digest.update(chunk)
    return digest.hexdigest()


def verify_sha256(path: str | os.PathLike[str], expected_sha256: str, how_to_fix: str) -> None:
    """Raise :class:`ChecksumMismatchError` unless ``path`` has digest ``expected_sha256``.

    ``how_to_fix`` ends the message, because the right remedy depends on where the file came from.
    """
    actual = sha256_of(path)
    if actual != expected_sha256:
        size = os.path.getsize(path)
        raise ChecksumMismatchError(
            f"{path} ({size:,} bytes) has SHA-256 {actual}, but {expected_sha256} was expected. "
            f"The file is incomplete, corrupt or a different file. {how_to_fix}"
        )


def download(url: str, dest: str | os.PathLike[str], expected_sha256: str) -> Path:
    """Download ``url`` to ``dest`` with a progress bar, checking its SHA-256 before keeping it.

    The bytes go to a temporary file in the destination folder and are moved into place with
    ``os.replace`` only once complete and verified. So an interrupted or corrupt download never
    leaves a half-written ``dest`` that a later call would mistake for a good copy.
    Network failures propagate as ``urllib.error.URLError`` / ``OSError``.
    """
    from tqdm.auto import tqdm  # imported here: only a download needs a progress bar

    dest = Path(dest)
    dest.parent.mkdir(parents=True, exist_ok=True)
    # Same folder as dest, so os.replace is a rename on one file system (atomic).
    handle, tmp_name = tempfile.mkstemp(dir=dest.parent, prefix=f".{dest.name}.", suffix=".part")
    try:
        digest = hashlib.sha256()
        with os.fdopen(handle, "wb") as tmp_file, urllib.request.urlopen(
            url, timeout=_DOWNLOAD_TIMEOUT_SECONDS
        ) as response:
            length = response.headers.get("Content-Length")
            total = int(length) if length else None  # unknown size: the bar just counts bytes
            with tqdm(total=total, unit="B", unit_scale=True, desc=dest.name) as progress:
                while chunk := response.read(_DOWNLOAD_CHUNK_BYTES):
                    tmp_file.write(chunk)
                    digest.update(chunk)
                    progress.update(len(chunk))
        actual = digest.hexdigest()
        if actual != expected_sha256:
            raise ChecksumMismatchError(
                f"The file downloaded from {url} has SHA-256 {actual}, but {expected_sha256} "
                f"was expected, so it was not saved. Try again; if it keeps happening, download "
                f"the file by hand and save it as {dest}."
            )
        os.replace(tmp_name, dest)
    except BaseException:
        # Also on KeyboardInterrupt: never leave a partial download behind.
        Path(tmp_name).unlink(missing_ok=True)
        raise
    return dest


def _offline_message(cache_path: Path, error: BaseException) -> str:
    return (
        f"Tiny Shakespeare is not on this computer and could not be downloaded from "
        f"{TINY_SHAKESPEARE_URL} ({error}). Fix it in one of two ways:\n"
        f"  1. download that URL by hand (e.g. in a browser) and save it as {cache_path}\n"
        f"  2. set the environment variable {DATA_DIR_ENV} to a folder that holds "
        f"{TINY_SHAKESPEARE_FILENAME}"
    )


def load_tiny_shakespeare() -> str:
    """Return the full text of Tiny Shakespeare (1,115,394 characters), verified by SHA-256.

    Where the text comes from, in order:

    1. ``$TFCOURSE_DATA_DIR/tinyshakespeare.txt`` (or ``input.txt``) when that variable is set
       (e.g. a copy shipped with the course); a missing file there is an error, not a download.
    2. The cache, ``cache_dir()/tinyshakespeare.txt``, filled by an earlier download.
    3. A one-time download from :data:`TINY_SHAKESPEARE_URL` into the cache.

    Raises :class:`ChecksumMismatchError` if a copy has the wrong contents and
    :class:`DatasetUnavailableError` if there is no copy and the download fails.
    """
    data_dir = _env_path(DATA_DIR_ENV)
    if data_dir is not None:
        path = find_in_data_dir(data_dir)
        verify_sha256(
            path,
            TINY_SHAKESPEARE_SHA256,
            f"Replace it with a fresh copy of {TINY_SHAKESPEARE_URL} "
            f"({TINY_SHAKESPEARE_BYTES:,} bytes).",
        )
        return path.read_text(encoding="utf-8")

    path = tiny_shakespeare_cache_path()
    if path.is_file():
        verify_sha256(
            path,
            TINY_SHAKESPEARE_SHA256,
            f"Delete {path} and call load_tiny_shakespeare() again to re-download it.",
        )
        return path.read_text(encoding="utf-8")

    try:
        download(TINY_SHAKESPEARE_URL, path, TINY_SHAKESPEARE_SHA256)
    except OSError as error:  # URLError is an OSError: no network, DNS failure, timeout...
        raise DatasetUnavailableError(_offline_message(path, error)) from error
    return path.read_text(encoding="utf-8")


# ---------------------------------------------------------------------------------------------
# Splitting and batching token streams
# ---------------------------------------------------------------------------------------------

SequenceT = TypeVar("SequenceT", torch.Tensor, Sequence)


def train_val_split(data: SequenceT, train_fraction: float = 0.9) -> tuple[SequenceT, SequenceT]:
    """Split a 1-D tensor (or list, string...) into its first ``train_fraction`` and the rest.

    There is no shuffling: the order of text matters, and taking the validation set from the
    end keeps its windows from overlapping training windows.
    """
    if not 0.0 < train_fraction < 1.0:
        raise ValueError(
            f"train_fraction must be strictly between 0 and 1, got {train_fraction}"
        )
    if isinstance(data, torch.Tensor) and data.dim() != 1:
        raise ValueError(f"expected a 1-D tensor of token ids, got shape {tuple(data.shape)}")
    n_train = int(len(data) * train_fraction)
    if n_train == 0 or n_train == len(data):
        raise ValueError(
            f"cannot split {len(data)} items with train_fraction={train_fraction}: "
            f"one of the two parts would be empty"
        )
    return data[:n_train], data[n_train:]


def _check_token_ids(data: torch.Tensor) -> None:
    """Errors for anything :func:`get_batch` cannot cut windows from."""
    if not isinstance(data, torch.Tensor):
        raise TypeError(
            f"data must be a torch.Tensor of token ids, got {type(data).__name__}; "
            f"convert it with torch.tensor(ids, dtype=torch.long)"
        )
    if data.dim() != 1:
        raise ValueError(
            f"data must be a 1-D tensor of token ids (N,), got shape {tuple(data.shape)}"
        )
    if data.dtype.is_floating_point or data.dtype.is_complex or data.dtype == torch.bool:
        raise TypeError(
            f"data must hold integer token ids (e.g. torch.long), got dtype {data.dtype}"
        )


def get_batch(
    data: torch.Tensor,
    batch_size: int,
    context_len: int,
    generator: torch.Generator | None = None,
    device: torch.device | str | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample ``batch_size`` random windows of ``context_len`` tokens and their next tokens.

    Returns ``(x, y)``, both ``(batch_size, context_len)`` of dtype ``torch.long``, with
    ``x[b] = data[i : i + T]`` and ``y[b] = data[i + 1 : i + T + 1]``: at every position the
    target is the token that comes next. Pass a seeded ``torch.Generator`` for reproducible
    batches; ``device`` is where the batch is returned (default: ``data``'s device).
    """
    _check_token_ids(data)
    if batch_size < 1:
        raise ValueError(f"batch_size must be at least 1, got {batch_size} (an empty batch)")
    if context_len < 1:
        raise ValueError(f"context_len must be at least 1, got {context_len}")
    n_tokens = data.shape[0]
    if n_tokens < context_len + 1:
        raise ValueError(
            f"data has {n_tokens} tokens, but one window needs context_len + 1 = "
            f"{context_len + 1} (the context plus the token after it)"
        )

    # A window starting at i needs data[i + context_len] as its last target,
    # so i ranges over 0 .. n_tokens - context_len - 1 (randint's high is exclusive).
    sample_device = generator.device if generator is not None else torch.device("cpu")
    starts = torch.randint(
        0, n_tokens - context_len, (batch_size,), generator=generator, device=sample_device
    ).to(data.device)  # (B,)
    offsets = torch.arange(context_len, device=data.device)  # (T,)
    positions = starts[:, None] + offsets[None, :]  # (B, 1) + (1, T) -> (B, T)

    x = data[positions].long()  # (B, T): the context
    y = data[positions + 1].long()  # (B, T): the same windows shifted one token ahead
    if device is not None:
        x, y = x.to(device), y.to(device)
    return x, y


# ---------------------------------------------------------------------------------------------
# A generated English→French parallel corpus
# ---------------------------------------------------------------------------------------------

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
