"""Copy weights from torch.nn's Transformer modules into tfcourse's, so outputs can be compared."""

import torch
from torch import nn

from tfcourse.attention import MultiHeadAttention
from tfcourse.blocks import DecoderLayer, EncoderLayer, LayerNorm


@torch.no_grad()
def copy_mha(ours: MultiHeadAttention, theirs: nn.MultiheadAttention) -> None:
    w_q, w_k, w_v = theirs.in_proj_weight.chunk(3, dim=0)  # torch stacks W^Q, W^K, W^V row-wise
    b_q, b_k, b_v = theirs.in_proj_bias.chunk(3, dim=0)
    for linear, w, b in ((ours.w_q, w_q, b_q), (ours.w_k, w_k, b_k), (ours.w_v, w_v, b_v)):
        linear.weight.copy_(w)
        linear.bias.copy_(b)
    ours.w_o.weight.copy_(theirs.out_proj.weight)
    ours.w_o.bias.copy_(theirs.out_proj.bias)


@torch.no_grad()
def copy_norm(ours: LayerNorm, theirs: nn.LayerNorm) -> None:
    ours.weight.copy_(theirs.weight)
    ours.bias.copy_(theirs.bias)


@torch.no_grad()
def copy_ffn(ours, theirs) -> None:
    ours.ffn.linear1.load_state_dict(theirs.linear1.state_dict())
    ours.ffn.linear2.load_state_dict(theirs.linear2.state_dict())


def copy_encoder_layer(ours: EncoderLayer, theirs: nn.TransformerEncoderLayer) -> None:
    copy_mha(ours.self_attn, theirs.self_attn)
    copy_ffn(ours, theirs)
    copy_norm(ours.norm1, theirs.norm1)
    copy_norm(ours.norm2, theirs.norm2)


def copy_decoder_layer(ours: DecoderLayer, theirs: nn.TransformerDecoderLayer) -> None:
    copy_mha(ours.self_attn, theirs.self_attn)
    copy_mha(ours.cross_attn, theirs.multihead_attn)
    copy_ffn(ours, theirs)
    copy_norm(ours.norm1, theirs.norm1)
    copy_norm(ours.norm2, theirs.norm2)
    copy_norm(ours.norm3, theirs.norm3)
