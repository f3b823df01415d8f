"""One open watch: its queue of events and what it sends for each.

Owns the bridge from the store (events delivered from any thread) to one
streaming response on the server's loop, and the selector transition rule: an
object that stops matching the watch's selector is sent as DELETED, one that
starts matching as ADDED, as the apiserver's watch cache does.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
from typing import Any, TypedDict

from agentpool.sim.apiserver.errors import StatusObject
from agentpool.sim.apiserver.resources import ResourceType
from agentpool.sim.apiserver.selectors import ObjectFilter
from agentpool.sim.apiserver.store import Event, EventType, KubeObject

MAX_PENDING = 10_000
"""Undelivered events after which a watch is closed, as the apiserver drops a
watcher that does not keep up; the client re-lists. Bounds memory."""


class WatchEvent(TypedDict):
    type: str
    object: KubeObject | StatusObject


def translate(event: Event, flt: ObjectFilter) -> WatchEvent | None:
    """What a watch with filter ``flt`` sends for ``event``, if anything."""
    if flt.everything:
        return {"type": event.type.value, "object": event.obj}
    if event.type is EventType.DELETED:
        return {"type": "DELETED", "object": event.obj} if flt.matches(event.obj) else None
    now = flt.matches(event.obj)
    before = event.old is not None and flt.matches(event.old)
    if now:
        return {"type": "MODIFIED" if before else "ADDED", "object": event.obj}
    if before:
        assert event.old is not None
        # The apiserver sends the previous state stamped with the new version,
        # so a client resuming from it does not replay this change.
        metadata = dict(event.old["metadata"], resourceVersion=str(event.rv))
        return {"type": "DELETED", "object": dict(event.old, metadata=metadata)}
    return None


class Watcher:
    """A store subscriber feeding one watch stream on ``loop``."""

    def __init__(
        self, rt: ResourceType, flt: ObjectFilter, loop: asyncio.AbstractEventLoop
    ) -> None:
        self.rt = rt
        self.filter = flt
        self._loop = loop
        # None is the end-of-stream marker: shutdown, overflow.
        self._queue: asyncio.Queue[Event | None] = asyncio.Queue()
        self._ended = False

    def deliver(self, event: Event) -> None:
        # Called under the store lock from any thread; a closed loop means the
        # stream is gone already, and its unsubscribe is on its way.
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._put, event)

    def _put(self, event: Event | None) -> None:
        if self._ended:
            return
        if event is None or self._queue.qsize() >= MAX_PENDING:
            self._ended = True
            event = None
        self._queue.put_nowait(event)

    def end(self) -> None:
        """End the stream soon (on the loop thread or any other)."""
        with contextlib.suppress(RuntimeError):
            self._loop.call_soon_threadsafe(self._put, None)

    @property
    def ended(self) -> bool:
        """True once the end marker was queued (shutdown, overflow)."""
        return self._ended

    async def next(self, timeout: float) -> Event | None:
        """The next event, or None at the end of the stream or after ``timeout``."""
        try:
            return await asyncio.wait_for(self._queue.get(), timeout)
        except TimeoutError:
            return None


def encode(event: WatchEvent | dict[str, Any]) -> bytes:
    """One line of the newline-delimited JSON stream."""
    return json.dumps(event, separators=(",", ":")).encode() + b"\n"
