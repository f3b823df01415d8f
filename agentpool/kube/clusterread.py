"""What ``kubectl agentpool status`` reads, with the user's own kubeconfig: one snapshot.

Reads only cluster objects, never a pod's ``/metrics`` (no port-forward):
the managed Nodes, whichever Joulie kinds the server serves (NodeTwins,
NodePowerProfiles, TelemetryProfiles with their status), the pool Leases
(label ``agentpool.joulie.io/pool``) of elastic pools and the StatefulSets
(static pools' shard counts), in every namespace or in one. Everything is
listed, nothing watched or written; ``get``/``list`` on those kinds is all the
user needs, and StatefulSets are optional: a user who may not list them gets
the table without shard counts, and the reason.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from kubernetes import client, config

from agentpool.errors import KubePermanentError, KubeTemporaryError
from agentpool.kube.api import CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S, KubeApi, PoolResource, Resource
from agentpool.pool.membership import LABEL_POOL


@dataclass(frozen=True)
class ClusterObjects:
    """Raw JSON of everything the status table is made of."""

    nodes: list[dict[str, Any]]
    power_profiles: list[dict[str, Any]] = field(default_factory=list)
    telemetry_profiles: list[dict[str, Any]] = field(default_factory=list)
    node_twins: list[dict[str, Any]] = field(default_factory=list)
    leases: list[dict[str, Any]] = field(default_factory=list)
    served: frozenset[str] = frozenset()
    """The ``joulie.io`` kinds the server serves."""
    statefulsets: list[dict[str, Any]] | None = None
    """None: not read (``--shards`` given, or the server refused: :attr:`unreadable`)."""
    unreadable: str | None = None
    """Why the StatefulSets could not be listed (RBAC)."""


def user_client(kubeconfig: str | None, context: str | None) -> client.ApiClient:
    """An ApiClient as kubectl would make it: ``--kubeconfig``, else ``KUBECONFIG``, else
    ``~/.kube/config``, with ``--context`` or the current one."""
    configuration = client.Configuration()
    try:
        config.load_kube_config(
            config_file=kubeconfig, context=context, client_configuration=configuration
        )
    except (config.ConfigException, OSError) as exc:
        problem = f"cannot load a kubeconfig ({kubeconfig or 'default'}): {exc}"
        raise KubePermanentError(problem) from exc
    configuration.retries = 0
    return client.ApiClient(configuration)


def read_cluster(
    api: KubeApi, selector: str | None, namespace: str | None, statefulsets: bool = True
) -> ClusterObjects:
    """List what the table needs (``statefulsets``: the StatefulSets too); KubeError when
    the server refuses or cannot be reached."""
    served = frozenset(api.served())
    kinds = {
        kind: api.list(kind).items if kind.value in served else []
        for kind in (Resource.NODE_POWER_PROFILES, Resource.TELEMETRY_PROFILES,
                     Resource.NODE_TWINS)
    }
    sets, unreadable = _statefulsets(api, namespace) if statefulsets else (None, None)
    return ClusterObjects(
        nodes=api.list(Resource.NODES, label_selector=selector).items,
        power_profiles=kinds[Resource.NODE_POWER_PROFILES],
        telemetry_profiles=kinds[Resource.TELEMETRY_PROFILES],
        node_twins=kinds[Resource.NODE_TWINS],
        leases=_pool_leases(api, namespace),
        served=served,
        statefulsets=sets,
        unreadable=unreadable,
    )


_KWARGS: dict[str, Any] = {
    "_preload_content": False,
    "_request_timeout": (CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S),
}


def _pool_leases(api: KubeApi, namespace: str | None) -> list[dict[str, Any]]:
    coord = api.coordination
    kwargs = {**_KWARGS, "label_selector": LABEL_POOL}
    if namespace:
        return _items(api.call("list", PoolResource.LEASES,
                               lambda: coord.list_namespaced_lease(namespace, **kwargs)),
                      PoolResource.LEASES)
    return _items(api.call("list", PoolResource.LEASES,
                           lambda: coord.list_lease_for_all_namespaces(**kwargs)),
                  PoolResource.LEASES)


def _statefulsets(
    api: KubeApi, namespace: str | None
) -> tuple[list[dict[str, Any]] | None, str | None]:
    """Every StatefulSet (which ones run the agent is in their pod template, not in a label
    both charts share), or None and why the server refused."""
    apps = api.apps
    try:
        if namespace:
            response = api.call("list", PoolResource.STATEFULSETS,
                                lambda: apps.list_namespaced_stateful_set(namespace, **_KWARGS))
        else:
            response = api.call("list", PoolResource.STATEFULSETS,
                                lambda: apps.list_stateful_set_for_all_namespaces(**_KWARGS))
    except KubePermanentError as exc:
        if exc.status in (403, 404):  # RBAC (or no apps/v1): the table goes on without
            return None, str(exc)
        raise
    return _items(response, PoolResource.STATEFULSETS), None


def _items(response: Any, resource: PoolResource) -> list[dict[str, Any]]:
    """The ``items`` of a raw list answer (the connection released)."""
    try:
        body = json.loads(response.data)
    except ValueError as exc:
        raise KubeTemporaryError(f"list {resource.value}: answer is not JSON") from exc
    finally:
        response.release_conn()
    items = body.get("items") if isinstance(body, dict) else None
    return [i for i in items or [] if isinstance(i, dict)]
