"""The checks of lesson 02 (embeddings and positional encoding): every named mistake is recognised,
a correct answer passes with one line, and the answers themselves are off-limits."""

from __future__ import annotations

import math

import pytest
import torch
import torch.nn.functional as F
from torch import nn

import tfcourse.embedding as E
from tfcourse.checks.core import CheckFailed, OffLimitsError
from tfcourse.checks.embeddings import (check_input_layer, check_learned_positions, check_one_hot_lookup,
                                        check_permutation_test, check_positional_encoding, check_token_embedding)

from check_helpers import assert_passes as passes


# ------------------------------------------------------------------------------------------
# 1. one-hot lookup
# ------------------------------------------------------------------------------------------


def lookup(ids, table):
    return F.one_hot(ids, table.shape[0]).to(table.dtype) @ table


def test_lookup_correct_passes(capfd):
    passes(check_one_hot_lookup, lookup, capfd)


def test_lookup_by_hand_built_one_hot_passes(capfd):
    def by_hand(ids, table):
        one_hot = (ids[..., None] == torch.arange(table.shape[0])).to(table.dtype)
        return one_hot @ table
    passes(check_one_hot_lookup, by_hand, capfd)


def test_lookup_returning_the_one_hot_matrix_is_named():
    with pytest.raises(CheckFailed, match="returned the one-hot matrix itself"):
        check_one_hot_lookup(lambda ids, table: F.one_hot(ids, table.shape[0]).float())


def test_lookup_with_an_integer_one_hot_gets_a_dtype_hint():
    with pytest.raises(CheckFailed, match=r"convert with .to\(table.dtype\)"):
        check_one_hot_lookup(lambda ids, table: F.one_hot(ids, table.shape[0]) @ table)


def test_lookup_by_indexing_is_off_limits():
    with pytest.raises(OffLimitsError, match="picking rows of the table"):
        check_one_hot_lookup(lambda ids, table: table[ids])
    with pytest.raises(OffLimitsError, match="picking rows of the table"):
        check_one_hot_lookup(lambda ids, table: table.index_select(0, ids.view(-1)).view(*ids.shape, -1))


def test_lookup_delegating_to_torch_or_the_package_is_off_limits():
    with pytest.raises(OffLimitsError, match="torch.nn.functional.embedding"):
        check_one_hot_lookup(lambda ids, table: F.embedding(ids, table))

    def via_package(ids, table):
        emb = E.TokenEmbedding(*table.shape, scale=False)
        return emb(ids)
    with pytest.raises(OffLimitsError, match="tfcourse.embedding.TokenEmbedding"):
        check_one_hot_lookup(via_package)


def test_lookup_stub_is_not_implemented():
    def stub(ids, table):
        raise NotImplementedError()
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_one_hot_lookup(stub)


# ------------------------------------------------------------------------------------------
# 2. scaled token embedding
# ------------------------------------------------------------------------------------------


def token_embedding(init_std=None, scale=lambda d: math.sqrt(d), use_data=False):
    class ScaledTokenEmbedding(nn.Module):
        def __init__(self, vocab_size, d_model):
            super().__init__()
            std = 1 / math.sqrt(d_model) if init_std is None else init_std
            self.weight = nn.Parameter(torch.randn(vocab_size, d_model) * std)
            self.scale = scale(d_model)

        def forward(self, ids):
            weight = self.weight.data if use_data else self.weight
            return weight[ids] * self.scale
    return ScaledTokenEmbedding


def test_token_embedding_correct_passes(capfd):
    passes(check_token_embedding, token_embedding(), capfd)


@pytest.mark.parametrize(("scale", "message"), [
    (lambda d: 1.0, r"without the x sqrt\(d_model\) scaling"),
    (lambda d: 1 / math.sqrt(d), r"divided by sqrt\(d_model\)"),
    (lambda d: float(d), "multiplied by d_model instead of sqrt"),
])
def test_token_embedding_scaling_mistakes_are_named(scale, message):
    with pytest.raises(CheckFailed, match=message):
        check_token_embedding(token_embedding(scale=scale))


@pytest.mark.parametrize(("std", "message"), [(1.0, "plain torch.randn"), (0.02, "GPT-2's 0.02"),
                                              (0.5, "expected 0.125")])
def test_token_embedding_init_mistakes_are_named(std, message):
    with pytest.raises(CheckFailed, match=message):
        check_token_embedding(token_embedding(init_std=std))


