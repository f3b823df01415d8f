"""The interpreters each step of the fork server's heap layout runs on: its one gate.

The layout steps write into CPython's objects and allocators as a given
version lays them out (reference counts, inline bytecode caches, pymalloc's
pool headers). On an interpreter whose layout they
were not tested against they could corrupt the fork server's heap, so each
step asks :func:`unsupported` first and runs only on the exact versions of
:data:`TESTED`, where the whole suite runs in CI (``.ci/run``). A new Python
is added here once the suite passes on it; until then the fork server still
works there, its workers only copy more of its pages (the start-up report
says which steps were skipped, and why).
"""

from __future__ import annotations

import enum
import sys
import sysconfig


class Step(enum.Enum):
    """A step of the fork server's heap layout (:mod:`~agentpool.worker.forking.preload`)."""

    PACK_CODE = "code packing"
    """:mod:`~agentpool.worker.forking.codepack` (and its use of the allocators)."""
    IMMORTALIZE = "immortal heap"
    """:mod:`~agentpool.worker.forking.immortal`."""
    FILL_HOLES = "hole filling"
    """:mod:`~agentpool.worker.forking.holes` (:mod:`~agentpool.worker.forking.allocator`)."""


TESTED: dict[tuple[int, int], frozenset[Step]] = {
    # The interpreter setup.cfg claims and CI runs the whole suite on (the image's).
    # Another one gets no step: each writes into CPython's objects as this version
    # lays them out, and a layout nothing keeps testing may have moved.
    (3, 12): frozenset(Step),
}
"""The versions (major, minor) each step was tested on, with 64-bit CPython and the GIL."""


def tested_on(step: Step) -> list[str]:
    """The versions ``step`` runs on, as ``"3.12"``."""
    return [f"{major}.{minor}" for (major, minor), steps in TESTED.items() if step in steps]


def unsupported(step: Step, version: tuple[int, int] | None = None) -> str | None:
    """Why ``step`` does not run on this interpreter (None: it does).

    ``version`` stands for this interpreter's major and minor version, for the tests.
    """
    if sys.implementation.name != "cpython":
        return f"{sys.implementation.name} is not CPython"
    major, minor = version or sys.version_info[:2]
    if step not in TESTED.get((major, minor), frozenset()):
        return f"Python {major}.{minor} is not one it was tested on ({', '.join(tested_on(step))})"
    if sys.maxsize <= 2**32:
        return "a 32-bit build"
    if sysconfig.get_config_var("Py_GIL_DISABLED"):
        return "the free-threaded build counts references and allocates differently"
    if hasattr(sys, "getobjects") or sysconfig.get_config_var("Py_TRACE_REFS"):
        return "a Py_TRACE_REFS build: two pointers come before the reference count"
    return None
