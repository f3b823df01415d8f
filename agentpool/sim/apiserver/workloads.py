"""StatefulSet specifics: creation defaults and the ``/scale`` subresource.

Owns how the emulator presents a StatefulSet as an ``autoscaling/v1`` Scale
(what ``kubectl scale`` and a HorizontalPodAutoscaler read and write) and how a
Scale written back changes only ``spec.replicas``. There is no controller
behind it: nothing creates pods, so ``status.replicas`` stays what was last
written to ``/status`` (0 on a fresh object), as on a control plane without
kube-controller-manager (the envtest server the conformance tests compare with).
"""

from __future__ import annotations

from typing import Any

from agentpool.sim.apiserver.errors import ApiError, BadRequestError

KubeObject = dict[str, Any]


def default_statefulset(obj: KubeObject) -> KubeObject:
    """What the apiserver fills in on create: one replica, an empty status."""
    spec = dict(obj.get("spec") or {})
    spec.setdefault("replicas", 1)
    _check_replicas(spec["replicas"], "spec.replicas")
    return dict(obj, spec=spec, status={"replicas": 0})


def _check_replicas(value: Any, field: str) -> None:
    if not isinstance(value, int) or isinstance(value, bool) or value < 0:
        raise ApiError(
            422, "Invalid",
            f"{field}: Invalid value: {value!r}: must be greater than or equal to 0",
        )


def _selector_string(obj: KubeObject) -> str:
    """``spec.selector.matchLabels`` as a selector string, keys sorted as the apiserver does."""
    labels = ((obj.get("spec") or {}).get("selector") or {}).get("matchLabels") or {}
    return ",".join(f"{key}={labels[key]}" for key in sorted(labels))


def to_scale(obj: KubeObject) -> KubeObject:
    """The ``autoscaling/v1`` Scale view of a stored StatefulSet."""
    meta = obj["metadata"]
    return {
        "kind": "Scale", "apiVersion": "autoscaling/v1",
        "metadata": {key: meta[key] for key in (
            "name", "namespace", "uid", "resourceVersion", "creationTimestamp") if key in meta},
        "spec": {"replicas": (obj.get("spec") or {}).get("replicas", 0)},
        "status": {
            "replicas": (obj.get("status") or {}).get("replicas", 0),
            "selector": _selector_string(obj),
        },
    }


def apply_scale(current: KubeObject, scale: Any) -> KubeObject:
    """The StatefulSet after a Scale is written: only ``spec.replicas`` moves.

    The Scale's ``metadata.resourceVersion`` (if any) is carried over as the
    store's precondition, so a stale Scale is a 409 as on the real server.
    """
    if not isinstance(scale, dict):
        raise BadRequestError("the request body must be a JSON object")
    replicas = (scale.get("spec") or {}).get("replicas", 0)
    _check_replicas(replicas, "spec.replicas")
    metadata = dict(current["metadata"])
    wanted_rv = (scale.get("metadata") or {}).get("resourceVersion")
    if wanted_rv:
        metadata["resourceVersion"] = wanted_rv
    spec = dict(current.get("spec") or {}, replicas=replicas)
    return dict(current, metadata=metadata, spec=spec)
