"""Run by the fork server only: load everything a worker needs, warm it, then freeze.

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
(:mod:`~agentpool.worker.forking.codepack`), on CPython 3.12 every
object is made immortal (:mod:`agentpool.worker.forking.immortal`), so a worker
reading a shared object no longer copies its page to count a reference, and
the allocators' free memory is filled (:mod:`~agentpool.worker.forking.holes`),
so a worker's new objects land on pages of its own. The diagnostics options
``AGENTPOOL_PACK_CODE``, ``AGENTPOOL_IMMORTALIZE`` and ``AGENTPOOL_FILL_HOLES``
turn each off (to measure it, or to rule it out); the
server has them from its command line. What each step saves: BENCHMARKS.md.
Best effort: a failure here only costs that memory, and :func:`prepare`'s report
says what was done and what was skipped, why.
"""

import encodings.idna  # noqa: F401 - see the module docstring
import functools
import gc
import time

import agentpool.controller.metrics
import agentpool.controller.node
import agentpool.worker.main  # noqa: F401 - imported for its side effect of loading
from agentpool.config.settings import DiagnosticsSettings

KEPT: list[object] = []
"""What the preparation made, kept alive past the freeze: freed later, it would leave holes
in the shared pages for the workers' allocations to land in."""


def _failed(exc: BaseException) -> str:
    return f"{type(exc).__name__}: {exc}"


def prepare(diagnostics: DiagnosticsSettings) -> list[str]:
    """Warm, lay out and freeze the heap as ``diagnostics`` allow; what was done and skipped,
    one line each (the server sends it to the supervisor, which logs it: this process has
    no logging set up)."""
    report: list[str] = []
    KEPT.append(report)
    began = time.monotonic()
    try:
        from agentpool.worker.forking import codepack, warmup

        with warmup.environment() as stage:
            warmup.run(stage)
            if not diagnostics.pack_code:
                report.append("code packing skipped: AGENTPOOL_PACK_CODE=false")
            elif (why := codepack.unsupported()) is not None:
                report.append(f"code packing skipped: {why}")
            else:
                try:
                    warmup.run(stage)  # what a worker still writes after two runs is packed
                    hot = [
                        code for backend in warmup.REHEARSED
                        for code in codepack.written_in_child(
                            functools.partial(warmup.scout, stage, backend)
                        )
                    ]
                    KEPT.append(hot)
                    copied, pages = codepack.pack(hot)
                    report.append(f"code packing: the {copied} code objects a new worker "
                                  f"writes copied onto {pages} pages")
                except Exception as exc:  # best effort: what was copied runs as the original
                    report.append(f"code packing skipped ({_failed(exc)})")
                warmup.run(stage)  # specialise the copies as the originals were, in two runs
                warmup.run(stage)
            KEPT.append(stage)
        report.append(f"warm-up: every tick path taken in {time.monotonic() - began:.2f}s")
    except Exception as exc:  # best effort: never keep the fork server from starting
        report.append(f"warm-up skipped ({_failed(exc)}): workers warm up on their own first "
                      "ticks")

    gc.collect()
    if not diagnostics.immortalize:
        report.append("immortal heap skipped: AGENTPOOL_IMMORTALIZE=false")
    else:
        try:
            from agentpool.worker.forking.immortal import make_heap_immortal

            report.append(make_heap_immortal())
        except Exception as exc:  # best effort, as the warm-up: what was done stays done
            report.append(f"immortal heap skipped ({_failed(exc)}): workers copy the pages "
                          "they read")
    if diagnostics.fill_holes:
        from agentpool.worker.forking.holes import fill

        report.append(fill())
    gc.freeze()
    report.append(f"heap frozen: {gc.get_freeze_count()} objects")
    return report
