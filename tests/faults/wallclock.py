"""Step the wall clock of the agent's processes only (tests/faults/wallclock.c says how,
and why a preloaded library stands in for stepping the host's clock)."""

from __future__ import annotations

import mmap
import os
import shutil
import struct
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("wallclock.c")
_OFFSET = struct.Struct("q")


def compiler() -> str | None:
    return shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")


class SteppedClock:
    """The library, built into ``directory``, and the offset every process that loads it
    adds to its wall-clock readings."""

    def __init__(self, directory: Path) -> None:
        cc = compiler()
        assert cc is not None
        directory.mkdir(parents=True, exist_ok=True)
        self.library = directory / "libwallclock.so"
        subprocess.run(
            [cc, "-shared", "-fPIC", "-O1", "-Wall", "-Werror", "-o", str(self.library),
             str(SOURCE), "-ldl"],
            check=True, capture_output=True,
        )
        self.offset_file = directory / "offset"
        self.offset_file.write_bytes(_OFFSET.pack(0))

    def env(self) -> dict[str, str]:
        """What puts a process (and every child it starts) on this clock."""
        return {"LD_PRELOAD": str(self.library), "WALLCLOCK_OFFSET_FILE": str(self.offset_file)}

    def step_to(self, offset_s: float) -> None:
        """Wall clocks read true time plus ``offset_s`` from now on, in every process."""
        with open(self.offset_file, "r+b") as f, mmap.mmap(f.fileno(), _OFFSET.size) as m:
            m[: _OFFSET.size] = _OFFSET.pack(round(offset_s * 1e9))
