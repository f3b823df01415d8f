"""Each benchmark's own section of BENCHMARKS.md, replaced in place by its next run.

A section lies between two HTML comments naming its script; everything
outside them (the hand-written results and their commentary) is kept as it
is. A report without the markers yet gets the section appended.
"""

from __future__ import annotations

from pathlib import Path


def markers(script: str) -> tuple[str, str]:
    return f"<!-- bench/{script}: begin -->", f"<!-- bench/{script}: end -->"


def replace_section(path: Path, script: str, section: str) -> None:
    """Put ``section`` between ``script``'s markers in ``path``, or append it with them."""
    begin, end = markers(script)
    block = f"{begin}\n{section.strip(chr(10))}\n{end}"
    old = path.read_text() if path.exists() else ""
    start = old.find(begin)
    stop = old.find(end, start) if start != -1 else -1
    if stop != -1:
        new = old[:start] + block + old[stop + len(end) :]
    else:
        new = (old.rstrip("\n") + "\n\n" if old.strip() else "") + block + "\n"
    path.write_text(new)