def test_token_embedding_detached_table_is_named():
    with pytest.raises(CheckFailed, match="no gradient reached 'weight'"):
        check_token_embedding(token_embedding(use_data=True))


def test_token_embedding_without_a_weight_parameter_is_named():
    class Buffered(nn.Module):
        def __init__(self, vocab_size, d_model):
            super().__init__()
            self.register_buffer("weight", torch.randn(vocab_size, d_model) / math.sqrt(d_model))

        def forward(self, ids):
            return self.weight[ids] * math.sqrt(self.weight.shape[1])
    with pytest.raises(CheckFailed, match="exactly one parameter named 'weight'"):
        check_token_embedding(Buffered)


def test_token_embedding_delegating_is_off_limits():
    class ViaTorch(nn.Module):
        def __init__(self, vocab_size, d_model):
            super().__init__()
            self.emb = nn.Embedding(vocab_size, d_model)
    with pytest.raises(OffLimitsError, match="torch.nn.Embedding"):
        check_token_embedding(ViaTorch)

    class ViaPackage(nn.Module):
        def __init__(self, vocab_size, d_model):
            super().__init__()
            self.emb = E.TokenEmbedding(vocab_size, d_model)
    with pytest.raises(OffLimitsError, match="tfcourse.embedding.TokenEmbedding"):
        check_token_embedding(ViaPackage)

    class ViaFunctional(token_embedding()):
        def forward(self, ids):
            return F.embedding(ids, self.weight) * self.scale
    with pytest.raises(OffLimitsError, match="torch.nn.functional.embedding"):
        check_token_embedding(ViaFunctional)


def test_token_embedding_with_a_plain_tensor_attribute_is_named():
    class TensorScale(token_embedding()):
        def __init__(self, vocab_size, d_model):
            super().__init__(vocab_size, d_model)
            self.scale = torch.tensor(math.sqrt(d_model))  # right on the CPU, left behind by .to("cuda")
    with pytest.raises(CheckFailed, match=r"self.scale is a plain tensor attribute.*register_buffer\('scale'"):
        check_token_embedding(TensorScale)


def test_token_embedding_returning_float32_for_float64_is_named():
    class AlwaysFloat32(token_embedding()):
        def forward(self, ids):
            return super().forward(ids).float()
    with pytest.raises(CheckFailed, match="with float64 input your output is torch.float32"):
        check_token_embedding(AlwaysFloat32)


def test_token_embedding_stub_is_not_implemented():
    class Stub(nn.Module):
        def __init__(self, vocab_size, d_model):
            super().__init__()
            raise NotImplementedError()
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_token_embedding(Stub)


# ------------------------------------------------------------------------------------------
# 3. permutation test
# ------------------------------------------------------------------------------------------


def permutation_test(layer, x, perm):
    return torch.allclose(layer(x[:, perm]), layer(x)[:, perm], atol=1e-5)


def test_permutation_test_correct_passes(capfd):
    passes(check_permutation_test, permutation_test, capfd)


def test_permutation_test_without_permuting_back_is_named():
    with pytest.raises(CheckFailed, match=r"you said False.*permute the output back"):
        check_permutation_test(lambda layer, x, perm: torch.allclose(layer(x[:, perm]), layer(x), atol=1e-5))


def test_permutation_test_with_the_inverse_is_named():
    def inverse(layer, x, perm):
        back = torch.argsort(torch.tensor(perm))
        return torch.allclose(layer(x[:, perm]), layer(x)[:, back], atol=1e-5)
    with pytest.raises(CheckFailed, match=r"perm=\[1, 2, 0\].*not its inverse"):
        check_permutation_test(inverse)


def test_permutation_test_always_true_is_named():
    with pytest.raises(CheckFailed, match=r"after adding positional encoding.*you said True"):
        check_permutation_test(lambda layer, x, perm: True)


def test_permutation_test_must_return_a_bool():
    with pytest.raises(CheckFailed, match="return True or False"):
        check_permutation_test(lambda layer, x, perm: layer(x[:, perm]) - layer(x)[:, perm])


def test_permutation_test_must_not_modify_x():
    def in_place(layer, x, perm):
        result = permutation_test(layer, x, perm)
        x.mul_(2)
        return result
    with pytest.raises(CheckFailed, match="modified input #1 in place"):
        check_permutation_test(in_place)


