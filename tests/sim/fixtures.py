"""Fixtures around the API emulator; imported by ``tests/conftest.py`` for every test."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client, config

from agentpool.sim.apiserver import ApiEmulator


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
