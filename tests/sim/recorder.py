"""Raw watches through the real client, recorded for the conformance tests."""

from __future__ import annotations

import threading
from typing import Any

from kubernetes import watch


class Recorder:
    """A raw watch in a thread, recording (type, name, resourceVersion) until stopped."""

    def __init__(self, lister: Any, **kwargs: Any) -> None:
        self.events: list[tuple[str, str, str]] = []
        self.objects: list[dict[str, Any]] = []
        self._watch = watch.Watch()
        self._thread = threading.Thread(target=self._run, args=(lister, kwargs), daemon=True)
        self._thread.start()

    def _run(self, lister: Any, kwargs: dict[str, Any]) -> None:
        try:
            for event in self._watch.stream(lister, timeout_seconds=30, **kwargs):
                obj = event["raw_object"]
                meta = obj.get("metadata") or {}
                # The object first: a test waits on ``events`` and then reads both.
                self.objects.append(obj)
                self.events.append(
                    (event["type"], meta.get("name", ""), meta.get("resourceVersion"))
                )
        except Exception:  # the server went away at teardown; the events tell the rest
            return

    def stop(self) -> None:
        self._watch.stop()
