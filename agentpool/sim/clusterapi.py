"""The admin's direct API to a real kube-apiserver, shaped like the emulator's.

Owns what tests, the demo and :class:`~agentpool.sim.cluster.SimCluster` do to
a real control plane by hand: create, get, list, merge-patch, replace and
delete objects by plural name, apply manifests (CRDs wait until
Established), and wipe the kit's kinds between scenarios. The methods have
the same names and shapes as :class:`~agentpool.sim.apiserver.ApiEmulator`'s
direct API, so a scenario runs unchanged on either, and failures raise the
same :class:`~agentpool.sim.apiserver.errors.ApiError` built from the
server's ``Status`` body.

Plain HTTPS with urllib, never the ``kubernetes`` client: this is the
oracle the client-side code is checked against, so it must not share code
with it. Paths come from API discovery, so CRDs installed later are found.
"""

from __future__ import annotations

import json
import ssl
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentpool.sim.apiserver.errors import ApiError
from agentpool.sim.polling import wait_until

KubeObject = dict[str, Any]
MERGE_PATCH = "application/merge-patch+json"
CHART_CRDS = Path(__file__).resolve().parents[2] / "charts" / "joulie" / "crds"
"""The chart's CRDs, in a source checkout (an installed wheel does not carry the chart)."""
CRD_ESTABLISH_TIMEOUT_S = 30.0
GATEWAY_TIMEOUT = 504
"""The server's answer to a request that ran past its timeout."""


@dataclass(frozen=True)
class _Served:
    group_version: str
    plural: str
    kind: str
    namespaced: bool

    def path(self, namespace: str | None, name: str | None = None) -> str:
        root = "/api/v1" if self.group_version == "v1" else f"/apis/{self.group_version}"
        ns = f"/namespaces/{namespace}" if self.namespaced and namespace else ""
        tail = f"/{urllib.parse.quote(name, safe='')}" if name else ""
        return f"{root}{ns}/{self.plural}{tail}"


