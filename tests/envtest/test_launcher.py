"""The envtest launcher: users, kubeconfigs, restarts, and nothing left behind."""

from __future__ import annotations

import json
from pathlib import Path

import psutil
import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentpool.sim.envtest import (
    ASSETS_ENV,
    EnvtestServer,
    EnvtestUnavailableError,
    find_assets,
    service_account_user,
)
from tests.support.apiservers import kube_client


def test_without_binaries_the_reason_says_how_to_get_them(tmp_path: Path) -> None:
    with pytest.raises(EnvtestUnavailableError, match="setup-envtest use"):
        find_assets({})
    (tmp_path / "etcd").write_text("")
    (tmp_path / "etcd").chmod(0o755)
    with pytest.raises(EnvtestUnavailableError, match="kube-apiserver is missing"):
        find_assets({ASSETS_ENV: str(tmp_path)})


def test_a_server_of_its_own_serves_named_users_and_leaves_nothing_behind(
    tmp_path: Path,
) -> None:
    try:
        assets = find_assets()
    except EnvtestUnavailableError as exc:
        pytest.skip(str(exc))
    name, groups = service_account_user("ns", "robot")
    server = EnvtestServer(assets, users={name: groups})
    before = {p.pid for p in psutil.Process().children()}  # a shared server may run already
    with server:
        names = ("etcd", "kube-apiserver")
        pids = [p.pid for p in psutil.Process().children()
                if p.name() in names and p.pid not in before]
        assert len(pids) == 2
        workdir = server.workdir
        assert server.version() == (1, 20)
        admin = kube_client(server.kubeconfig(tmp_path / "admin"))
        robot = kube_client(server.kubeconfig(tmp_path / "robot", name))
        try:
            assert client.CoreV1Api(admin).list_node().items == []
            # Authenticated as that user, and RBAC (nothing granted) refuses it.
            with pytest.raises(ApiException) as caught:
                client.CoreV1Api(robot).list_node()
            assert caught.value.status == 403
            message = json.loads(caught.value.body)["message"]
            assert f'User "{name}" cannot list resource "nodes"' in message
        finally:
            admin.close()
            robot.close()
    assert not workdir.exists()
    assert not any(psutil.pid_exists(pid) and psutil.Process(pid).status() != "zombie"
                   for pid in pids)
