"""This process's memory allocators seen from inside: pymalloc's pools, the C heap's end.

For the fork server's layout work (:mod:`~agentpool.worker.forking.codepack`,
:mod:`~agentpool.worker.forking.holes`), which places objects by where the
allocators put them. What is assumed, and checked by :func:`unsupported`: an
interpreter this was tested on (:mod:`~agentpool.worker.forking.interpreters`)
with pymalloc (pools of 16 KiB, blocks up to 512 bytes, each pool's header
first: the blocks in use as its first 32-bit word), in anonymous mappings
(its arenas); bigger objects from glibc's malloc, whose main heap ends at
``sbrk(0)``.
"""

from __future__ import annotations

import ctypes
import functools
import os
import sys
import sysconfig
from typing import Any

from agentpool.worker.forking import interpreters

POOL = 16384
"""pymalloc's pool size: one size class of blocks per pool."""
SMALL = 512
"""pymalloc's largest block: bigger objects come from the C library's malloc."""


def unsupported() -> str | None:
    """Why this process's allocators are not the ones assumed here (None: they are)."""
    why = interpreters.unsupported(interpreters.Step.FILL_HOLES)
    if why is not None:
        return why
    if os.environ.get("PYTHONMALLOC") or sys.flags.dev_mode:
        return "another allocator (PYTHONMALLOC or -X dev)"
    if not sysconfig.get_config_var("WITH_PYMALLOC"):
        return "built without pymalloc"
    return None


def anonymous_mappings() -> list[tuple[int, int]]:
    """Address ranges of this process's anonymous mappings, where pymalloc's arenas are;
    never the ``[heap]``, where a pool-sized mask could point before the first page."""
    ranges = []
    with open("/proc/self/maps", encoding="ascii", errors="replace") as maps:
        for line in maps:
            fields = line.split()
            if len(fields) == 5:  # no name: anonymous
                low, high = (int(x, 16) for x in fields[0].split("-"))
                ranges.append((low, high))
    return ranges


class Pools:
    """Reads the pool header of small objects; arenas are looked up in the mappings."""

    def __init__(self) -> None:
        self._arenas = anonymous_mappings()

    def _mapped(self, address: int) -> bool:
        for _ in range(2):
            if any(low <= address < high for low, high in self._arenas):
                return True
            self._arenas = anonymous_mappings()  # a new arena since the last look
        return False

    def in_use(self, obj: object) -> tuple[int, int] | None:
        """(its pool's address, the blocks in use there) for a pymalloc object, or None
        when ``obj`` is not in an arena. The count includes ``obj`` and whatever the
        caller's own temporaries of that size class hold at the time (an int for an
        address: 32 bytes; a ctypes reader: 128)."""
        pool = id(obj) & ~(POOL - 1)
        if not self._mapped(pool):
            return None
        return pool, ctypes.c_uint.from_address(pool).value


@functools.cache
def _sbrk() -> Any:
    try:
        sbrk = ctypes.CDLL(None).sbrk  # the C library is linked into the interpreter
    except (OSError, AttributeError):
        return None
    sbrk.restype = ctypes.c_void_p
    sbrk.argtypes = [ctypes.c_ssize_t]
    return sbrk


def heap_end() -> int:
    """Where the C library's main heap ends now (``sbrk(0)``); 0 if it cannot be told."""
    sbrk = _sbrk()
    return int(sbrk(0) or 0) if sbrk is not None else 0
