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
