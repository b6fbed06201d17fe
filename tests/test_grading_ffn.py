"""The FFN lesson's long list of submissions (tests/test_grading.py holds the catalogue): a file of
its own (each group of it may go to any worker: conftest.SPREAD)."""

import pytest

from test_grading import CASES, FFN, _groups, grade_as_intended

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("lesson", "cases"), _groups({FFN}))
def test_catalogue_of_ffn_submissions_is_graded_as_intended(lesson, cases, tmp_path, record_property):
    assert all(case.lesson == FFN for case in cases) and len(CASES) > len(cases)
    grade_as_intended(lesson, cases, tmp_path, record_property)
