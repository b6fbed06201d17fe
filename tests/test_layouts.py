"""Multi-head attention in either parameter layout: three projections or one fused w_qkv."""

from __future__ import annotations

import pytest
import torch
from torch import nn

from tfcourse.attention import MultiHeadAttention
from tfcourse.layouts import attention_layout, in_layout_of, project_qkv


class Fused(nn.Module):
    def __init__(self, d_model):
        super().__init__()
        self.w_qkv, self.w_o = nn.Linear(d_model, 3 * d_model), nn.Linear(d_model, d_model)


class Holder(nn.Module):
    """A model with one fused attention module inside, at blocks.0.attn."""

    def __init__(self, d_model):
        super().__init__()
        self.blocks = nn.ModuleList([nn.Module()])
        self.blocks[0].attn = Fused(d_model)


def test_the_fused_weights_are_the_separate_ones_stacked():
    torch.manual_seed(0)
    separate = MultiHeadAttention(8, 2)
    fused = Holder(8)
    state = {f"blocks.0.attn.{k}": v for k, v in separate.state_dict().items()}
    fused.load_state_dict(in_layout_of(fused, state))
    assert fused.blocks[0].attn.w_qkv.weight.shape == (24, 8)  # (3 d_model, d_model): W_q; W_k; W_v
    x, memory = torch.randn(2, 3, 8), torch.randn(2, 5, 8)
    for args in ((x,), (x, memory)):
        for ours, theirs in zip(project_qkv(fused.blocks[0].attn, *args), project_qkv(separate, *args)):
            torch.testing.assert_close(ours, theirs)
    assert attention_layout(separate) == "separate" and attention_layout(fused.blocks[0].attn) == "fused"


def test_a_model_without_fused_attention_gets_its_state_unchanged():
    state = MultiHeadAttention(8, 2).state_dict()
    assert in_layout_of(MultiHeadAttention(8, 2), state).keys() == state.keys()


def test_an_attention_module_in_neither_layout_is_named():
    with pytest.raises(ValueError, match=r"neither w_q, w_k, w_v .* nor one w_qkv"):
        attention_layout(nn.Linear(4, 4))
