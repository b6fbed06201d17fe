"""tfcourse.training.translation: the translation lesson's pipeline, and a fast-mode training run that must
beat the copy-the-source baseline on held-out sentences."""

from __future__ import annotations

import pytest
import torch

from tfcourse.data import make_translation_pairs
from tfcourse.models import Transformer, TransformerConfig
from tfcourse.output import cross_entropy
from tfcourse.training.translation import (
    IGNORE_INDEX,
    TranslationRecipe,
    build_vocabularies,
    copy_baseline,
    encode_pairs,
    evaluate,
    exact_match,
    make_loss_fn,
    model_forward,
    shift_target,
    smoothed_cross_entropy,
    token_accuracy,
    train_translator,
    translate_sentences,
)

pytestmark = pytest.mark.usefixtures("one_thread")  # see conftest.py


def test_vocabularies_put_the_specials_first_and_keep_elided_words_whole():
    pairs = [("the bird sits on the mat", "l'oiseau est assis sur le tapis")]
    source, target = build_vocabularies(pairs)
    for vocab in (source, target):
        assert vocab.itos[:4] == ["<pad>", "<unk>", "<bos>", "<eos>"]
    assert "l'oiseau" in target.stoi
    assert target.decode(target.encode("l'oiseau est assis sur le tapis".split())) == pairs[0][1]


def test_encode_pairs_pads_on_the_right():
    pairs = [("the cat sits on the mat", "le chat est assis sur le tapis"),
             ("the cats sleep in the bed", "les chats dorment dans le lit")]
    source, target = build_vocabularies(pairs)
    src, tgt = encode_pairs(pairs + [("the cat sees the dog", "le chat voit le chien")], source, target)
    assert src.shape == (3, 6) and tgt.shape == (3, 7)
    assert src[2, 5] == source.pad_id and tgt[2, 5:].tolist() == [target.pad_id] * 2
    assert (src[2, :5] == source.pad_id).sum() == 0


def test_shift_target_on_a_hand_made_batch():
    tgt = torch.tensor([[7, 8, 9], [5, 0, 0]])  # pad 0
    decoder_input, labels = shift_target(tgt, bos_id=2, eos_id=3, pad_id=0)
    assert decoder_input.tolist() == [[2, 7, 8, 9], [2, 5, 0, 0]]
    assert labels.tolist() == [[7, 8, 9, 3], [5, 3, IGNORE_INDEX, IGNORE_INDEX]]
    assert tgt.tolist() == [[7, 8, 9], [5, 0, 0]]  # not modified


def test_loss_ignores_padding_and_smooths_labels():
    pairs = make_translation_pairs(50)
    source, target = build_vocabularies(pairs)
    src, tgt = encode_pairs(pairs[:4], source, target)

    class Fixed(torch.nn.Module):  # the same logits whatever the input
        def forward(self, src, decoder_input):
            torch.manual_seed(0)
            return torch.randn(*decoder_input.shape, target.vocab_size)

    loss = make_loss_fn(source, target, label_smoothing=0.1)(Fixed(), src, tgt)
    decoder_input, labels = shift_target(tgt, target.bos_id, target.eos_id, target.pad_id)
    logits = Fixed()(src, decoder_input)
    keep = labels != IGNORE_INDEX
    expected = cross_entropy(logits[keep], labels[keep], label_smoothing=0.1)
    assert torch.allclose(loss, expected)


def test_scores_by_hand():
    hyps = ["le chat dort", "la vache", "les chiens voient le chat"]
    refs = ["le chat dort", "la vache noire", "les chats voient le chat"]
    assert exact_match(hyps, refs) == pytest.approx(1 / 3)
    assert token_accuracy(hyps, refs) == pytest.approx((3 + 2 + 4) / (3 + 3 + 5))
    assert copy_baseline(["the table"]) == ["the table"]
    assert evaluate(hyps, refs)["exact_match"] == pytest.approx(1 / 3)


def test_fast_recipe_beats_the_copy_baseline_on_held_out_sentences():
    run = train_translator(TranslationRecipe.fast(), device="cpu")
    test = run["test_pairs"][:100]
    english, french = [e for e, _ in test], [f for _, f in test]
    model_scores = evaluate(translate_sentences(run["model"], english, run["source_vocab"], run["target_vocab"]),
                            french)
    copy_scores = evaluate(copy_baseline(english), french)
    assert not set(english) & {e for e, _ in run["train_pairs"]}  # held out for real
    assert model_scores["token_accuracy"] > copy_scores["token_accuracy"] + 0.3, (model_scores, copy_scores)
    assert run["history"]["val_loss"][-1] < run["history"]["val_loss"][0]


def test_the_loss_is_made_of_the_pieces_it_is_given():
    """make_loss_fn's three steps can be replaced (lesson 09 trains with the learner's own): each is called,
    and tfcourse's pieces give the loss of the plain recipe."""
    pairs = make_translation_pairs(60, seed=3)
    source_vocab, target_vocab = build_vocabularies(pairs)
    src, tgt = encode_pairs(pairs[:4], source_vocab, target_vocab)
    torch.manual_seed(0)
    model = Transformer(TransformerConfig(source_vocab.vocab_size, target_vocab.vocab_size, d_model=16, n_heads=2,
                                          n_layers=1, dropout=0.0, pad_id=source_vocab.pad_id)).eval()
    calls = []

    def spy(name, fn):
        return lambda *args: calls.append(name) or fn(*args)

    plain = make_loss_fn(source_vocab, target_vocab, 0.1)(model, src, tgt)
    pieces = make_loss_fn(source_vocab, target_vocab, 0.1, shift=spy("shift", shift_target),
                          loss=spy("loss", smoothed_cross_entropy), forward=spy("forward", model_forward))
    assert torch.equal(pieces(model, src, tgt), plain) and calls == ["shift", "forward", "loss"]
    wrong = make_loss_fn(source_vocab, target_vocab, 0.1, loss=lambda logits, labels, eps: logits.mean())
    assert not torch.equal(wrong(model, src, tgt), plain)  # the piece given is the one used


def test_train_translator_trains_with_the_loss_it_is_given():
    calls = []

    def make_loss(source_vocab, target_vocab, label_smoothing):
        loss_fn = make_loss_fn(source_vocab, target_vocab, label_smoothing)
        return lambda model, src, tgt: calls.append(src.shape) or loss_fn(model, src, tgt)

    recipe = TranslationRecipe(n_pairs=200, d_model=16, n_heads=2, n_layers=1, batch_size=8, max_steps=3,
                               warmup_steps=1)
    train_translator(recipe, make_loss=make_loss)
    assert len(calls) >= 3  # every training step (and the evaluations) went through it
