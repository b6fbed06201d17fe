"""Shared by the tests of the exercise checks (tests/test_checks_NN.py)."""


def assert_passes(check, learner, capfd, hidden=True) -> None:
    """The check accepts `learner`: exactly one ✔ line on stdout, nothing on stderr."""
    check(learner, hidden=hidden)
    out, err = capfd.readouterr()
    assert out.startswith("✔ ") and out.count("\n") == 1, out
    assert err == ""


def stub(*args, **kwargs):
    """What an unanswered exercise does."""
    raise NotImplementedError()
