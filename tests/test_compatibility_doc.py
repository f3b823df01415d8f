"""docs/joulie-compatibility.md: every row is pinned by a test, and every test it names exists.

A test column cites ``tests/path.py::test_name`` (a later ``::test_other`` in
the same cell is in that file), or a whole test module; each must be found
by reading the test files (no import: what the page promises must be a test
function pytest collects).
"""

from __future__ import annotations

import re
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PAGE = ROOT / "docs" / "joulie-compatibility.md"
CITE = re.compile(r"`(tests/[\w/]+\.py)?(?:::(\w+))?`")


def rows() -> list[list[str]]:
    """The cells of every body row of every table whose last column is 'test'."""
    found, header = [], None
    for line in PAGE.read_text().splitlines():
        if not line.startswith("|"):
            header = None
            continue
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if header is None:
            header = cells
        elif set(line) <= set("|- "):
            continue
        elif header[-1] == "test":
            found.append(cells)
    return found


def test_every_row_names_a_test_that_exists() -> None:
    table = rows()
    assert len(table) >= 30
    for cells in table:
        cited = CITE.findall(cells[-1])
        if not cited:
            assert cells[-1] == "same", cells  # the tests of the row above
            continue
        module = None
        for path, name in cited:
            module = path or module
            assert module is not None, cells
            source = (ROOT / module).read_text()
            if name:
                assert re.search(rf"^def {name}\(", source, re.MULTILINE), (module, name)
