"""A whole simulated cluster on 127.0.0.1: API server, power simulator, agent processes.

What the integration tests, the benchmark and the demo share: seed N managed
nodes with their NodePowerProfiles and TelemetryProfiles (controls pointing
at the power simulator, or host controls over per-node sysfs trees), or, with
``api="nodetwin"``, with NodeTwins as Joulie's current operator writes them
(routing then comes from the agent's ``TELEMETRY_*`` environment, see
:meth:`SimCluster.routing_env`), then run the real ``agentpool`` command
against it as a subprocess, exactly as a pod would run it, with
``KUBECONFIG`` pointing at the API server: the emulator by default, or a real
kube-apiserver (:class:`~agentpool.sim.envtest.EnvtestServer`) shared between
scenarios, which a cluster wipes on entry and exit.
"""

from __future__ import annotations

import os
import sys
import tempfile
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any, Protocol

from agentpool.sim.agentproc import AgentProcess, free_port
from agentpool.sim.apiserver import ApiEmulator
from agentpool.sim.clusterapi import chart_crds
from agentpool.sim.envtest import ADMIN, EnvtestServer
from agentpool.sim.objects import (
    MANAGED,
    node_twin,
    operator_status,
    power_profile,
    telemetry_profile,
    twin_name,
)
from agentpool.sim.power.server import PowerSim

KINDS = ("telemetryprofiles", "nodepowerprofiles", "nodetwins", "nodehardwares", "nodes")
"""What a scenario seeds; a shared real server is wiped of these between scenarios."""


class DirectApi(Protocol):
    """What both the emulator and :class:`~agentpool.sim.clusterapi.ClusterApi` offer."""

    # ``namespace`` only matters for namespaced kinds (leases, statefulsets).
    def create(
        self, resource: str, obj: dict[str, Any], namespace: str | None = None
    ) -> dict[str, Any]: ...
    def get(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any]: ...
    def patch(
        self, resource: str, name: str, patch: dict[str, Any], subresource: str | None = None,
        namespace: str | None = None,
    ) -> dict[str, Any]: ...
    def delete(self, resource: str, name: str, namespace: str | None = None) -> dict[str, Any]: ...
    def list(
        self,
        resource: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
    ) -> list[dict[str, Any]]: ...


