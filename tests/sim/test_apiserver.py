"""The API emulator, driven through the real ``kubernetes`` client (never monkeypatched)."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import pytest
import urllib3
from kubernetes import client, watch
from kubernetes.client.exceptions import ApiException

from agentpool.sim.apiserver import ApiEmulator, NotFoundError
from agentpool.sim.polling import wait_until
from tests.support.apiservers import kube_client

GROUP, VERSION = "joulie.io", "v1alpha1"
TP, NPP = "telemetryprofiles", "nodepowerprofiles"


def node(name: str, **labels: str) -> dict[str, Any]:
    return {"apiVersion": "v1", "kind": "Node", "metadata": {"name": name, "labels": labels}}


def profile(name: str, node_name: str = "worker-0") -> dict[str, Any]:
    return {
        "apiVersion": f"{GROUP}/{VERSION}", "kind": "TelemetryProfile",
        "metadata": {"name": name},
        "spec": {"target": {"scope": "node", "nodeName": node_name}},
    }


def status_of(exc: ApiException) -> dict[str, Any]:
    body: dict[str, Any] = json.loads(exc.body)
    return body


@pytest.fixture
def core(kube_api: client.ApiClient) -> client.CoreV1Api:
    return client.CoreV1Api(kube_api)


@pytest.fixture
def custom(kube_api: client.ApiClient) -> client.CustomObjectsApi:
    return client.CustomObjectsApi(kube_api)


# -- discovery, CRUD, errors -------------------------------------------------------


def test_discovery_and_version(kube_api: client.ApiClient) -> None:
    assert client.VersionApi(kube_api).get_code().git_version.startswith("v1.30")
    assert client.CoreApi(kube_api).get_api_versions().versions == ["v1"]
    groups = client.ApisApi(kube_api).get_api_versions().groups
    assert [g.name for g in groups] == [GROUP, "coordination.k8s.io", "apps", "events.k8s.io"]
    core_resources = {r.name for r in client.CoreV1Api(kube_api).get_api_resources().resources}
    assert core_resources == {"nodes"}
    joulie = client.CustomObjectsApi(kube_api).get_api_resources(GROUP, VERSION)
    assert {r.name for r in joulie.resources} == {NPP, TP, f"{TP}/status"}
    assert not any(r.namespaced for r in joulie.resources)
    apps = client.AppsV1Api(kube_api).get_api_resources().resources
    assert {(r.name, r.namespaced) for r in apps} == {
        ("statefulsets", True), ("statefulsets/status", True), ("statefulsets/scale", True),
    }
    leases = client.CoordinationV1Api(kube_api).get_api_resources().resources
    assert {(r.name, r.namespaced) for r in leases} == {("leases", True)}


def test_create_get_list_carry_kind_and_metadata(
    core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    created, code, _ = core.create_node_with_http_info(client.V1Node(
        metadata=client.V1ObjectMeta(name="worker-0", labels={"joulie.io/managed": "true"}),
    ))
    assert code == 201
    meta = created.metadata
    assert meta.uid
    assert meta.creation_timestamp is not None
    assert int(meta.resource_version) > 0
    assert meta.generation == 1
    assert core.read_node("worker-0").metadata.uid == meta.uid

    nodes = core.list_node()
    assert (nodes.kind, nodes.api_version) == ("NodeList", "v1")
    assert int(nodes.metadata.resource_version) >= int(meta.resource_version)

    npp = custom.create_cluster_custom_object(GROUP, VERSION, NPP, {
        "metadata": {"name": "worker-0"}, "spec": {"nodeName": "worker-0", "profile": "eco"},
    })
    assert (npp["kind"], npp["apiVersion"]) == ("NodePowerProfile", f"{GROUP}/{VERSION}")
    assert int(npp["metadata"]["resourceVersion"]) > int(meta.resource_version)
    listed = custom.list_cluster_custom_object(GROUP, VERSION, NPP)
    assert listed["kind"] == "NodePowerProfileList"
    assert listed["metadata"]["resourceVersion"] == npp["metadata"]["resourceVersion"]
    assert [o["metadata"]["name"] for o in listed["items"]] == ["worker-0"]


def test_missing_object_is_a_not_found_status(
    core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    with pytest.raises(ApiException) as caught:
        core.read_node("nope")
    assert caught.value.status == 404
    status = status_of(caught.value)
    assert (status["kind"], status["reason"], status["code"]) == ("Status", "NotFound", 404)
    with pytest.raises(ApiException) as caught:
        custom.patch_cluster_custom_object(GROUP, VERSION, TP, "nope", {"spec": {}})
    assert status_of(caught.value)["details"] == {"name": "nope", "kind": TP, "group": GROUP}


def test_duplicate_create_is_already_exists(core: client.CoreV1Api) -> None:
    core.create_node(node("worker-0"))
    with pytest.raises(ApiException) as caught:
        core.create_node(node("worker-0"))
    assert caught.value.status == 409
    assert status_of(caught.value)["reason"] == "AlreadyExists"


def test_put_replaces_and_stale_version_conflicts(custom: client.CustomObjectsApi) -> None:
    first = custom.create_cluster_custom_object(GROUP, VERSION, NPP, {
        "metadata": {"name": "p"}, "spec": {"nodeName": "w", "profile": "eco"},
    })
    replaced = custom.replace_cluster_custom_object(GROUP, VERSION, NPP, "p", dict(
        first, spec={"nodeName": "w", "profile": "performance"},
    ))
    assert replaced["spec"] == {"nodeName": "w", "profile": "performance"}
    assert replaced["metadata"]["generation"] == 2
    assert replaced["metadata"]["uid"] == first["metadata"]["uid"]

    for write in (
        lambda: custom.replace_cluster_custom_object(GROUP, VERSION, NPP, "p", first),
        lambda: custom.patch_cluster_custom_object(GROUP, VERSION, NPP, "p", {
            "metadata": {"resourceVersion": first["metadata"]["resourceVersion"]},
            "spec": {"profile": "eco"},
        }),
    ):
        with pytest.raises(ApiException) as caught:
            write()
        assert caught.value.status == 409
        assert status_of(caught.value)["reason"] == "Conflict"
    assert custom.get_cluster_custom_object(GROUP, VERSION, NPP, "p") == replaced


def test_merge_strategic_and_json_patch(core: client.CoreV1Api) -> None:
    core.create_node(node("worker-0", a="1", b="2"))
    # CoreV1Api sends a dict body as strategic merge patch: treated as merge patch.
    patched = core.patch_node("worker-0", {"metadata": {"labels": {"a": None, "c": "3"}}})
    assert patched.metadata.labels == {"b": "2", "c": "3"}
    # A list body goes as application/json-patch+json.
    patched = core.patch_node("worker-0", [
        {"op": "replace", "path": "/metadata/labels/b", "value": "20"},
        {"op": "add", "path": "/spec", "value": {"unschedulable": True}},
    ])
    assert patched.metadata.labels == {"b": "20", "c": "3"}
    assert patched.spec.unschedulable is True


def test_delete_answers_the_object_then_not_found(core: client.CoreV1Api) -> None:
    created = core.create_node(node("worker-0"))
    answer, code, _ = core.delete_node_with_http_info("worker-0")
    assert code == 200
    # This client version returns the body as a plain dict ("object").
    assert answer["kind"] == "Node"
    assert int(answer["metadata"]["resourceVersion"]) > int(created.metadata.resource_version)
    with pytest.raises(ApiException) as caught:
        core.delete_node("worker-0")
    assert caught.value.status == 404


# -- selectors -------------------------------------------------------------------

SELECTOR_CASES = [
    ("joulie.io/managed=true", ["a", "b"]),
    ("joulie.io/managed==true", ["a", "b"]),
    ("joulie.io/managed!=true", ["c", "d"]),
    ("zone in (x, y)", ["a", "c"]),
    ("zone notin (x)", ["b", "c", "d"]),
    ("zone", ["a", "b", "c"]),
    ("!zone", ["d"]),
    ("joulie.io/managed=true,zone=x", ["a"]),
    ("joulie.io/managed=true,!zone", []),
    ("", ["a", "b", "c", "d"]),
]


@pytest.mark.parametrize(("selector", "expected"), SELECTOR_CASES)
def test_label_selectors_on_list(
    api_emulator: ApiEmulator, core: client.CoreV1Api, selector: str, expected: list[str]
) -> None:
    api_emulator.create("nodes", node("a", **{"joulie.io/managed": "true", "zone": "x"}))
    api_emulator.create("nodes", node("b", **{"joulie.io/managed": "true", "zone": "z"}))
    api_emulator.create("nodes", node("c", **{"joulie.io/managed": "false", "zone": "y"}))
    api_emulator.create("nodes", node("d"))
    names = [n.metadata.name for n in core.list_node(label_selector=selector).items]
    assert names == expected


def test_field_selector_and_bad_selectors(
    api_emulator: ApiEmulator, core: client.CoreV1Api
) -> None:
    api_emulator.create("nodes", node("a"))
    api_emulator.create("nodes", node("b"))
    for selector, expected in (("metadata.name=b", ["b"]), ("metadata.name!=b", ["a"])):
        items = core.list_node(field_selector=selector).items
        assert [n.metadata.name for n in items] == expected
    for kwargs in ({"label_selector": "a in b"}, {"field_selector": "spec.unschedulable=true"}):
        with pytest.raises(ApiException) as caught:
            core.list_node(**kwargs)
        assert caught.value.status == 400


# -- watch -----------------------------------------------------------------------


def test_watch_without_version_sends_current_objects_then_changes(
    api_emulator: ApiEmulator, core: client.CoreV1Api
) -> None:
    api_emulator.create("nodes", node("a"))
    seen: list[tuple[str, str]] = []
    w = watch.Watch()
    # Each change is made from inside the loop, in answer to the previous event.
    for event in w.stream(core.list_node, timeout_seconds=5):
        seen.append((event["type"], event["object"].metadata.name))
        if len(seen) == 1:
            api_emulator.create("nodes", node("b"))
        elif len(seen) == 2:
            api_emulator.patch("nodes", "a", {"metadata": {"labels": {"x": "1"}}})
        elif len(seen) == 3:
            api_emulator.delete("nodes", "b")
        else:
            w.stop()
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("MODIFIED", "a"), ("DELETED", "b")]


def test_watch_selector_transitions(api_emulator: ApiEmulator, core: client.CoreV1Api) -> None:
    api_emulator.create("nodes", node("a", managed="true"))
    steps = [
        lambda: api_emulator.patch("nodes", "a", {"metadata": {"labels": {"managed": "false"}}}),
        lambda: api_emulator.patch("nodes", "a", {"metadata": {"labels": {"managed": "true"}}}),
        lambda: api_emulator.create("nodes", node("other")),  # never matches: no event
        lambda: api_emulator.patch("nodes", "a", {"metadata": {"labels": {"zone": "x"}}}),
    ]
    seen: list[tuple[str, str, str]] = []
    w = watch.Watch()
    for event in w.stream(core.list_node, label_selector="managed=true", timeout_seconds=5):
        labels = event["object"].metadata.labels
        seen.append((event["type"], event["object"].metadata.name, labels["managed"]))
        if steps:
            steps.pop(0)()
            if len(steps) == 1:
                steps.pop(0)()
        else:
            w.stop()
    assert seen == [
        ("ADDED", "a", "true"),
        ("DELETED", "a", "true"),  # the last state that matched
        ("ADDED", "a", "true"),
        ("MODIFIED", "a", "true"),
    ]


def test_watch_by_field_selector_sees_one_node(
    api_emulator: ApiEmulator, core: client.CoreV1Api
) -> None:
    api_emulator.create("nodes", node("a"))
    api_emulator.create("nodes", node("b"))
    w = watch.Watch()
    names = []
    for event in w.stream(core.list_node, field_selector="metadata.name=b", timeout_seconds=5):
        names.append(event["object"].metadata.name)
        if len(names) == 1:
            api_emulator.patch("nodes", "a", {"metadata": {"labels": {"x": "1"}}})
            api_emulator.patch("nodes", "b", {"metadata": {"labels": {"x": "1"}}})
        else:
            w.stop()
    assert names == ["b", "b"]


def test_watch_from_resource_version_replays_later_events(
    api_emulator: ApiEmulator, custom: client.CustomObjectsApi
) -> None:
    custom.create_cluster_custom_object(GROUP, VERSION, TP, profile("t0"))
    since = custom.list_cluster_custom_object(GROUP, VERSION, TP)["metadata"]["resourceVersion"]
    api_emulator.create(TP, profile("t1"))
    api_emulator.create("nodes", node("ignored"))  # another resource: not replayed
    api_emulator.patch(TP, "t0", {"spec": {"target": {"nodeName": "w9"}}})
    seen = []
    w = watch.Watch()
    for event in w.stream(
        custom.list_cluster_custom_object, GROUP, VERSION, TP,
        resource_version=since, timeout_seconds=5,
    ):
        seen.append((event["type"], event["object"]["metadata"]["name"]))
        if len(seen) == 2:
            w.stop()
    assert seen == [("ADDED", "t1"), ("MODIFIED", "t0")]


def test_watch_older_than_history_is_gone(tmp_path: Path) -> None:
    with ApiEmulator(history_limit=5) as emu:
        api = kube_client(emu.write_kubeconfig(tmp_path / "kubeconfig"))
        core = client.CoreV1Api(api)
        first = emu.create("nodes", node("a"))["metadata"]["resourceVersion"]
        for i in range(10):
            emu.patch("nodes", "a", {"metadata": {"labels": {"i": str(i)}}})
        # The raw stream: 200, one ERROR event carrying a 410 Status, then the end.
        response = core.list_node(watch=True, resource_version=first, _preload_content=False)
        lines = [json.loads(line) for line in response.data.splitlines()]
        assert [e["type"] for e in lines] == ["ERROR"]
        assert (lines[0]["object"]["code"], lines[0]["object"]["reason"]) == (410, "Expired")
        # The client's Watch turns it into ApiException(410).
        with pytest.raises(ApiException) as caught:
            list(watch.Watch().stream(core.list_node, resource_version=first, timeout_seconds=5))
        assert caught.value.status == 410
        assert emu.store.history_length("nodes") == 5

        # History is kept per type, like the apiserver's watch cache: a burst
        # of profile writes does not expire a node watcher's version.
        latest = emu.get("nodes", "a")["metadata"]["resourceVersion"]
        for i in range(10):
            emu.create(TP, profile(f"t{i}"))
        emu.patch("nodes", "a", {"metadata": {"labels": {"after": "burst"}}})
        w = watch.Watch()
        replayed = []
        for event in w.stream(core.list_node, resource_version=latest, timeout_seconds=5):
            replayed.append(event["object"].metadata.labels["after"])
            w.stop()
        assert replayed == ["burst"]
        assert emu.store.history_length() == 10
        api.close()


def test_watch_timeout_seconds_ends_the_stream(
    api_emulator: ApiEmulator, core: client.CoreV1Api
) -> None:
    started = time.monotonic()
    events = list(watch.Watch().stream(core.list_node, timeout_seconds=1))
    elapsed = time.monotonic() - started
    assert events == []
    assert 0.9 <= elapsed < 3
    wait_until(lambda: api_emulator.open_watches() == 0, 5.0)


# -- status subresource -----------------------------------------------------------


def test_status_subresource_splits_writes(custom: client.CustomObjectsApi) -> None:
    created = custom.create_cluster_custom_object(GROUP, VERSION, TP, dict(
        profile("t"), status={"control": {"cpu": {"result": "applied"}}},
    ))
    assert "status" not in created  # status is not writable on create either

    report = {"control": {"cpu": {"backend": "rapl", "result": "applied"}}}
    written = custom.patch_cluster_custom_object_status(GROUP, VERSION, TP, "t", {
        "status": report, "spec": {"target": {"nodeName": "hijacked"}},
    })
    assert written["status"] == report
    assert written["spec"] == created["spec"]  # /status ignores the spec
    assert written["metadata"]["generation"] == 1

    # The object itself ignores .status, but takes the spec (and bumps generation).
    main = custom.patch_cluster_custom_object(GROUP, VERSION, TP, "t", {
        "status": {"control": {}}, "spec": {"target": {"nodeName": "w2"}},
    })
    assert main["status"] == report
    assert main["spec"]["target"]["nodeName"] == "w2"
    assert main["metadata"]["generation"] == 2

    replaced = custom.replace_cluster_custom_object_status(GROUP, VERSION, TP, "t", dict(
        main, status={"control": {"cpu": {"result": "blocked"}}},
    ))
    assert replaced["status"] == {"control": {"cpu": {"result": "blocked"}}}
    stale = dict(main, status={})
    with pytest.raises(ApiException) as caught:
        custom.replace_cluster_custom_object_status(GROUP, VERSION, TP, "t", stale)
    assert caught.value.status == 409


def test_unchanged_write_is_a_no_op(custom: client.CustomObjectsApi) -> None:
    custom.create_cluster_custom_object(GROUP, VERSION, TP, profile("t"))
    once = custom.patch_cluster_custom_object_status(GROUP, VERSION, TP, "t", {"status": {"a": 1}})
    again = custom.patch_cluster_custom_object_status(GROUP, VERSION, TP, "t", {"status": {"a": 1}})
    assert again["metadata"]["resourceVersion"] == once["metadata"]["resourceVersion"]


# -- faults -----------------------------------------------------------------------


def test_injected_errors_leave_state_untouched(
    api_emulator: ApiEmulator, custom: client.CustomObjectsApi
) -> None:
    before = custom.create_cluster_custom_object(GROUP, VERSION, TP, profile("t"))
    api_emulator.inject(verb="patch", resource=TP, subresource="status", fault="500", times=2)
    api_emulator.inject(verb="create", resource="tp", fault=429, retry_after=2)
    for _ in range(2):
        with pytest.raises(ApiException) as caught:
            custom.patch_cluster_custom_object_status(GROUP, VERSION, TP, "t", {"status": {"x": 1}})
        assert caught.value.status == 500
        assert status_of(caught.value)["reason"] == "InternalError"
    with pytest.raises(ApiException) as caught:
        custom.create_cluster_custom_object(GROUP, VERSION, TP, profile("u"))
    assert caught.value.status == 429
    assert caught.value.headers["Retry-After"] == "2"
    assert status_of(caught.value)["details"]["retryAfterSeconds"] == 2
    assert api_emulator.get(TP, "t") == before
    assert [o["metadata"]["name"] for o in api_emulator.list(TP)] == ["t"]
    assert api_emulator.pending_faults() == 0
    # Spent: the next requests succeed.
    custom.patch_cluster_custom_object_status(GROUP, VERSION, TP, "t", {"status": {"x": 1}})
    custom.create_cluster_custom_object(GROUP, VERSION, TP, profile("u"))


def test_injected_410_on_list_and_watch(api_emulator: ApiEmulator, core: client.CoreV1Api) -> None:
    api_emulator.inject(verb="list", resource="nodes", fault="410")
    api_emulator.inject(verb="watch", resource="nodes", fault="410")
    with pytest.raises(ApiException) as caught:
        core.list_node()
    assert caught.value.status == 410
    with pytest.raises(ApiException) as caught:
        list(watch.Watch().stream(core.list_node, resource_version="1", timeout_seconds=5))
    assert caught.value.status == 410


def test_injected_slow_hang_and_drop(
    api_emulator: ApiEmulator, custom: client.CustomObjectsApi
) -> None:
    custom.create_cluster_custom_object(GROUP, VERSION, TP, profile("t"))
    api_emulator.inject(verb="get", resource=TP, fault="slow", delay=0.3)
    started = time.monotonic()
    assert custom.get_cluster_custom_object(GROUP, VERSION, TP, "t")["metadata"]["name"] == "t"
    assert time.monotonic() - started >= 0.3

    # PATCH is not retried by urllib3, so the client sees the fault itself.
    api_emulator.inject(verb="patch", resource=TP, fault="hang", delay=5)
    with pytest.raises(urllib3.exceptions.ReadTimeoutError):
        custom.patch_cluster_custom_object_status(
            GROUP, VERSION, TP, "t", {"status": {"x": 1}}, _request_timeout=0.3,
        )
    api_emulator.inject(verb="patch", resource=TP, fault="drop")
    with pytest.raises(urllib3.exceptions.ProtocolError):
        custom.patch_cluster_custom_object_status(GROUP, VERSION, TP, "t", {"status": {"x": 1}})
    assert "status" not in api_emulator.get(TP, "t")


def test_hung_request_and_open_watch_do_not_delay_stop(tmp_path: Path) -> None:
    emu = ApiEmulator().start()
    api = kube_client(emu.write_kubeconfig(tmp_path / "kubeconfig"))
    core = client.CoreV1Api(api)
    emu.inject(verb="patch", resource="nodes", fault="hang")  # forever
    outcomes: list[str] = []

    def watch_nodes() -> None:
        events = list(watch.Watch().stream(core.list_node, timeout_seconds=300))
        outcomes.append(f"watch ended with {len(events)} events")

    def hang() -> None:
        try:
            core.patch_node("a", {"metadata": {"labels": {"x": "1"}}})
        except urllib3.exceptions.ProtocolError:
            outcomes.append("patch dropped")

    threads = [threading.Thread(target=watch_nodes), threading.Thread(target=hang)]
    for thread in threads:
        thread.start()
    wait_until(lambda: emu.open_watches("nodes") == 1 and emu.pending_faults() == 0, 5.0)
    started = time.monotonic()
    emu.stop()
    stopped_in = time.monotonic() - started
    for thread in threads:
        thread.join(5)
    api.close()
    print(f"\nstop() with an open watch and a hung request: {stopped_in * 1000:.0f} ms")
    assert stopped_in < 1.0
    assert sorted(outcomes) == ["patch dropped", "watch ended with 0 events"]


def test_restart_on_the_same_port_keeps_objects(tmp_path: Path) -> None:
    emu = ApiEmulator().start()
    try:
        api = kube_client(emu.write_kubeconfig(tmp_path / "kubeconfig"))
        core = client.CoreV1Api(api)
        core.create_node(node("a"))
        port = emu.port
        emu.stop()
        with pytest.raises(urllib3.exceptions.MaxRetryError):
            core.list_node(_request_timeout=1)
        emu.start()
        assert emu.port == port
        assert [n.metadata.name for n in core.list_node().items] == ["a"]
        api.close()
    finally:
        emu.stop()


# -- counters and the direct API ----------------------------------------------------


def test_counters_count_requests_and_open_watches(
    api_emulator: ApiEmulator, core: client.CoreV1Api, custom: client.CustomObjectsApi
) -> None:
    core.create_node(node("a"))
    core.read_node("a")
    core.list_node()
    custom.create_cluster_custom_object(GROUP, VERSION, TP, profile("t"))
    custom.patch_cluster_custom_object_status(GROUP, VERSION, TP, "t", {"status": {"x": 1}})
    custom.patch_cluster_custom_object_status(GROUP, VERSION, TP, "t", {"status": {"x": 2}})
    w = watch.Watch()
    for _ in w.stream(core.list_node, timeout_seconds=5):
        assert api_emulator.open_watches() == api_emulator.open_watches("nodes") == 1
        assert api_emulator.open_watches(TP) == 0
        w.stop()
    wait_until(lambda: api_emulator.open_watches() == 0, 5.0)
    assert api_emulator.request_counts() == {
        ("create", "nodes"): 1, ("get", "nodes"): 1, ("list", "nodes"): 1,
        ("watch", "nodes"): 1, ("create", TP): 1, ("patch", f"{TP}/status"): 2,
    }
    api_emulator.reset_counters()
    assert api_emulator.request_counts() == {}


def test_direct_api_shares_the_store(api_emulator: ApiEmulator, core: client.CoreV1Api) -> None:
    created = api_emulator.create("nodes", node("a", x="1"))
    assert core.read_node("a").metadata.uid == created["metadata"]["uid"]
    core.patch_node("a", {"metadata": {"labels": {"y": "2"}}})
    assert api_emulator.get("nodes", "a")["metadata"]["labels"] == {"x": "1", "y": "2"}
    assert [n["metadata"]["name"] for n in api_emulator.list("nodes", "y=2")] == ["a"]
    api_emulator.delete("nodes", "a")
    with pytest.raises(NotFoundError):
        api_emulator.get("nodes", "a")


def test_kubeconfig_points_at_the_emulator(api_emulator: ApiEmulator) -> None:
    assert api_emulator.kubeconfig is not None
    config = json.loads(api_emulator.kubeconfig.read_text())
    assert config["current-context"] == "agentpool-emulator"
    assert config["clusters"][0]["cluster"]["server"] == api_emulator.url


# -- cost and the command line ------------------------------------------------------


def test_write_rates_stay_flat_with_bounded_history(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    with ApiEmulator(history_limit=500) as emu:
        api = kube_client(emu.write_kubeconfig(tmp_path / "kubeconfig"))
        custom = client.CustomObjectsApi(api)

        def rate(count: int, op: Callable[[int], object]) -> float:
            started = time.perf_counter()
            for i in range(count):
                op(i)
            return count / (time.perf_counter() - started)

        creates = rate(300, lambda i: custom.create_cluster_custom_object(
            GROUP, VERSION, TP, profile(f"t{i}")))
        patch = lambda i: custom.patch_cluster_custom_object_status(  # noqa: E731
            GROUP, VERSION, TP, "t0", {"status": {"control": {"cpu": {"observed": {"i": i}}}}})
        early = rate(600, patch)
        late = rate(600, patch)  # the history has wrapped several times by now
        api.close()
        with capsys.disabled():  # the numbers are worth seeing in every run
            print(
                f"\n[apiserver] creates/s {creates:.0f}; status patches/s {early:.0f} "
                f"(first 600), {late:.0f} (next 600, history capped at "
                f"{emu.store.history_length()})"
            )
    # Flat, not fast: the rates follow the machine's load, but with the history bounded
    # writing on does not slow writes down (an unbounded history slowed each one more).
    assert emu.store.history_length() <= 500
    assert late > 0.2 * early


def test_module_entry_point_serves_until_interrupted(tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    env = dict(os.environ, PYTHONWARNINGS="error")
    proc = subprocess.Popen(
        [sys.executable, "-m", "agentpool.sim.apiserver", "--port", "0",
         "--kubeconfig", str(kubeconfig)],
        stdout=subprocess.PIPE, stderr=subprocess.PIPE, env=env, text=True,
    )
    try:
        wait_until(kubeconfig.exists, timeout=15)
        api = kube_client(kubeconfig)
        assert client.CoreV1Api(api).list_node().items == []
        api.close()
        proc.send_signal(signal.SIGINT)
        out, err = proc.communicate(timeout=10)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == 0, err
    assert "serving the Kubernetes API emulator at http://127.0.0.1:" in out
