"""Every status body the agent writes, and the writer that writes them, coalesced.

The bodies: TelemetryProfile ``status.control`` (:func:`status_body`) and
NodeTwin ``status.controlStatus`` (:func:`twin_status_body`), each with its
``cpu`` and, for a node with a GPU cap, ``gpu`` part.

Writes go through the status subresource as a JSON merge patch, never a PUT
of the object. A node's status is written when it changes (backend, result,
message, or what ``observed`` says was enforced: the cap, GPU caps, the
throttle..., never its readings alone; see :mod:`agentpool.results`), or as
a heartbeat once per ``heartbeat_s``; anything in between only replaces the
pending entry, so a slow or failing API server costs one pending write per
profile, never a queue, and the last result wins.

The agent runs its writer with :data:`HEARTBEAT_S` (5 minutes, like the
kubelet's ``nodeStatusReportFrequency``) and ``spread_heartbeats``, which
gives each profile's first heartbeat a fixed phase in the period (from a
hash of its name), so profiles written together at start-up do not
heartbeat together forever after, in one burst of PATCHes.

A heartbeat is timed from the offer of the result it wrote, not from when the
write finished, and is due up to :data:`HEARTBEAT_EARLY_S` before its period
is up. Offers come with the workers' ticks, on a grid that every worker
shares (:mod:`agentpool.worker.cadence`), a little early or spread over a
burst's few seconds: so timed, a profile's heartbeat stays on its tick of the
grid instead of slipping a whole interval, its period is what it says, and a
pool's heartbeats stay spread over every tick.

The writer thread may not die: a write that fails in any way is logged and
retried (API errors that are worth it) or dropped, and the thread goes on.
A failure that is the server's, not the write's (no answer at all, 429, 5xx),
pauses every write: then one write at a time probes the server, with
:func:`~agentpool.backoff.reconnect_delay` between probes, and the first that
lands lets the rest go. During an outage a pool's writer thus sends one
request per backoff step, not one per node, and every pending status is
written within one backoff step of the server's return. Unanswered ones are
logged at debug level (:mod:`agentpool.kube.reachability` tells the outage).
Its memory is bounded by the live profiles: a profile the server no longer
has (404) is forgotten, and so is one the supervisor says is gone. Writes of
one batch go out concurrently, at most ``concurrency`` at a time, so the final
statuses of a large pool are written within the shutdown deadline.
"""

from __future__ import annotations

import logging
import threading
import time
import zlib
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agentpool.backoff import RECONNECT_MAX_S, exponential_delay, reconnect_delay
from agentpool.durations import utc_timestamp
from agentpool.errors import KubeError, KubeTemporaryError
from agentpool.kube.api import KubeApi, Resource
from agentpool.kube.reachability import level_of
from agentpool.kube.writehold import WriteHold
from agentpool.proctitle import name_thread
from agentpool.results import GpuTickResult, TickResult

log = logging.getLogger(__name__)

HEARTBEAT_S = 300.0
"""The agent's status heartbeat: an unchanged status is rewritten this often."""
HEARTBEAT_EARLY_S = 5.0
"""How much before its period is up a heartbeat may go out (at most a tenth of the
period): more than a tick's lateness within a burst of 1,000 reports (a few seconds on
two cores) plus a fence renewal's early tick (a second)."""
CONCURRENCY = 8
"""Status writes in flight at once (below the API client's connection pool size)."""

StatusBody = Callable[[TickResult, frozenset[str]], dict[str, Any]]
"""Builds the ``status`` merge patch from a result and the observed keys to null."""


@dataclass
class _Written:
    key: tuple[object, ...]
    heartbeat_at: float
    """When an unchanged status is due again."""
    observed_keys: frozenset[str]


@dataclass
class _Pending:
    node: str
    result: TickResult
    offered_at: float
    """When ``result`` was offered (``clock``): its heartbeat period starts there."""
    attempt: int = 0
    not_before: float = 0.0


@dataclass
class _Pause:
    """Writes wait for the server: it failed them as a whole (no answer, 429, 5xx)."""

    attempt: int
    """Probes failed so far."""
    not_before: float
    """When the next probe goes (``time.monotonic``)."""


def _servers_fault(exc: KubeTemporaryError) -> bool:
    """A failure every write would meet now, not only this one (a 409 is this write's)."""
    return exc.status is None or exc.status == 429 or exc.status >= 500


GPU_OBSERVED_KEYS = (
    "capWattsPerGpu",
    "capPctOfMax",
    "targetWattsPerGpu",
    "requestedWattsPerGpu",
    "gpuCount",
    "powerWattsTotal",
    "controlState",
    "devices",
    "discovered",
)
"""Every key ``control.gpu.observed`` may carry; the ones a tick leaves out are nulled in
the merge patch, so a key observed once does not linger."""


