"""Autograding: a catalogue of submissions, good and bad, each graded as intended.

Every submission is built from the lesson notebooks (so the catalogue follows the lessons), graded
with `tfcourse.course.grade` (the same code as `tfcourse grade`), and must receive exactly the expected
points per exercise, with a message that names the problem. The learner's file must not change.
The results table is printed at the end of the test session. Each lesson's submissions are graded
together in one temporary course (the long FFN list in two), and every lesson's untouched student
version must score 0 on every exercise: each graded test cell fails on its stub.
"""

from __future__ import annotations

import copy
import hashlib
import re
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

import nbformat
import pytest

from tfcourse import manifest
from tfcourse.checks.debugging import planted_bugs
from tfcourse.course.grade import find_notebook, grade_submissions

pytestmark = pytest.mark.slow  # runs nbgrader and notebooks: `make test-fast` leaves it out

ROOT = Path(__file__).resolve().parents[1]
CONFIG = ROOT / "nbgrader_config.py"
TIMEOUT = 20  # seconds per cell, as a lesson's fast-mode training cells may need on a busy machine
# The FFN lesson's slowest cell takes under half a second: its list (with the infinite loop, which
# waits out the timeout in each of the two cells that call the looping function) grades with less.
FFN_TIMEOUT = 10
# Lesson 13's gradient check starts two process groups (2 and 3 fresh Pythons importing torch): 10 s on an
# idle 2-core machine, over 20 s on one shared with the rest of the suite. The course's own limit is 120 s.
PARALLEL, PARALLEL_TIMEOUT = "13_data_parallel", 120


def _meta(cell) -> dict:
    return cell.metadata.get("nbgrader", {})


def _strip_markers(source: str) -> str:
    return re.sub(r"^[ \t]*### (BEGIN|END) SOLUTION[ \t]*\n", "", source, flags=re.M)


def student_version(lesson: str):
    return nbformat.read(ROOT / "notebooks" / lesson / f"{lesson}.ipynb", as_version=4)


def complete(lesson: str):
    """The student version with every exercise answered as in the solutions."""
    source = nbformat.read(ROOT / "solutions" / lesson / f"{lesson}.ipynb", as_version=4)
    answers = {_meta(c)["grade_id"]: _strip_markers(c.source) for c in source.cells if _meta(c).get("solution")}
    nb = student_version(lesson)
    for cell in nb.cells:
        if _meta(cell).get("solution"):
            cell.source = answers[_meta(cell)["grade_id"]]
    return nb


def edit(nb, grade_id: str, old: str, new: str):
    """Replace `old` by `new` in the cell `grade_id` (fails loudly if the lesson changed)."""
    nb = copy.deepcopy(nb)
    cell = next(c for c in nb.cells if _meta(c).get("grade_id") == grade_id)
    assert old in cell.source, f"{grade_id} no longer contains {old!r}: update the catalogue"
    cell.source = cell.source.replace(old, new)
    return nb


def stub(nb, grade_id: str, student_nb):
    """Put back the unanswered stub of one exercise."""
    nb = copy.deepcopy(nb)
    stubbed = next(c for c in student_nb.cells if _meta(c).get("grade_id") == grade_id)
    index = next(i for i, c in enumerate(nb.cells) if _meta(c).get("grade_id") == grade_id)
    nb.cells[index] = copy.deepcopy(stubbed)
    return nb


def transform_cell(nb, grade_id: str, change: Callable):
    nb = copy.deepcopy(nb)
    index = next(i for i, c in enumerate(nb.cells) if _meta(c).get("grade_id") == grade_id)
    change(nb.cells, index)
    return nb


def insert_cell_after_setup(nb, source: str):
    nb = copy.deepcopy(nb)
    index = next(i for i, c in enumerate(nb.cells) if "setup(" in c.source and c.cell_type == "code")
    nb.cells.insert(index + 1, nbformat.v4.new_code_cell(source))
    return nb


