"""Lesson 11's submissions (tests/test_grading.py holds the catalogue and its helpers; the untouched
student version is graded there with every other lesson): one wrong exercise loses only its points."""

import pytest

from test_grading import complete, edit, experimenting, grade_as_intended, notebook_case

pytestmark = pytest.mark.slow

MODERN = "11_modern_llm"

CASES = [
    notebook_case("complete solutions", MODERN, lambda: complete(MODERN)),
    notebook_case("buggy RMSNorm: eps outside the square root (float64, seed)", MODERN,
                  experimenting(lambda: edit(complete(MODERN), "rms_norm_impl",
                                             "rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True) + self.eps)",
                                             "rms = torch.sqrt(x.pow(2).mean(dim=-1, keepdim=True)) + self.eps")),
                  {"rms_norm_tests": (0, "outside the square root")}),
    notebook_case("buggy SwiGLU: gate and up swapped", MODERN,
                  lambda: edit(complete(MODERN), "swiglu_impl", "gated = F.silu(self.w_gate(x)) * self.w_up(x)",
                               "gated = F.silu(self.w_up(x)) * self.w_gate(x)"),
                  {"swiglu_tests": (0, "gate and up are swapped")}),
    # the layer (exercise 5) uses the learner's apply_rope: judged with the reference in its place
    notebook_case("buggy RoPE: the cache's offset ignored (float64, seed), no cascade", MODERN,
                  experimenting(lambda: edit(complete(MODERN), "rope_impl",
                                             "rope_cos_sin(x.shape[-2], x.shape[-1], offset, base, x.device)",
                                             "rope_cos_sin(x.shape[-2], x.shape[-1], 0, base, x.device)")),
                  {"rope_tests": (0, "offset is ignored"),
                   # only the earlier exercise that fails is named, once
                   "gqa_layer_tests": (4, r"in place — fix Exercise 3 \(apply_rope\) first: with yours it fails")}),
    notebook_case("buggy GQA: kv heads tiled with repeat, no cascade", MODERN,
                  lambda: edit(complete(MODERN), "gqa_impl", "return x.repeat_interleave(n_rep, dim=1)",
                               "return x.repeat(1, n_rep, 1, 1)"),
                  {"gqa_tests": (0, "tiled as a whole stack"),
                   "gqa_layer_tests": (4, r"in place — fix Exercise 4 \(grouped_query_attention\) first: with yours")}),
    notebook_case("buggy layer: values rotated too", MODERN,
                  lambda: edit(complete(MODERN), "gqa_layer_impl",
                               "q, k = apply_rope(q, offset), apply_rope(k, offset)",
                               "q, k, v = apply_rope(q, offset), apply_rope(k, offset), apply_rope(v, offset)"),
                  {"gqa_layer_tests": (0, "values rotated too")}),
]


def test_catalogue_of_modern_llm_submissions_is_graded_as_intended(tmp_path, record_property):
    grade_as_intended(MODERN, CASES, tmp_path, record_property)
