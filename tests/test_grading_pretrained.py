"""Lesson 12's submissions, good and bad (tests/test_grading.py holds the machinery and the catalogue of
the other lessons): each wrong exercise loses its own points only, with a message that names the mistake."""

import pytest

from test_grading import complete, edit, experimenting, grade_as_intended, notebook_case

pytestmark = pytest.mark.slow

LESSON = "12_pretrained"
GELU = "return 0.5 * x * (1.0 + torch.tanh(inner))"
SPLIT = "q_w, k_w, v_w = c_attn_weight.t().split(d_model, dim=0)  # each (d, d)"
LABELS = "labels = torch.where(chosen, ids, torch.full_like(ids, IGNORE_INDEX))  # the loss looks only here"
LOSS = "return -picked.mean()"

CASES = [
    notebook_case("complete solutions", LESSON, lambda: complete(LESSON)),
    notebook_case("buggy GELU: the exact erf GELU", LESSON,
                  lambda: edit(complete(LESSON), "gelu_tanh_impl", GELU,
                               "return 0.5 * x * (1.0 + torch.erf(x / math.sqrt(2.0)))"),
                  {"gelu_tanh_tests": (0, "the exact GELU")}),
    notebook_case("buggy conversion: c_attn not transposed", LESSON,
                  lambda: edit(complete(LESSON), "convert_attention_impl", SPLIT,
                               "q_w, k_w, v_w = c_attn_weight.split(d_model, dim=1)"),
                  {"convert_attention_tests": (0, "not transposed: Conv1D stores")}),
    notebook_case("buggy conversion: k and q swapped (float64, seed)", LESSON,
                  experimenting(lambda: edit(complete(LESSON), "convert_attention_impl", SPLIT,
                                             "k_w, q_w, v_w = c_attn_weight.t().split(d_model, dim=0)")),
                  {"convert_attention_tests": (0, "the k block of c_attn")}),
    notebook_case("buggy masking: labels everywhere", LESSON,
                  lambda: edit(complete(LESSON), "mask_tokens_impl", LABELS, "labels = ids.clone()"),
                  {"mask_tokens_tests": (0, "every position has a label")}),
    notebook_case("buggy loss: the mean over all positions", LESSON,
                  lambda: edit(complete(LESSON), "mlm_loss_impl", LOSS,
                               "return -picked.sum() / labels.numel()"),
                  {"mlm_loss_tests": (0, "mean over all B")}),
]


def test_catalogue_of_pretrained_submissions_is_graded_as_intended(tmp_path, record_property):
    grade_as_intended(LESSON, CASES, tmp_path, record_property)