def test_permutation_test_stub_is_not_implemented():
    def stub(layer, x, perm):
        raise NotImplementedError()
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_permutation_test(stub)


# ------------------------------------------------------------------------------------------
# 4. sinusoidal positional encoding
# ------------------------------------------------------------------------------------------


def pe(max_len, d_model, *, base=10000.0, start=0, power=lambda two_i, i: two_i, swap=False, halves=False,
       factor=1.0, dtype=torch.float32, per_column=False):
    """A sin/cos table with the usual mistakes as options (the defaults give the right one)."""
    position = torch.arange(start, start + max_len, dtype=torch.float32)[:, None]  # (max_len, 1)
    two_i = torch.arange(0, d_model, 2, dtype=torch.float32)  # 0, 2, 4, ...
    angle = position / base ** (power(two_i, two_i / 2) / d_model)  # (max_len, d_model/2)
    odd_angle = position / base ** ((two_i + 1) / d_model) if per_column else angle
    first, second = (torch.cos, torch.sin) if swap else (torch.sin, torch.cos)
    table = torch.zeros(max_len, d_model, dtype=dtype)
    if halves:
        table[:, : d_model // 2], table[:, d_model // 2:] = first(angle), second(angle)
    else:
        table[:, 0::2], table[:, 1::2] = first(angle), second(odd_angle)
    return table * factor


def test_pe_correct_passes(capfd):
    passes(check_positional_encoding, pe, capfd)


def test_pe_with_exp_log_formulation_passes(capfd):
    def annotated(max_len, d_model):  # the Annotated Transformer's exp(-log(10000) 2i / d) form
        position = torch.arange(max_len).unsqueeze(1)
        div_term = torch.exp(torch.arange(0, d_model, 2) * -(math.log(10000.0) / d_model))
        table = torch.zeros(max_len, d_model)
        table[:, 0::2] = torch.sin(position * div_term)
        table[:, 1::2] = torch.cos(position * div_term)
        return table
    passes(check_positional_encoding, annotated, capfd)


@pytest.mark.parametrize(("options", "message"), [
    (dict(swap=True), "sin and cos swapped"),
    (dict(power=lambda two_i, i: i), "exponent i/d_model instead of 2i/d_model"),
    (dict(per_column=True), "each column uses its own index"),
    (dict(power=lambda two_i, i: 2 * two_i), "2j/d_model where j is the column index"),
    (dict(start=1), "positions 1..max_len"),
    (dict(base=1000.0), "base 1000 instead of 10000"),
    (dict(halves=True), "all sines in the first half"),
])
def test_pe_mistakes_are_named(options, message):
    with pytest.raises(CheckFailed, match=message):
        check_positional_encoding(lambda max_len, d_model: pe(max_len, d_model, **options))


def test_pe_scaled_by_sqrt_d_model_is_named():
    with pytest.raises(CheckFailed, match=r"multiplied by sqrt\(d_model\)"):
        check_positional_encoding(lambda max_len, d_model: pe(max_len, d_model, factor=math.sqrt(d_model)))


def test_pe_in_float64_is_named():
    with pytest.raises(CheckFailed, match="expected dtype torch.float32, got torch.float64"):
        check_positional_encoding(lambda max_len, d_model: pe(max_len, d_model, dtype=torch.float64))


def test_pe_delegating_is_off_limits():
    with pytest.raises(OffLimitsError, match="tfcourse.embedding.sinusoidal_positional_encoding"):
        check_positional_encoding(lambda max_len, d_model: E.sinusoidal_positional_encoding(max_len, d_model))
    with pytest.raises(OffLimitsError, match="tfcourse.embedding.SinusoidalPositionalEncoding"):
        check_positional_encoding(lambda max_len, d_model: E.SinusoidalPositionalEncoding(d_model, max_len).pe)


def test_pe_stub_is_not_implemented():
    def stub(max_len, d_model):
        raise NotImplementedError()
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_positional_encoding(stub)


# ------------------------------------------------------------------------------------------
# 5. learned positional embeddings
# ------------------------------------------------------------------------------------------


def learned(init_std=0.02, use_offset=True, add_x=True, check_length=True, in_place=False):
    class LearnedPositionalEmbedding(nn.Module):
        def __init__(self, d_model, max_len):
            super().__init__()
            self.max_len = max_len
            self.weight = nn.Parameter(torch.randn(max_len, d_model) * init_std)

        def forward(self, x, offset=0):
            length = x.shape[1]
            if check_length and offset + length > self.max_len:
                raise ValueError(f"offset + T = {offset + length} > max_len = {self.max_len}")
            start = offset if use_offset else 0
            rows = self.weight[start: start + length]  # (T, d_model)
            if in_place:
                return x.add_(rows)
            return x + rows if add_x else rows.expand_as(x)
    return LearnedPositionalEmbedding


def test_learned_correct_passes(capfd):
    passes(check_learned_positions, learned(), capfd)


@pytest.mark.parametrize(("options", "message"), [
    (dict(use_offset=False), "the offset was ignored"),
    (dict(add_x=False), "the position vectors alone"),
    (dict(init_std=1.0), "plain torch.randn"),
    (dict(check_length=False), r"(expected a|instead of raising a) ValueError"),
    (dict(in_place=True), "modified input #1 in place"),
])
def test_learned_mistakes_are_named(options, message):
    with pytest.raises(CheckFailed, match=message):
        check_learned_positions(learned(**options), hidden=True)


def test_learned_positions_made_with_arange_on_the_cpu_is_named():
    class OneHotPositions(learned()):
        def forward(self, x, offset=0):
            length = x.shape[1]
            if offset + length > self.max_len:
                raise ValueError("past max_len")
            positions = torch.arange(offset, offset + length)  # no device=x.device: on the CPU
            rows = F.one_hot(positions, self.max_len).to(x.dtype) @ self.weight  # (T, d_model)
            return x + rows
    with pytest.raises(CheckFailed, match=r"creates a tensor on the CPU.*torch.arange\(T, device=x.device\)"):
        check_learned_positions(OneHotPositions)


def test_learned_delegating_is_off_limits():
    class ViaTorch(nn.Module):
        def __init__(self, d_model, max_len):
            super().__init__()
            self.table = nn.Embedding(max_len, d_model)
    with pytest.raises(OffLimitsError, match="torch.nn.Embedding"):
        check_learned_positions(ViaTorch)

    class ViaPackage(nn.Module):
        def __init__(self, d_model, max_len):
            super().__init__()
            self.inner = E.LearnedPositionalEmbedding(d_model, max_len)
    with pytest.raises(OffLimitsError, match="tfcourse.embedding.LearnedPositionalEmbedding"):
        check_learned_positions(ViaPackage)


def test_learned_stub_is_not_implemented():
    class Stub(nn.Module):
        def __init__(self, d_model, max_len):
            super().__init__()
            raise NotImplementedError()
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_learned_positions(Stub)


# ------------------------------------------------------------------------------------------
# 6. the input layer
# ------------------------------------------------------------------------------------------


def input_layer(scale_token=True, scale_pe=False, add_pe=True, use_offset=True, start=0, concat=False,
                check_length=True, pe_as_parameter=False, dropout_where="sum"):
    class InputLayer(nn.Module):
        def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
            super().__init__()
            self.max_len, self.scale = max_len, math.sqrt(d_model)
            self.token = token_embedding(scale=(lambda d: math.sqrt(d)) if scale_token else (lambda d: 1.0))(
                vocab_size, d_model)
            table = E.sinusoidal_positional_encoding(max_len + 1, d_model)[start: start + max_len]
            if pe_as_parameter:
                self.pe = nn.Parameter(table)
            else:
                self.register_buffer("pe", table)
            self.dropout = nn.Dropout(dropout)

        def forward(self, ids, offset=0):
            length = ids.shape[1]
            if check_length and offset + length > self.max_len:
                raise ValueError("past max_len")
            start = offset if use_offset else 0
            rows = self.pe[start: start + length] * (self.scale if scale_pe else 1.0)  # (T, d_model)
            x = self.token(ids)
            if dropout_where == "token":
                return self.dropout(x) + rows
            if dropout_where == "functional":
                x = F.dropout(x + rows, 0.5)
                return x
            if concat:
                return torch.cat([x, rows.expand_as(x)], dim=-1)
            x = x + rows if add_pe else x
            return x if dropout_where == "none" else self.dropout(x)
    return InputLayer


def test_input_layer_correct_passes(capfd):
    passes(check_input_layer, input_layer(), capfd)


def test_input_layer_built_from_package_parts_passes(capfd):
    class FromPackage(nn.Module):
        def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
            super().__init__()
            self.token = E.TokenEmbedding(vocab_size, d_model)
            self.register_buffer("pe", E.sinusoidal_positional_encoding(max_len, d_model))
            self.dropout = nn.Dropout(dropout)

        def forward(self, ids, offset=0):
            if offset + ids.shape[1] > self.pe.shape[0]:
                raise ValueError("past max_len")
            return self.dropout(self.token(ids) + self.pe[offset: offset + ids.shape[1]])
    passes(check_input_layer, FromPackage, capfd)


@pytest.mark.parametrize(("options", "message"), [
    (dict(scale_token=False), r"without x sqrt\(d_model\), plus PE"),
    (dict(scale_pe=True), "only the token embedding is scaled, not the PE"),
    (dict(add_pe=False), "the positional encoding was not added"),
    (dict(use_offset=False), "the offset was ignored"),
    (dict(start=1), r"self.pe .*positions 1..max_len"),
    (dict(concat=True), "concatenated instead of added"),
    (dict(check_length=False), r"(expected a|instead of raising a) ValueError"),
    (dict(pe_as_parameter=True), "'pe' is an nn.Parameter"),
    (dict(dropout_where="none"), "only 0% of the entries are 0"),
    (dict(dropout_where="token"), "pass embedding \\+ PE through self.dropout"),
    (dict(dropout_where="functional"), "dropout must be inactive after .eval"),
])
def test_input_layer_mistakes_are_named(options, message):
    with pytest.raises(CheckFailed, match=message):
        check_input_layer(input_layer(**options), hidden=True)


def test_input_layer_positions_starting_at_one_in_forward_is_named():
    class StartsAtOne(input_layer()):
        def forward(self, ids, offset=0):
            table = E.sinusoidal_positional_encoding(self.max_len + 1, self.pe.shape[1])
            if offset + ids.shape[1] > self.max_len:
                raise ValueError("past max_len")
            return self.dropout(self.token(ids) + table[offset + 1: offset + 1 + ids.shape[1]])
    with pytest.raises(CheckFailed, match="positions offset\\+1..offset\\+T"):
        check_input_layer(StartsAtOne)


def test_input_layer_with_a_plain_tensor_attribute_is_named():
    class PlainPositions(input_layer()):
        def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
            super().__init__(vocab_size, d_model, max_len, dropout)
            self.positions = torch.arange(max_len)  # a plain attribute: .to(device) leaves it on the CPU

        def forward(self, ids, offset=0):
            if offset + ids.shape[1] > self.max_len:
                raise ValueError("past max_len")
            rows = self.pe[self.positions[offset: offset + ids.shape[1]]]  # (T, d_model)
            return self.dropout(self.token(ids) + rows)
    with pytest.raises(CheckFailed, match=r"self.positions is a plain tensor attribute"):
        check_input_layer(PlainPositions)


def test_input_layer_building_the_table_in_forward_is_named():
    class TableInForward(input_layer()):
        def forward(self, ids, offset=0):
            length = ids.shape[1]
            if offset + length > self.max_len:
                raise ValueError("past max_len")
            table = E.sinusoidal_positional_encoding(self.max_len, self.pe.shape[1])  # made on the CPU
            return self.dropout(self.token(ids) + table[offset: offset + length])
    with pytest.raises(CheckFailed, match="creates a tensor on the CPU"):
        check_input_layer(TableInForward)


def test_input_layer_delegating_is_off_limits():
    class ViaPackage(nn.Module):
        def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
            super().__init__()
            self.inner = E.InputEmbedding(vocab_size, d_model, max_len, dropout)
    with pytest.raises(OffLimitsError, match="tfcourse.embedding.InputEmbedding"):
        check_input_layer(ViaPackage)

    class ViaModule(input_layer()):
        def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
            super().__init__(vocab_size, d_model, max_len, dropout)
            self.positions = E.SinusoidalPositionalEncoding(d_model, max_len)
    with pytest.raises(OffLimitsError, match="tfcourse.embedding.SinusoidalPositionalEncoding"):
        check_input_layer(ViaModule)


def test_input_layer_stub_is_not_implemented():
    class Stub(nn.Module):
        def __init__(self, vocab_size, d_model, max_len, dropout=0.1):
            super().__init__()
            raise NotImplementedError()
    with pytest.raises(CheckFailed, match="not implemented yet"):
        check_input_layer(Stub)
