"""Small filesystems that fill up, private to the agent under test.

The agent runs in a mount namespace of its own (``unshare -m``) in which a small
tmpfs is mounted on each directory asked for: the kernel's real ENOSPC, and SIGBUS
for a sparse mmap'd page it cannot find, as on a full ``emptyDir``. The mounts
vanish with the namespace when the agent exits, whatever the test did; the test
reaches them through ``/proc/<agent pid>/root``.
"""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from pathlib import Path

CHUNK = 1 << 16


def can_mount_tmpfs() -> bool:
    """Root with mount namespaces: ``unshare -m`` and a tmpfs mounted in it."""
    if shutil.which("unshare") is None:
        return False
    with tempfile.TemporaryDirectory() as where:
        probe = subprocess.run(
            ["unshare", "-m", "--propagation", "private", "mount", "-t", "tmpfs", "-o",
             "size=64k", "tmpfs", where],
            capture_output=True, check=False,
        )
    return probe.returncode == 0


def with_tmpfs(mounts: dict[Path, int]) -> list[str]:
    """A ``wrap`` for ``SimCluster.start_agent``: a tmpfs of ``size`` bytes on each path
    (made here if missing), in the agent's own mount namespace."""
    script = []
    for path, size in mounts.items():
        path.mkdir(parents=True, exist_ok=True)
        script.append(f"mount -t tmpfs -o size={size} agentpool-test {path}")
    return ["unshare", "-m", "--propagation", "private", "sh", "-c",
            " && ".join([*script, 'exec "$@"']), "sh"]


def seen_by(pid: int, path: Path) -> Path:
    """``path`` as the process ``pid`` sees it (its mount namespace)."""
    return Path(f"/proc/{pid}/root") / path.relative_to("/")


def fill(directory: Path) -> Path:
    """Write a file into ``directory`` until its filesystem says ENOSPC; the file."""
    target = directory / "fill"
    fd = os.open(target, os.O_WRONLY | os.O_CREAT | os.O_APPEND, 0o600)
    try:
        for size in (CHUNK, 4096, 1):
            block = b"\0" * size
            with contextlib.suppress(OSError):
                while True:
                    os.write(fd, block)
    finally:
        os.close(fd)
    stat = os.statvfs(directory)
    assert stat.f_bavail == 0, f"{directory} is not full: {stat.f_bavail} blocks free"
    return target
