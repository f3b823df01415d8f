"""Fill the fork server's free memory, so that a worker's allocations land on fresh pages.

Why: after the imports and the warm-up, the fork server's heap is full of
holes: free blocks in pymalloc pools that are partly in use and free chunks
between the C library's. A worker's first allocations go into those holes
first, and every hole lies on a page it shares with the fork server, so each
few objects it makes copy a page of someone else's. With the holes taken, a
worker's objects are packed onto pages of its own.

How: objects that nobody uses (``bytes``, floats, plain objects of the
right size) are made until
every partly used pool of each size class is full and the C heap's free
chunks are taken, and kept in :data:`FILLERS` for the fork server's life.
They cost the fork server nothing it does not hold already (the holes'
pages are resident), and a worker never touches them. Call it last, right
before ``gc.freeze()``: whatever the fork server allocates after it (the
requests it reads between forks) lands on fresh pages, not in a hole a
worker would have inherited.

Best effort: only on the interpreters it was tested on
(:mod:`~agentpool.worker.forking.interpreters`) with pymalloc (not with
``PYTHONMALLOC`` set or ``-X dev``; elsewhere nothing is done), and the C
heap's part only with glibc 2.33 on (``mallinfo2``).
"""

from __future__ import annotations

import ctypes
import sys
from typing import Any

from agentpool.worker.forking import allocator

BYTES_HEADER = sys.getsizeof(b"")
"""A bytes object's size before its contents (the trailing NUL included)."""
MAX_FILLERS = 200_000
"""A bound, should the allocators not behave as assumed here."""

FILLERS: list[object] = []
"""What holds the holes: never read, never freed."""
C_CHUNKS: list[int] = []
"""Addresses of the small C heap chunks taken with ``malloc``: never read, never freed."""
MIN_CHUNK = 32
"""glibc's smallest chunk on 64-bit."""


class _MallInfo2(ctypes.Structure):
    _fields_ = [(name, ctypes.c_size_t) for name in (
        "arena", "ordblks", "smblks", "hblks", "hblkhd", "usmblks", "fsmblks", "uordblks",
        "fordblks", "keepcost",
    )]


def _filler(block: int) -> object:
    """A new object that takes one pymalloc block of ``block`` bytes."""
    if block == 16:
        return object()
    if block == 32:
        return float(len(FILLERS))  # a new float each time (24 bytes)
    return bytes(block - BYTES_HEADER)


def _block(size: int) -> int:
    return (size + 15) // 16 * 16


def fill_pools() -> int:
    """Take every free block of every partly used pool; returns how many were taken."""
    pools = allocator.Pools()
    # Alive while a pool's count is read, besides the fillers: the ctypes object reading
    # it, the last answer (a pair), and ints beyond the small-int cache (the pool's
    # address, this loop's counts). Each takes a block of its own size class.
    temporaries = dict.fromkeys(range(16, allocator.SMALL + 16, 16), 0)
    temporaries[_block(sys.getsizeof(ctypes.c_uint()))] += 1
    temporaries[_block(sys.getsizeof((1 << 40, 1 << 40)))] += 1
    temporaries[_block(sys.getsizeof(1 << 40))] += 3
    ours: dict[int, int] = {}
    """pool -> the fillers in it."""
    taken = 0
    for block in range(allocator.SMALL, 0, -16):
        while len(FILLERS) < MAX_FILLERS:
            obj = _filler(block)
            found = pools.in_use(obj)
            if found is None:  # not pymalloc's after all: leave it
                return taken
            pool, in_use = found
            mine = ours.get(pool, 0) + 1
            # Nothing in this pool but fillers (and these lines' temporaries): it was
            # empty, so every partly used pool of this size is full now.
            if in_use <= mine + temporaries[block]:
                break
            ours[pool] = mine
            FILLERS.append(obj)
            taken += 1
    return taken


def _mallinfo2() -> Any:
    """glibc's ``mallinfo2`` (2.33 on), or None."""
    try:
        mallinfo2 = ctypes.CDLL(None).mallinfo2
    except (OSError, AttributeError):  # not glibc (2.33 on)
        return None
    mallinfo2.restype = _MallInfo2
    return mallinfo2


def fill_heap() -> int:
    """Take the C heap's free chunks; returns the bytes taken.

    Chunks bigger than a pymalloc block are taken with ``bytes`` objects; smaller
    ones, which only C code's own ``malloc`` calls reach (a pymalloc-sized object
    never does), with ``malloc`` itself, or they would stay holes: :data:`C_CHUNKS`
    keeps them.
    """
    mallinfo2 = _mallinfo2()
    if mallinfo2 is None:
        return 0
    taken = 0
    size = 1 << 16
    while size > allocator.SMALL and len(FILLERS) < MAX_FILLERS:
        info = mallinfo2()
        # The top chunk begins where the heap ends less its size: below it, a hole.
        top = allocator.heap_end() - info.keepcost
        if info.fordblks - info.keepcost < size:
            size //= 2
            continue
        obj = bytes(size - BYTES_HEADER)
        if id(obj) >= top:
            size //= 2  # no hole this big is left: it came from the top
            continue
        FILLERS.append(obj)
        taken += size
    return taken + _fill_small_chunks(mallinfo2)


def _fill_small_chunks(mallinfo2: Any) -> int:
    """Take the free chunks of up to a pymalloc block's size with ``malloc``."""
    malloc = ctypes.CDLL(None).malloc
    malloc.restype = ctypes.c_void_p
    malloc.argtypes = [ctypes.c_size_t]
    taken = 0
    chunk = allocator.SMALL + 16  # a chunk's size, its 8-byte header included
    while chunk >= MIN_CHUNK and len(C_CHUNKS) < MAX_FILLERS:
        info = mallinfo2()
        top = allocator.heap_end() - info.keepcost
        if info.fordblks - info.keepcost < chunk:
            chunk //= 2
            continue
        address = malloc(chunk - 8)
        if not address:
            break
        C_CHUNKS.append(address)  # from the top or not, kept: freed, it would be a hole
        if address >= top:
            chunk //= 2
            continue
        taken += chunk
    return taken


def fill() -> str:
    """Both, and one line saying what was done (or why not)."""
    why = allocator.unsupported()
    if why is not None:
        return f"holes left as they are: {why}"
    heap = fill_heap()  # first: its own small objects would leave holes in full pools
    blocks = fill_pools()
    return f"holes filled: {blocks} pymalloc blocks, {heap // 1024} KiB of the C heap"
