"""What ``kubectl agentpool status`` reads, with the user's own kubeconfig: one snapshot.

Reads only cluster objects, never a pod's ``/metrics`` (no port-forward):
the managed Nodes, whichever Joulie kinds the server serves (NodeTwins,
NodePowerProfiles, TelemetryProfiles with their status), and the pool
Leases (label ``agentpool.joulie.io/pool``) of elastic pools, in every
namespace or in one. Everything is listed, nothing watched or written;
``get``/``list`` on those kinds is all the user needs.
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


def read_cluster(api: KubeApi, selector: str | None, namespace: str | None) -> ClusterObjects:
    """List what the table needs; KubeError when the server refuses or cannot be reached."""
    served = frozenset(api.served())
    kinds = {
        kind: api.list(kind).items if kind.value in served else []
        for kind in (Resource.NODE_POWER_PROFILES, Resource.TELEMETRY_PROFILES,
                     Resource.NODE_TWINS)
    }
    return ClusterObjects(
        nodes=api.list(Resource.NODES, label_selector=selector).items,
        power_profiles=kinds[Resource.NODE_POWER_PROFILES],
        telemetry_profiles=kinds[Resource.TELEMETRY_PROFILES],
        node_twins=kinds[Resource.NODE_TWINS],
        leases=_pool_leases(api, namespace),
        served=served,
    )


def _pool_leases(api: KubeApi, namespace: str | None) -> list[dict[str, Any]]:
    coord = api.coordination
    kwargs: dict[str, Any] = {
        "label_selector": LABEL_POOL,
        "_preload_content": False,
        "_request_timeout": (CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S),
    }
    if namespace:
        response = api.call("list", PoolResource.LEASES,
                            lambda: coord.list_namespaced_lease(namespace, **kwargs))
    else:
        response = api.call("list", PoolResource.LEASES,
                            lambda: coord.list_lease_for_all_namespaces(**kwargs))
    try:
        body = json.loads(response.data)
    except ValueError as exc:
        raise KubeTemporaryError("list leases: answer is not JSON") from exc
    finally:
        response.release_conn()
    items = body.get("items") if isinstance(body, dict) else None
    return [i for i in items or [] if isinstance(i, dict)]
