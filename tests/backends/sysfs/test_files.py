"""write_int on plain files (a lab's sysfs-shaped tree): exact contents, never empty."""

from __future__ import annotations

import os
import threading
from pathlib import Path

from agentpool.backends.sysfs.files import read_int, write_int


def test_a_shorter_value_replaces_a_longer_one_exactly(tmp_path: Path) -> None:
    limit = tmp_path / "constraint_0_power_limit_uw"
    limit.write_text("165000000\n")
    write_int(limit, 60_000_000)
    assert limit.read_text() == "60000000\n"
    write_int(limit, 165_000_000)
    assert limit.read_text() == "165000000\n"


def test_a_reader_never_sees_the_file_empty_while_it_is_rewritten(tmp_path: Path) -> None:
    # A pod's teardown SIGKILLs a worker in the middle of its restore: with O_TRUNC the file
    # was left empty between the truncate and the write, and the next agent found no number
    # there (RAPL unusable). Here a reader looks at every moment it can get while values
    # of the same length are written back and forth.
    limit = tmp_path / "constraint_0_power_limit_uw"
    limit.write_text("165000000\n")
    seen: list[bytes] = []
    done = threading.Event()

    def watch() -> None:
        fd = os.open(limit, os.O_RDONLY)
        try:
            while not done.is_set():
                seen.append(os.pread(fd, 64, 0))
        finally:
            os.close(fd)

    watcher = threading.Thread(target=watch)
    watcher.start()
    try:
        for _ in range(3000):
            write_int(limit, 120_000_000)
            write_int(limit, 165_000_000)
    finally:
        done.set()
        watcher.join()
    assert seen
    assert b"" not in seen
    assert read_int(limit) == 165_000_000
