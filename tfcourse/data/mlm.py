"""Masked-token batches, as BERT trains its encoder (Devlin et al., 2019, section 3.1).

Of the positions that hold ordinary tokens, `mask_prob` (15 %) are chosen at random. Of those,
80 % are replaced by [MASK], 10 % by a random ordinary token, and 10 % keep their token. The model
must predict the original token at every chosen position, and only there: the labels hold the
original id at the chosen positions and IGNORE_INDEX (-100) everywhere else. Special tokens
(padding, [CLS], [MASK] itself) are never chosen and never drawn as the random replacement.

Why not [MASK] everywhere: [MASK] never occurs when the model is used, so a model that learned to
look only at [MASK] positions would be lost on real text. The random and the unchanged 10 % make it
predict a token for *every* input position, without knowing which ones were altered.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor

from ..output import IGNORE_INDEX  # the label of a position the loss skips
from ..validation import expect_tensor


def _check_mask_args(ids: Tensor, mask_id: int, vocab_size: int, special_ids: Sequence[int],
                     mask_prob: float) -> None:
    expect_tensor(ids, "ids", expected="(B, T) token ids")
    if ids.dtype != torch.long:
        raise TypeError(f"ids must be int64 (torch.long) token ids, got dtype {ids.dtype}")
    if not 0.0 <= mask_prob <= 1.0:
        raise ValueError(f"mask_prob must be in [0, 1], got {mask_prob}")
    if not 0 <= mask_id < vocab_size:
        raise ValueError(f"mask_id must be in [0, vocab_size={vocab_size}), got {mask_id}")
    if mask_id not in special_ids:
        raise ValueError(f"special_ids must include mask_id={mask_id} (it must never be chosen or drawn), "
                         f"got {list(special_ids)}")
    if len(set(special_ids) & set(range(vocab_size))) >= vocab_size:
        raise ValueError("every id is special: there is no ordinary token to draw")


def mask_tokens(ids: Tensor, mask_id: int, vocab_size: int, special_ids: Sequence[int], mask_prob: float = 0.15,
                generator: torch.Generator | None = None) -> tuple[Tensor, Tensor]:
    """BERT's masking of token ids (B, T) -> (inputs (B, T), labels (B, T)).

    special_ids: ids never chosen nor drawn (padding, [CLS], [MASK], ...); it must include mask_id.
    All randomness comes from `generator`, so the same seed gives the same batch.
    """
    _check_mask_args(ids, mask_id, vocab_size, special_ids, mask_prob)
    special = torch.isin(ids, torch.tensor(list(special_ids), device=ids.device))  # (B, T)
    chosen = (torch.rand(ids.shape, generator=generator, device=ids.device) < mask_prob) & ~special
    labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))  # the loss looks only here
    # One uniform draw per position splits the chosen ones 80 / 10 / 10.
    action = torch.rand(ids.shape, generator=generator, device=ids.device)  # (B, T) in [0, 1)
    ordinary = torch.tensor([i for i in range(vocab_size) if i not in set(special_ids)], device=ids.device)
    random_ids = ordinary[torch.randint(len(ordinary), ids.shape, generator=generator, device=ids.device)]
    inputs = torch.where(chosen & (action < 0.8), torch.full_like(ids, mask_id), ids)  # 80 %: [MASK]
    inputs = torch.where(chosen & (action >= 0.8) & (action < 0.9), random_ids, inputs)  # 10 %: a random token
    return inputs, labels  # the other 10 % of the chosen keep their token


def _check_loss_args(logits: Tensor, labels: Tensor) -> None:
    expect_tensor(logits, "logits", ndim=3, expected="(B, T, V)")
    expect_tensor(labels, "labels", ndim=2, expected="(B, T)")
    if labels.shape != logits.shape[:2]:
        raise ValueError(f"labels must be (B, T) = {tuple(logits.shape[:2])} for logits {tuple(logits.shape)}, "
                         f"got {tuple(labels.shape)}")
    if not (labels != IGNORE_INDEX).any():
        raise ValueError(f"no position is chosen (every label is {IGNORE_INDEX}): the loss would be 0 / 0")


def masked_lm_loss(logits: Tensor, labels: Tensor) -> Tensor:
    """Mean cross-entropy over the chosen positions only (labels != IGNORE_INDEX).

    logits (B, T, V), labels (B, T) -> a scalar. Averaging over all B * T positions instead would
    shrink the loss by the fraction chosen (about 0.15) and weigh batches by how many were chosen.
    """
    _check_loss_args(logits, labels)
    chosen = labels != IGNORE_INDEX  # (B, T)
    log_probs = torch.log_softmax(logits[chosen], dim=-1)  # (N_chosen, V)
    picked = log_probs.gather(1, labels[chosen][:, None])  # (N_chosen, 1): log p(original token)
    return -picked.mean()


__all__ = ["IGNORE_INDEX", "mask_tokens", "masked_lm_loss"]
