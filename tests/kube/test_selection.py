"""KindDiscovery against the API emulator through the real client: which kinds each setting
watches, CRDs installed and removed while it runs, and what ``/readyz`` is told.

``discover()`` is driven by hand with a simulated clock (the thread only calls it in a loop);
the emulator's ``install(shape)`` serves another set of CRDs, as when CRDs come and go.
"""

from __future__ import annotations

import logging

import pytest

from agentpool.config.options import JoulieApi
from agentpool.errors import KubeUnreachableError
from agentpool.kube.api import KubeApi, Resource
from agentpool.kube.selection import ABSENT_CONFIRM_S, KindDiscovery, kinds_for, problem_for
from agentpool.sim.apiserver import ApiEmulator
from agentpool.sim.polling import wait_until
from tests.support.clock import Clock

NPP, TP, NT, NHW = (
    Resource.NODE_POWER_PROFILES, Resource.TELEMETRY_PROFILES, Resource.NODE_TWINS,
    Resource.NODE_HARDWARES,
)
ALL = {NPP, TP, NT, NHW}


class Recorder:
    """The discovery's callbacks, recorded; ``fail`` makes on_added raise for a kind."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, Resource]] = []
        self.fail: set[Resource] = set()

    def added(self, kind: Resource) -> None:
        if kind in self.fail:
            raise RuntimeError(f"cannot watch {kind}")
        self.calls.append(("added", kind))

    def removed(self, kind: Resource) -> None:
        self.calls.append(("removed", kind))


def discovery(api: KubeApi, setting: JoulieApi) -> tuple[KindDiscovery, Recorder, Clock]:
    rec, clock = Recorder(), Clock(100.0)
    return KindDiscovery(api, setting, rec.added, rec.removed, clock=clock), rec, clock


@pytest.mark.parametrize(
    ("setting", "served", "watched"),
    [
        (JoulieApi.AUTO, ALL, ALL),
        (JoulieApi.AUTO, {NPP, TP}, {NPP, TP}),
        (JoulieApi.PROFILES, ALL, {NPP, TP}),
        (JoulieApi.NODETWIN, ALL, {NT, NHW, TP}),
        (JoulieApi.NODETWIN, {NT, NHW}, {NT, NHW}),
    ],
)
def test_each_setting_watches_its_kinds_among_those_served(
    setting: JoulieApi, served: set[Resource], watched: set[Resource]
) -> None:
    assert kinds_for(setting, served) == watched
    assert problem_for(setting, served) is None


def test_what_readyz_is_told_names_what_is_missing() -> None:
    message = problem_for(JoulieApi.AUTO, {TP})
    assert message == (
        "neither nodetwins.joulie.io nor nodepowerprofiles.joulie.io is served: install "
        "Joulie's CRDs (the chart's crds/; missing: nodepowerprofiles.joulie.io, "
        "nodetwins.joulie.io, nodehardwares.joulie.io)"
    )
    assert problem_for(JoulieApi.AUTO, {NT}) is None  # one API is enough
    assert "JOULIE_API=profiles but nodepowerprofiles.joulie.io" in str(
        problem_for(JoulieApi.PROFILES, {NT, NHW, TP})
    )
    assert "JOULIE_API=nodetwin but nodetwins.joulie.io" in str(
        problem_for(JoulieApi.NODETWIN, {NPP, TP})
    )


def test_what_readyz_is_told_when_rbac_keeps_the_agent_from_a_served_kind() -> None:
    # Joulie's own agent ClusterRole (c38b80d): the profile API's kinds are out of reach.
    assert problem_for(JoulieApi.AUTO, ALL, {NPP, TP}) is None
    assert problem_for(JoulieApi.NODETWIN, ALL, {NPP, TP}) is None
    assert problem_for(JoulieApi.PROFILES, ALL, {NPP, TP}) == (
        "JOULIE_API=profiles but RBAC does not let this agent list and watch "
        "nodepowerprofiles.joulie.io"
    )
    assert problem_for(JoulieApi.AUTO, ALL, {NPP, NT}) == (
        "neither nodetwins.joulie.io nor nodepowerprofiles.joulie.io can be read: served, "
        "but RBAC does not let this agent list and watch nodepowerprofiles.joulie.io, "
        "nodetwins.joulie.io"
    )


def test_crds_installed_and_removed_while_running(
    api_emulator: ApiEmulator, api: KubeApi
) -> None:
    d, rec, clock = discovery(api, JoulieApi.AUTO)
    api_emulator.install("none")
    d.discover()
    assert (rec.calls, d.watched) == ([], frozenset())
    assert d.problem is not None
    assert d.problem.startswith("neither nodetwins.joulie.io")
    api_emulator.install("profiles")
    d.discover()
    assert rec.calls == [("added", NPP), ("added", TP)]
    assert d.problem is None
    api_emulator.install("all")
    d.discover()
    assert rec.calls[2:] == [("added", NT), ("added", NHW)]
    assert d.watched == ALL
    # The profile API's CRDs go: dropped once still missing ABSENT_CONFIRM_S later.
    api_emulator.install("nodetwin")
    d.discover()
    assert len(rec.calls) == 4
    assert d.watched == ALL
    assert d.served == {NT, NHW}  # readiness stops counting their informers at once
    clock.now += ABSENT_CONFIRM_S / 2
    d.discover()
    assert len(rec.calls) == 4
    clock.now += ABSENT_CONFIRM_S
    d.discover()
    assert rec.calls[4:] == [("removed", NPP), ("removed", TP)]
    assert d.watched == {NT, NHW}
    assert d.problem is None


def test_one_odd_answer_drops_nothing(api_emulator: ApiEmulator, api: KubeApi) -> None:
    d, rec, clock = discovery(api, JoulieApi.AUTO)
    api_emulator.install("all")
    d.discover()
    api_emulator.install("profiles")
    d.discover()
    assert d.problem is None
    api_emulator.install("all")  # back before the absence was confirmed
    clock.now += 10 * ABSENT_CONFIRM_S
    d.discover()
    api_emulator.install("profiles")
    clock.now += ABSENT_CONFIRM_S / 2
    d.discover()
    assert [c for c, _ in rec.calls] == ["added"] * 4
    assert d.watched == ALL


def test_a_failing_callback_is_tried_again(api_emulator: ApiEmulator, api: KubeApi) -> None:
    d, rec, _ = discovery(api, JoulieApi.AUTO)
    api_emulator.install("all")
    rec.fail = {NT}
    d.discover()
    assert d.watched == {NPP, TP, NHW}
    rec.fail = set()
    d.discover()
    assert d.watched == ALL


def test_discovery_failing_before_any_answer_is_a_problem_then_recovers(
    api_emulator: ApiEmulator, api: KubeApi
) -> None:
    d, _, _ = discovery(api, JoulieApi.AUTO)
    api_emulator.stop()  # an API server that does not answer yet
    d.discover()
    assert d.problem is not None
    assert d.problem.startswith("API discovery failed: ")
    api_emulator.start()
    d.discover()
    assert d.problem is None
    assert d.watched == {NPP, TP}
    # Later failures keep what is watched (the informers say what fails).
    api_emulator.stop()
    d.discover()
    assert d.problem is None
    assert d.watched == {NPP, TP}


def test_the_thread_finds_a_crd_installed_later_and_stops(
    api_emulator: ApiEmulator, api: KubeApi
) -> None:
    rec = Recorder()
    api_emulator.install("none")
    d = KindDiscovery(api, JoulieApi.AUTO, rec.added, rec.removed, period_s=0.2,
                      first_retry_s=0.05, max_retry_s=0.2)
    d.start()
    try:
        wait_until(lambda: d.problem is not None and "neither" in d.problem, 5)
        api_emulator.install("nodetwin")
        # The kinds are taken, then the problem cleared: wait for both.
        wait_until(lambda: d.watched == {NT, NHW} and d.problem is None, 5)
    finally:
        d.stop()
    assert not d._thread.is_alive()


# -- a server that is starting (the phases of a kube-apiserver 1.20 start: STARTING_PHASES) --


def logged(caplog: pytest.LogCaptureFixture) -> list[tuple[int, str]]:
    return [(r.levelno, r.getMessage()) for r in caplog.records
            if r.name == "agentpool.kube.selection"]


def test_a_503_while_the_server_starts_is_said_and_every_kind_kept(
    api_emulator: ApiEmulator, api: KubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    d, rec, clock = discovery(api, JoulieApi.AUTO)
    api_emulator.install("all")
    d.discover()
    caplog.clear()
    api_emulator.starting = "crd-informer"  # every joulie.io path: 503 "server is starting"
    for _ in range(3):
        clock.now += ABSENT_CONFIRM_S
        d.discover()
    assert (d.watched, d.served, d.problem) == (ALL, ALL, None)
    assert [c for c, _ in rec.calls] == ["added"] * 4
    messages = logged(caplog)
    assert len(messages) == 1, messages
    level, message = messages[0]
    assert level == logging.WARNING
    assert message.startswith(
        "API discovery failed: discover /apis/joulie.io/v1alpha1: HTTP 503 Service Unavailable; "
        "the Joulie kinds watched are kept (nodepowerprofiles, telemetryprofiles, "
    )
    assert "install" not in caplog.text


def test_a_404_from_a_server_not_ready_yet_drops_nothing(
    api_emulator: ApiEmulator, api: KubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    """404 for the CRDs' group version until the server registered their discovery, while
    its /readyz fails: not "CRDs uninstalled", however long it lasts."""
    caplog.set_level(logging.INFO, "agentpool.kube.selection")
    d, rec, clock = discovery(api, JoulieApi.AUTO)
    api_emulator.install("all")
    d.discover()
    caplog.clear()
    api_emulator.starting = "crd-discovery"
    for _ in range(5):
        clock.now += ABSENT_CONFIRM_S
        d.discover()
    assert (d.watched, d.served, d.problem) == (ALL, ALL, None)
    assert d.starting == (
        "starting: /readyz answers HTTP 500 (failing: autoregister-completion)"
    )
    api_emulator.starting = None
    d.discover()
    assert d.starting is None
    assert [c for c, _ in rec.calls] == ["added"] * 4
    assert logged(caplog) == [
        (logging.INFO, f"Kubernetes API at {api_emulator.url} is starting: /readyz answers "
         "HTTP 500 (failing: autoregister-completion); discovery keeps the Joulie kinds last "
         "found (nodepowerprofiles, telemetryprofiles, nodetwins, nodehardwares) until it is "
         "ready"),
        (logging.INFO, f"Kubernetes API at {api_emulator.url} is ready: discovery goes by what "
         "it serves again"),
    ]
    # Ready, the same answer is taken: a CRD really removed is dropped once confirmed.
    api_emulator.install("nodetwin")
    d.discover()
    clock.now += ABSENT_CONFIRM_S
    d.discover()
    assert d.watched == {NT, NHW}


def test_an_agent_started_with_the_server_says_it_is_starting_not_uninstalled(
    api_emulator: ApiEmulator, api: KubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    d, rec, _ = discovery(api, JoulieApi.AUTO)
    api_emulator.install("all")
    api_emulator.starting = "crd-informer"
    d.discover()
    assert d.problem is not None
    assert d.problem.endswith("HTTP 503 Service Unavailable")
    api_emulator.starting = "crd-discovery"
    d.discover()
    assert d.problem == (
        f"Kubernetes API at {api_emulator.url} is starting: /readyz answers HTTP 500 (failing: "
        "autoregister-completion); the Joulie kinds it serves are known once it is ready"
    )
    assert (rec.calls, d.watched) == ([], frozenset())
    assert {level for level, _ in logged(caplog)} == {logging.WARNING}
    assert "install" not in caplog.text
    api_emulator.starting = None
    d.discover()
    assert (d.watched, d.problem) == (ALL, None)


def test_the_end_of_an_outage_has_discovery_look_at_the_servers_readiness(
    api_emulator: ApiEmulator, api: KubeApi, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.INFO, "agentpool.kube.selection")
    d, rec, _ = discovery(api, JoulieApi.AUTO)
    api_emulator.install("all")
    d.discover()
    api_emulator.stop()
    with pytest.raises(KubeUnreachableError):
        api.list(Resource.NODES)
    api_emulator.starting = "crd-informer"
    api_emulator.start()
    api.list(Resource.NODES)  # the server answers: the outage is over
    assert d._wake.is_set()
    d.discover()
    assert d.starting is not None
    assert d.starting.startswith("starting: /readyz answers HTTP 500 (failing: informer-sync, ")
    assert f"Kubernetes API at {api_emulator.url} is starting" in caplog.text
    assert d.watched == ALL
    assert [c for c, _ in rec.calls] == ["added"] * 4
