"""Helpers for asserting on sysfs-shaped trees: whole-tree snapshots and diffs."""

from __future__ import annotations

import os
from pathlib import Path

from agentpool.sim.sysfs import trees as simfs


def snapshot(root: Path) -> dict[str, str]:
    """Every file under ``root`` (relative path -> content), without walking symlinked dirs.

    Locked limit files are symlinks into /proc; they are read through the link.
    """
    out: dict[str, str] = {}
    for dirpath, _dirs, files in os.walk(root):
        for name in files:
            path = Path(dirpath) / name
            out[str(path.relative_to(root))] = path.read_text()
    return out


LIVE_FILES = ("energy_uj", "scaling_cur_freq")
"""What LiveSysfs moves by itself; the agent never writes these."""


def settings_of(root: Path) -> dict[str, str]:
    """A snapshot without the files LiveSysfs moves: what is left is what the agent may change."""
    return {k: v for k, v in snapshot(root).items() if not k.endswith(LIVE_FILES)}


def changes(before: dict[str, str], after: dict[str, str]) -> dict[str, str]:
    """Files whose content differs (new content), so a test can assert the exact set."""
    assert before.keys() == after.keys()
    return {k: v for k, v in after.items() if before[k] != v}


def rel(root: Path, path: Path) -> str:
    return str(path.relative_to(root))


def lock(tree: simfs.SysfsTree, path: Path) -> None:
    """Make ``path`` refuse writes (EPERM, even for root) while reading its current value.

    The same sealed-memfd mechanism the sim uses for BIOS-locked RAPL
    (:class:`agentpool.sim.sysfs.trees.LockMode`), applied to one file of a writable tree.
    """
    value = simfs.read_int(path)
    path.unlink()
    simfs._sealed(path, value, tree._fds)
