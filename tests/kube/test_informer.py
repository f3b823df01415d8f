"""The informer against the API emulator, through the real kubernetes client."""

from __future__ import annotations

import queue
import time
from pathlib import Path

import pytest

from agentpool.kube.api import KubeApi, Resource, load_client
from agentpool.kube.informer import Change, Informer, InformerEvent, Relisted
from agentpool.sim.apiserver import ApiEmulator
from agentpool.sim.polling import wait_until


def node(name: str, managed: bool = True) -> dict[str, object]:
    labels = {"joulie.io/managed": "true"} if managed else {}
    return {"metadata": {"name": name, "labels": labels}}


class Sink:
    def __init__(self) -> None:
        self.events: queue.SimpleQueue[InformerEvent] = queue.SimpleQueue()
        self.seen: list[InformerEvent] = []

    def __call__(self, event: InformerEvent) -> None:
        self.events.put(event)

    def next(self, timeout: float = 5.0) -> InformerEvent:
        event = self.events.get(timeout=timeout)
        self.seen.append(event)
        return event


def test_snapshot_then_changes_with_selector(api_emulator: ApiEmulator, api: KubeApi) -> None:
    api_emulator.create("nodes", node("a"))
    api_emulator.create("nodes", node("b", managed=False))
    sink = Sink()
    informer = Informer(api, Resource.NODES, sink, label_selector="joulie.io/managed=true")
    informer.start()
    try:
        first = sink.next()
        assert isinstance(first, Relisted)
        assert [i["metadata"]["name"] for i in first.items] == ["a"]
        api_emulator.patch("nodes", "b", {"metadata": {"labels": {"joulie.io/managed": "true"}}})
        change = sink.next()
        assert isinstance(change, Change)
        assert (change.kind, change.obj["metadata"]["name"]) == ("ADDED", "b")
        api_emulator.patch("nodes", "a", {"metadata": {"labels": {"joulie.io/managed": None}}})
        change = sink.next()
        assert isinstance(change, Change)
        assert (change.kind, change.obj["metadata"]["name"]) == ("DELETED", "a")
        assert informer.synced.is_set()
    finally:
        informer.stop()


def test_gone_relists_and_counts_a_watch_restart(api_emulator: ApiEmulator, api: KubeApi) -> None:
    api_emulator.create("nodes", node("a"))
    restarts: list[tuple[Resource, str]] = []
    sink = Sink()
    api_emulator.inject(verb="watch", resource="nodes", fault="410", times=1)
    informer = Informer(
        api, Resource.NODES, sink, on_watch_restart=lambda r, why: restarts.append((r, why))
    )
    informer.start()
    try:
        assert isinstance(sink.next(), Relisted)
        second = sink.next()
        assert isinstance(second, Relisted), "410 Gone must trigger a full relist"
        assert restarts == [(Resource.NODES, "gone")]
        counts = api_emulator.request_counts()
        assert counts[("list", "nodes")] == 2
    finally:
        informer.stop()


def test_server_errors_back_off_then_recover(api_emulator: ApiEmulator, api: KubeApi) -> None:
    api_emulator.create("nodes", node("a"))
    api_emulator.inject(verb="list", resource="nodes", fault="500", times=2)
    sink = Sink()
    informer = Informer(api, Resource.NODES, sink, max_backoff_s=0.5)
    informer.start()
    try:
        snapshot = sink.next(timeout=10)
        assert isinstance(snapshot, Relisted)
        assert api_emulator.request_counts()[("list", "nodes")] == 3
        assert informer.healthy.is_set()
    finally:
        informer.stop()


def test_a_silent_watch_is_noticed_by_the_read_timeout(
    api_emulator: ApiEmulator, api: KubeApi
) -> None:
    # The watch hangs with the connection open and never answers; the client's read
    # timeout (server timeout + 10 s would be long, so use a 1 s server timeout) ends it.
    api_emulator.create("nodes", node("a"))
    api_emulator.inject(verb="watch", resource="nodes", fault="hang", times=1)
    sink = Sink()
    informer = Informer(api, Resource.NODES, sink, watch_timeout_s=1.0, max_backoff_s=0.2)
    informer.start()
    try:
        assert isinstance(sink.next(), Relisted)
        wait_until(lambda: api_emulator.request_counts().get(("watch", "nodes"), 0) >= 2, 20)
        api_emulator.create("nodes", node("late"))
        change = sink.next(timeout=10)
        assert isinstance(change, Change)
        assert change.obj["metadata"]["name"] == "late"
    finally:
        informer.stop()


