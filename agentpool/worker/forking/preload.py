"""Imported by the fork server only: load everything a worker needs, warm it, then freeze.

``gc.freeze()`` moves every object allocated so far to a permanent
generation the collector never scans, so a forked worker's garbage
collections do not touch (and copy-on-write duplicate) the shared pages.
Never import this from the supervisor itself.

What a worker would otherwise do for itself, once per process, is done here
once for all of them: import ``encodings.idna`` (http.client encodes the host
name with it on the first request, pulling in ``stringprep`` and
``unicodedata``), and drive throwaway node controllers through every tick
path (:mod:`agentpool.worker.forking.warmup`), so caches are filled and bytecode
is specialised when the workers fork. On CPython 3.12 and 3.13 every object
is then made immortal (:mod:`agentpool.worker.forking.immortal`), so a worker
reading a shared object no longer copies its page to count a reference;
``AGENTPOOL_IMMORTALIZE=0`` turns that off (to measure it, or to rule it out).
What each step saves: BENCHMARKS.md. Best effort: a failure here only costs
that memory.
"""

import encodings.idna  # noqa: F401 - see the module docstring
import gc
import os

import agentpool.controller.metrics
import agentpool.controller.node
import agentpool.worker.main  # noqa: F401 - imported for its side effect of loading

try:
    from agentpool.worker.forking.warmup import warm_up

    warm_up()
except Exception:  # best effort: never keep the fork server from starting
    pass

gc.collect()
if os.environ.get("AGENTPOOL_IMMORTALIZE", "1") != "0":
    try:
        from agentpool.worker.forking.immortal import immortalize

        immortalize()
    except Exception:  # best effort, as the warm-up: what was done stays done
        pass
gc.freeze()
