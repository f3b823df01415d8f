"""Publish one NodeHardware per controlled node, writing only when its content changes.

Joulie's own agent rewrites every node's NodeHardware twice per tick; at a
thousand nodes that is most of its API traffic for facts that almost never
change. Here the supervisor *offers* a node's inputs (labels, capacity,
allocatable, its routing, what its worker's GPU backend last showed) when its
worker starts and whenever they may have changed, and a thread (1) creates
the object if this process has not seen it (an existing one, 409, is fine),
(2) discovers the content (sysfs reads for host-controlled nodes, see
:mod:`agentpool.hardware.host`; NVML / AMD SMI for host GPU control in
daemonset mode, :mod:`agentpool.hardware.gpu_host`; the hardware catalog's
keys, :mod:`agentpool.hardware.catalog`), and (3) writes ``status`` through
the subresource only when the content differs from what it last wrote. The
first write of a node in this process replaces the whole status (an object
Joulie's agent wrote keeps no key of its); later ones merge-patch the
difference, keys that disappeared nulled so they go away. A rediscovery pass
every :data:`REDISCOVER_S` picks up host changes (a BIOS update, a module
loaded, a GPU limit changed by hand) without writing otherwise; a node
without host discovery (HTTP control, or no sysfs) has nothing to
rediscover, its content following only from what is offered, so it is looked
at again only when new inputs are offered.

``publish_due(now)`` does one pass synchronously; the thread only calls it,
so a test can drive simulated minutes without waiting.
"""

from __future__ import annotations

import copy
import logging
import math
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from agentpool.durations import utc_timestamp
from agentpool.errors import KubeError
from agentpool.hardware.catalog import Catalog
from agentpool.hardware.gpu_host import HostGpuSurvey
from agentpool.hardware.host import discover_host
from agentpool.hardware.labels import discover
from agentpool.hardware.nodehardware import GpuAccess, nodehardware_status
from agentpool.kube.api import KubeApi, Resource
from agentpool.kube.reachability import level_of
from agentpool.kube.writehold import WriteHold
from agentpool.proctitle import name_thread
from agentpool.results import GpuSeen
from agentpool.tokenbucket import Budget, TokenBucket

log = logging.getLogger(__name__)

REDISCOVER_S = 60.0
"""Host facts are read again this often; a write follows only if they changed."""
RETRY_S = 5.0
WRITE_BUDGET = Budget(burst=100, refill_s=1 / 50)
"""This pod's NodeHardware writes: 100 at once, then 50 a second (a create and a patch per
node the first time). A pool pod starting 1,000 nodes would otherwise send 2,000 writes in
the seconds its workers start, competing with them for the cores (and for this process's
GIL) and loading the API server for facts that can wait: caps come first."""
COALESCE_S = 1.0
"""A rediscovery waits up to this much longer, so that the nodes due within it go together."""
BUDGET_WAKE_S = 0.2
"""Out of tokens, the thread sleeps at least this long (then has about ten)."""


@dataclass(frozen=True)
class HardwareInputs:
    """What the supervisor knows about a node that the NodeHardware content depends on."""

    node: str
    labels: dict[str, str]
    capacity: dict[str, Any]
    allocatable: dict[str, Any]
    sysfs_root: str | None
    """The node's sysfs mount when it is under host control, else None."""
    http_control: bool = False
    """CPU control goes to an HTTP endpoint (a BMC or gateway)."""
    http_telemetry: bool = False
    """CPU telemetry comes from an HTTP endpoint."""
    gpu_control: str = "none"
    """Where GPU caps go: ``host``, ``http`` or ``none``."""
    gpu_telemetry: bool = False
    """GPU telemetry comes from an HTTP endpoint."""
    gpu_host: bool = False
    """Host GPU control on the node the agent runs on: NVML / AMD SMI are asked."""
    gpu_problem: str | None = None
    """Why host GPU control cannot work for this node (a pool pod)."""
    gpu_seen: GpuSeen | None = None
    """What the node's worker last saw of its GPUs (a GPU cap's tick); None: nothing."""

    @property
    def rediscovered(self) -> bool:
        """Whether the host has facts that may change under the agent (sysfs, GPU limits)."""
        return self.sysfs_root is not None or self.gpu_host


