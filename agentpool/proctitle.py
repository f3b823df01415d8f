"""Process titles: what ``ps``, ``top`` and ``/proc/<pid>/comm`` call each agentpool process.

Linux keeps two names per process. ``comm`` (``/proc/<pid>/comm``, at most
15 bytes: what ``top`` shows by default and ``pgrep``, ``ps -o comm`` and
``ps -C`` match) is set with ``prctl(PR_SET_NAME)``. The command line
(``/proc/<pid>/cmdline``: ``ps aux``, ``top -c``) is read from the memory
the kernel put ``argv`` in at exec, whose bounds ``/proc/self/stat`` gives
(``arg_start``, ``arg_end``); overwriting those bytes in place renames the
process, as PostgreSQL and the ``setproctitle`` package do on Linux. Nothing
reads that memory after start-up: CPython copied ``argv`` into ``sys.argv``
and ``sys.orig_argv`` before running any Python code. A title longer than
the area is cut; it is never extended into the environment (which C code may
still read through ``environ``), so ``ps`` never shows a mangled one.

Why not ``setproctitle``: it would be a compiled dependency of every image
for a few lines of ctypes, and ``ctypes`` is loaded by the worker anyway
(``PR_SET_PDEATHSIG``); measured, it also cost each worker more memory
(BENCHMARKS.md, optimisations). The area's bounds are read once, at import, which
in a worker means in the fork server: its children inherit the numbers.

:func:`enable` (``AGENTPOOL_PROCTITLE=false``: every process is told at start,
and a worker inherits its fork server's choice) leaves every name as it was, to
measure the cost or to rule it out. Best effort everywhere: a failure leaves the
name alone.
"""

from __future__ import annotations

import ctypes
import threading
from typing import Any

PR_SET_NAME = 15
COMM_BYTES = 15
"""``TASK_COMM_LEN`` is 16, with the terminating NUL."""
COMM_PREFIX = "ap:"
TITLE_PREFIX = "agentpool: "


_enabled = True


def enable(on: bool) -> None:
    """Whether :func:`set_title` and :func:`name_thread` rename anything in this process
    (and the processes it forks from now on)."""
    global _enabled
    _enabled = on


def argv_area(stat: str | None = None) -> tuple[int, int] | None:
    """(start, end) of this process's argv memory, from ``/proc/self/stat`` (Linux >= 3.5)."""
    try:
        if stat is None:
            with open("/proc/self/stat", encoding="ascii") as f:
                stat = f.read()
        # comm (field 2) may hold spaces and parentheses: fields count from after its ')'.
        fields = stat[stat.rindex(")") + 2 :].split()
        start, end = int(fields[48 - 3]), int(fields[49 - 3])
    except (OSError, ValueError, IndexError):
        return None
    return (start, end) if 0 < start < end else None


def _libc_prctl() -> Any:
    try:
        return ctypes.CDLL(None, use_errno=True).prctl
    except (OSError, AttributeError):
        return None


_AREA = argv_area()
_PRCTL = _libc_prctl()


def comm_for(name: str) -> str:
    """A ``comm`` naming a node in 15 bytes: ``ap:`` and its first DNS label, or as much of
    the label's end as fits (where names of one cluster differ: ``...-vmss000003``)."""
    label = name.split(".", 1)[0] or name
    short = COMM_PREFIX + label
    if len(short.encode()) <= COMM_BYTES:
        return short
    tail = label.encode()[-(COMM_BYTES - len(COMM_PREFIX) - 1):].decode(errors="ignore")
    return f"{COMM_PREFIX}~{tail}"


def set_title(title: str, comm: str | None = None) -> bool:
    """Rename this process (its command line, and ``comm`` when given); True if done."""
    if not _enabled:
        return False
    done = False
    if _AREA is not None and _AREA[1] - _AREA[0] >= 3:
        start, end = _AREA
        size = end - start
        raw = title.encode(errors="replace")[: size - 2]
        # The title, NULs, and a last byte that is not NUL: the kernel's sign that argv
        # was rewritten (setproctitle's), on which /proc/<pid>/cmdline is the title up to
        # its NUL, without the padding.
        ctypes.memmove(start, raw + b"\0" * (size - 1 - len(raw)) + b" ", size)
        done = True
    if comm is not None and _PRCTL is not None:
        name = comm.encode(errors="replace")[:COMM_BYTES]
        done = _PRCTL(PR_SET_NAME, ctypes.c_char_p(name), 0, 0, 0) == 0 and done
    return done


def name_thread(name: str | None = None) -> bool:
    """Give the calling thread its name in the kernel too (its thread's ``comm``,
    ``/proc/<pid>/task/<tid>/comm``: what ``top -H``, ``ps -L`` and ``pidstat -t`` show),
    cut to 15 bytes; True if done. ``name``: the thread's Python name when not given.

    Python (before 3.14) names no thread in the kernel, so every thread of the
    supervisor would show as the process does, and where its CPU goes could only
    be told with a Python profiler. Called first thing in each thread the agent
    starts; never in the main thread, whose ``comm`` is the process's name.
    """
    if not _enabled or _PRCTL is None:
        return False
    raw = (name or threading.current_thread().name).encode(errors="replace")[:COMM_BYTES]
    return bool(_PRCTL(PR_SET_NAME, ctypes.c_char_p(raw), 0, 0, 0) == 0)


def worker_title(node: str) -> tuple[str, str]:
    """(title, comm) of the worker of ``node``."""
    return f"{TITLE_PREFIX}node {node}", comm_for(node)
