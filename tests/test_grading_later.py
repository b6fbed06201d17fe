"""Lessons 07–10's submissions (tests/test_grading.py holds the catalogue): a file of their own, so
that each may go to another worker (conftest.SPREAD) while the earlier lessons are graded."""

import pytest

from test_grading import CASES, LATER_LESSONS, _groups, grade_as_intended

pytestmark = pytest.mark.slow


@pytest.mark.parametrize(("lesson", "cases"), _groups(LATER_LESSONS))
def test_catalogue_of_later_lessons_is_graded_as_intended(lesson, cases, tmp_path, record_property):
    assert {case.lesson for case in CASES} >= LATER_LESSONS  # every lesson here has cases in the catalogue
    grade_as_intended(lesson, cases, tmp_path, record_property)
