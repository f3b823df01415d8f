"""A memory cgroup of its own for an agent under test: the pod's ``resources.limits.memory``.

Made under this process's own memory cgroup (cgroup v1's memory hierarchy, or the
unified one where it holds the memory controller), with an optional limit; an agent
started through :meth:`MemoryCgroup.wrap` runs in it with every process it forks, so
the kernel charges, limits and OOM-kills them as a container's. Needs root and a
writable cgroup filesystem (:func:`available` says). Found here independently of
the agent's own reading of its cgroup, which the tests check against it.
"""

from __future__ import annotations

import os
import signal
import time
from pathlib import Path

CGROUP_FS = Path("/sys/fs/cgroup")


def _own() -> tuple[Path, int] | None:
    """This process's memory cgroup directory and its version, if one can be written."""
    try:
        lines = Path("/proc/self/cgroup").read_text().splitlines()
    except OSError:
        return None
    for line in lines:
        hierarchy, controllers, path = line.split(":", 2)
        if "memory" in controllers.split(","):
            return CGROUP_FS / "memory" / path.lstrip("/"), 1
        if hierarchy == "0" and (CGROUP_FS / "cgroup.controllers").is_file():
            unified = CGROUP_FS / path.lstrip("/")
            if "memory" in (unified / "cgroup.controllers").read_text().split():
                return unified, 2
    return None


def available() -> bool:
    """Whether a child memory cgroup can be made here (root, a writable cgroup fs)."""
    own = _own()
    return own is not None and os.access(own[0], os.W_OK)


class MemoryCgroup:
    """A child of this process's memory cgroup; :meth:`close` empties and removes it."""

    def __init__(self, name: str, limit_bytes: int | None = None) -> None:
        own = _own()
        if own is None:
            raise RuntimeError("no memory cgroup of this process to make a child under")
        parent, self.version = own
        self.path = parent / f"{name}-{os.getpid()}"
        self.path.mkdir()
        if limit_bytes is not None:
            self.set_limit(limit_bytes)

    def _file(self, v1: str, v2: str) -> Path:
        return self.path / (v1 if self.version == 1 else v2)

    def set_limit(self, limit_bytes: int) -> None:
        self._file("memory.limit_in_bytes", "memory.max").write_text(str(limit_bytes))

    def usage_bytes(self) -> int:
        return int(self._file("memory.usage_in_bytes", "memory.current").read_text())

    def peak_bytes(self) -> int:
        return int(self._file("memory.max_usage_in_bytes", "memory.peak").read_text())

    def stat(self) -> dict[str, int]:
        out = {}
        for line in (self.path / "memory.stat").read_text().splitlines():
            key, _, value = line.partition(" ")
            out[key] = int(value)
        return out

    def unreclaimable_bytes(self) -> int:
        """What the kernel cannot take back under the limit without killing: the usage
        less file-backed page cache (tmpfs pages, which cannot be dropped, stay in)."""
        stat = self.stat()
        if self.version == 1:
            return self.usage_bytes() - (stat["total_cache"] - stat["total_shmem"])
        return self.usage_bytes() - (stat["file"] - stat["shmem"])

    def oom_kills(self) -> int:
        text = self._file("memory.oom_control", "memory.events").read_text()
        return next(int(line.split()[1]) for line in text.splitlines()
                    if line.startswith("oom_kill "))

    def pids(self) -> list[int]:
        return [int(p) for p in (self.path / "cgroup.procs").read_text().split()]

    def wrap(self) -> list[str]:
        """A command prefix that moves itself into this cgroup, then runs the rest."""
        return ["sh", "-c", f'echo $$ > {self.path}/cgroup.procs && exec "$@"', "sh"]

    def close(self, timeout: float = 10.0) -> None:
        """SIGKILL what still runs in it, then remove it."""
        deadline = time.monotonic() + timeout
        while True:
            pids = self.pids()
            if not pids:
                break
            for pid in pids:
                try:
                    os.kill(pid, signal.SIGKILL)
                except ProcessLookupError:
                    pass
            if time.monotonic() > deadline:
                raise RuntimeError(f"{self.path} still holds processes {pids}")
            time.sleep(0.05)
        self.path.rmdir()

    def __enter__(self) -> MemoryCgroup:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()
