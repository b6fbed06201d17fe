"""Tests for tfcourse.data (Tiny Shakespeare, batching, the EN->FR corpus). No test touches the network: downloads go to a fake urlopen."""

from __future__ import annotations

import hashlib
import io
import os
import urllib.error
import urllib.request

import pytest
import torch

from tfcourse.data import shakespeare as data
from tfcourse.data import (
    ChecksumMismatchError,
    DatasetUnavailableError,
    get_batch,
    make_translation_pairs,
    split_translation_pairs,
    train_val_split,
    translate_english,
)
from tfcourse.data.shakespeare import CACHE_DIR_ENV, DATA_DIR_ENV

FAKE_TEXT = "First Citizen:\nBefore we proceed any further, hear me speak.\n" * 50
FAKE_BYTES = FAKE_TEXT.encode("utf-8")
FAKE_SHA256 = hashlib.sha256(FAKE_BYTES).hexdigest()


# ---------------------------------------------------------------------------------------------
# Tiny Shakespeare: where the file comes from
# ---------------------------------------------------------------------------------------------


@pytest.fixture
def isolated_env(monkeypatch, tmp_path):
    """No data dir, a private cache dir, the fake text's checksum, and no real network."""
    monkeypatch.delenv(DATA_DIR_ENV, raising=False)
    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "cache"))
    monkeypatch.setattr(data, "TINY_SHAKESPEARE_SHA256", FAKE_SHA256)

    def no_network(*args, **kwargs):
        raise AssertionError("the test tried to use the network")

    monkeypatch.setattr(urllib.request, "urlopen", no_network)
    return tmp_path


class FakeResponse:
    """Stands in for the object urlopen returns: headers, read(n), context manager."""

    def __init__(self, payload: bytes) -> None:
        self._stream = io.BytesIO(payload)
        self.headers = {"Content-Length": str(len(payload))}

    def read(self, size: int = -1) -> bytes:
        return self._stream.read(size)

    def __enter__(self) -> FakeResponse:
        return self

    def __exit__(self, *exc_info) -> None:
        return None


def fake_urlopen(payload: bytes, calls: list[str]):
    def urlopen(url, *args, **kwargs):
        calls.append(url)
        return FakeResponse(payload)

    return urlopen


@pytest.mark.parametrize("filename", ["tinyshakespeare.txt", "input.txt"])
def test_data_dir_copy_is_read_and_verified(isolated_env, monkeypatch, filename):
    data_dir = isolated_env / "course-data"
    data_dir.mkdir()
    (data_dir / filename).write_bytes(FAKE_BYTES)
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))

    assert data.load_tiny_shakespeare() == FAKE_TEXT
    assert not (isolated_env / "cache").exists()  # nothing downloaded or cached


def test_data_dir_without_the_file_is_an_error_not_a_download(isolated_env, monkeypatch):
    data_dir = isolated_env / "empty"
    data_dir.mkdir()
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))

    with pytest.raises(FileNotFoundError, match=DATA_DIR_ENV) as error:
        data.load_tiny_shakespeare()
    assert str(data_dir) in str(error.value)


def test_checksum_mismatch_names_both_digests(isolated_env, monkeypatch):
    data_dir = isolated_env / "course-data"
    data_dir.mkdir()
    (data_dir / "tinyshakespeare.txt").write_bytes(b"not shakespeare")
    monkeypatch.setenv(DATA_DIR_ENV, str(data_dir))

    with pytest.raises(ChecksumMismatchError) as error:
        data.load_tiny_shakespeare()
    message = str(error.value)
    assert FAKE_SHA256 in message
    assert hashlib.sha256(b"not shakespeare").hexdigest() in message


def test_corrupt_cache_says_to_delete_it(isolated_env):
    cache_file = data.tiny_shakespeare_cache_path()
    cache_file.parent.mkdir(parents=True)
    cache_file.write_bytes(FAKE_BYTES[:100])  # a truncated download

    with pytest.raises(ChecksumMismatchError, match="Delete"):
        data.load_tiny_shakespeare()