# What a learner may leave behind while experimenting: the checks must not depend on it.
EXPERIMENTING = "torch.set_default_dtype(torch.float64)\ntorch.manual_seed(12345)"


def experimenting(make_nb: Callable) -> Callable:
    """The submission, with float64 as the default dtype and another seed set after the setup cell."""
    return lambda: insert_cell_after_setup(make_nb(), EXPERIMENTING)


@dataclass
class Case:
    name: str
    lesson: str
    build: Callable[[Path], Path | None]  # writes the submission under a folder, returns its path
    # grade_id -> (points, message regex) for exercises that must lose points; the others get full marks.
    losing: dict[str, tuple[float, str]] = field(default_factory=dict)
    all_zero: str | None = None  # message regex when every exercise must score 0
    integrity: str | None = None  # regex the integrity report must match; None: the report must be empty
    repeat: bool = False  # grade it REPEATS times: the scores must not vary


def with_fields(case: Case, **fields) -> Case:
    for name, value in fields.items():
        setattr(case, name, value)
    return case


def notebook_case(name, lesson, make_nb, losing=None, all_zero=None, filename=None):
    def build(folder: Path) -> Path:
        path = folder / (filename or f"{lesson}.ipynb")
        nbformat.write(make_nb(), path)
        return path

    return Case(name, lesson, build, losing or {}, all_zero)


def raw_case(name, lesson, text, all_zero):
    def build(folder: Path) -> Path:
        path = folder / f"{lesson}.ipynb"
        path.write_text(text)
        return path

    return Case(name, lesson, build, {}, all_zero)


FFN = "04_ffn"
# Writes to stderr from a thread for longer than the notebook runs: the lines land in whatever
# cell is running, test cells included. nbgrader alone would score each such test cell 0.
STDERR_THREAD = """import sys, threading, time

def _noise():
    for _ in range(3_000):
        print("progress...", file=sys.stderr, flush=True)
        time.sleep(0.03)

threading.Thread(target=_noise, daemon=True).start()"""
COPY_BY_SOURCE = """import inspect
import tfcourse.tokenizers as reference

_namespace = dict(vars(reference))
exec(inspect.getsource(reference.count_pairs), _namespace)
count_pairs = _namespace["count_pairs"]"""
FLUSH_RAISES = """import sys
class FlushRaises:
    def write(self, text):
        return len(text)
    def flush(self):
        raise OSError("flush refused")
"""
RELU = "hidden = torch.relu(self.linear1(x))  # (..., d_ff)"
RETURN = "return self.linear2(hidden)  # (..., d_model)"


def ffn_forward(returning: str):
    return lambda: edit(complete(FFN), "ffn_impl", RETURN, returning)


