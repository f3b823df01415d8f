"""The public face of the API emulator: start/stop, kubeconfig, faults, counters.

Owns the lifecycle (a :class:`~agentpool.sim.serving.BackgroundServer` per
run, objects kept across stop/start) and the direct Python API that tests,
the benchmark and the demo use to seed and inspect state without HTTP. The
direct API writes through the same :class:`~.store.Store` as HTTP requests, so
open watches see its changes; it is safe to call from any thread.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path
from typing import Any

from agentpool.sim.apiserver.counters import Counters
from agentpool.sim.apiserver.faults import FaultRule, FaultTable, parse_fault
from agentpool.sim.apiserver.patching import merge_patch
from agentpool.sim.apiserver.resources import SHAPES, ResourceType, resolve
from agentpool.sim.apiserver.schema import crd_schemas
from agentpool.sim.apiserver.selectors import ObjectFilter
from agentpool.sim.apiserver.server import ApiApp
from agentpool.sim.apiserver.store import DEFAULT_HISTORY, KubeObject, Store
from agentpool.sim.serving import BackgroundServer

ObjectList = list[KubeObject]
CONTEXT = "agentpool-emulator"


class ApiEmulator:
    """Stands in for a kube-apiserver, which cannot be installed here.

    No real apiserver is packaged for PyPI, npm or Debian, and kind/KWOK need
    images or downloads; this is an HTTP server on 127.0.0.1 that the
    unmodified ``kubernetes`` client (and kubectl) talks to. It serves core
    ``nodes`` and the cluster-scoped ``joulie.io/v1alpha1`` kinds
    ``nodepowerprofiles``, ``telemetryprofiles``, ``nodetwins`` and
    ``nodehardwares`` (the last three with ``/status``; ``shape`` says which
    are served: by default the profile API's, see :data:`~.resources.SHAPES`),
    and the namespaced ``leases`` and ``statefulsets`` (with ``/status`` and
    ``/scale``) in every shape, with
    real resourceVersion, selector, watch and conflict semantics; see
    :mod:`agentpool.sim.apiserver.server` for what it deliberately ignores.

    Usage::

        with ApiEmulator() as emu:
            emu.write_kubeconfig(tmp / "kubeconfig")
            emu.create("nodes", {"metadata": {"name": "worker-0"}})
            emu.inject(verb="patch", resource="telemetryprofiles", fault="500", times=2)

    ``stop()`` ends open watches and hung requests and returns in well under
    a second; ``start()`` afterwards serves the same objects on the same port
    (to emulate an apiserver outage).
    """

    def __init__(
        self,
        port: int = 0,
        host: str = "127.0.0.1",
        history_limit: int = DEFAULT_HISTORY,
        shutdown_timeout: float = 0.5,
        shape: str = "profiles",
    ) -> None:
        self.served = self._shape(shape)
        """The kinds served now (see :meth:`install`); the others answer 404 as on a
        cluster without their CRD."""
        self.starting: str | None = None
        """None: serving. Else the phase of a kube-apiserver start it answers as, until
        set back to None: ``"crd-informer"`` (every ``joulie.io`` path 503 "server is
        starting") or ``"crd-discovery"`` (404 for them), ``/readyz`` 500 in both
        (:data:`~agentpool.sim.apiserver.server.STARTING_PHASES`)."""
        self.store = Store(history_limit=history_limit)
        self._faults = FaultTable()
        self._counters = Counters()
        self._host = host
        self._port = port
        self._shutdown_timeout = shutdown_timeout
        self._server: BackgroundServer | None = None
        self.kubeconfig: Path | None = None
        """The last kubeconfig written by :meth:`write_kubeconfig` (for ``KUBECONFIG=``)."""

    @staticmethod
    def _shape(shape: str) -> tuple[ResourceType, ...]:
        try:
            return SHAPES[shape]
        except KeyError:
            raise ValueError(f"unknown cluster shape {shape!r}; known: {sorted(SHAPES)}") from None

    def install(self, shape: str) -> None:
        """Serve the kinds of another cluster shape from now on (``"all"``: every
        kind), as when CRDs are installed or removed while clients run. Objects of
        kinds no longer served are kept, out of sight, as etcd keeps them."""
        self.served = self._shape(shape)

    # -- lifecycle -----------------------------------------------------------

    def start(self) -> ApiEmulator:
        if self._server is not None:
            raise RuntimeError("emulator already running")
        server = BackgroundServer(
            lambda: ApiApp(
                self.store, self._faults, self._counters, served=lambda: self.served,
                starting=lambda: self.starting,
            ).build(),
            host=self._host, port=self._port, shutdown_timeout=self._shutdown_timeout,
        )
        server.start()
        self._server = server
        self._port = server.port  # sticky: a restart comes back where clients look
        return self

    def stop(self) -> None:
        if self._server is not None:
            self._server.stop()
            self._server = None

    @property
    def running(self) -> bool:
        return self._server is not None

    def __enter__(self) -> ApiEmulator:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()

    @property
    def port(self) -> int:
        """The bound port (known after the first start)."""
        return self._port

    @property
    def url(self) -> str:
        if not self._port:
            raise RuntimeError("emulator never started: no port yet")
        return f"http://{self._host}:{self._port}"

    def write_kubeconfig(self, path: str | os.PathLike[str]) -> Path:
        """Write a kubeconfig (JSON, which is YAML) pointing at :attr:`url`, no auth."""
        config = {
            "apiVersion": "v1", "kind": "Config", "preferences": {},
            "clusters": [{"name": CONTEXT, "cluster": {"server": self.url}}],
            "users": [{"name": CONTEXT, "user": {}}],
            "contexts": [{"name": CONTEXT, "context": {"cluster": CONTEXT, "user": CONTEXT}}],
            "current-context": CONTEXT,
        }
        target = Path(path)
        # Write then rename, so a process polling for the file never reads half of it.
        partial = target.with_name(target.name + ".partial")
        partial.write_text(json.dumps(config, indent=2) + "\n")
        partial.replace(target)
        self.kubeconfig = target
        return target

    def install_crds(self, crds: list[KubeObject]) -> None:
        """Prune and validate writes of the served kinds by these CRDs' schemas.

        Without it the emulator keeps whatever it is sent (as a CRD whose
        schema preserves unknown fields); with it, it behaves as a real
        apiserver with those CRDs installed.
        """
        for crd in crds:
            plural, schema = crd_schemas(crd)
            self.store.install_schema(plural, schema)

    # -- faults and counters -------------------------------------------------

    def inject(
        self,
        verb: str | None = None,
        resource: str | None = None,
        subresource: str | None = None,
        fault: str | int = "500",
        times: int | None = 1,
        retry_after: int | None = None,
        delay: float | None = None,
        name: str | None = None,
    ) -> FaultRule:
        """Make the next ``times`` matching requests misbehave (None: until cleared).

        ``fault``: an HTTP error code (``"500"``, ``429``, ``"410"``...; 429
        carries ``Retry-After: retry_after``, default 1), ``"hang"`` (hold
        for ``delay`` seconds or until stop, then close without answering),
        ``"slow"`` (wait ``delay``, default 0.5 s, then answer normally) or
        ``"drop"`` (close the connection without answering). ``410`` on a
        watch is an ERROR event with a GoneError Status, like an expired version.
        ``None`` filters match anything; ``subresource=""`` matches only the
        object itself, ``"status"`` only ``/status``. ``resource`` accepts
        short names. Note that urllib3 retries GETs on a dropped connection.
        """
        kind, code = parse_fault(fault)
        rule = FaultRule(
            kind, code, verb=verb, resource=resolve(resource).plural if resource else None,
            subresource=subresource, name=name, remaining=times, retry_after=retry_after,
            delay=delay,
        )
        self._faults.add(rule)
        return rule

    def clear_faults(self) -> None:
        self._faults.clear()

    def pending_faults(self) -> int:
        return self._faults.pending()

    def request_counts(self) -> dict[tuple[str, str], int]:
        """Requests by (verb, resource); status writes count as ``<plural>/status``."""
        return self._counters.requests()

    def open_watches(self, resource: str | None = None) -> int:
        return self._counters.open_watches(resolve(resource).plural if resource else None)

    def reset_counters(self) -> None:
        self._counters.reset()

    # -- direct API (no HTTP, same store) --------------------------------------

    @property
    def resource_version(self) -> int:
        return self.store.resource_version

    def _type(self, resource: str | ResourceType) -> ResourceType:
        rt = resource if isinstance(resource, ResourceType) else resolve(resource)
        if rt not in self.served:
            raise KeyError(f"{rt.plural} is not served by this cluster shape")
        return rt

    # A namespaced kind (leases, statefulsets) takes ``namespace`` (for create
    # and replace also ``metadata.namespace``); cluster-scoped kinds ignore it.

    def create(
        self, resource: str | ResourceType, obj: KubeObject, namespace: str | None = None
    ) -> KubeObject:
        return copy.deepcopy(
            self.store.create(self._type(resource), copy.deepcopy(obj), namespace)
        )

    def get(
        self, resource: str | ResourceType, name: str, namespace: str | None = None
    ) -> KubeObject:
        return copy.deepcopy(self.store.get(self._type(resource), name, namespace))

    def list(
        self,
        resource: str | ResourceType,
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
    ) -> ObjectList:
        flt = ObjectFilter.parse(label_selector, field_selector)
        if namespace:
            flt = flt.in_namespace(namespace)
        items, _ = self.store.list_objects(self._type(resource), flt)
        return copy.deepcopy(items)

    def patch(
        self,
        resource: str | ResourceType,
        name: str,
        patch: dict[str, Any],
        subresource: str | None = None,
        namespace: str | None = None,
    ) -> KubeObject:
        """JSON merge patch; ``subresource="status"`` writes only ``.status``."""
        frozen = copy.deepcopy(patch)
        return copy.deepcopy(self.store.update(
            self._type(resource), name, lambda current: merge_patch(current, frozen), subresource,
            namespace,
        ))

    def replace(
        self, resource: str | ResourceType, obj: KubeObject, subresource: str | None = None
    ) -> KubeObject:
        """PUT semantics: the whole object (a stale resourceVersion in it is a 409 Conflict)."""
        body = copy.deepcopy(obj)
        meta = body.get("metadata") or {}
        return copy.deepcopy(self.store.update(
            self._type(resource), meta.get("name", ""), lambda _current: body, subresource,
            meta.get("namespace"),
        ))

    def delete(
        self, resource: str | ResourceType, name: str, namespace: str | None = None
    ) -> KubeObject:
        return copy.deepcopy(self.store.delete(self._type(resource), name, namespace=namespace))
