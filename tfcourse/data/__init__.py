"""The data the course trains on.

    shakespeare.py  Tiny Shakespeare: local copy, cache or download, checked by SHA-256
    batching.py     train/val split and random (context, next-token) windows for a language model
    en_fr.py        a generated English→French parallel corpus (the translation lesson)
    zh_en.py        a generated Chinese→English parallel corpus (the same lesson, 猫追狗 → the cat chases the dog)
    recall.py       the long-range recall task of the RNN lesson
"""

from .batching import get_batch, train_val_split
from .en_fr import make_translation_pairs, split_translation_pairs, translate_english
from .recall import recall_batch
from .zh_en import CHINESE_WORDS, make_chinese_english_pairs
from .shakespeare import (DATA_DIR_ENV, TINY_SHAKESPEARE_SHA256, CharCorpus, ChecksumMismatchError,
                          DatasetUnavailableError, char_corpus, load_tiny_shakespeare)

__all__ = [
    "load_tiny_shakespeare", "char_corpus", "CharCorpus", "DatasetUnavailableError", "ChecksumMismatchError", "DATA_DIR_ENV",
    "TINY_SHAKESPEARE_SHA256", "train_val_split", "get_batch", "make_translation_pairs",
    "split_translation_pairs", "translate_english", "recall_batch", "make_chinese_english_pairs",
    "CHINESE_WORDS",
]
