"""Fixtures around the API servers (emulator, real kube-apiserver), for every test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from agentpool.sim.apiserver import ApiEmulator
from agentpool.sim.cluster import KINDS, DirectApi
from agentpool.sim.clusterapi import chart_crds
from agentpool.sim.envtest import EnvtestServer, EnvtestUnavailableError, find_assets


def kube_client(kubeconfig: Path) -> client.ApiClient:
    """A real ``kubernetes`` ApiClient configured only from ``kubeconfig``."""
    cfg = client.Configuration()
    config.load_kube_config(config_file=str(kubeconfig), client_configuration=cfg)
    return client.ApiClient(cfg)


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

AGENT_NAMESPACE = "joulie-system"


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


class Backend:
    """One API server under test, reached by the real client and by the direct API."""

    def __init__(
        self, name: str, direct: DirectApi, kubeconfig: Path, server: EnvtestServer | None = None
    ) -> None:
        self.name = name
        self.direct = direct
        self.server = server
        self.kubeconfig = kubeconfig
        self.client = kube_client(kubeconfig)

    def close(self) -> None:
        self.client.close()


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