def _control(
    result: TickResult | GpuTickResult, now: str, observed: dict[str, Any] | None
) -> dict[str, Any]:
    """One control's status: the four keys both APIs declare, and ``observed`` where the
    schema has it (the profile API; a NodeTwin's would be pruned)."""
    body: dict[str, Any] = {
        "backend": result.backend.value,
        "result": result.result.value,
        "message": result.message,
    }
    if observed is not None:
        body["observed"] = observed
    body["updatedAt"] = now
    return body


def status_body(result: TickResult, stale_keys: frozenset[str] = frozenset()) -> dict[str, Any]:
    """TelemetryProfile ``status.control``: the merge patch; keys no longer observed are
    nulled so they go away."""
    now = utc_timestamp()
    observed: dict[str, Any] = dict.fromkeys(stale_keys)
    observed.update(result.observed)
    control = {"cpu": _control(result, now, observed)}
    if result.gpu is not None:
        gpu_observed: dict[str, Any] = dict.fromkeys(GPU_OBSERVED_KEYS)
        gpu_observed.update(result.gpu.observed)
        control["gpu"] = _control(result.gpu, now, gpu_observed)
    return {"control": control}


def twin_status_body(
    result: TickResult, stale_keys: frozenset[str] = frozenset()
) -> dict[str, Any]:
    """NodeTwin ``status.controlStatus``: ``cpu``, and ``gpu`` when the node has a GPU cap.

    The agent owns exactly these: the four keys Joulie's CRD declares there.
    Everything else in a NodeTwin's status (``schedulableClass``, the
    predicted scores, ``powerMeasurement``...) belongs to the operator, so
    the merge patch names only them and never carries anything the schema
    does not declare (a real server would prune it: what the profile API
    reports in ``observed`` goes to metrics instead, and ``stale_keys`` do
    not apply).
    """
    now = utc_timestamp()
    control = {"cpu": _control(result, now, None)}
    if result.gpu is not None:
        control["gpu"] = _control(result.gpu, now, None)
    return {"controlStatus": control}


