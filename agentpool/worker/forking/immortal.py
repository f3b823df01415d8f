"""Make the fork server's heap immortal before workers fork from it.

Why: a forked worker shares the fork server's pages until it writes to
them, and CPython writes to an object whenever it takes or drops a
reference to it: calling a function writes its function and code objects,
loading a constant writes the constant, looking up a method writes the
method. So every shared page a worker's code merely *reads* becomes a
private copy in that worker. Measured, that is most of a worker's memory
(BENCHMARKS.md, ``memory.py``). ``gc.freeze()`` only keeps the collector's
own writes away.

CPython 3.12 made some objects immortal (PEP 683): ``None``, small ints,
interned strings, static types. ``Py_INCREF``/``Py_DECREF`` skip an object
whose reference count has its immortal value, so its page is never written
for a reference. There is no public API to make other objects immortal; this
module does what Meta's Cinder runtime does before forking its workers
(``cinder.immortalize_heap()``): it sets the reference count of every object
reachable from the fork server's modules and collector to that value.

What it changes in a worker, deliberately: objects that existed in the fork
server are never deallocated (they are shared and frozen already; a worker
that drops the last reference to one keeps it, which costs nothing shared).
Nothing created after this call is affected.

Only on the interpreters it was tested on
(:mod:`~agentpool.worker.forking.interpreters`), and only where a probe
object's first word is seen to count its references. Anywhere else it does
nothing and :func:`unsupported` says why; on 3.11 a worker then costs what
BENCHMARKS.md shows for it. The walk's own bookkeeping (the set of visited
ids, the list of pending objects) is never made immortal: it is freed when
the walk ends.
"""

from __future__ import annotations

import contextlib
import ctypes
import gc
import sys
import time
import types

from agentpool.worker.forking import interpreters

IMMORTAL_REFCNT = 0xFFFFFFFF
"""``_Py_IMMORTAL_REFCNT`` of 3.12 and 3.13 on 64-bit builds (``UINT_MAX``)."""
_LOW32 = 0xFFFFFFFF


def _refcount_word(obj: object) -> ctypes.c_ssize_t:
    # ob_refcnt is the first word of every object; id() is the object's address.
    return ctypes.c_ssize_t.from_address(id(obj))


def _probe_counts_references() -> bool:
    """Whether the first word of an object follows its reference count here."""
    probe = object()
    before = _refcount_word(probe).value & _LOW32
    if before not in (sys.getrefcount(probe) - 1, sys.getrefcount(probe)):
        return False
    held = [probe]  # one more reference
    after = _refcount_word(probe).value & _LOW32
    del held
    return after == before + 1 and _refcount_word(probe).value & _LOW32 == before


def unsupported() -> str | None:
    """Why this interpreter's reference counts are not laid out as assumed (None: they are)."""
    why = interpreters.unsupported(interpreters.Step.IMMORTALIZE)
    if why is None and not _probe_counts_references():
        return "a probe object's first word does not count its references"
    return why


def supported() -> bool:
    """Whether this interpreter's reference counts are laid out as this module assumes."""
    return unsupported() is None


def is_immortal(obj: object) -> bool:
    """Whether CPython treats ``obj`` as immortal (the sign bit of the low 32 bits)."""
    return supported() and (_refcount_word(obj).value & _LOW32) >= 0x80000000


def _children(obj: object) -> list[object]:
    children = gc.get_referents(obj)
    # Not reached through gc.get_referents: code objects are not GC containers
    # (their constants are what a worker's LOAD_CONST writes), and static
    # builtin types hide their dicts (the method descriptors a worker looks up).
    if isinstance(obj, types.CodeType):
        children.extend((obj.co_consts, obj.co_names))
    elif isinstance(obj, type):
        with contextlib.suppress(Exception):  # a metaclass may make __dict__ anything
            children.extend(obj.__dict__.values())
    return children


def immortalize() -> int:
    """Make every object reachable now immortal; returns how many were changed.

    Call in the fork server after the warm-up and ``gc.collect()``, right
    before ``gc.freeze()``, and never in a process that keeps creating and
    dropping the objects it walks (they would never be freed again).
    """
    if not supported():
        return 0
    changed = 0
    pending: list[object] = gc.get_objects()
    pending.extend(sys.modules.values())
    # The walk's own containers are in that snapshot (or reachable from it): never theirs
    # to keep, and what they hold (the visited ids) must not be walked either.
    seen: set[int] = {id(pending)}
    seen.add(id(seen))
    while pending:
        obj = pending.pop()
        if id(obj) in seen:
            continue
        seen.add(id(obj))
        word = _refcount_word(obj)
        if (word.value & _LOW32) < 0x80000000:  # not immortal yet (static objects are)
            word.value = IMMORTAL_REFCNT
            changed += 1
        pending.extend(_children(obj))
    return changed


def make_heap_immortal() -> str:
    """:func:`immortalize`, and one line saying what it did or why it did nothing."""
    why = unsupported()
    if why is not None:
        return f"immortal heap skipped: {why}; workers copy the pages they read"
    began = time.monotonic()
    changed = immortalize()
    return f"immortal heap: {changed} objects made immortal in {time.monotonic() - began:.2f}s"
