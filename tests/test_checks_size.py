"""tools/checks_size.py: each line of a check module counted as the kind it is."""

from __future__ import annotations

import textwrap
from pathlib import Path

from tools import checks_size

SOURCE = textwrap.dedent('''\
    """A module's docstring,
    over two lines."""

    import torch  # code with a comment after it

    # a comment of its own
    def check(x):
        """One line of docstring."""
        mistakes = {
            "the input itself: the layer's output was thrown away": x,
            f"{x} added to itself: the residual twice": x + x,
        }
        raise ValueError(describe(x, mistakes, shown=3) + ", "
                         "expected a Tensor of shape (B, T, d_model)")
    SOURCE = """a planted bug's source,
    one line after another
    """
''')
EXPECTED = ["docstring", "docstring", "blank", "code", "blank", "comment", "code", "docstring", "code", "message",
            "message", "code", "code", "message", "message", "message", "message"]


def test_each_line_gets_its_kind():
    assert checks_size.line_kinds(SOURCE) == EXPECTED


def test_the_table_counts_every_line_of_every_module(capsys):
    assert checks_size.main([]) == 0
    rows = capsys.readouterr().out.splitlines()
    modules = sorted((checks_size.ROOT / "tfcourse" / "checks").glob("*.py"))
    assert len(rows) == len(modules) + 2  # the header, one row per module, the total
    total = rows[-1].split()
    assert total[0] == "total"
    assert int(total[1]) == sum(len(path.read_text(encoding="utf-8").splitlines()) for path in modules)
    assert sum(map(int, total[2:])) == int(total[1])  # every line has one kind


def test_any_file_may_be_counted(tmp_path: Path, capsys):
    path = tmp_path / "module.py"
    path.write_text(SOURCE, encoding="utf-8")
    checks_size.main([str(path)])
    total = capsys.readouterr().out.splitlines()[-1].split()
    counts = dict(zip(checks_size.KINDS, map(int, total[2:])))
    assert counts == {kind: EXPECTED.count(kind) for kind in checks_size.KINDS}
