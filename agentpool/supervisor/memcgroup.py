"""The memory cgroup the agent runs in (the container's): its limit and its OOM kills.

Read from the cgroup filesystem, version 2 (``memory.max``, ``memory.events``) or
version 1 (``memory.limit_in_bytes``, ``memory.oom_control``), whichever holds the
memory controller. The process's own cgroup comes from ``/proc/self/cgroup`` and
the mount from ``/proc/self/mountinfo``: in a container the cgroup filesystem is
usually mounted at the container's own cgroup (a private cgroup namespace, or a v1
bind mount of it), and in a privileged pod it may be the host's whole tree, where
the path leads down to the container. The limit that applies is the lowest on the
way up to the mount's root (a pod-level cgroup limits its containers too).

Reads are a few small files; anything missing or unreadable is None ("not known",
"no limit"), never an error: a process outside any memory cgroup runs unlimited.
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

_OCTAL = re.compile(r"\\([0-7]{3})")
V1_UNLIMITED = 1 << 62
"""A v1 limit at or above this is the kernel's "no limit" (PAGE_COUNTER_MAX pages)."""


@dataclass(frozen=True)
class MemoryCgroup:
    """One memory cgroup directory, and the mount root above which no limit is visible."""

    path: Path
    root: Path
    version: int
    """2 (unified) or 1 (the memory controller's own hierarchy)."""

    def limit_bytes(self) -> int | None:
        """The lowest memory limit from this cgroup up to the mount root; None: none."""
        name = "memory.max" if self.version == 2 else "memory.limit_in_bytes"
        lowest: int | None = None
        here = self.path
        while True:
            value = _read_limit(here / name)
            if value is not None and (lowest is None or value < lowest):
                lowest = value
            if here == self.root or here.parent == here:
                return lowest
            here = here.parent

    def oom_kills(self) -> int | None:
        """Processes of this cgroup the kernel's OOM killer has killed so far."""
        name = "memory.events" if self.version == 2 else "memory.oom_control"
        try:
            text = (self.path / name).read_text()
        except OSError:
            return None
        for line in text.splitlines():
            key, _, value = line.partition(" ")
            if key == "oom_kill":
                try:
                    return int(value)
                except ValueError:
                    return None
        return None


def _read_limit(path: Path) -> int | None:
    try:
        text = path.read_text().strip()
    except OSError:
        return None
    if text == "max":
        return None
    try:
        value = int(text)
    except ValueError:
        return None
    return None if value >= V1_UNLIMITED else value


def _unescape(field: str) -> str:
    """A mountinfo path field: spaces and the like are written as octal escapes."""
    return _OCTAL.sub(lambda m: chr(int(m[1], 8)), field)


@dataclass(frozen=True)
class _Mount:
    root: str
    point: str
    version: int


def _mounts(mountinfo: str) -> list[_Mount]:
    mounts = []
    for line in mountinfo.splitlines():
        head, sep, tail = line.partition(" - ")
        fields, after = head.split(), tail.split()
        if not sep or len(fields) < 5 or len(after) < 3:
            continue
        fstype, options = after[0], after[2].split(",")
        if fstype == "cgroup2":
            mounts.append(_Mount(_unescape(fields[3]), _unescape(fields[4]), 2))
        elif fstype == "cgroup" and "memory" in options:
            mounts.append(_Mount(_unescape(fields[3]), _unescape(fields[4]), 1))
    return mounts


def _memberships(proc_cgroup: str) -> dict[int, str]:
    """Version -> this process's cgroup path in the hierarchy with the memory controller."""
    found: dict[int, str] = {}
    for line in proc_cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        hierarchy, controllers, path = parts
        if hierarchy == "0" and controllers == "":
            found[2] = path
        elif "memory" in controllers.split(","):
            found[1] = path
    return found


def _inside(mount: _Mount, path: str) -> Path:
    """``path`` (as /proc/self/cgroup names it) under the mount, or the mount itself when
    the path is not below the mount's root (a namespaced view of another tree)."""
    point = Path(mount.point)
    root = mount.root.rstrip("/")
    if path == root or path.startswith(root + "/"):
        candidate = point / path[len(root):].lstrip("/")
        if candidate.is_dir():
            return candidate
    return point


def find(proc: Path = Path("/proc/self")) -> MemoryCgroup | None:
    """The memory cgroup of the process whose ``/proc/<pid>`` is ``proc``; None where it
    has none (no cgroup filesystem mounted, no memory controller)."""
    try:
        mountinfo = (proc / "mountinfo").read_text()
        memberships = _memberships((proc / "cgroup").read_text())
    except OSError:
        return None
    for mount in _mounts(mountinfo):
        path = memberships.get(mount.version)
        if path is None:
            continue
        where = _inside(mount, path)
        # A unified hierarchy without the memory controller (cgroup v1 holds it) has no
        # memory.max in a non-root cgroup, nor memory.stat at its root.
        control = "memory.stat" if mount.version == 2 else "memory.limit_in_bytes"
        if os.path.exists(where / control):
            return MemoryCgroup(where, Path(mount.point), mount.version)
    return None
