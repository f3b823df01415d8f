"""Which Joulie API to speak (JOULIE_API), from API discovery, on the emulator's cluster shapes."""

from __future__ import annotations

import threading
from collections.abc import Iterator
from pathlib import Path

import pytest

from agentpool.config.options import JoulieApi
from agentpool.kube.api import KubeApi, Resource, load_client
from agentpool.kube.selection import ApiSelector, Selection, choose
from agentpool.sim.apiserver import ApiEmulator
from agentpool.sim.polling import wait_until

PROFILE_KINDS = {"nodepowerprofiles", "telemetryprofiles"}
TWIN_KINDS = {"nodetwins", "nodehardwares"}


def test_an_explicit_api_is_spoken_when_served_and_said_missing_when_not() -> None:
    twins = choose(JoulieApi.NODETWIN, TWIN_KINDS)
    assert isinstance(twins, Selection)
    assert twins.resources == (Resource.NODES, Resource.NODE_TWINS, Resource.NODE_HARDWARES)
    profiles = choose(JoulieApi.PROFILES, PROFILE_KINDS | TWIN_KINDS)
    assert isinstance(profiles, Selection)
    assert profiles.api is JoulieApi.PROFILES
    assert profiles.resources == (
        Resource.NODES, Resource.NODE_POWER_PROFILES, Resource.TELEMETRY_PROFILES
    )
    missing = choose(JoulieApi.NODETWIN, PROFILE_KINDS)
    assert isinstance(missing, str)
    assert "nodetwins.joulie.io is not served" in missing
    assert "nodepowerprofiles.joulie.io is not served" in str(choose(JoulieApi.PROFILES, set()))


def test_a_telemetry_profile_still_routes_nodes_on_the_nodetwin_api() -> None:
    selection = choose(JoulieApi.NODETWIN, TWIN_KINDS | {"telemetryprofiles"})
    assert isinstance(selection, Selection)
    assert Resource.TELEMETRY_PROFILES in selection.resources


@pytest.fixture
def api(tmp_path: Path) -> Iterator[tuple[ApiEmulator, KubeApi]]:
    with ApiEmulator(shape="none") as emulator:
        client = KubeApi(load_client(str(emulator.write_kubeconfig(tmp_path / "kubeconfig"))))
        yield emulator, client
        client.close()


def test_the_selector_waits_for_the_crds_says_why_and_selects_once(
    api: tuple[ApiEmulator, KubeApi],
) -> None:
    emulator, client = api
    chosen: list[Selection] = []
    asked = threading.Event()
    selector = ApiSelector(
        client, JoulieApi.PROFILES, lambda s: (chosen.append(s), asked.set()),
        first_retry_s=0.05, max_retry_s=0.1,
    )
    selector.start()
    try:
        # Nothing served: it says why, and keeps asking instead of giving up or crashing.
        missing = "nodepowerprofiles.joulie.io is not served"
        wait_until(lambda: missing in (selector.problem or ""), 10)
        assert not selector.selected.is_set()
        emulator.install("profiles")  # the operator installs its CRDs later
        assert asked.wait(10)
        assert selector.selected.is_set()
        assert selector.problem is None
        assert [s.api for s in chosen] == [JoulieApi.PROFILES]
    finally:
        selector.stop()
