"""Imported by the fork server only: load everything a worker needs, warm it, then freeze.

``gc.freeze()`` moves every object allocated so far to a permanent
generation the collector never scans, so a forked worker's garbage
collections do not touch (and copy-on-write duplicate) the shared pages.
Never import this from the supervisor itself.

What a worker would otherwise do for itself, once per process, is done here
once for all of them: import ``encodings.idna`` (``ssl`` encodes an HTTPS
endpoint's host name with it on the first connection, pulling in
``stringprep`` and ``unicodedata``), and drive throwaway node controllers through every tick
path and a whole worker's set-up and loop (:mod:`agentpool.worker.forking.warmup`),
so caches are filled and bytecode is specialised when the workers fork.
Then the heap is laid out for forking: the code objects a new worker still
writes (found by a forked child rehearsing one) are copied next to each other
(:mod:`~agentpool.worker.forking.codepack`), every type gets its version tag
(:mod:`~agentpool.worker.forking.typetags`), on CPython 3.12 and 3.13 every
object is made immortal (:mod:`agentpool.worker.forking.immortal`), so a worker
reading a shared object no longer copies its page to count a reference, and
the allocators' free memory is filled (:mod:`~agentpool.worker.forking.holes`),
so a worker's new objects land on pages of its own. ``AGENTPOOL_PACK_CODE=0``,
``AGENTPOOL_TYPE_TAGS=0``, ``AGENTPOOL_IMMORTALIZE=0`` and ``AGENTPOOL_FILL_HOLES=0``
turn each off (to measure it, or to rule it out). What each step saves:
BENCHMARKS.md. Best effort: a failure here only costs that memory, and
:data:`REPORT` says what was done and what was skipped, why.
"""

import encodings.idna  # noqa: F401 - see the module docstring
import functools
import gc
import os
import time

import agentpool.controller.metrics
import agentpool.controller.node
import agentpool.worker.main  # noqa: F401 - imported for its side effect of loading

REPORT: list[str] = []
"""What preloading did and skipped, one line each: the server sends it to the supervisor,
which logs it (this process has no logging set up)."""


def _failed(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


_began = time.monotonic()
try:
    from agentpool.worker.forking import codepack, warmup

    with warmup.environment() as _stage:
        warmup.run(_stage)
        if os.environ.get("AGENTPOOL_PACK_CODE", "1") == "0":
            REPORT.append("code packing skipped: AGENTPOOL_PACK_CODE=0")
        elif (_why := codepack.unsupported()) is not None:
            REPORT.append(f"code packing skipped: {_why}")
        else:
            try:
                warmup.run(_stage)  # what a worker still writes after two runs is packed
                _hot = [
                    code for backend in warmup.REHEARSED
                    for code in codepack.written_in_child(
                        functools.partial(warmup.scout, _stage, backend)
                    )
                ]
                _copied, _pages = codepack.pack(_hot)
                REPORT.append(f"code packing: the {_copied} code objects a new worker writes "
                              f"copied onto {_pages} pages")
            except Exception as exc:  # best effort: what was copied runs as the original
                REPORT.append(f"code packing skipped ({_failed(exc)})")
            warmup.run(_stage)  # specialise the copies as the originals were, in two runs
            warmup.run(_stage)
    REPORT.append(f"warm-up: every tick path taken in {time.monotonic() - _began:.2f}s")
except Exception as exc:  # best effort: never keep the fork server from starting
    REPORT.append(f"warm-up skipped ({_failed(exc)}): workers warm up on their own first ticks")

gc.collect()
if os.environ.get("AGENTPOOL_TYPE_TAGS", "1") != "0":
    from agentpool.worker.forking.typetags import assign

    REPORT.append(assign())
if os.environ.get("AGENTPOOL_IMMORTALIZE", "1") == "0":
    REPORT.append("immortal heap skipped: AGENTPOOL_IMMORTALIZE=0")
else:
    try:
        from agentpool.worker.forking.immortal import make_heap_immortal

        REPORT.append(make_heap_immortal())
    except Exception as exc:  # best effort, as the warm-up: what was done stays done
        REPORT.append(f"immortal heap skipped ({_failed(exc)}): workers copy the pages "
                      "they read")
if os.environ.get("AGENTPOOL_FILL_HOLES", "1") != "0":
    from agentpool.worker.forking.holes import fill

    REPORT.append(fill())
gc.freeze()
REPORT.append(f"heap frozen: {gc.get_freeze_count()} objects")