CASES = [
    notebook_case("untouched student version", FFN, lambda: student_version(FFN), all_zero="not implemented yet"),
    notebook_case("complete solutions", FFN, lambda: complete(FFN)),
    with_fields(notebook_case("buggy FFN: no ReLU", FFN,
                              lambda: edit(complete(FFN), "ffn_impl", RELU, "hidden = self.linear1(x)"),
                              {"ffn_tests": (0, r"without ReLU")}), repeat=True),
    notebook_case("test cell deleted", FFN, lambda: transform_cell(stub(complete(FFN), "ffn_impl", student_version(FFN)),
                                                                  "ffn_tests", lambda cells, i: cells.pop(i)),
                  {"ffn_tests": (0, r"")}),
    notebook_case("test cell edited to `pass`", FFN,
                  lambda: transform_cell(stub(complete(FFN), "ffn_impl", student_version(FFN)), "ffn_tests",
                                         lambda cells, i: setattr(cells[i], "source", "pass")),
                  {"ffn_tests": (0, "not implemented yet")}),
    notebook_case("test cell turned into markdown", FFN,
                  lambda: transform_cell(stub(complete(FFN), "ffn_impl", student_version(FFN)), "ffn_tests",
                                         lambda cells, i: cells.__setitem__(
                                             i, nbformat.v4.new_markdown_cell(cells[i].source, metadata=cells[i].metadata))),
                  {"ffn_tests": (0, "not implemented yet")}),
    notebook_case("cell duplicated (duplicate grade ids)", FFN,
                  lambda: transform_cell(stub(complete(FFN), "ffn_impl", student_version(FFN)), "ffn_tests",
                                         lambda cells, i: cells.insert(i + 1, _copy_of(cells[i]))),
                  {"ffn_tests": (0, "not implemented yet")}),
    notebook_case("infinite loop in one exercise", FFN,
                  lambda: edit(complete(FFN), "trace_impl", "hidden = ffn.linear1(x)",
                               "while True:\n        pass\n    hidden = ffn.linear1(x)"),
                  {"trace_tests": (0, r"(?i)timeout|timed out|interrupt")}),
    notebook_case("huge memory allocation", FFN,
                  lambda: edit(complete(FFN), "collapse_impl", "weight = linear2.weight @ linear1.weight",
                               "waste = torch.empty(2**40, 2**20)\n    weight = linear2.weight @ linear1.weight"),
                  {"collapse_tests": (0, r"RuntimeError")}),
    notebook_case("syntax error in one cell", FFN,
                  lambda: edit(complete(FFN), "load_weights_impl", "with torch.no_grad():", "with torch.no_grad() (:"),
                  {"load_weights_tests": (0, r"NameError: name 'load_paper_weights' is not defined")}),
    notebook_case("exception at import", FFN,
                  lambda: insert_cell_after_setup(complete(FFN), "import a_module_that_does_not_exist")),
    notebook_case("NaN outputs", FFN, ffn_forward("return self.linear2(hidden) * float('nan')"),
                  {"ffn_tests": (0, "NaN")}),
    notebook_case("wrong shape", FFN, ffn_forward("return self.linear2(hidden)[..., :-1]"),
                  {"ffn_tests": (0, "expected shape")}),
    notebook_case("wrong dtype", FFN, ffn_forward("return self.linear2(hidden).double()"),
                  {"ffn_tests": (0, "dtype")}),
    notebook_case("modifies its input in place", FFN,
                  lambda: edit(complete(FFN), "trace_impl", "residual = x + output",
                               "residual = x + output\n    x.add_(1.0)"),
                  {"trace_tests": (0, "in place")}),
    notebook_case("returns an object whose __eq__ is always True", FFN,
                  ffn_forward("return type('Equal', (), {'__eq__': lambda self, other: True})()"),
                  {"ffn_tests": (0, "expected a torch.Tensor")}),
    with_fields(notebook_case("overrides showtraceback", FFN,
                              lambda: insert_cell_after_setup(student_version(FFN),
                                                              "get_ipython().showtraceback = lambda *args, **kwargs: None"),
                              all_zero="not implemented yet"),
                integrity=r"assigns to `get_ipython\(\)\.showtraceback`"),
    with_fields(notebook_case("stderr from a background thread, in every cell", FFN,
                              lambda: insert_cell_after_setup(complete(FFN), STDERR_THREAD)), repeat=True),
    # nothing implemented, the check replaced: checks modules are read-only, so the real check runs
    with_fields(notebook_case("replaces the check its test cell imports", FFN,
                              lambda: insert_cell_after_setup(
                                  stub(complete(FFN), "collapse_impl", student_version(FFN)),
                                  "import tfcourse.checks.ffn as checks\n"
                                  "checks.check_collapse_linear = lambda *args, **kwargs: None"),
                              {"collapse_tests": (0, "not implemented yet")}),
                integrity=r"assigns to `tfcourse\.checks\.ffn\.check_collapse_linear`"),
    notebook_case("calls sys.exit(0)", FFN, ffn_forward("import sys\n        sys.exit(0)"),
                  {"ffn_tests": (0, r"sys\.exit")}),
    notebook_case("prints to stderr", FFN,
                  ffn_forward("import sys\n        print('debug', file=sys.stderr)\n        return self.linear2(hidden)")),
    notebook_case("closes sys.stdout in a cell of its own", FFN,
                  lambda: insert_cell_after_setup(complete(FFN), "import sys\nsys.stdout.close()")),
    with_fields(notebook_case("sets sys.stdout = None in its forward", FFN,
                              ffn_forward("import sys\n        sys.stdout = None\n        " + RETURN),
                              {"ffn_tests": (0, r"broke sys\.stdout")}),
                integrity=r"assigns to `sys\.stdout`"),
    # a stream whose flush() raises: the kernel flushes after every cell, so it used to stop finishing cells
    with_fields(notebook_case("replaces sys.stdout by a stream whose flush() raises, in a cell of its own", FFN,
                              lambda: insert_cell_after_setup(complete(FFN), FLUSH_RAISES + "sys.stdout = FlushRaises()")),
                integrity=r"assigns to `sys\.stdout`"),
    with_fields(notebook_case("replaces sys.stdout by a stream whose flush() raises, in its forward", FFN,
                              ffn_forward(FLUSH_RAISES.replace("\n", "\n        ") + "sys.stdout = FlushRaises()\n        "
                                          + RETURN),
                              {"ffn_tests": (0, r"broke sys\.stdout .*cannot write or flush")}),
                integrity=r"assigns to `sys\.stdout`"),
    # a structural mistake is one line naming the parameter and both shapes, not torch's traceback
    notebook_case("builds linear2 as nn.Linear(d_model, d_ff)", FFN,
                  lambda: edit(complete(FFN), "ffn_impl", "self.linear2 = nn.Linear(d_ff, d_model)",
                               "self.linear2 = nn.Linear(d_model, d_ff)"),
                  {"ffn_tests": (0, r"^CheckFailed: FeedForward\(8, 32\): linear2\.weight has shape \(32, 8\), "
                                    r"expected \(8, 32\)")}),
    notebook_case("delegates to the tfcourse reference", FFN,
                  lambda: edit(complete(FFN), "ffn_impl", RELU,
                               "from tfcourse.ffn import PositionwiseFeedForward\n"
                               "        hidden = torch.relu(PositionwiseFeedForward(x.shape[-1]).linear1(x))"),
                  {"ffn_tests": (0, "off-limits")}),
    notebook_case("renamed notebook", FFN, lambda: complete(FFN), filename="04_ffn-Copy1.ipynb"),
    Case("missing notebook", FFN, lambda folder: None, all_zero="missing"),
    raw_case("not valid JSON", FFN, '{"cells": [', all_zero="not a valid notebook"),
    notebook_case("kernelspec names another kernel", FFN,
                  lambda: _with_kernel(complete(FFN), {"name": "julia-1.10", "display_name": "Julia", "language": "julia"})),
    # one buggy exercise per lesson: only that exercise loses its points, though the learner left
    # float64 as the default dtype and another seed behind
    notebook_case("buggy decode: token by token (float64, seed)", "01_tokenization",
                  experimenting(lambda: edit(complete("01_tokenization"), "bpe_decode_impl",
                               'data = b"".join(vocab[i] for i in ids)',
                               'return "".join(vocab[i].decode("utf-8", errors="replace") for i in ids)\n    data = b""')),
                  {"bpe_decode_tests": (0, "token by token")}),
    notebook_case("buggy learned positions: offset ignored (float64, seed)", "02_embeddings",
                  experimenting(lambda: edit(complete("02_embeddings"), "learned_positions_impl",
                               "return x + self.weight[offset : offset + length]", "return x + self.weight[:length]")),
                  {"learned_positions_tests": (0, "offset")}),
    notebook_case("buggy causal mask: diagonal blocked (float64, seed)", "03_attention",
                  experimenting(lambda: edit(complete("03_attention"), "causal_mask_impl", ".tril(diagonal=t_k - t_q)",
                               ".tril(diagonal=t_k - t_q - 1)")),
                  {"causal_mask_tests": (0, "diagonal")}),
    notebook_case("delegates to the torch built-in", "03_attention",
                  lambda: edit(complete("03_attention"), "causal_mask_impl",
                               "return torch.ones(t_q, t_k, dtype=torch.bool, device=device).tril(diagonal=t_k - t_q)",
                               "return torch.nn.Transformer.generate_square_subsequent_mask(t_q) == 0"),
                  {"causal_mask_tests": (0, "off-limits")}),
    # the reference handed in as the learner's own: by import, or as a copy made from its source
    notebook_case("hands in the reference (imports it over its own answer)", "03_attention",
                  lambda: transform_cell(complete("03_attention"), "sdpa_impl", lambda cells, i: setattr(
                      cells[i], "source", cells[i].source + "\n\nfrom tfcourse.attention import scaled_dot_product_attention")),
                  {"sdpa_tests": (0, "the reference itself, or a copy of its code")}),
    with_fields(notebook_case("hands in a copy of the reference made from its source", "01_tokenization",
                              lambda: transform_cell(complete("01_tokenization"), "count_pairs_impl", lambda cells, i: setattr(
                                  cells[i], "source", COPY_BY_SOURCE)),
                              {"count_pairs_tests": (0, "off-limits")}),
                integrity=r"exec"),
    # correct, though not written like the solution: full marks
    notebook_case("LayerNorm written another way (rsqrt, variance by hand)", "05_blocks",
                  lambda: edit(complete("05_blocks"), "layer_norm_impl",
                               "var = x.var(dim=-1, keepdim=True, unbiased=False)",
                               "var = ((x - mean) ** 2).mean(dim=-1, keepdim=True)")),
    # one early bug costs one exercise: the layers built on it are judged with the reference in its place
    notebook_case("buggy LayerNorm (unbiased variance): no cascade (float64, seed)", "05_blocks",
                  experimenting(lambda: edit(complete("05_blocks"), "layer_norm_impl", "unbiased=False", "unbiased=True")),
                  {"layer_norm_tests": (0, r"unbiased variance"),
                   # the layers' lines: right with the reference LayerNorm, the hidden run named as such
                   "encoder_layer_tests": (3, r"^✔ EncoderLayer is right with the reference LayerNorm in place — "
                                              r"fix Exercise 1 \(LayerNorm\) first:"),
                   "sublayer_connection_tests": (2, r"\(the hidden cases: other shapes and settings")}),
    notebook_case("buggy positional encoding (sin and cos swapped): no cascade", "02_embeddings",
                  lambda: edit(complete("02_embeddings"), "sinusoidal_pe_impl",
                               "pe[:, 0::2] = torch.sin(angle)  # even dimensions 2i\n    pe[:, 1::2] = torch.cos(angle)",
                               "pe[:, 0::2] = torch.cos(angle)  # even dimensions 2i\n    pe[:, 1::2] = torch.sin(angle)"),
                  {"sinusoidal_pe_tests": (0, "sin and cos swapped")}),
    notebook_case("buggy encoder stack: every layer reads the input", "05_blocks",
                  lambda: edit(complete("05_blocks"), "encoder_stack_impl", "x = layer(x, mask)",
                               "out = layer(x, mask)"),
                  {"encoder_stack_tests": (0, r"your output equals the input x itself \(after the final norm\): "
                                              r"every layer's output was thrown away")}),
    notebook_case("buggy shift_right: shifted left (float64, seed)", "06_models",
                  experimenting(lambda: edit(complete("06_models"), "shift_right_impl",
                               "return torch.cat([bos, tgt[:, :-1]], dim=1)", "return torch.cat([tgt[:, 1:], bos], dim=1)")),
                  {"shift_right_tests": (0, "left")}),
    notebook_case("buggy sampling: temperature ignored (float64, seed)", "07_decoding",
                  experimenting(lambda: edit(complete("07_decoding"), "sampling_impl",
                               "filter_logits(logits.float() / temperature, top_k, top_p)",
                               "filter_logits(logits.float(), top_k, top_p)")),
                  {"sampling_tests": (0, "temperature")}),
    # (two exercises wrong in one submission, each costing only its own points: one grading, not two)
    notebook_case("buggy learning-rate schedule (no warm-up) and head score (divided by T) (float64, seed)",
                  "08_training",
                  experimenting(lambda: edit(edit(complete("08_training"), "lr_schedule_impl",
                                                  "return config.lr * step / config.warmup_steps", "return config.lr"),
                                             "head_score_impl", "return before.mean(dim=-1)",
                                             "return before.sum(dim=-1) / weights.shape[-1]")),
                  {"lr_schedule_tests": (0, "warm-up"),
                   "head_score_tests": (0, "sum over positions divided by T: position 0 has no token before it")}),
    notebook_case("buggy shifted target: no <eos> (float64, seed)", "09_translation",
                  experimenting(lambda: edit(complete("09_translation"), "shift_target_impl",
                               "labels[torch.arange(batch, device=tgt.device), lengths] = eos_id", "pass")),
                  {"shift_target_tests": (0, "eos")}),
    # (two exercises wrong in one submission: each loses only its own points)
    notebook_case("buggy forward (the causal mask alone) and decoder input (not shifted, <bos> at the end)",
                  "09_translation",
                  lambda: edit(edit(complete("09_translation"), "forward_impl",
                                    "self_mask = causal_mask(length, device=src.device) & "
                                    "padding_mask(decoder_input, pad_id)",
                                    "self_mask = causal_mask(length, device=src.device)"),
                               "shift_target_impl", "decoder_input = torch.cat([bos, tgt], dim=1)",
                               "decoder_input = torch.cat([tgt, bos], dim=1)"),
                  {"forward_tests": (0, r"your output equals the logits with the causal mask alone \(they differ "
                                        r"only at padded target positions\)"),
                   "shift_target_tests": (0, r"decoder_input .*: your output equals the target not shifted, "
                                             r"with <bos> at the end")}),
    notebook_case("buggy path length: attention grows with distance (float64, seed)", "10_rnn_vs_transformer",
                  experimenting(lambda: edit(complete("10_rnn_vs_transformer"), "path_length_impl",
                               'return 1  # position j attends to position i directly', "return distance")),
                  {"path_length_tests": (0, "attention")}),
    notebook_case("buggy RNN step: reads the previous input x[:, t - 1]", "10_rnn_vs_transformer",
                  lambda: edit(complete("10_rnn_vs_transformer"), "rnn_impl", "x[:, t] @ w_xh", "x[:, t - 1] @ w_xh"),
                  {"rnn_tests": (0, r"your output equals the recurrence reading the previous step's input "
                                    r"\(x\[:, t - 1\]")}),
    # a correct composite built on a wrong earlier helper keeps its points; its line names the helper
    notebook_case("buggy merge_word under a correct train_bpe and bpe_encode", "01_tokenization",
                  lambda: edit(complete("01_tokenization"), "merge_word_impl", "i += 2", "i += 1"),
                  {"merge_word_tests": (0, ""),
                   "train_bpe_tests": (4, r"^✔ train_bpe is right with the reference merge_word in place — "
                                          r"fix Exercise 3 \(merge_word\) first"),
                   "bpe_encode_tests": (3, r"fix Exercise 3 \(merge_word\) first")}),
    # (two helpers wrong in one submission: each loses its own points, the line names both, once each)
    notebook_case("buggy merge_heads and scaled_dot_product_attention under a correct MultiHeadAttention",
                  "03_attention",
                  lambda: edit(edit(complete("03_attention"), "heads_impl",
                                    "x = x.transpose(1, 2)  # (B, T, n_heads, d_head)", "pass"),
                               "sdpa_impl", "/ math.sqrt(d_k)", ""),
                  {"heads_tests": (0, "without the transpose"),
                   "sdpa_tests": (0, r"1/√d_k"),
                   "mha_tests": (3, r"^✔ MultiHeadAttention is right with the reference scaled_dot_product_attention, "
                                    r"split_heads and merge_heads in place — fix Exercise 2 "
                                    r"\(scaled_dot_product_attention\) and Exercise 5 \(split_heads")}),  # (cut at 200)
    notebook_case("buggy log_softmax (no max shift) under a correct cross_entropy", "06_models",
                  lambda: edit(complete("06_models"), "log_softmax_impl",
                               "shifted = logits - logits.amax(dim=dim, keepdim=True)", "shifted = logits"),
                  {"log_softmax_tests": (0, ""),
                   "cross_entropy_tests": (2, r"fix Exercise 1 \(a stable log_softmax\) first")}),
    # structure is free where the maths is the same: nanoGPT's fused projection under the lesson's names
    notebook_case("MultiHeadAttention with one fused w_qkv (nanoGPT's layout)", "03_attention",
                  lambda: edit(edit(complete("03_attention"), "mha_impl",
                                    "        self.w_q = nn.Linear(d_model, d_model)  # all heads' W^Q side by side: head i "
                                    "owns a block of d_head outputs\n        self.w_k = nn.Linear(d_model, d_model)\n"
                                    "        self.w_v = nn.Linear(d_model, d_model)\n",
                                    "        self.w_qkv = nn.Linear(d_model, 3 * d_model)  # q | k | v\n"),
                               "mha_impl",
                               "        q = split_heads(self.w_q(x), self.n_heads)  # (B, n_heads, T_q, d_head)\n"
                               "        k = split_heads(self.w_k(source), self.n_heads)  # (B, n_heads, T_k, d_head)\n"
                               "        v = split_heads(self.w_v(source), self.n_heads)  # (B, n_heads, T_k, d_head)\n",
                               "        d = x.shape[-1]\n"
                               "        q = split_heads(x @ self.w_qkv.weight[:d].T + self.w_qkv.bias[:d], self.n_heads)\n"
                               "        kv = source @ self.w_qkv.weight[d:].T + self.w_qkv.bias[d:]  # (B, T_k, 2d)\n"
                               "        k, v = (split_heads(t, self.n_heads) for t in kv.split(d, dim=-1))\n")),
]


