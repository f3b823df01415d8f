"""Request and open-watch counters, read by tests and the benchmark.

Owns the tallies only. Requests are keyed by (verb, resource) with the
subresource folded into the resource as RBAC writes it
(``telemetryprofiles/status``). Every request that reached a resource route
counts, including those answered with an injected fault. Thread-safe.
"""

from __future__ import annotations

import threading
from collections import Counter


class Counters:
    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._requests: Counter[tuple[str, str]] = Counter()
        self._watches: Counter[str] = Counter()

    def request(self, verb: str, resource: str) -> None:
        with self._lock:
            self._requests[(verb, resource)] += 1

    def watch_opened(self, resource: str) -> None:
        with self._lock:
            self._watches[resource] += 1

    def watch_closed(self, resource: str) -> None:
        with self._lock:
            self._watches[resource] -= 1

    def requests(self) -> dict[tuple[str, str], int]:
        with self._lock:
            return dict(self._requests)

    def open_watches(self, resource: str | None = None) -> int:
        with self._lock:
            if resource is None:
                return sum(self._watches.values())
            return self._watches[resource]

    def reset(self) -> None:
        """Zero the request tallies; open watches are state, not history, and stay."""
        with self._lock:
            self._requests.clear()
