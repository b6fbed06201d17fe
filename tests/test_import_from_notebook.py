"""tfcourse.course.import_from_notebook: a later lesson takes the learner's own classes from an earlier one."""

from __future__ import annotations

import sys

import nbformat
import pytest
import torch
from nbformat.v4 import new_code_cell, new_markdown_cell, new_notebook

from tfcourse.checks.core import learner_namespaces
from tfcourse.course.notebook_import import NotebookImportError, definition_cells, import_from_notebook

pytestmark = pytest.mark.slow  # executes notebook cells: `make test-fast` leaves it out

DEFINITIONS = '''
import torch
from torch import nn

D_MODEL = 8
D_FF = D_MODEL * 4  # arithmetic on constants is a constant too
NAMES: tuple = ("embed", "blocks", "output")


class FeedForward(nn.Module):
    """Two linear layers."""

    def __init__(self, d_model=D_MODEL):
        super().__init__()
        self.linear1 = nn.Linear(d_model, D_FF)
        self.linear2 = nn.Linear(D_FF, d_model)

    def forward(self, x):
        return self.linear2(torch.relu(self.linear1(x)))


def double(x):
    return 2 * x
'''


def write_notebook(path, *sources, markdown="# A lesson"):
    cells = [new_markdown_cell(markdown)] + [new_code_cell(source) for source in sources]
    nbformat.write(new_notebook(cells=cells), path)
    return path


@pytest.fixture
def lesson(tmp_path):
    marker = tmp_path / "ran.txt"
    return write_notebook(
        tmp_path / "03_lesson.ipynb",
        DEFINITIONS,
        f"open({str(marker)!r}, 'w').write('a cell that runs things was executed')",  # not a definition cell
        "device = torch.device('cpu')\nprint(double(2))",  # an assignment from a call: skipped
        "%matplotlib inline\nimport math",  # IPython magic: not plain Python, skipped
        "def not_run():\n    return 1\nnot_run()",  # a def *and* a call: the whole cell is skipped
        "check_feed_forward(FeedForward)",  # a test cell
    ), marker


def test_a_single_name_returns_the_object_and_a_list_returns_a_tuple(lesson):
    path, _ = lesson
    FeedForward = import_from_notebook(path, "FeedForward")
    ffn = FeedForward()
    assert ffn(torch.ones(2, 3, 8)).shape == (2, 3, 8)
    ffn_cls, double = import_from_notebook(path, ["FeedForward", "double"])
    assert double(21) == 42 and ffn_cls().linear1.out_features == 32


def test_only_definition_cells_run(lesson):
    path, marker = lesson
    import_from_notebook(path, "double")
    assert not marker.exists()
    nb = nbformat.read(path, as_version=4)
    assert [index for index, _ in definition_cells(nb)] == [1]
    with pytest.raises(NotebookImportError, match="`not_run` is not defined"):
        import_from_notebook(path, "not_run")


def test_a_missing_name_says_which_notebook_to_finish(lesson):
    path, _ = lesson
    with pytest.raises(NotebookImportError) as error:
        import_from_notebook(path, ["FeedForward", "MultiHeadAttention"])
    assert str(error.value) == f"`MultiHeadAttention` is not defined in {path}: finish that exercise first"


def test_a_stub_and_a_definition_that_uses_one_are_refused(tmp_path):
    path = write_notebook(
        tmp_path / "06_models.ipynb",
        "from torch import nn\n\nclass Block(nn.Module):\n    def forward(self, x):\n"
        "        # YOUR CODE HERE\n        raise NotImplementedError()",
        "from torch import nn\n\nclass GPT(nn.Module):\n    def __init__(self):\n        super().__init__()\n"
        "        self.block = Block()",
        "def unrelated():\n    return 3",
    )
    with pytest.raises(NotebookImportError, match=r"`Block` still raises NotImplementedError in .*06_models.ipynb: "
                                                   "finish that exercise first"):
        import_from_notebook(path, "Block")
    with pytest.raises(NotebookImportError, match="`GPT` uses `Block`, which still raises NotImplementedError"):
        import_from_notebook(path, "GPT")
    assert import_from_notebook(path, "unrelated")() == 3


def test_a_later_cell_redefines_and_wins(tmp_path):
    path = write_notebook(tmp_path / "lesson.ipynb",
                          "def f():\n    raise NotImplementedError()", "def f():\n    return 'finished'")
    assert import_from_notebook(path, "f")() == "finished"


def test_classes_live_in_a_registered_module(lesson):
    path, _ = lesson
    FeedForward = import_from_notebook(path, "FeedForward")
    module = sys.modules[FeedForward.__module__]
    assert module.D_MODEL == 8 and module.NAMES == ("embed", "blocks", "output")
    assert learner_namespaces(FeedForward) == [vars(module)]  # the checks' off-limits guard can find it


def test_a_failing_definition_cell_is_named(tmp_path):
    path = write_notebook(tmp_path / "broken.ipynb", "import a_module_that_does_not_exist\n\ndef f():\n    return 1")
    with pytest.raises(NotebookImportError, match=r"cell 1 of .*broken.ipynb failed: ModuleNotFoundError"):
        import_from_notebook(path, "f")


def test_a_missing_notebook_is_a_clear_error(tmp_path):
    with pytest.raises(FileNotFoundError, match="no notebook at"):
        import_from_notebook(tmp_path / "06_models.ipynb", "GPT")


def test_a_setup_cells_imports_run_but_not_its_calls(tmp_path):
    marker = tmp_path / "setup-ran.txt"
    path = write_notebook(
        tmp_path / "06_models.ipynb",
        f"import torch\nfrom torch import nn\n\nopen({str(marker)!r}, 'w').write('x')\ndevice = torch.device('cpu')",
        "class MiniGPT(nn.Module):\n    def forward(self, ids):\n        return torch.zeros(ids.shape + (5,))",
    )
    MiniGPT = import_from_notebook(path, "MiniGPT")
    assert MiniGPT()(torch.zeros(2, 3, dtype=torch.long)).shape == (2, 3, 5)
    assert not marker.exists()