def _copy_of(cell):
    duplicate = copy.deepcopy(cell)
    duplicate.id = "duplicate"
    return duplicate


def _with_kernel(nb, kernelspec):
    nb.metadata["kernelspec"] = kernelspec
    return nb


def _sha(path: Path | None) -> str | None:
    return hashlib.sha256(path.read_bytes()).hexdigest() if path and path.exists() else None


UNFINISHED = "not implemented yet"
# A debug exercise's test cell -> the diagnosis of its planted bug: what grading says of it, untouched.
DEBUG_MISTAKES = {e.grade_id: re.escape(planted_bugs()[e.answer_id].mistake)
                  for e in manifest.exercises() if e.answer_id in planted_bugs()}


def _points(result) -> str:
    return ", ".join(f"{e.grade_id.removesuffix('_tests')} {e.score:g}/{e.max_score:g}" for e in result.exercises)


def _graded_lessons() -> list[str]:
    return sorted(p.parent.name for p in (ROOT / "solutions").glob("*/*.ipynb")
                  if any(_meta(c).get("grade") for c in nbformat.read(p, as_version=4).cells))


# Every graded lesson, untouched: each test cell must fail on the stubs, with the stub's message.
CASES += [notebook_case("untouched student version", lesson, lambda lesson=lesson: student_version(lesson),
                        all_zero="not implemented yet")
          for lesson in _graded_lessons() if lesson != FFN]