class ClusterApi:
    """Direct API of a real server for one user (normally the admin)."""

    def __init__(self, url: str, token: str, context: ssl.SSLContext) -> None:
        self.url = url
        self._token = token
        self._context = context
        self._served: dict[str, _Served] = {}

    # -- transport ----------------------------------------------------------------

    def request(
        self,
        method: str,
        path: str,
        body: Any = None,
        content_type: str = "application/json",
        timeout: float = 30.0,
    ) -> Any:
        """One request; JSON in and out; ApiError from the Status body on failure."""
        data = None if body is None else json.dumps(body).encode()
        headers = {"Authorization": f"Bearer {self._token}", "Accept": "application/json"}
        if data is not None:
            headers["Content-Type"] = content_type
        req = urllib.request.Request(self.url + path, data=data, method=method, headers=headers)
        try:
            with urllib.request.urlopen(req, timeout=timeout, context=self._context) as answer:
                return json.loads(answer.read() or b"null")
        except urllib.error.HTTPError as exc:
            raise _api_error(exc) from exc

    # -- discovery ----------------------------------------------------------------

    def _discover(self) -> None:
        served: dict[str, _Served] = {}
        versions = ["v1", *self._group_versions()]
        for gv in versions:
            root = "/api/v1" if gv == "v1" else f"/apis/{gv}"
            for r in self.request("GET", root).get("resources", []):
                if "/" in r["name"]:
                    continue  # subresources are reached through their parent
                entry = _Served(gv, r["name"], r["kind"], bool(r["namespaced"]))
                for key in (r["name"], r.get("singularName") or "", *(r.get("shortNames") or [])):
                    if key:
                        served.setdefault(key.lower(), entry)
                served.setdefault(f"{r['kind']}.{gv}".lower(), entry)
        self._served = served

    def _group_versions(self) -> list[str]:
        groups = self.request("GET", "/apis").get("groups", [])
        return [v["groupVersion"] for g in groups for v in g.get("versions", [])]

    def _resolve(self, resource: str) -> _Served:
        key = resource.lower()
        if key not in self._served:
            self._discover()
        if key not in self._served:
            raise KeyError(f"resource {resource!r} is not served by {self.url}")
        return self._served[key]

    def served(self, resource: str) -> bool:
        try:
            self._resolve(resource)
        except KeyError:
            return False
        return True

    # -- the emulator's direct API ------------------------------------------------

    def create(self, resource: str, obj: KubeObject, namespace: str | None = None) -> KubeObject:
        rt = self._resolve(resource)
        body = {"apiVersion": rt.group_version, "kind": rt.kind, **obj}
        ns = namespace or (obj.get("metadata") or {}).get("namespace")
        result: KubeObject = self.request("POST", rt.path(ns), body)
        return result

    def get(self, resource: str, name: str, namespace: str | None = None) -> KubeObject:
        result: KubeObject = self.request("GET", self._resolve(resource).path(namespace, name))
        return result

    def list(
        self,
        resource: str,
        label_selector: str | None = None,
        field_selector: str | None = None,
        namespace: str | None = None,
    ) -> list[KubeObject]:
        query = {k: v for k, v in (("labelSelector", label_selector),
                                   ("fieldSelector", field_selector)) if v}
        path = self._resolve(resource).path(namespace)
        if query:
            path += "?" + urllib.parse.urlencode(query)
        items: list[KubeObject] = self.request("GET", path).get("items") or []
        return items

    def _count(self, path: str) -> int:
        """How many objects a collection holds (the server counts; one item is sent)."""
        page = self.request("GET", f"{path}?limit=1")
        return len(page.get("items") or []) + int(page["metadata"].get("remainingItemCount") or 0)

    def patch(
        self,
        resource: str,
        name: str,
        patch: dict[str, Any],
        subresource: str | None = None,
        namespace: str | None = None,
    ) -> KubeObject:
        """JSON merge patch; ``subresource="status"`` writes only ``.status``."""
        path = self._resolve(resource).path(namespace, name)
        if subresource:
            path += f"/{subresource}"
        result: KubeObject = self.request("PATCH", path, patch, content_type=MERGE_PATCH)
        return result

    def replace(
        self, resource: str, obj: KubeObject, subresource: str | None = None
    ) -> KubeObject:
        meta = obj.get("metadata") or {}
        path = self._resolve(resource).path(meta.get("namespace"), meta.get("name", ""))
        if subresource:
            path += f"/{subresource}"
        result: KubeObject = self.request("PUT", path, obj)
        return result

    def delete(self, resource: str, name: str, namespace: str | None = None) -> KubeObject:
        result: KubeObject = self.request("DELETE", self._resolve(resource).path(namespace, name))
        return result

    # -- manifests ------------------------------------------------------------------

    def apply(self, docs: Iterable[KubeObject]) -> None:
        """Create each object (replace it when it exists); wait for CRDs to be Established."""
        crds: list[str] = []
        for doc in docs:
            plural = f"{doc['kind']}.{doc['apiVersion']}"
            try:
                self.create(plural, doc)
            except ApiError as exc:
                if exc.code != 409:
                    raise
                current = self.get(plural, doc["metadata"]["name"],
                                   doc["metadata"].get("namespace"))
                doc = {**doc, "metadata": {**doc["metadata"],
                       "resourceVersion": current["metadata"]["resourceVersion"]}}
                self.replace(plural, doc)
            if doc["kind"] == "CustomResourceDefinition":
                crds.append(doc["metadata"]["name"])
        for name in crds:
            wait_until(lambda n=name: self._established(n), CRD_ESTABLISH_TIMEOUT_S)  # type: ignore[misc]
        if crds:
            self._discover()

    def _established(self, name: str) -> bool:
        crd = self.get("customresourcedefinitions", name)
        conditions = (crd.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "Established" and c.get("status") == "True"
                   for c in conditions)

    def wipe(self, resources: Iterable[str]) -> None:
        """Delete every object of these cluster-scoped kinds (a clean slate per scenario):
        a DELETE of each collection, which the server empties before it answers.

        A collection too large to empty within the server's request timeout (60 s by
        default: 10,000 Nodes) is answered 504 part way; what it deleted stays deleted,
        so the DELETE is sent again while each one makes progress.
        """
        for resource in resources:
            if not self.served(resource):
                continue
            path = self._resolve(resource).path(None)
            left = -1
            while True:
                try:
                    self.request("DELETE", path, timeout=600)
                    break
                except ApiError as exc:
                    if exc.code != GATEWAY_TIMEOUT:
                        raise
                    before, left = left, self._count(path)
                    if left == before:
                        raise  # no progress since the last try: it will not end


def chart_crds(directory: Path = CHART_CRDS) -> list[KubeObject]:
    """The CustomResourceDefinitions the chart ships, parsed."""
    files = sorted(directory.glob("*.yaml"))
    if not files:
        raise FileNotFoundError(f"no CRDs in {directory}: run from a source checkout of agentpool")
    return [yaml.safe_load(f.read_text()) for f in files]


def _api_error(exc: urllib.error.HTTPError) -> ApiError:
    try:
        status = json.loads(exc.read() or b"{}")
    except ValueError:
        status = {}
    return ApiError(
        int(status.get("code") or exc.code),
        str(status.get("reason") or exc.reason),
        str(status.get("message") or exc.reason),
        status.get("details"),
    )