@dataclass
class _Entry:
    inputs: HardwareInputs
    created: bool = False
    written: dict[str, Any] | None = None
    due: float = 0.0


def merge_diff(old: dict[str, Any] | None, new: dict[str, Any]) -> dict[str, Any]:
    """A JSON merge patch turning ``old`` into ``new`` (removed keys become null)."""
    if old is None:
        return copy.deepcopy(new)
    patch: dict[str, Any] = {}
    for key in old.keys() - new.keys():
        patch[key] = None
    for key, value in new.items():
        before = old.get(key)
        if isinstance(value, dict) and isinstance(before, dict):
            sub = merge_diff(before, value)
            if sub:
                patch[key] = sub
        elif value != before:
            patch[key] = copy.deepcopy(value)
    return patch


class HardwarePublisher:
    """Owns every NodeHardware this process writes. ``offer``/``forget`` never block."""

    def __init__(
        self,
        api: KubeApi,
        clock: Callable[[], float] = time.monotonic,
        rediscover_s: float = REDISCOVER_S,
        budget: Budget = WRITE_BUDGET,
        hold: WriteHold | None = None,
        catalog: Catalog | None = None,
        survey: HostGpuSurvey | None = None,
    ) -> None:
        self._api = api
        self._catalog = catalog
        self._survey = survey or HostGpuSurvey()
        """Only the publishing thread (or a test calling ``publish_due``) uses it."""
        self._clock = clock
        self._hold = hold
        """Writes wait while it holds (workers starting)."""
        self._rediscover_s = rediscover_s
        self._bucket = TokenBucket(budget, clock())
        """Only the publishing thread (or a test calling ``publish_due``) touches it."""
        self._entries: dict[str, _Entry] = {}
        self._cond = threading.Condition()
        self._stop = False
        self.enabled = False
        """Set while NodeHardware is served and watched (simulate-only mode too, as Joulie's
        agent publishes it before its simulate-only check)."""
        self._thread = threading.Thread(target=self._run, name="nodehardware", daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(2)

    def offer(self, inputs: HardwareInputs) -> None:
        with self._cond:
            entry = self._entries.get(inputs.node)
            if entry is None:
                self._entries[inputs.node] = _Entry(inputs)
            elif entry.inputs != inputs:
                entry.inputs, entry.due = inputs, 0.0
            else:
                return
            self._cond.notify()

    def forget(self, node: str) -> None:
        """The node left this pod's scope: its new owner (or nobody) publishes from now on."""
        with self._cond:
            self._entries.pop(node, None)

    def next_due(self) -> float | None:
        """When the earliest node is due (a rediscovery or a retry); None: none is, until
        inputs are offered."""
        with self._cond:
            return self._next_due()

    def _next_due(self) -> float | None:
        due = min((e.due for e in self._entries.values()), default=math.inf)
        return None if due == math.inf else due

    def _run(self) -> None:
        name_thread()
        while True:
            with self._cond:
                if self._stop:
                    return
                now = self._clock()
                due = self._next_due()
                if due is None or due > now:
                    # Rediscoveries a little late, several at once: spread by the budget,
                    # each node's turn would otherwise wake the thread (and its pass over
                    # every node) on its own. An offer wakes it at once all the same.
                    self._cond.wait(due - now + COALESCE_S if due is not None else None)
                    continue
                if not self._bucket.ready(now):
                    # Some tokens at once: each pass looks at every node.
                    self._cond.wait(max(BUDGET_WAKE_S, self._bucket.next_token(now) - now))
                    continue
                held = self._hold.wait_s() if self._hold is not None else 0.0
                if held > 0:  # workers are starting: their caps first
                    self._cond.wait(held)
                    continue
            self.publish_due(self._clock())

    def publish_due(self, now: float) -> int:
        """Publish the nodes whose turn has come, as far as the write budget allows (the
        rest stay due); returns the number of API writes."""
        with self._cond:
            due = [(n, e, e.inputs) for n, e in self._entries.items() if e.due <= now]
        writes = 0
        for node, entry, inputs in due:
            if self._stop:
                # A stop returns after a bounded join: a thread still writing (and logging)
                # while the interpreter shuts down would abort the process.
                break
            if not self._bucket.ready(now):
                break
            try:
                written = self._publish(entry, inputs)
                self._bucket.take(written)
                writes += written
                # Only a host has anything to rediscover; the rest waits for an offer.
                delay = self._rediscover_s if inputs.rediscovered else math.inf
            except KubeError as exc:
                log.log(level_of(exc), "NodeHardware of node %s not written: %s", node, exc)
                self._bucket.take()  # a refused write loaded the API server too
                delay = RETRY_S
            with self._cond:
                if entry.inputs is inputs:  # newer inputs offered meanwhile stay due now
                    entry.due = now + delay
        return writes

    def _gpus(self, inputs: HardwareInputs) -> GpuAccess:
        seen, problem = inputs.gpu_seen, inputs.gpu_problem
        if seen is None and inputs.gpu_host:
            vendors = discover(inputs.labels).gpu_vendors
            seen, problem = self._survey("AMD" in vendors and "NVIDIA" not in vendors)
        return GpuAccess(inputs.gpu_control, inputs.gpu_telemetry, seen, problem)

    def _publish(self, entry: _Entry, inputs: HardwareInputs) -> int:
        host = discover_host(Path(inputs.sysfs_root)) if inputs.sysfs_root else None
        content = nodehardware_status(
            inputs.labels,
            inputs.capacity,
            inputs.allocatable,
            host,
            http_control=inputs.http_control,
            http_telemetry=inputs.http_telemetry,
            gpus=self._gpus(inputs),
            catalog=self._catalog,
        )
        if content == entry.written:
            return 0
        name = node_object_name(inputs.node)
        writes = 0
        if not entry.created:
            body = {
                "apiVersion": "joulie.io/v1alpha1",
                "kind": "NodeHardware",
                "metadata": {"name": name},
                "spec": {"nodeName": inputs.node},
            }
            try:
                self._api.create(Resource.NODE_HARDWARES, body)
                writes += 1
            except KubeError as exc:
                if exc.status != 409:  # 409: it exists already (another run created it)
                    raise
            entry.created = True
        stamp = utc_timestamp()
        # Both names: Joulie's CRD declares updatedAt, its Go type lastUpdated.
        stamps = {"updatedAt": stamp, "lastUpdated": stamp}
        if entry.written is None:
            # The object may be older than this process (Joulie's agent, an earlier run):
            # a merge patch would keep every key it has that this content lacks.
            self._api.replace_status(Resource.NODE_HARDWARES, name, {**content, **stamps})
        else:
            self._api.patch_status(
                Resource.NODE_HARDWARES, name, {**merge_diff(entry.written, content), **stamps}
            )
        entry.written = content
        log.info(
            "NodeHardware %s of node %s written (quality %s)",
            name,
            inputs.node,
            content["quality"]["overall"],
        )
        return writes + 1


def node_object_name(node: str) -> str:
    """The name Joulie gives a node's NodeTwin and NodeHardware.

    Lowercased, ``.``, ``_`` and ``/`` turned into ``-``, leading and trailing
    ``-`` trimmed (as ``sanitizeNodeObjectName`` in Joulie's agent).
    """
    name = node.strip().lower()
    for char in "._/":
        name = name.replace(char, "-")
    return name.strip("-")