class StatusWriter:
    """Coalescing, retrying status writer. ``offer`` is thread safe and never blocks.

    ``clock`` only decides when a heartbeat is due (tests move it); retry
    delays and flush deadlines are real time, because the writer thread
    really sleeps through them.
    """

    def __init__(
        self,
        api: KubeApi,
        heartbeat_s: float = 60.0,
        clock: Callable[[], float] = time.monotonic,
        max_backoff_s: float = RECONNECT_MAX_S,
        spread_heartbeats: bool = False,
        concurrency: int = CONCURRENCY,
        resource: Resource = Resource.TELEMETRY_PROFILES,
        body: StatusBody | None = None,
        hold: WriteHold | None = None,
    ) -> None:
        self._api = api
        self._hold = hold
        """Writes wait while it holds (workers starting), except to flush."""
        self._flushing = False
        self._resource = resource
        self._body: StatusBody = body or status_body
        self._heartbeat_s = heartbeat_s
        self._spread = spread_heartbeats
        self._clock = clock
        self._max_backoff_s = max_backoff_s
        self._pool = ThreadPoolExecutor(
            max_workers=concurrency, thread_name_prefix="status", initializer=name_thread
        )
        self._written: dict[str, _Written] = {}
        self._pending: dict[str, _Pending] = {}
        self._pause: _Pause | None = None
        self._cond = threading.Condition()
        self._stop = False
        self._busy = False
        self._thread = threading.Thread(target=self._run, name="status-writer", daemon=True)
        self.writes = 0
        self.failures = 0

    def start(self) -> None:
        self._thread.start()

    def offer(self, profile: str, node: str, result: TickResult, force: bool = False) -> bool:
        """Queue a write if the status changed or the heartbeat is due; True if queued."""
        now = self._clock()
        with self._cond:
            last = self._written.get(profile)
            due = (
                force
                or last is None
                or last.key != result.status_key()
                or now >= last.heartbeat_at
            )
            if not due:
                return False
            pending = self._pending.get(profile)
            if pending is not None:  # the last result wins and keeps its backoff
                pending.node, pending.result, pending.offered_at = node, result, now
            else:
                self._pending[profile] = _Pending(node, result, now)
            self._cond.notify()
            return True

    def forget(self, profile: str) -> None:
        with self._cond:
            self._written.pop(profile, None)
            self._pending.pop(profile, None)

    def remembered(self) -> int:
        """Profiles the writer holds state for (written or pending)."""
        with self._cond:
            return len(self._written.keys() | self._pending.keys())

    def flush(self, timeout: float) -> bool:
        """Wait until nothing is pending (or ``timeout``); True when all was written."""
        deadline = time.monotonic() + timeout
        with self._cond:
            self._flushing = True  # the last writes: no hold keeps them
            for entry in self._pending.values():
                entry.not_before = 0.0  # shutdown: no more backoff
            if self._pause is not None:
                self._pause.not_before = 0.0
            self._cond.notify()
            while self._pending or self._busy:
                left = deadline - time.monotonic()
                if left <= 0:
                    return False
                self._cond.wait(min(left, 0.1))
            return True

    def stop(self) -> None:
        with self._cond:
            self._stop = True
            self._cond.notify()
        self._thread.join(2)
        self._pool.shutdown(wait=False, cancel_futures=True)

    def _next_batch(self) -> list[tuple[str, _Pending]] | None:
        with self._cond:
            while not self._stop:
                now = time.monotonic()
                ready = [(p, e) for p, e in self._pending.items() if e.not_before <= now]
                held = 0.0 if self._hold is None or self._flushing else self._hold.wait_s()
                if ready and self._pause is not None:
                    held = max(held, self._pause.not_before - now)
                    ready = ready[:1]  # a probe: the others wait until one write lands
                if ready and held > 0:
                    self._cond.wait(held)
                    continue
                if ready:
                    for profile, _ in ready:
                        del self._pending[profile]
                    self._busy = True
                    return ready
                waits = [e.not_before - now for e in self._pending.values()]
                self._cond.wait(min(waits) if waits else None)
            return None

    def _run(self) -> None:
        name_thread()
        while (batch := self._next_batch()) is not None:
            try:
                list(self._pool.map(lambda item: self._write_safely(*item), batch))
            except Exception:  # the pool itself failed (shut down): write in this thread
                log.exception("status writer: concurrent writes failed; writing one by one")
                for profile, entry in batch:
                    self._write_safely(profile, entry)
            with self._cond:
                self._busy = False
                self._cond.notify_all()

    def _write_safely(self, profile: str, entry: _Pending) -> None:
        try:
            self._write(profile, entry)
        except Exception:  # a bug or an unexpected error: lose this write, not the writer
            with self._cond:
                self.failures += 1
            log.exception("status of %s (%s) not written", entry.node, profile)

    def _write(self, profile: str, entry: _Pending) -> None:
        with self._cond:
            last = self._written.get(profile)
        stale = (last.observed_keys - entry.result.observed.keys()) if last else frozenset()
        try:
            self._api.patch_status(
                self._resource, profile, self._body(entry.result, frozenset(stale))
            )
        except KubeTemporaryError as exc:
            self._retry_later(profile, entry, exc)
            return
        except KubeError as exc:
            with self._cond:
                self.failures += 1
                if exc.status == 404:  # gone from the server: nothing to remember it by
                    self._written.pop(profile, None)
            log.warning("status of %s (%s) not written: %s", entry.node, profile, exc)
            return
        period = self._heartbeat_s
        if self._spread and last is None:  # first write: the first heartbeat gets its phase
            period *= (zlib.crc32(profile.encode()) % 1000 + 1) / 1000
        due = entry.offered_at + period - min(HEARTBEAT_EARLY_S, period / 10)
        with self._cond:
            self.writes += 1
            if self._pause is not None:
                self._pause = None  # the server takes writes again: every pending one goes
                self._cond.notify()
            self._written[profile] = _Written(
                entry.result.status_key(), due, frozenset(entry.result.observed)
            )

    def _retry_later(self, profile: str, entry: _Pending, exc: KubeTemporaryError) -> None:
        with self._cond:
            self.failures += 1
            now = time.monotonic()
            not_before = 0.0  # a pause decides when, for every pending write
            pause = self._pause
            if not _servers_fault(exc):
                entry.attempt += 1
                delay = exponential_delay(entry.attempt, 0.5, self._max_backoff_s, 1.0)
                not_before = now + delay
            elif pause is not None and now < pause.not_before:
                delay = pause.not_before - now  # a write sent with this one already paused
            else:
                attempt = 1 if pause is None else pause.attempt + 1
                delay = reconnect_delay(attempt, self._max_backoff_s)
                if exc.status == 429:
                    delay = max(delay, exc.delay)
                self._pause = _Pause(attempt, now + delay)
            newer = self._pending.get(profile)
            if newer is None:
                entry.not_before = not_before
                self._pending[profile] = entry
            else:
                newer.attempt, newer.not_before = entry.attempt, not_before
        log.log(level_of(exc), "status of %s (%s): %s; retry in %.1fs", entry.node, profile,
                exc, delay)
