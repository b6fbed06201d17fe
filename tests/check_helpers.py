"""Shared by the tests of the exercise checks (tests/test_checks_NN.py)."""


def assert_passes(check, learner, capfd, hidden=True) -> None:
    """The check accepts `learner`: exactly one ✔ line on stdout, nothing on stderr."""
    check(learner, hidden=hidden)
    out, err = capfd.readouterr()
    assert out.startswith("✔ ") and out.count("\n") == 1, out
    assert err == ""


def assert_fails_naming(check, learner, named: str, hidden: bool = False) -> None:
    """The check refuses `learner` with a message that contains `named`."""
    import pytest

    from tfcourse.checks.core import CheckFailed

    with pytest.raises(CheckFailed) as failure:
        check(learner, hidden=hidden)
    assert named in str(failure.value), failure.value


def stub(*args, **kwargs):
    """What an unanswered exercise does."""
    raise NotImplementedError()
