"""Lesson 13's submissions, good and bad (tests/test_grading.py holds the machinery and the catalogue of
the other lessons): each wrong exercise loses its own points only, with a message that names the mistake.
The gradient exercise is graded by running the submission's function in real gloo process groups. The
catalogue holds the mistakes of sharding and averaging; every other usual mistake of the lesson is named by
its check in tests/test_checks_parallel.py (each submission here costs process groups of its own)."""

import pytest

from test_grading import complete, edit, grade_as_intended, notebook_case

pytestmark = pytest.mark.slow

LESSON = "13_data_parallel"
SHARD = "return x[rows], y[rows]  # (B/N, ...) each"
AVERAGE = "dist.all_reduce(parameter.grad, op=dist.ReduceOp.SUM)  # in place: the sum over the workers"
MEAN = "parameter.grad /= world_size  # the mean: the sum would make the step N times too big"

CASES = [
    notebook_case("complete solutions", LESSON, lambda: complete(LESSON)),
    notebook_case("buggy shard: every worker gets the whole batch", LESSON,
                  lambda: edit(complete(LESSON), "shard_batch_impl", SHARD, "return x, y"),
                  {"shard_batch_tests": (0, "the data is not sharded")}),
    notebook_case("buggy averaging: the sum of the gradients", LESSON,
                  lambda: edit(complete(LESSON), "average_gradients_impl", MEAN, "pass"),
                  {"average_gradients_tests": (0, "the sum of the workers' gradients, not their mean")}),
    notebook_case("buggy averaging: the loss all-reduced instead of the gradients", LESSON,
                  lambda: edit(edit(complete(LESSON), "average_gradients_impl", AVERAGE,
                                    "dist.all_reduce(torch.zeros(1))  # the loss, say: .grad stays this worker's"),
                               "average_gradients_impl", MEAN, "pass"),
                  {"average_gradients_tests": (0, "nothing was all-reduced")}),
]


def test_catalogue_of_data_parallel_submissions_is_graded_as_intended(tmp_path, record_property):
    grade_as_intended(LESSON, CASES, tmp_path, record_property)