def test_download_fills_the_cache_once(isolated_env, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen(FAKE_BYTES, calls))

    assert data.load_tiny_shakespeare() == FAKE_TEXT
    cache_file = isolated_env / "cache" / "tinyshakespeare.txt"
    assert cache_file.read_bytes() == FAKE_BYTES
    assert calls == [data.TINY_SHAKESPEARE_URL]

    assert data.load_tiny_shakespeare() == FAKE_TEXT  # second call: from the cache
    assert len(calls) == 1
    assert os.listdir(cache_file.parent) == ["tinyshakespeare.txt"]  # no temporary files left


def test_corrupt_download_is_not_kept(isolated_env, monkeypatch):
    calls: list[str] = []
    monkeypatch.setattr(urllib.request, "urlopen", fake_urlopen(b"garbage", calls))

    with pytest.raises(ChecksumMismatchError, match=FAKE_SHA256):
        data.load_tiny_shakespeare()
    assert os.listdir(isolated_env / "cache") == []


def test_offline_without_a_copy_explains_the_fix(isolated_env, monkeypatch):
    def offline(*args, **kwargs):
        raise urllib.error.URLError("Temporary failure in name resolution")

    monkeypatch.setattr(urllib.request, "urlopen", offline)

    with pytest.raises(DatasetUnavailableError) as error:
        data.load_tiny_shakespeare()
    message = str(error.value)
    assert DATA_DIR_ENV in message
    assert str(isolated_env / "cache" / "tinyshakespeare.txt") in message
    assert data.TINY_SHAKESPEARE_URL in message


def test_cache_dir_resolution(monkeypatch, tmp_path):
    monkeypatch.delenv(CACHE_DIR_ENV, raising=False)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path / "xdg"))
    assert data.cache_dir() == tmp_path / "xdg" / "tfcourse"

    monkeypatch.setenv(CACHE_DIR_ENV, str(tmp_path / "mine"))
    assert data.cache_dir() == tmp_path / "mine"

    monkeypatch.delenv(CACHE_DIR_ENV)
    monkeypatch.delenv("XDG_CACHE_HOME")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))
    assert data.cache_dir() == tmp_path / "home" / ".cache" / "tfcourse"


@pytest.mark.skipif(
    not os.environ.get(DATA_DIR_ENV),
    reason=f"needs the real Tiny Shakespeare: set {DATA_DIR_ENV} to a folder holding it",
)
def test_real_tiny_shakespeare_matches_published_size():
    text = data.load_tiny_shakespeare()
    assert len(text.encode("utf-8")) == data.TINY_SHAKESPEARE_BYTES
    assert text.startswith("First Citizen:")


# ---------------------------------------------------------------------------------------------
# Splitting and batching
# ---------------------------------------------------------------------------------------------


def test_train_val_split_keeps_order():
    ids = torch.arange(100)
    train, val = train_val_split(ids)
    assert torch.equal(train, torch.arange(90)) and torch.equal(val, torch.arange(90, 100))
    assert train_val_split("abcdefghij", 0.8) == ("abcdefgh", "ij")


@pytest.mark.parametrize("fraction", [0.0, 1.0, -0.1, 1.5])
def test_train_val_split_rejects_bad_fraction(fraction):
    with pytest.raises(ValueError, match="between 0 and 1"):
        train_val_split(torch.arange(10), fraction)


def test_get_batch_windows_and_targets():
    ids = torch.arange(1000) * 7 % 101  # distinct-looking values, so shifts are detectable
    x, y = get_batch(ids, batch_size=5, context_len=8, generator=torch.Generator().manual_seed(0))
    assert x.shape == y.shape == (5, 8)
    assert x.dtype == y.dtype == torch.long
    assert torch.equal(x[:, 1:], y[:, :-1])  # y is x shifted by one
    for row_x, row_y in zip(x, y):
        # Find where the window starts, then compare against the data itself.
        start = next(i for i in range(len(ids) - 8) if torch.equal(ids[i : i + 8], row_x))
        assert torch.equal(row_y, ids[start + 1 : start + 9])


def test_get_batch_reaches_the_last_token():
    ids = torch.arange(5)
    x, y = get_batch(ids, batch_size=1, context_len=4)  # only one window fits
    assert x.tolist() == [[0, 1, 2, 3]] and y.tolist() == [[1, 2, 3, 4]]


