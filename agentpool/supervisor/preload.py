"""Imported by the fork server only: load everything a worker needs, then freeze.

``gc.freeze()`` moves every object allocated so far to a permanent
generation the collector never scans, so a forked worker's garbage
collections do not touch (and copy-on-write duplicate) the shared pages.
Never import this from the supervisor itself.
"""

import gc

import agentpool.controller.node
import agentpool.metrics
import agentpool.supervisor.worker  # noqa: F401 - imported for its side effect of loading

gc.collect()
gc.freeze()
