"""Build and drive the fake ``libnvidia-ml.so.1`` (tests/backends/fake_nvml/fake_nvml.c).

It stands in for NVIDIA's driver library, which cannot exist on a machine
without an NVIDIA GPU: NVIDIA's own binding (``pynvml`` from nvidia-ml-py)
loads it through its ordinary lookup, ``CDLL("libnvidia-ml.so.1")``. A
subprocess finds it through ``LD_LIBRARY_PATH`` (:meth:`FakeNvml.env`); the
test process itself loads it once by absolute path (:func:`preload`), after
which the dynamic loader answers the binding's lookup by soname with it.
Device state is a text file the tests read and write.
"""

from __future__ import annotations

import ctypes
import os
import shutil
import subprocess
from dataclasses import dataclass, replace
from pathlib import Path

import pytest

SOURCE = Path(__file__).parents[1] / "backends" / "fake_nvml" / "fake_nvml.c"
SONAME = "libnvidia-ml.so.1"


@dataclass(frozen=True)
class FakeGpu:
    uuid: str
    name: str = "Fake_GPU"
    min_w: float = 100.0
    max_w: float = 400.0
    default_w: float = 350.0
    limit_w: float | None = None
    """The current limit; None: the default."""
    power_w: float = 300.0
    fail: str = "none"
    """none, not_supported, no_permission, lost or sticky (see the C file)."""


def compiler() -> str:
    found = shutil.which(os.environ.get("CC", "gcc")) or shutil.which("cc")
    if found is None:
        pytest.skip("no C compiler (gcc/cc) to build the fake libnvidia-ml.so.1")
    return found


def build(directory: Path) -> Path:
    """Compile the fake into ``directory/libnvidia-ml.so.1``; returns the library path."""
    directory.mkdir(parents=True, exist_ok=True)
    library = directory / SONAME
    subprocess.run(
        [
            compiler(),
            "-shared",
            "-fPIC",
            "-O1",
            "-Wall",
            "-Werror",
            f"-Wl,-soname,{SONAME}",
            "-o",
            str(library),
            str(SOURCE),
        ],
        check=True,
        capture_output=True,
    )
    return library


_preloaded: list[ctypes.CDLL] = []


def preload(library: Path) -> None:
    """Load the fake into this process once, so ``CDLL("libnvidia-ml.so.1")`` finds it."""
    if not _preloaded:
        _preloaded.append(ctypes.CDLL(str(library), mode=ctypes.RTLD_GLOBAL))


class FakeNvml:
    """The state file of one fake host's GPUs."""

    def __init__(self, library: Path, state: Path) -> None:
        self.library = library
        self.state = state

    def write(self, gpus: list[FakeGpu], driver: bool = True) -> None:
        lines = [f"driver {'loaded' if driver else 'missing'}"]
        for g in gpus:
            limit = g.default_w if g.limit_w is None else g.limit_w
            mw = [round(w * 1000) for w in (g.min_w, g.max_w, g.default_w, limit, g.power_w)]
            lines.append(" ".join([g.uuid, g.name, *map(str, mw), g.fail]))
        # Atomically, as the fake itself writes: a worker reading a half-written file
        # would see fewer devices or none.
        partial = self.state.with_name(self.state.name + ".test-tmp")
        partial.write_text("\n".join(lines) + "\n")
        os.replace(partial, self.state)

    def read(self) -> tuple[bool, list[FakeGpu]]:
        first, *rows = self.state.read_text().split("\n")
        gpus = []
        for row in filter(None, rows):
            uuid, name, lo, hi, default, limit, power, fail = row.split()
            lo_w, hi_w, d_w, l_w, p_w = (int(v) / 1000 for v in (lo, hi, default, limit, power))
            gpus.append(FakeGpu(uuid, name, lo_w, hi_w, d_w, l_w, p_w, fail))
        return first == "driver loaded", gpus

    def limits(self) -> list[float | None]:
        return [g.limit_w for g in self.read()[1]]

    def set_fail(self, index: int, fail: str) -> None:
        driver, gpus = self.read()
        gpus[index] = replace(gpus[index], fail=fail)
        self.write(gpus, driver)

    def set_driver(self, loaded: bool) -> None:
        self.write(self.read()[1], loaded)

    def env(self) -> dict[str, str]:
        """What a subprocess needs to load the fake through the binding's lookup."""
        return {
            "LD_LIBRARY_PATH": str(self.library.parent),
            "FAKE_NVML_STATE": str(self.state),
        }
