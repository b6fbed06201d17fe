import pytest
import torch


@pytest.fixture
def one_thread():
    """Run a test on one CPU thread.

    Multi-threaded CPU kernels may split a sum differently from one run to the next, which moves
    results in the last bit. Exact-resume tests compare bit for bit, so they need one thread; the
    tiny models in the tests are also fastest on one.
    """
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def pytest_terminal_summary(terminalreporter):
    """Print how long each solution notebook took (tests/test_notebooks.py records it)."""
    module = __import__("sys").modules.get("test_notebooks")
    times = getattr(module, "RUN_TIMES", {}) if module else {}
    if times:
        terminalreporter.section("solution notebooks, fast mode")
        for lesson, seconds in times.items():
            terminalreporter.write_line(f"{seconds:7.1f} s  {lesson}")
        terminalreporter.write_line(f"{sum(times.values()):7.1f} s  total")
