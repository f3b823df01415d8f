"""Fixtures shared by every test package: the API servers under test, and no kept connections."""

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client

from agentpool.backends.httpclient import close_connections
from agentpool.sim.apiserver import ApiEmulator
from agentpool.sim.cluster import KINDS, SimCluster
from agentpool.sim.clusterapi import chart_crds
from agentpool.sim.envtest import EnvtestServer, EnvtestUnavailableError, find_assets
from tests.support.apiservers import Backend, kube_client


@pytest.fixture(autouse=True)
def _no_kept_connections() -> Iterator[None]:
    """The HTTP backend keeps connections alive per thread: each test starts without any
    and leaves none open (a test's server is gone after it)."""
    close_connections()
    yield
    close_connections()


@pytest.fixture
def api_emulator(tmp_path: Path) -> Iterator[ApiEmulator]:
    """A running emulator with its kubeconfig written (``api_emulator.kubeconfig``)."""
    emu = ApiEmulator().start()
    try:
        emu.write_kubeconfig(tmp_path / "kubeconfig")
        yield emu
    finally:
        emu.stop()


@pytest.fixture
def kube_api(api_emulator: ApiEmulator) -> Iterator[client.ApiClient]:
    """The real client pointed at ``api_emulator`` through its kubeconfig."""
    assert api_emulator.kubeconfig is not None
    api = kube_client(api_emulator.kubeconfig)
    try:
        yield api
    finally:
        api.close()


# -- a real kube-apiserver (envtest binaries), shared by the whole run ------------------


@pytest.fixture(scope="session")
def envtest_server() -> Iterator[EnvtestServer]:
    """One real etcd + kube-apiserver per pytest run, with the chart's CRDs installed.

    Skipped, with how to get the binaries, where ``KUBEBUILDER_ASSETS`` does
    not name them. Scenarios share it and wipe what they seed.
    """
    try:
        assets = find_assets()
    except EnvtestUnavailableError as exc:
        pytest.skip(str(exc))
    with EnvtestServer(assets) as server:
        server.api().apply(chart_crds())
        yield server


@pytest.fixture(params=["emulator", "envtest"])
def sim_cluster(request: pytest.FixtureRequest) -> Iterator[SimCluster]:
    """A simulated cluster on the API emulator, then on a real kube-apiserver."""
    server: EnvtestServer | None = None
    if request.param == "envtest":
        server = request.getfixturevalue("envtest_server")
    with SimCluster(server=server) as sim:
        yield sim


@pytest.fixture(params=["emulator", "envtest"])
def backend(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[Backend]:
    """The emulator (with the chart's CRDs) and, where binaries exist, the real server."""
    if request.param == "emulator":
        emu = ApiEmulator(shape="all").start()  # every chart CRD served, as Helm installs them
        emu.install_crds(chart_crds())
        chosen = Backend("emulator", emu, emu.write_kubeconfig(tmp_path / "kubeconfig"))
        try:
            yield chosen
        finally:
            chosen.close()
            emu.stop()
        return
    server: EnvtestServer = request.getfixturevalue("envtest_server")
    admin = server.api()
    admin.wipe(KINDS)
    chosen = Backend("envtest", admin, server.kubeconfig(tmp_path / "kubeconfig"), server)
    try:
        yield chosen
    finally:
        chosen.close()
        admin.wipe(KINDS)


def pytest_collection_finish(session: pytest.Session) -> None:
    # Importing the fork server (or its preload) warms, freezes and makes immortal the
    # importing process's heap: in pytest's process that broke Hypothesis's own checks
    # (gc.get_referrers does not see frozen objects). Tests start it as a subprocess.
    import sys

    preloaded = [m for m in ("agentpool.worker.forking.preload",
                             "agentpool.worker.forking.server") if m in sys.modules]
    if preloaded:
        raise pytest.UsageError(f"a test module imported {preloaded} into pytest's process")