REPEATS = 2  # the repeat=True submissions are graded this many times: the scores must not vary
GROUP_SIZE = 14  # submissions per temporary course: a long list is split so two workers can share it


def _groups(lessons) -> list:
    groups = []
    for lesson in sorted(lessons):
        cases = [case for case in CASES if case.lesson == lesson]
        parts = -(-len(cases) // GROUP_SIZE)
        for k in range(parts):
            part = cases[k::parts]
            groups.append(pytest.param(lesson, part, id=lesson if parts == 1 else f"{lesson}-{k + 1}"))
    return groups


# Lessons 07–10 are graded from a file of their own (tests/test_grading_later.py), so that under
# `--dist loadfile` several workers share this catalogue (each test may go to any worker: conftest.SPREAD).
LATER_LESSONS = {"07_decoding", "08_training", "09_translation", "10_rnn_vs_transformer"}


@pytest.mark.parametrize(("lesson", "cases"), _groups({case.lesson for case in CASES} - {FFN} - LATER_LESSONS))
def test_catalogue_of_submissions_is_graded_as_intended(lesson, cases, tmp_path, record_property):
    grade_as_intended(lesson, cases, tmp_path, record_property)


def grade_as_intended(lesson, cases, tmp_path, record_property) -> None:
    """Grade `cases` (one lesson's) in one temporary course; assert every score and message."""
    paths, hashes = {}, {}
    for i, case in enumerate(cases):
        folder = tmp_path / f"learner{i}"
        folder.mkdir()
        built = case.build(folder)
        paths[f"learner{i}"] = find_notebook(folder, lesson) if built is not None else None
        hashes[f"learner{i}"] = _sha(built)
    # Nothing is graded twice: cases whose notebooks are the same bytes (a renamed copy of the
    # complete solutions, say) share one grading; only the repeats are graded again on purpose.
    first_with = {}
    for student, path in paths.items():
        if path is not None:
            first_with.setdefault(_sha(path), student)
    to_grade = {s: p for s, p in paths.items() if p is None or first_with[_sha(p)] == s}
    repeated = [i for i, case in enumerate(cases) if case.repeat]
    for r in range(1, REPEATS):
        for i in repeated:
            to_grade[f"learner{i}-again{r}"] = paths[f"learner{i}"]
    timeout = {FFN: FFN_TIMEOUT, PARALLEL: PARALLEL_TIMEOUT}.get(lesson, TIMEOUT)
    graded = grade_submissions(lesson, to_grade, ROOT / "solutions", CONFIG, timeout=timeout)
    results = {**{s: graded[first_with[_sha(p)]] for s, p in paths.items() if p is not None}, **graded}

    for i, case in enumerate(cases):
        student = f"learner{i}"
        result = results[student]
        record_property("catalogue", (case.name, lesson, _points(result) + (f"  [{result.problem}]" if result.problem else "")))
        assert _sha(paths[student]) == hashes[student], f"{case.name}: the learner's file changed"
        assert result.exercises, f"{case.name}: no exercises graded"
        for exercise in result.exercises:
            if case.all_zero is not None:
                expected, pattern = 0.0, case.all_zero
                if pattern == UNFINISHED and exercise.grade_id in DEBUG_MISTAKES:
                    pattern = DEBUG_MISTAKES[exercise.grade_id]  # it starts from its planted bug, not a stub
            elif exercise.grade_id in case.losing:
                expected, pattern = case.losing[exercise.grade_id]
            else:
                expected, pattern = exercise.max_score, ""
            assert exercise.score == expected, (
                f"{case.name}: {exercise.grade_id} scored {exercise.score}, expected {expected} ({exercise.message})")
            assert re.search(pattern, exercise.message), (
                f"{case.name}: {exercise.grade_id} message {exercise.message!r} should match {pattern!r}")
        if case.integrity is None:
            assert result.integrity == [], f"{case.name}: unexpected integrity findings {result.integrity}"
        else:
            assert any(re.search(case.integrity, finding) for finding in result.integrity), (
                f"{case.name}: the integrity report {result.integrity} should match {case.integrity!r}")
    for i in repeated:
        for r in range(1, REPEATS):
            again = results[f"learner{i}-again{r}"]
            assert [(e.grade_id, e.score) for e in again.exercises] == \
                   [(e.grade_id, e.score) for e in results[f"learner{i}"].exercises], "scores vary between autogrades"