def _names(events: list[InformerEvent]) -> set[str]:
    names: set[str] = set()
    for event in events:
        objs = event.items if isinstance(event, Relisted) else [event.obj]
        names |= {o["metadata"]["name"] for o in objs}
    return names


@pytest.mark.parametrize(
    ("verb", "code"), [("watch", 403), ("list", 404), ("watch", 404), ("watch", 422)]
)
def test_permanent_errors_are_retried_forever_and_reported(
    api_emulator: ApiEmulator, api: KubeApi, verb: str, code: int
) -> None:
    # A 403 (RBAC changed) or 404 (CRD being reinstalled) is retried, never the end of
    # the informer thread, and readiness says so meanwhile.
    api_emulator.create("nodes", node("a"))
    sink = Sink()
    informer = Informer(api, Resource.NODES, sink, watch_timeout_s=1.0, max_backoff_s=0.2)
    informer.start()
    try:
        assert isinstance(sink.next(), Relisted)
        api_emulator.inject(verb=verb, resource="nodes", fault=code, times=None)
        if verb == "list":  # a list happens only after the watch failed once
            api_emulator.inject(verb="watch", resource="nodes", fault=code, times=1)
        wait_until(lambda: (e := informer.staleness()[1]) is not None and str(code) in e, 20)
        count = api_emulator.request_counts().get((verb, "nodes"), 0)
        wait_until(lambda: api_emulator.request_counts().get((verb, "nodes"), 0) > count + 2, 20)
        api_emulator.clear_faults()
        api_emulator.create("nodes", node("late"))
        wait_until(lambda: "late" in _names([*sink.seen, sink.next(timeout=10)]), 20)
        # After a relist the informer hands the objects on, then confirms: a moment apart.
        wait_until(lambda: informer.staleness()[1] is None, 5)
        assert informer.staleness()[0] < 20  # confirmed by the answers just received
    finally:
        informer.stop()


def test_stop_returns_promptly_with_a_watch_open(api_emulator: ApiEmulator, api: KubeApi) -> None:
    sink = Sink()
    informer = Informer(api, Resource.NODES, sink, watch_timeout_s=300)
    informer.start()
    sink.next()
    wait_until(lambda: api_emulator.open_watches() == 1, 5)
    started = time.monotonic()
    informer.stop(timeout=5)
    # Measured 0.01 s (the socket is shut down, not waited out); the 300 s watch would
    # hold it for minutes, so 2 s keeps 200x headroom and still fails.
    assert time.monotonic() - started < 2.0


def test_unknown_kubeconfig_is_a_clear_error(tmp_path: Path) -> None:
    from agentpool.errors import KubePermanentError

    with pytest.raises(KubePermanentError, match="cannot load Kubernetes configuration"):
        load_client(str(tmp_path / "missing"))


def test_a_refusal_is_retried_not_final(api_emulator: ApiEmulator, api: KubeApi) -> None:
    # A real apiserver answers 403 for a moment after a restart (cold RBAC cache): an
    # informer that gave up there would leave the pod unready for good.
    api_emulator.create("nodes", node("a"))
    api_emulator.inject(verb="list", resource="nodes", fault="403", times=2)
    sink = Sink()
    restarts: list[str] = []
    informer = Informer(
        api, Resource.NODES, sink, max_backoff_s=0.2,
        on_watch_restart=lambda resource, why: restarts.append(why),
    )
    informer.start()
    try:
        first = sink.next(timeout=10)
        assert isinstance(first, Relisted)
        assert [i["metadata"]["name"] for i in first.items] == ["a"]
        assert restarts == ["error", "error"]
        wait_until(informer.healthy.is_set, 5)
    finally:
        informer.stop()
