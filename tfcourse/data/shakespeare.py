"""Tiny Shakespeare (about 1 MB of plays), the text the language-model lessons train on.

`load_tiny_shakespeare` looks for a local copy first ($TFCOURSE_DATA_DIR, then the cache) and
downloads the file only once, checking its SHA-256 so that every learner trains on exactly the
same bytes.
"""

from __future__ import annotations

import hashlib
import os
import tempfile
import urllib.request
from dataclasses import dataclass
from pathlib import Path

import torch

from ..cache import CACHE_DIR_ENV, cache_dir  # (CACHE_DIR_ENV: named here too, as before)
from ..cache import env_path as _env_path
from ..tokenizers import CharTokenizer
from .batching import get_batch, train_val_split


TINY_SHAKESPEARE_URL = (
    "https://raw.githubusercontent.com/karpathy/char-rnn/master/data/tinyshakespeare/input.txt"
)
TINY_SHAKESPEARE_BYTES = 1_115_394
TINY_SHAKESPEARE_SHA256 = "86c4e6aa9db7c042ec79f339dcb96d42b0075e16b8fc2e86bf0ca57e2dc565ed"
TINY_SHAKESPEARE_FILENAME = "tinyshakespeare.txt"

# Names accepted inside $TFCOURSE_DATA_DIR: ours, and the name the file has upstream.
_DATA_DIR_FILENAMES = (TINY_SHAKESPEARE_FILENAME, "input.txt")

DATA_DIR_ENV = "TFCOURSE_DATA_DIR"

_DOWNLOAD_CHUNK_BYTES = 64 * 1024
_DOWNLOAD_TIMEOUT_SECONDS = 60


class DatasetUnavailableError(RuntimeError):
    """No local copy of a dataset exists and it could not be downloaded (e.g. offline)."""


class ChecksumMismatchError(RuntimeError):
    """A data file's SHA-256 differs from the published one: the file is corrupt or different."""


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
# The character-level corpus that lesson 08, the training script and the benchmarks train on
# ---------------------------------------------------------------------------------------------


@dataclass
class CharCorpus:
    """A text encoded character by character, split 90/10 into train and val token streams."""

    text: str
    tokenizer: CharTokenizer
    splits: dict[str, torch.Tensor]  # "train", "val" -> 1-D token ids

    def to(self, device: torch.device | str) -> CharCorpus:
        """The same corpus with its token streams on `device` (batches are then cut there)."""
        return CharCorpus(self.text, self.tokenizer, {k: v.to(device) for k, v in self.splits.items()})

    def batches(self, batch_size: int, context_len: int):
        """get_batch(split, generator) for tfcourse.training.train: random windows of one split."""

        def get_split_batch(split: str, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
            return get_batch(self.splits[split], batch_size, context_len, generator)

        return get_split_batch


def char_corpus(text: str | None = None) -> CharCorpus:
    """`text` (default: Tiny Shakespeare) as a character-level corpus."""
    text = load_tiny_shakespeare() if text is None else text
    tokenizer = CharTokenizer.from_text(text)
    data = torch.tensor(tokenizer.encode(text), dtype=torch.long)  # (N,)
    return CharCorpus(text, tokenizer, dict(zip(("train", "val"), train_val_split(data))))
