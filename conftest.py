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
    """Print the figures that tests record: notebook run times and the autograder catalogue."""
    modules = __import__("sys").modules
    times = getattr(modules.get("test_notebooks"), "RUN_TIMES", {})
    if times:
        terminalreporter.section("solution notebooks, fast mode")
        for lesson, seconds in times.items():
            terminalreporter.write_line(f"{seconds:7.1f} s  {lesson}")
        terminalreporter.write_line(f"{sum(times.values()):7.1f} s  total")
    rows = getattr(modules.get("test_grading"), "CATALOGUE", [])
    if rows:
        terminalreporter.section("autograder catalogue: points per exercise")
        for case, lesson, points in rows:
            terminalreporter.write_line(f"{case:<48} {lesson:<21} {points}")
