"""The translation lesson's pipeline: English→French (and Chinese→English) with the encoder–decoder Transformer.

    pairs ──build_vocabularies──▶ two WordTokenizers (<pad> <unk> <bos> <eos> first)
          ──encode_pairs──▶ src (N, S), tgt (N, T): word ids, padded with <pad>
    batch ──shift_target──▶ decoder input <bos> y1 … yn, labels y1 … yn <eos>   (teacher forcing)
          ──Transformer──▶ logits (B, T + 1, V) ──cross_entropy(label smoothing, ignore padding)──▶ loss

Evaluation decodes held-out sentences step by step (greedy or beam) and scores them with
exact match and token accuracy, next to a copy-the-source baseline. `train_translator`
puts it all together; the lesson and the tests both call it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..data.en_fr import make_translation_pairs, split_translation_pairs
from ..data.zh_en import make_chinese_english_pairs
from ..decoding import translate, translate_beam
from ..models import Transformer, TransformerConfig
from ..output import IGNORE_INDEX, cross_entropy  # IGNORE_INDEX: padding is not a word to predict
from ..tokenizers import WordTokenizer
from ..training.loop import TrainConfig, train


# ----------------------------------------------------------------------------------------------
# Vocabularies and batches
# ----------------------------------------------------------------------------------------------


# One token per Chinese character (Chinese writes no spaces); anything else is cut at spaces.
_WORD = re.compile(r"[\u4e00-\u9fff]|[^\s\u4e00-\u9fff]+")


def words(sentence: str) -> list[str]:
    """The tokens of a sentence: English and French words cut at single spaces (l'oiseau stays one word),
    Chinese one character at a time (猫追狗 -> 猫, 追, 狗)."""
    return _WORD.findall(sentence)


def build_vocabularies(pairs: Sequence[tuple[str, str]]) -> tuple[WordTokenizer, WordTokenizer]:
    """One vocabulary per language, from the training pairs; <pad>=0, <unk>=1, <bos>=2, <eos>=3."""
    source = WordTokenizer.from_texts(words(english) for english, _ in pairs)
    target = WordTokenizer.from_texts(words(french) for _, french in pairs)
    return source, target


def pad(rows: Sequence[Sequence[int]], pad_id: int, length: int | None = None) -> Tensor:
    """Lists of ids of different lengths -> (N, length) tensor, filled up with pad_id on the right."""
    length = length or max(len(row) for row in rows)
    out = torch.full((len(rows), length), pad_id, dtype=torch.long)
    for i, row in enumerate(rows):
        out[i, : len(row)] = torch.tensor(row, dtype=torch.long)
    return out


def encode_pairs(pairs: Sequence[tuple[str, str]], source_vocab: WordTokenizer,
                 target_vocab: WordTokenizer) -> tuple[Tensor, Tensor]:
    """-> src (N, S) and tgt (N, T): word ids only (no <bos>/<eos>), padded to the longest sentence."""
    src = pad([source_vocab.encode(words(english)) for english, _ in pairs], source_vocab.pad_id)
    tgt = pad([target_vocab.encode(words(french)) for _, french in pairs], target_vocab.pad_id)
    return src, tgt


def shift_target(tgt: Tensor, bos_id: int, eos_id: int, pad_id: int,
                 ignore_index: int = IGNORE_INDEX) -> tuple[Tensor, Tensor]:
    """Teacher forcing. tgt (B, T) word ids padded with pad_id -> (decoder_input, labels), both (B, T + 1).

    decoder_input = <bos> y1 … yn <pad> …   (the target shifted right: position t sees y1 … yt only)
    labels        = y1 … yn <eos> ignore …  (what position t must predict; padding is not scored)
    """
    batch = tgt.shape[0]
    is_word = tgt != pad_id  # (B, T)
    bos = torch.full((batch, 1), bos_id, dtype=tgt.dtype, device=tgt.device)  # (B, 1)
    decoder_input = torch.cat([bos, tgt], dim=1)  # (B, T + 1)
    # <eos> goes right after each row's last word, i.e. at index n = number of words in that row.
    labels = torch.cat([tgt, torch.full_like(bos, pad_id)], dim=1)  # (B, T + 1)
    lengths = is_word.sum(dim=1)  # (B,)
    labels[torch.arange(batch, device=tgt.device), lengths] = eos_id
    labels = labels.masked_fill(labels == pad_id, ignore_index)  # padding -> not scored
    return decoder_input, labels


# The pieces of the training loss, each replaceable (lesson 09 trains with the learner's own):
ShiftFn = Callable[[Tensor, int, int, int], tuple[Tensor, Tensor]]  # (tgt, bos, eos, pad) -> (decoder input, labels)
SmoothedLossFn = Callable[[Tensor, Tensor, float], Tensor]  # (logits, labels, epsilon) -> the mean loss
ForwardFn = Callable[[nn.Module, Tensor, Tensor], Tensor]  # (model, src, decoder input) -> logits


def smoothed_cross_entropy(logits: Tensor, labels: Tensor, epsilon: float) -> Tensor:
    """Label-smoothed cross-entropy over the labels that are not IGNORE_INDEX (tfcourse's, for make_loss_fn)."""
    return cross_entropy(logits, labels, ignore_index=IGNORE_INDEX, label_smoothing=epsilon)


def model_forward(model: nn.Module, src: Tensor, decoder_input: Tensor) -> Tensor:
    """The model's own forward pass (masks and all): model(src, decoder_input)."""
    return model(src, decoder_input)


def make_loss_fn(source_vocab: WordTokenizer, target_vocab: WordTokenizer, label_smoothing: float = 0.1, *,
                 shift: ShiftFn = shift_target, loss: SmoothedLossFn = smoothed_cross_entropy,
                 forward: ForwardFn = model_forward):
    """loss_fn(model, src, tgt) for tfcourse.training.loop.train: shift, predict, smoothed cross-entropy.
    `shift`, `loss` and `forward` are the three steps (lesson 09's exercises 1-3 can stand in for them)."""

    def loss_fn(model: Transformer, src: Tensor, tgt: Tensor) -> Tensor:
        decoder_input, labels = shift(tgt, target_vocab.bos_id, target_vocab.eos_id, target_vocab.pad_id)
        logits = forward(model, src, decoder_input)  # (B, T + 1, V)
        return loss(logits, labels, label_smoothing)

    return loss_fn


def make_get_batch(splits: dict[str, tuple[Tensor, Tensor]], batch_size: int):
    """get_batch(split, generator) for tfcourse.training.loop.train: random sentence pairs of one split."""

    def get_batch(split: str, generator: torch.Generator) -> tuple[Tensor, Tensor]:
        src, tgt = splits[split]
        rows = torch.randint(len(src), (batch_size,), generator=generator)  # (B,)
        return src[rows], tgt[rows]  # (B, S), (B, T)

    return get_batch


# ----------------------------------------------------------------------------------------------
# Decoding and scoring
# ----------------------------------------------------------------------------------------------


# decode(model, src (S,), bos_id, eos_id, max_new_tokens) -> <bos> y1 ... (1 + n,): one sentence, as lesson 09's
# exercise 4 writes it.
DecodeOne = Callable[[Transformer, Tensor, int, int, int], Tensor]


def greedy_decode(model: Transformer, src: Tensor, bos_id: int, eos_id: int, max_new_tokens: int) -> Tensor:
    """One source sentence src (S,) -> its greedy translation <bos> y1 ... (1 + n,), ending in <eos> if
    written: `translate` for a batch of one (lesson 09's exercise 4)."""
    if src.dim() != 1:
        raise ValueError(f"greedy_decode takes one sentence, a 1-D tensor of ids (S,); got shape {tuple(src.shape)}")
    return translate(model, src[None], bos_id, eos_id, max_new_tokens)[0]  # (1, 1 + n) -> (1 + n,)


def translate_sentences(model: Transformer, sentences: Sequence[str], source_vocab: WordTokenizer,
                        target_vocab: WordTokenizer, beam_size: int = 1, max_new_tokens: int = 16,
                        decode: DecodeOne | None = None) -> list[str]:
    """Translate source sentences: greedy (beam_size 1, all at once), beam search (one at a time), or
    `decode` (e.g. your greedy_decode), one unpadded sentence at a time."""
    if decode is not None and beam_size != 1:
        raise ValueError("translate_sentences: give decode or beam_size, not both")
    device = next(model.parameters()).device
    src = pad([source_vocab.encode(words(s)) for s in sentences], source_vocab.pad_id).to(device)  # (N, S)
    bos, eos = target_vocab.bos_id, target_vocab.eos_id

    def rows() -> list[Tensor]:  # (S_i,) each: one sentence, unpadded (for decoding one at a time)
        return [row[row != source_vocab.pad_id] for row in src]

    if decode is not None:
        with torch.no_grad():
            outputs = [decode(model, row, bos, eos, max_new_tokens) for row in rows()]
    elif beam_size == 1:
        outputs = list(translate(model, src, bos, eos, max_new_tokens))  # the whole padded batch at once
    else:
        outputs = [translate_beam(model, row, bos, eos, max_new_tokens, beam_size) for row in rows()]
    results = []
    for ids in outputs:
        ids = ids.tolist()[1:]  # drop <bos>
        ids = ids[: ids.index(eos)] if eos in ids else ids  # stop at the first <eos>
        results.append(target_vocab.decode(ids))
    return results


def exact_match(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Fraction of sentences translated word for word exactly right."""
    return sum(h.split() == r.split() for h, r in zip(hypotheses, references)) / len(references)


def token_accuracy(hypotheses: Sequence[str], references: Sequence[str]) -> float:
    """Fraction of reference words that the hypothesis has at the same position.

    A missing word (hypothesis too short) counts as wrong; extra words at the end are not
    counted here (exact match punishes them).
    """
    correct = total = 0
    for hypothesis, reference in zip(hypotheses, references):
        h, r = hypothesis.split(), reference.split()
        correct += sum(a == b for a, b in zip(h, r))
        total += len(r)
    return correct / total


def copy_baseline(sentences: Sequence[str]) -> list[str]:
    """The laziest translator: give the source sentence back unchanged."""
    return list(sentences)


def evaluate(hypotheses: Sequence[str], references: Sequence[str]) -> dict[str, float]:
    return {"exact_match": exact_match(hypotheses, references),
            "token_accuracy": token_accuracy(hypotheses, references)}


# ----------------------------------------------------------------------------------------------
# The whole recipe
# ----------------------------------------------------------------------------------------------


# The generated language pairs a recipe can train on: source -> target.
CORPORA: dict[str, Callable[..., list[tuple[str, str]]]] = {
    "en-fr": make_translation_pairs,  # the [colour] noun verb [preposition] the [colour] noun
    "zh-en": make_chinese_english_pairs,  # 猫追狗, 今天天气真好: number, tense and case to recover
}


@dataclass
class TranslationRecipe:
    """Data, model and training sizes. `fast()` trains in seconds; the defaults in a few CPU minutes."""

    n_pairs: int = 6000  # generated sentence pairs (10 % held out)
    d_model: int = 64  # width: the grammar has under 100 words per language
    n_heads: int = 4  # d_head = 16
    n_layers: int = 2  # encoder layers and decoder layers
    dropout: float = 0.1  # the paper's rate
    label_smoothing: float = 0.1  # the paper's epsilon
    batch_size: int = 64  # sentence pairs per step
    max_steps: int = 1500  # optimizer steps
    lr: float = 2e-3  # small model, large learning rate
    warmup_steps: int = 100  # post-LN needs a gentle start
    schedule: str = "cosine"  # TrainConfig.schedule: "cosine", or "inverse_sqrt" (the paper's eq. 3, peak lr)
    seed: int = 0  # data, initialisation and batch order
    corpus: str = "en-fr"  # a key of CORPORA: which generated language pair

    @classmethod
    def fast(cls) -> "TranslationRecipe":
        return cls(n_pairs=2000, max_steps=150, warmup_steps=20)


def train_translator(recipe: TranslationRecipe, device: str | None = "cpu", progress: bool = False,
                     build_model: Callable[[TransformerConfig], nn.Module] = Transformer,
                     make_loss: Callable[..., Callable] = make_loss_fn) -> dict:
    """Generate the corpus, build vocabularies, train a Transformer; returns everything the lesson needs.

    `build_model(config)` makes the model (e.g. one made of your own components);
    `make_loss(source_vocab, target_vocab, label_smoothing)` the training loss (e.g. from your own
    shift_target, smoothed cross-entropy and forward pass: make_loss_fn with them in place).
    Keys: model, source_vocab, target_vocab, train_pairs, test_pairs, history.
    """
    if recipe.corpus not in CORPORA:
        raise ValueError(f"TranslationRecipe.corpus must be one of {sorted(CORPORA)}, got {recipe.corpus!r}")
    pairs = CORPORA[recipe.corpus](recipe.n_pairs, seed=recipe.seed)
    train_pairs, test_pairs = split_translation_pairs(pairs, test_fraction=0.1, seed=recipe.seed)
    source_vocab, target_vocab = build_vocabularies(train_pairs)
    splits = {"train": encode_pairs(train_pairs, source_vocab, target_vocab),
              "val": encode_pairs(test_pairs, source_vocab, target_vocab)}
    torch.manual_seed(recipe.seed)
    config = TransformerConfig(source_vocab.vocab_size, target_vocab.vocab_size, d_model=recipe.d_model,
                               n_heads=recipe.n_heads, n_layers=recipe.n_layers, dropout=recipe.dropout,
                               max_len=64, pad_id=source_vocab.pad_id)
    model = build_model(config)
    train_config = TrainConfig(max_steps=recipe.max_steps, lr=recipe.lr, min_lr=recipe.lr / 10,
                               warmup_steps=recipe.warmup_steps, schedule=recipe.schedule, weight_decay=0.01,
                               eval_interval=max(recipe.max_steps // 5, 1), eval_steps=5,
                               seed=recipe.seed, device=device, progress=progress,
                               amp=False)  # fp32 everywhere: a d_model-64 model gains nothing from bf16,
                                           # and the lesson's accuracy figures were measured in fp32
    history = train(model, make_get_batch(splits, recipe.batch_size), train_config,
                    loss_fn=make_loss(source_vocab, target_vocab, recipe.label_smoothing))
    model.eval()
    return {"model": model, "source_vocab": source_vocab, "target_vocab": target_vocab,
            "train_pairs": train_pairs, "test_pairs": test_pairs, "history": history}


__all__ = [
    "IGNORE_INDEX", "words", "build_vocabularies", "pad", "encode_pairs", "shift_target", "smoothed_cross_entropy",
    "model_forward", "make_loss_fn",
    "make_get_batch", "greedy_decode", "translate_sentences", "exact_match", "token_accuracy", "copy_baseline", "evaluate",
    "CORPORA", "TranslationRecipe", "train_translator",
]
