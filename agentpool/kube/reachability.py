"""Whether the API server answers at all: one account of an outage, for the log and /readyz.

Every request of a :class:`~agentpool.kube.api.KubeApi` reports here whether
it got an HTTP answer (:meth:`Reachability.heard`) or none (refused, reset,
timed out: :class:`~agentpool.errors.KubeUnreachableError`). The first
request without an answer after one with an answer starts an *outage*, told
once in the log (WARNING, with the error and what the agent does meanwhile);
while it lasts, one line at most every :data:`SUMMARY_EVERY_S` says for how
long and how many requests went unanswered; the first answer ends it with
one line saying how long it lasted. The threads that made the requests log
their own unanswered ones at debug level only (:func:`level_of`), so the log
of an outage is a few lines whatever the number of nodes and threads retrying.

What counts as an answer: any HTTP status but those of :data:`NOT_SERVING`.
A kube-apiserver coming back from a restart answers 503 ("server is
starting") for custom resources while its CRD informer syncs, and a proxy
in front of it answers 502 or 503 while it is away: during an outage such an
answer is one more request unanswered, never its end. Outside an outage it
starts none (the server answered a moment ago; the request's own caller says
what failed), so a server that answers 503 on one path among answers on the
others does not make outages begin and end by the second.

It only counts and tells: retrying is each caller's business, and it never
blocks a request. :meth:`Reachability.when_back` names who is told, in the
thread that made the answering request, when an outage ends.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from agentpool.durations import format_duration
from agentpool.errors import KubeError, KubeUnreachableError

log = logging.getLogger(__name__)

SUMMARY_EVERY_S = 60.0
"""While the API server stays unreachable, the log says so again this often at most."""
NOT_SERVING = frozenset({502, 503})
"""HTTP statuses that do not end an outage: the server says it is not serving yet (503),
or a proxy in front of it finds none (502, 503)."""


def serving(status: int) -> bool:
    """Whether an HTTP answer with ``status`` is the API server's word (it ends an outage)."""
    return status not in NOT_SERVING


def level_of(exc: KubeError) -> int:
    """The level a caller logs a failed request at: debug when it got no answer (the
    outage's own lines say it), warning otherwise."""
    return logging.DEBUG if isinstance(exc, KubeUnreachableError) else logging.WARNING


@dataclass(frozen=True)
class Outage:
    """The API server has not answered since ``since`` (monotonic)."""

    since: float
    unanswered: int
    """Requests without an answer since."""
    error: str
    """The last one's error."""


class Reachability:
    """The outage in progress, if any, for one API server. Thread safe."""

    def __init__(
        self,
        server: str,
        clock: Callable[[], float] = time.monotonic,
        summary_every_s: float = SUMMARY_EVERY_S,
    ) -> None:
        self.server = server
        self._clock = clock
        self._summary_every_s = summary_every_s
        self._lock = threading.Lock()
        self._outage: Outage | None = None
        self._told_at = 0.0
        self._listeners: list[Callable[[], None]] = []

    def when_back(self, listener: Callable[[], None]) -> None:
        """Call ``listener()`` whenever an outage ends; it must not block (wake a thread)."""
        self._listeners.append(listener)

    @property
    def down(self) -> bool:
        """True from a request without an answer until the next answer."""
        return self._outage is not None

    def outage(self) -> Outage | None:
        return self._outage

    def heard(self, status: int, error: str) -> None:
        """A request got an HTTP answer with ``status``; ``error`` says how the request
        failed where the status says it did."""
        if serving(status):
            self.answered()
        elif self._outage is not None:
            self.unanswered(error)

    def answered(self) -> None:
        """A request got the server's answer (a status that :func:`serving` accepts)."""
        if self._outage is None:  # the common case, without the lock
            return
        with self._lock:
            outage, self._outage = self._outage, None
        if outage is not None:
            lasted = format_duration(round(self._clock() - outage.since))
            log.info(
                "Kubernetes API at %s answers again after %s (%d requests without an answer "
                "meanwhile, the last: %s): watches resume, pending statuses are written",
                self.server, lasted, outage.unanswered, outage.error,
            )
            for listener in self._listeners:
                try:
                    listener()
                except Exception:  # a listener's bug must not fail the request that answered
                    log.exception("a listener of the API's return failed")

    def unanswered(self, error: str) -> None:
        """A request got no answer; ``error`` says how it failed."""
        now = self._clock()
        with self._lock:
            outage = self._outage
            if outage is None:
                self._outage = Outage(now, 1, error)
                self._told_at = now
                first, summary = True, None
            else:
                self._outage = outage = Outage(outage.since, outage.unanswered + 1, error)
                first = False
                summary = outage if now - self._told_at >= self._summary_every_s else None
                if summary is not None:
                    self._told_at = now
        if first:
            log.warning(
                "Kubernetes API at %s unreachable: %s; caches kept as last listed, "
                "retrying with backoff (said again every %s at most while it lasts)",
                self.server, error, format_duration(self._summary_every_s),
            )
        elif summary is not None:
            log.warning(
                "Kubernetes API at %s still unreachable after %s (%d requests without an "
                "answer): %s",
                self.server, format_duration(round(now - summary.since)), summary.unanswered,
                summary.error,
            )