def test_get_batch_is_reproducible_with_a_seeded_generator():
    ids = torch.arange(500)
    first = get_batch(ids, 4, 16, generator=torch.Generator().manual_seed(42))
    again = get_batch(ids, 4, 16, generator=torch.Generator().manual_seed(42))
    other = get_batch(ids, 4, 16, generator=torch.Generator().manual_seed(43))
    assert torch.equal(first[0], again[0]) and torch.equal(first[1], again[1])
    assert not torch.equal(first[0], other[0])


@pytest.mark.parametrize(
    ("tokens", "batch_size", "context_len", "error", "pattern"),
    [
        (torch.arange(20).reshape(4, 5), 2, 3, ValueError, "1-D"),
        (torch.rand(20), 2, 3, TypeError, "integer"),
        ([1, 2, 3, 4], 2, 2, TypeError, "torch.Tensor"),
        (torch.arange(8), 2, 8, ValueError, "8 tokens.*9"),
        (torch.arange(20), 0, 3, ValueError, "empty batch"),
        (torch.arange(20), 2, 0, ValueError, "context_len"),
    ],
)
def test_get_batch_errors(tokens, batch_size, context_len, error, pattern):
    with pytest.raises(error, match=pattern):
        get_batch(tokens, batch_size, context_len)


# ---------------------------------------------------------------------------------------------
# The English→French corpus
# ---------------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("english", "french"),
    [
        ("the cat sits on the mat", "le chat est assis sur le tapis"),
        ("the cats sit on the mats", "les chats sont assis sur les tapis"),  # plural
        ("the cow sits under the table", "la vache est assise sous la table"),  # feminine
        ("the mice sit in the house", "les souris sont assises dans la maison"),
        ("the white cows see the black dog", "les vaches blanches voient le chien noir"),
        ("the green bird eats the apples", "l'oiseau vert mange les pommes"),  # elision
        ("the dog sleeps near the bed", "le chien dort près du lit"),  # de + le = du
        ("the dogs run near the gardens", "les chiens courent près des jardins"),  # de + les
        ("the girl sits near the tree", "la fille est assise près de l'arbre"),
        ("the horses go to the garden", "les chevaux vont au jardin"),  # à + le = au
        ("the boy goes to the house", "le garçon va à la maison"),
    ],
)
def test_translate_english(english, french):
    assert translate_english(english) == french


@pytest.mark.parametrize(
    ("sentence", "pattern"),
    [
        ("the zebra sits on the mat", "zebra"),
        ("the cat sit on the mat", "agree"),
        ("the cat sits with the mat", "preposition"),
        ("the cat sits on the mat today", "today"),
        ("the black cow sleeps", "expected a preposition but the sentence ends there"),
        ("the cow eats", "ends where a noun phrase should start"),
    ],
)
def test_translate_english_errors_name_the_problem(sentence, pattern):
    with pytest.raises(ValueError, match=pattern):
        translate_english(sentence)


def test_translation_pairs_are_deterministic_distinct_and_consistent():
    pairs = make_translation_pairs(300, seed=1)
    assert pairs == make_translation_pairs(300, seed=1)
    assert pairs != make_translation_pairs(300, seed=2)
    assert len(pairs) == 300 and len(set(pairs)) == 300
    for english, french in pairs:
        assert translate_english(english) == french
        for sentence in (english, french):
            assert sentence == sentence.lower() and sentence == " ".join(sentence.split())
            assert sentence[-1].isalpha()  # no final punctuation


def test_split_translation_pairs_is_disjoint():
    pairs = make_translation_pairs(200, seed=0)
    pairs = pairs + pairs[:20]  # repeats must stay on one side
    train, test = split_translation_pairs(pairs, test_fraction=0.1, seed=0)
    assert len(train) + len(test) == len(pairs)
    assert not {english for english, _ in train} & {english for english, _ in test}
    assert not {french for _, french in train} & {french for _, french in test}
    assert len({english for english, _ in test}) == 20
    assert (train, test) == split_translation_pairs(pairs, test_fraction=0.1, seed=0)
    with pytest.raises(ValueError, match="between 0 and 1"):
        split_translation_pairs(pairs, test_fraction=1.0)
