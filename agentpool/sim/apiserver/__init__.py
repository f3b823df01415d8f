"""A Kubernetes API emulator: stands in for a kube-apiserver, which cannot be installed here.

The real ``kubernetes`` client talks to it unchanged over HTTP on 127.0.0.1.
It never imports that client: it only speaks HTTP and JSON. Modules:

- :mod:`.emulator`: :class:`ApiEmulator`, lifecycle, kubeconfig, faults, counters, direct API;
- :mod:`.server`: aiohttp routes, verbs, watch streams;
- :mod:`.store`: objects, resourceVersion, bounded event history (thread-safe);
- :mod:`.watch`: one watch stream and its selector transitions;
- :mod:`.selectors`: label and field selectors;
- :mod:`.patching`: merge patch and JSON patch;
- :mod:`.faults`, :mod:`.counters`: fault injection rules, request tallies;
- :mod:`.resources`: the served kinds and discovery documents;
- :mod:`.errors`: ``Status`` errors.
"""

from agentpool.sim.apiserver.emulator import ApiEmulator
from agentpool.sim.apiserver.errors import (
    AlreadyExistsError,
    ApiError,
    BadRequestError,
    ConflictError,
    GoneError,
    NotFoundError,
)
from agentpool.sim.apiserver.faults import FaultKind, FaultRule
from agentpool.sim.apiserver.resources import (
    NODE_HARDWARES,
    NODE_POWER_PROFILES,
    NODE_TWINS,
    NODES,
    RESOURCES,
    SHAPES,
    TELEMETRY_PROFILES,
    ResourceType,
)
from agentpool.sim.apiserver.store import KubeObject

__all__ = [
    "NODES",
    "NODE_HARDWARES",
    "NODE_POWER_PROFILES",
    "NODE_TWINS",
    "RESOURCES",
    "SHAPES",
    "TELEMETRY_PROFILES",
    "AlreadyExistsError",
    "ApiEmulator",
    "ApiError",
    "BadRequestError",
    "ConflictError",
    "FaultKind",
    "FaultRule",
    "GoneError",
    "KubeObject",
    "NotFoundError",
    "ResourceType",
]