class SimCluster:
    """API server + power simulator + helpers to seed nodes and run agents.

    ``server``: run against this real kube-apiserver instead of a fresh
    emulator; every chart CRD is installed there, and the agents
    authenticate as ``user`` (a user the server was started with), or, with
    ``service_account=(namespace, name)``, with a token of that
    ServiceAccount, as a pod does.

    ``api``: the objects :meth:`add_node` seeds, as an operator of that
    generation writes them: ``profiles`` (NodePowerProfile + TelemetryProfile)
    or ``nodetwin`` (NodeTwin, routing by the agent's environment).

    ``crds``: the CRDs the emulator serves: ``all`` (default) is the chart's
    set, as ``helm install`` installs it; ``profiles``, ``nodetwin`` or ``none``
    (an emulator shape) is a cluster with one operator's CRDs only, or none.
    A real server always serves every chart CRD. Agents start with the
    chart's defaults (``JOULIE_API`` unset: ``auto``) unless ``env`` says otherwise.
    """

    def __init__(
        self,
        workdir: str | os.PathLike[str] | None = None,
        seed: int = 0,
        server: EnvtestServer | None = None,
        user: str = ADMIN,
        service_account: tuple[str, str] | None = None,
        api: str = "profiles",
        crds: str = "all",
    ) -> None:
        self._tmp = None if workdir else tempfile.TemporaryDirectory(prefix="agentpool-sim-")
        self.workdir = Path(workdir or self._tmp.name)  # type: ignore[union-attr]
        self.server = server
        self.user = user
        self.service_account = service_account
        self.nodetwin = api == "nodetwin"
        self._emulator = ApiEmulator(shape=crds) if server is None else None
        self.api: DirectApi = self._emulator or server.api()  # type: ignore[union-attr]
        self.power = PowerSim(seed=seed)
        self.agents: list[AgentProcess] = []

    @property
    def emulator(self) -> ApiEmulator:
        """The emulator, for what only it can do (faults, request counts, outages)."""
        if self._emulator is None:
            raise RuntimeError("this cluster runs on a real kube-apiserver, not the emulator")
        return self._emulator

    @property
    def api_url(self) -> str:
        return self.emulator.url if self.server is None else self.server.url

    def __enter__(self) -> SimCluster:
        if self.server is None:
            self.emulator.start()
            self.kubeconfig = self.emulator.write_kubeconfig(self.workdir / "kubeconfig")
        else:
            admin = self.server.api()
            admin.apply(chart_crds())
            admin.wipe(KINDS)
            path = self.workdir / "kubeconfig"
            if self.service_account is not None:
                self.kubeconfig = self.server.service_account_kubeconfig(
                    path, *self.service_account
                )
            else:
                self.kubeconfig = self.server.kubeconfig(path, self.user)
        self.power.start()
        return self

    def __exit__(self, *exc: object) -> None:
        for agent in self.agents:
            agent.terminate(timeout=10)
        if self._emulator is not None:
            self._emulator.stop()
        elif self.server is not None:
            self.server.api().wipe(KINDS)
        self.power.stop()
        if self._tmp is not None:
            self._tmp.cleanup()

    def add_node(
        self,
        name: str,
        managed: bool = True,
        cap: float | None = 120.0,
        profile: str = "eco",
        http: bool = True,
        labels: Mapping[str, str] | None = None,
        mode: str = "auto",
        pct: float | None = None,
        status: Mapping[str, Any] | None = None,
        gpus: int = 0,
    ) -> None:
        """Seed a node and its desired state. NodeTwin API: a NodeTwin with ``cap``
        watts and/or ``pct`` percent of max, its operator status set to
        :func:`operator_status` (or ``status``); ``http`` is then up to the agent's
        environment (:meth:`routing_env`). ``gpus``: NVIDIA GPUs the device plugin
        makes allocatable on the Node (a GPU cap needs some)."""
        node_labels = dict(labels or {})
        if managed:
            node_labels[MANAGED] = "true"
        node: dict[str, Any] = {"metadata": {"name": name, "labels": node_labels}}
        if self.nodetwin:
            node["status"] = {
                "capacity": {"cpu": "64", "memory": "263855804Ki"},
                "allocatable": {"cpu": "63", "memory": "261758652Ki"},
            }
        if gpus:
            node.setdefault("status", {"capacity": {}, "allocatable": {}})
            for part in ("capacity", "allocatable"):
                node["status"][part]["nvidia.com/gpu"] = str(gpus)
        self.api.create("nodes", node)
        if "status" in node and self.server is not None:
            # A real server ignores a Node's status on create: it goes through /status.
            self.api.patch("nodes", name, {"status": node["status"]}, subresource="status")
        if self.nodetwin:
            if profile:
                twin = self.api.create("nodetwins", node_twin(name, cap, pct, profile))
                self.api.patch(
                    "nodetwins",
                    twin["metadata"]["name"],
                    {"status": dict(status if status is not None else operator_status(name))},
                    subresource="status",
                )
            return
        if profile:  # profile="" seeds the node without a NodePowerProfile
            self.api.create("nodepowerprofiles", power_profile(name, cap, profile))
        self.api.create(
            "telemetryprofiles", telemetry_profile(name, self.power if http else None, mode)
        )

    def set_labels(self, name: str, labels: Mapping[str, str | None]) -> None:
        self.api.patch("nodes", name, {"metadata": {"labels": dict(labels)}})

    def set_cap(
        self, name: str, cap: float | None, profile: str | None = None, pct: float | None = None
    ) -> None:
        """New desired watts (NodeTwin API: and/or percent; None removes that field)."""
        spec: dict[str, Any] = {"cpu": {"packagePowerCapWatts": cap}}
        if self.nodetwin:
            spec["cpu"]["packagePowerCapPctOfMax"] = pct
        if profile is not None:
            spec["profile"] = profile
        if self.nodetwin:
            self.api.patch("nodetwins", twin_name(name), {"spec": spec})
            return
        self.api.patch("nodepowerprofiles", name, {"spec": spec})

    def status(self, name: str) -> dict[str, Any]:
        """The node's CPU control status (NodeTwin API: ``status.controlStatus.cpu``)."""
        if self.nodetwin:
            twin = self.api.get("nodetwins", twin_name(name))
            return dict(((twin.get("status") or {}).get("controlStatus") or {}).get("cpu") or {})
        obj = self.api.get("telemetryprofiles", name)
        cpu: dict[str, Any] = ((obj.get("status") or {}).get("control") or {}).get("cpu") or {}
        return cpu

    def routing_env(self, mode: str = "auto") -> dict[str, str]:
        """The agent's ``TELEMETRY_*`` variables pointing at the power simulator."""
        return {
            "TELEMETRY_CPU_SOURCE": "http",
            "TELEMETRY_CPU_HTTP_ENDPOINT": self.power.telemetry_endpoint,
            "TELEMETRY_CPU_CONTROL": "http",
            "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT": self.power.control_endpoint,
            "TELEMETRY_CPU_CONTROL_MODE": mode,
        }

    def start_agent(
        self,
        env: Mapping[str, str] | None = None,
        args: list[str] | None = None,
        name: str = "agent",
        wrap: list[str] | None = None,
    ) -> AgentProcess:
        """Run ``python -m agentpool ARGS`` against this cluster.

        ``wrap`` is a command that gets the agent's command line appended, for
        running it in another environment (a private mount namespace, say).
        """
        port = free_port()
        # The agent's private directories (metrics, state) go under the cluster's workdir,
        # which is removed on exit: a test that SIGKILLs an agent (no clean-up runs, as
        # in a pod) must not leave them in the machine's /tmp.
        tmp = self.workdir / f"{name}-{len(self.agents)}.tmp"
        tmp.mkdir(exist_ok=True)
        full_env = {
            k: v
            for k, v in os.environ.items()
            if not k.startswith(("POOL_", "AGENT_", "NODE_", "TELEMETRY_", "JOULIE_"))
        }
        full_env.update(
            {
                "KUBECONFIG": str(self.kubeconfig),
                "AGENT_MODE": "pool",
                "METRICS_ADDR": f"127.0.0.1:{port}",
                "RECONCILE_INTERVAL": "1s",
                "SHUTDOWN_TIMEOUT": "10s",
                "PYTHONUNBUFFERED": "1",
                "TMPDIR": str(tmp),
            }
        )
        full_env.pop("PROMETHEUS_MULTIPROC_DIR", None)
        full_env.update(env or {})
        argv = [*(wrap or []), sys.executable, "-m", "agentpool", *(args or [])]
        agent = AgentProcess(argv, full_env, port, self.workdir / f"{name}-{len(self.agents)}.log")
        self.agents.append(agent)
        return agent

    def controlled_nodes(self, since: float = 0.0) -> Iterator[str]:
        """Nodes the power simulator received a control request for (monotonic ``since``)."""
        seen: set[str] = set()
        for request in self.power.requests(kind="control"):
            if request.node and request.monotonic >= since and request.node not in seen:
                seen.add(request.node)
                yield request.node
