"""A narrow, typed facade over the kubernetes client: list, watch, patch status.

Why raw JSON (``_preload_content=False``) instead of the client's models:
the agent forwards objects to worker processes and indexes a few fields, so
deserialising thousands of nodes into ``V1Node`` would cost CPU and memory
for nothing. Why our own watch loop instead of ``kubernetes.watch.Watch``:
it needs an explicit relist on 410 Gone, a client-side read timeout, and
its ``deserialize=False`` path cannot report ERROR events.

Why nodes, Leases and StatefulSets are read through the client's generic
request path (``param_serialize`` + ``call_api``) rather than ``CoreV1Api``
and ``AppsV1Api``: those generated classes live in modules of megabytes of
code that take seconds to load on a busy node, and every start paid for them
before its first list (BENCHMARKS.md: container start). ``CustomObjectsApi``
and ``CoordinationV1Api`` are small; the latter is only made when a Lease is
read or written.

Traps handled here: ``timeout_seconds`` is only a server-side timeout, so
every call also passes ``_request_timeout`` or a dropped connection would
hang forever; urllib3's own retries are disabled (``retries=0``) so that
tenacity, one level up, is the only retry policy. Every request's deadline:
connect (TLS handshake included) :data:`CONNECT_TIMEOUT_S`, then each read
:data:`REQUEST_TIMEOUT_S` (Events: theirs), a watch's reads its
``timeout_s`` plus :func:`watch_read_timeout`'s margin. A request that timed
out waiting for an answer also drops the idle connections kept for reuse:
after packets were dropped for a while they are as dead as the one that
timed out, and each would cost its own timeout to find out.

Each request tells :attr:`KubeApi.reachability` whether it got an HTTP answer;
one without an answer is a :class:`~agentpool.errors.KubeUnreachableError`.
"""

from __future__ import annotations

import enum
import functools
import json
import re
import socket
import weakref
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any
from urllib.parse import quote

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from agentpool.errors import (
    KubeError,
    KubePermanentError,
    KubeTemporaryError,
    KubeUnreachableError,
)
from agentpool.kube.reachability import Reachability
from agentpool.tokenbucket import RateLimiter

GROUP = "joulie.io"
VERSION = "v1alpha1"
CONNECT_TIMEOUT_S = 5.0
CONNECTION_POOL_SIZE = 160
"""Connections kept per API server: each informer's watch holds one (a static pool pod that
owns up to 64 nodes watches two kinds per node, by name: 128) and the status writer writes
several at once; fewer, and urllib3 would discard a watch's connection each time it ends,
with a warning, and open a new one (a TLS handshake) for the next. Only connections opened
are kept: the size is a ceiling, not an allocation."""
REQUEST_TIMEOUT_S = 30.0
TABLE_ACCEPT = "application/json;as=Table;v=v1;g=meta.k8s.io"
"""A list answered as ``meta.k8s.io/v1`` Table (served since Kubernetes 1.15)."""
LIST_PAGE_SIZE = 100
"""Objects per page of a LIST (``limit``, then ``continue``): a page is decoded, filtered and
dropped before the next is asked for, so the decoded peak is a page's, not the cluster's.
client-go's reflector asks for 500; 100 because that peak stays in the process's memory
(what a pool pod keeps of a page is decoded again afterwards, but the allocator holds on
to the room), and a real cluster's Node is about 14 KB of JSON."""
WATCH_READ_MARGIN_S = 10.0
"""A watch's reads may wait its server-side timeout plus this (at most doubling it)."""


def watch_read_timeout(timeout_s: float) -> float:
    """How long a watch may go without a byte, its bookmarks included, before it is cut:
    long enough that a quiet but healthy stream is not cut, short enough to notice a
    silent one soon after the server should have ended it."""
    return timeout_s + min(WATCH_READ_MARGIN_S, timeout_s)


class Resource(enum.StrEnum):
    NODES = "nodes"
    NODE_POWER_PROFILES = "nodepowerprofiles"
    TELEMETRY_PROFILES = "telemetryprofiles"
    NODE_TWINS = "nodetwins"
    """Joulie's current API: desired state in spec, the agent's feedback in status."""
    NODE_HARDWARES = "nodehardwares"
    """Joulie's current API: what the agent found on each node."""


class PoolResource(enum.StrEnum):
    """Namespaced kinds only an elastic pool reads (docs/modes.md: elastic pool)."""

    LEASES = "leases"
    """``coordination.k8s.io/v1``: one per pool pod."""
    STATEFULSETS = "statefulsets"
    """``apps/v1``: the pool's own, for ``spec.replicas``."""


class EventResource(enum.StrEnum):
    """``events.k8s.io/v1``: the Events the agent records on Nodes (docs/metrics.md)."""

    EVENTS = "events"


EVENTS_API_VERSION = "events.k8s.io/v1"


class ReviewResource(enum.StrEnum):
    """``authorization.k8s.io/v1``: what the agent asks RBAC about itself."""

    SELF_SUBJECT_ACCESS_REVIEWS = "selfsubjectaccessreviews"


AnyResource = Resource | PoolResource | EventResource | ReviewResource

_BUILTIN_PATHS: dict[AnyResource, str] = {
    Resource.NODES: "/api/v1/nodes",
    PoolResource.LEASES: "/apis/coordination.k8s.io/v1/namespaces/{namespace}/leases",
    PoolResource.STATEFULSETS: "/apis/apps/v1/namespaces/{namespace}/statefulsets",
}
"""The kinds read by path (see the module docstring); the rest are ``joulie.io`` objects."""
_QUERY = {
    "label_selector": "labelSelector",
    "field_selector": "fieldSelector",
    "watch": "watch",
    "resource_version": "resourceVersion",
    "timeout_seconds": "timeoutSeconds",
    "allow_watch_bookmarks": "allowWatchBookmarks",
    "limit": "limit",
    "_continue": "continue",
    "include_object": "includeObject",
}
"""Keyword arguments of the generated list calls -> their query parameters."""


RequestHook = Callable[[str, str, int], None]
"""Called after every request with (verb, resource, HTTP code or 0 for no answer)."""


@dataclass(frozen=True)
class Listing:
    items: list[dict[str, Any]]
    resource_version: str


JsonBody = dict[str, Any] | list[dict[str, Any]]
"""A request body: an object, or the operations of a JSON patch."""


_CONNECTION_PREFIX = re.compile(r"^\w+Connection(?:Pool)?\([^)]*\): ")


def no_answer(exc: BaseException) -> str:
    """How a request that got no HTTP answer failed, in words that do not change from
    one try to the next (no object addresses): the log says an outage once."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    return f"{type(exc).__name__}: {_CONNECTION_PREFIX.sub('', str(exc))}"


def _wrap(exc: Exception, what: str) -> KubeError:
    if isinstance(exc, ApiException):
        status = int(exc.status or 0)
        reason = f"{what}: HTTP {status} {exc.reason}"
        # 409: a conflicting write (another writer got there first) is worth a retry too.
        if status in (409, 429) or status >= 500:
            retry_after = (exc.headers or {}).get("Retry-After") if exc.headers else None
            try:
                delay = float(retry_after) if retry_after else 1.0
            except ValueError:
                delay = 1.0
            return KubeTemporaryError(reason, status, delay)
        return KubePermanentError(reason, status)
    return KubeUnreachableError(f"{what}: no answer: {no_answer(exc)}")


def _timed_out(exc: BaseException) -> bool:
    """An established connection went silent (not a refused or failed connect)."""
    if isinstance(exc, urllib3.exceptions.MaxRetryError) and exc.reason is not None:
        exc = exc.reason
    return isinstance(exc, urllib3.exceptions.ReadTimeoutError | TimeoutError)


def load_client(kubeconfig: str | None) -> client.ApiClient:
    """An ApiClient from a kubeconfig file, or the in-cluster service account."""
    configuration = client.Configuration()
    source = kubeconfig or "in-cluster service account"
    try:
        if kubeconfig:
            config.load_kube_config(config_file=kubeconfig, client_configuration=configuration)
        else:
            config.load_incluster_config(client_configuration=configuration)
    except (config.ConfigException, OSError) as exc:
        problem = f"cannot load Kubernetes configuration from {source}: {exc}"
        raise KubePermanentError(problem) from exc
    except Exception as exc:
        # The client reads the file's YAML with no shape check of its own: a file that is
        # not a kubeconfig (a scalar, a list, undecodable bytes, a mapping of wrong types)
        # raises whatever its code trips over (YAMLError, TypeError, UnicodeDecodeError...).
        raise KubePermanentError(
            f"cannot load Kubernetes configuration from {source}: "
            f"not a kubeconfig ({type(exc).__name__}: {exc})"
        ) from exc
    configuration.retries = 0
    configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
    return client.ApiClient(configuration)


def json_body(response: Any, what: str) -> dict[str, Any]:
    """A raw response's JSON object (the connection released); KubeTemporaryError if not one."""
    try:
        return json_object(response.data, what)
    finally:
        response.release_conn()


def json_object(data: bytes, what: str) -> dict[str, Any]:
    """An answer's JSON object; KubeTemporaryError if it is not one."""
    try:
        body = json.loads(data)
    except ValueError as exc:
        raise KubeTemporaryError(f"{what}: answer is not JSON") from exc
    if not isinstance(body, dict):
        raise KubeTemporaryError(f"{what}: answer is not a JSON object")
    return body


class KubeApi:
    """List, watch, create and status-patch the resources the agent uses."""

    def __init__(
        self,
        api_client: client.ApiClient,
        on_request: RequestHook | None = None,
        namespace: str | None = None,
        limiter: RateLimiter | None = None,
    ) -> None:
        self._client = api_client
        self._custom = client.CustomObjectsApi(api_client)
        self.namespace = namespace
        """Where the namespaced :class:`PoolResource` kinds are read."""
        self._on_request = on_request or (lambda verb, resource, code: None)
        self.reachability = Reachability(str(api_client.configuration.host))
        """Whether the server answers: the outage in progress, told once in the log."""
        self._limiter = limiter
        """``KUBE_CLIENT_QPS``: every request waits for it before it is sent, as client-go's
        requests wait for its rate limiter (watches and their restarts included)."""

    @functools.cached_property
    def coordination(self) -> Any:
        """``CoordinationV1Api``, for reading and writing this pod's Lease."""
        return client.CoordinationV1Api(self._client)

    @functools.cached_property
    def apps(self) -> Any:
        """``AppsV1Api``, for reading agent pools' StatefulSets in any namespace."""
        return client.AppsV1Api(self._client)

    def close(self) -> None:
        self._client.close()

    def _get_raw(self, path: str, accept: str = "application/json", **kwargs: Any) -> Any:
        """GET ``path`` with a list call's keyword arguments; the raw urllib3 response.

        What the generated ``list_*`` methods do with ``_preload_content=False``,
        including raising :class:`ApiException` for an answer that is not 2xx.
        """
        timeout = kwargs.pop("_request_timeout")
        kwargs.pop("_preload_content", None)
        request = self._client.param_serialize(
            "GET",
            path,
            query_params=[(_QUERY[key], value) for key, value in kwargs.items()],
            header_params={"Accept": accept},
            auth_settings=["BearerToken"],
        )
        response = self._client.call_api(*request, _request_timeout=timeout)
        if not 200 <= response.status <= 299:
            response.read()
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response.response

    def _lister(self, resource: AnyResource) -> Callable[..., Any]:
        path = _BUILTIN_PATHS.get(resource)
        if path is not None:
            if isinstance(resource, PoolResource):
                if self.namespace is None:
                    raise KubePermanentError(
                        f"{resource.value} are namespaced: the KubeApi has no namespace"
                    )
                path = path.format(namespace=self.namespace)
            return functools.partial(self._get_raw, path)

        def custom(**kwargs: Any) -> Any:
            return self._custom.list_cluster_custom_object(GROUP, VERSION, resource.value, **kwargs)

        return custom

    def call(self, verb: str, resource: AnyResource, fn: Callable[[], Any]) -> Any:
        """Run one request: errors wrapped into our tree, the request hook told."""
        return self._call(verb, resource, fn)

    def _call(self, verb: str, resource: AnyResource, fn: Callable[[], Any]) -> Any:
        if self._limiter is not None:
            self._limiter.wait()
        try:
            response = fn()
        except ApiException as exc:
            self._on_request(verb, resource.value, int(exc.status or 0))
            wrapped = _wrap(exc, f"{verb} {resource.value}")
            self.reachability.heard(int(exc.status or 0), str(wrapped))
            raise wrapped from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._on_request(verb, resource.value, 0)
            raise self._unanswered(exc, f"{verb} {resource.value}") from exc
        self._on_request(verb, resource.value, int(getattr(response, "status", 200) or 200))
        self.reachability.answered()
        return response

    def _unanswered(self, exc: Exception, what: str) -> KubeError:
        """``exc`` (no HTTP answer) wrapped and told to :attr:`reachability`."""
        wrapped = _wrap(exc, what)
        if _timed_out(exc):
            self._forget_connections()
        self.reachability.unanswered(str(wrapped))
        return wrapped

    def _forget_connections(self) -> None:
        """Close the idle connections kept for reuse (those in use close when returned)."""
        pool_manager = getattr(getattr(self._client, "rest_client", None), "pool_manager", None)
        if pool_manager is not None:
            pool_manager.clear()

    def list(
        self,
        resource: AnyResource,
        label_selector: str | None = None,
        field_selector: str | None = None,
        timeout_s: float = REQUEST_TIMEOUT_S,
        keep: Callable[[dict[str, Any]], bool] | None = None,
        page_size: int = LIST_PAGE_SIZE,
        trim: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
    ) -> Listing:
        """Every object of ``resource`` the selectors pick (and ``keep`` keeps), in pages,
        each cut down by ``trim`` to what the caller reads.

        The pages are one consistent snapshot (the first page's resourceVersion). A
        ``continue`` token that expired meanwhile (410 Gone: etcd compacted past it) starts
        the list again, once; a second expiry is raised (the informer retries it).
        """
        return again_if_expired(functools.partial(
            self._list_pages, resource, label_selector, field_selector, timeout_s, keep,
            page_size, trim))

    def _list_pages(
        self,
        resource: AnyResource,
        label_selector: str | None,
        field_selector: str | None,
        timeout_s: float,
        keep: Callable[[dict[str, Any]], bool] | None,
        page_size: int,
        trim: Callable[[dict[str, Any]], dict[str, Any]] | None,
    ) -> Listing:
        items: list[dict[str, Any]] = []
        kept = bytearray()
        rv = ""
        token: str | None = None
        lister = self._lister(resource)
        while True:
            kwargs: dict[str, Any] = {
                "_preload_content": False,
                "_request_timeout": (CONNECT_TIMEOUT_S, timeout_s),
                "limit": page_size,
            }
            kwargs.update(_selectors(label_selector, field_selector))
            if token:
                kwargs["_continue"] = token
            response = self._call("list", resource, functools.partial(lister, **kwargs))
            body = json_body(response, f"list {resource.value}")
            meta = body.get("metadata") or {}
            rv = rv or _fresh(str(meta.get("resourceVersion") or ""))
            page = body.get("items") or []
            del body  # the page's objects go as soon as they are filtered
            if keep is None and trim is None:
                items.extend(i for i in page if isinstance(i, dict))
            else:
                # What is kept is held as text, one line each in one buffer outside the
                # small-object heap, until the last page is gone: decoded again then,
                # none of its objects pins the memory a page was decoded into.
                for i in page:
                    if isinstance(i, dict) and (keep is None or keep(i)):
                        kept += json.dumps(i if trim is None else trim(i)).encode() + b"\n"
            del page
            token = _fresh(str(meta.get("continue") or "")) or None
            del meta
            if not token:
                items.extend(json.loads(line) for line in kept.splitlines())
                return Listing(items, rv)

    def table_page(
        self,
        resource: Resource,
        label_selector: str | None,
        field_selector: str | None,
        page_size: int,
        token: str | None,
    ) -> dict[str, Any]:
        """One page of ``resource`` as a Table of rows without their objects
        (``includeObject=None``): what ``kubectl get`` reads, about 200 bytes per object.

        A server that cannot answer so says 406, or answers with the objects anyway (it
        ignored the ``Accept`` header): the caller tells by the answer's ``kind``.
        """
        path = _BUILTIN_PATHS.get(resource) or f"/apis/{GROUP}/{VERSION}/{resource.value}"
        kwargs: dict[str, Any] = {
            "_request_timeout": (CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S),
            "limit": page_size,
            "include_object": "None",
            **_selectors(label_selector, field_selector),
        }
        if token:
            kwargs["_continue"] = token
        fetch = functools.partial(self._get_raw, path, TABLE_ACCEPT, **kwargs)
        return json_body(self._call("list", resource, fetch), f"list {resource.value}")

    def watch(
        self,
        resource: AnyResource,
        resource_version: str,
        timeout_s: float,
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_open: Callable[[Any], None] | None = None,
        skip: Callable[[str], str | None] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Yield raw watch events until the server ends the stream.

        The read timeout is the server-side timeout plus a margin, so a watch
        that goes silent with its connection open is noticed. ``on_open``
        receives the response so another thread can close it to stop us.
        ``skip`` sees each event's line before it is decoded: the resourceVersion of
        an event the caller has no use for (it comes as a BOOKMARK of that version:
        only the watch's place moves on), or None to decode it.
        """
        kwargs: dict[str, Any] = {
            "watch": True,
            "resource_version": resource_version,
            "timeout_seconds": int(max(1, timeout_s)),
            "allow_watch_bookmarks": True,
            "_preload_content": False,
            "_request_timeout": (CONNECT_TIMEOUT_S, watch_read_timeout(timeout_s)),
        }
        kwargs.update(_selectors(label_selector, field_selector))
        lister = self._lister(resource)
        response = self._call("watch", resource, lambda: lister(**kwargs))
        if on_open is not None:
            on_open(response)
        try:
            for line in iter_resp_lines(response):
                self.reachability.answered()  # an event or bookmark is the server's word too
                if skip is not None and (version := skip(line)) is not None:
                    yield {"type": "BOOKMARK", "object": {"metadata": {"resourceVersion": version}}}
                    continue
                try:
                    event = json.loads(line)
                except ValueError as exc:
                    raise KubeTemporaryError(f"watch {resource.value}: bad event line") from exc
                if isinstance(event, dict):
                    yield event
        except (urllib3.exceptions.HTTPError, OSError, AttributeError) as exc:
            # AttributeError: urllib3 raises it reading a response another thread closed.
            if response in _ABORTED:  # stopped by its owner: says nothing about the server
                raise _wrap(exc, f"watch {resource.value}") from exc
            raise self._unanswered(exc, f"watch {resource.value}") from exc
        finally:
            response.close()
            response.release_conn()

    def patch_status(self, resource: Resource, name: str, status: dict[str, Any]) -> None:
        """JSON merge patch of ``status`` through the status subresource (never a PUT).

        A merge patch leaves keys not in ``status`` as they are, which is what keeps
        other writers' fields. Sent through the client's transport as the generated
        ``patch_cluster_custom_object_status`` sends it (same path, headers, auth),
        without its per-call argument validation: a pool pod sends one per node every
        heartbeat, and that validation was most of each request's CPU here.
        """
        path = f"/apis/{GROUP}/{VERSION}/{resource.value}/{quote(name, safe='')}/status"
        self._call("patch", resource, lambda: self._send("PATCH", path, {"status": status}))

    def replace_status(self, resource: Resource, name: str, status: dict[str, Any]) -> None:
        """Replace the whole ``status`` through the status subresource: a JSON patch
        adding ``/status`` (which replaces what is there), so keys another writer left
        go away in one request, with no read first and no resourceVersion to race on."""
        path = f"/apis/{GROUP}/{VERSION}/{resource.value}/{quote(name, safe='')}/status"
        body = [{"op": "add", "path": "/status", "value": status}]
        self._call("patch", resource, lambda: self._send("PATCH", path, body, json_patch=True))

    def create_event(
        self, namespace: str, event: dict[str, Any], timeout_s: float = REQUEST_TIMEOUT_S
    ) -> dict[str, Any]:
        """Create an ``events.k8s.io/v1`` Event, sent as given; the object the server made.

        Sent as :meth:`patch_status` sends (the generated method's validation cost more
        CPU than the request: a pool pod records an Event per node as it starts). A dict
        also escapes the typed Event API's re-serialising of MicroTime fields, in a
        format the apiserver refuses when the microseconds are zero.
        """
        path = f"/apis/{EVENTS_API_VERSION}/namespaces/{quote(namespace, safe='')}/events"
        response = self._call("create", EventResource.EVENTS,
                              lambda: self._send("POST", path, event, timeout_s))
        return json_object(response.data, f"create {EventResource.EVENTS.value}")

    def patch_event(
        self, namespace: str, name: str, patch: dict[str, Any],
        timeout_s: float = REQUEST_TIMEOUT_S,
    ) -> None:
        """JSON merge patch of an ``events.k8s.io/v1`` Event (a repeat's ``series``)."""
        path = (f"/apis/{EVENTS_API_VERSION}/namespaces/{quote(namespace, safe='')}/events/"
                f"{quote(name, safe='')}")
        self._call("patch", EventResource.EVENTS,
                   lambda: self._send("PATCH", path, patch, timeout_s))

    def _send(
        self, method: str, path: str, body: JsonBody,
        timeout_s: float = REQUEST_TIMEOUT_S, json_patch: bool = False,
    ) -> Any:
        """``body`` to ``path`` (a POST, or a PATCH as a JSON merge patch, or a JSON patch),
        the answer read whole; raises :class:`ApiException` for one that is not 2xx, as the
        generated methods do."""
        headers = {"Accept": "application/json"}
        if method == "PATCH":
            headers["Content-Type"] = (
                "application/json-patch+json" if json_patch else "application/merge-patch+json"
            )
        request = self._client.param_serialize(
            method, path, header_params=headers, body=body, auth_settings=["BearerToken"]
        )
        response = self._client.call_api(*request, _request_timeout=(CONNECT_TIMEOUT_S, timeout_s))
        response.read()  # the whole answer: its connection goes back to the pool
        if not 200 <= response.status <= 299:
            raise ApiException.from_response(http_resp=response, body=None, data=None)
        return response

    def create(self, resource: Resource, obj: dict[str, Any]) -> dict[str, Any]:
        """Create a cluster-scoped ``joulie.io`` object; 409 (exists) is a :class:`KubeError`."""
        response = self._call(
            "create",
            resource,
            lambda: self._custom.create_cluster_custom_object(
                GROUP,
                VERSION,
                resource.value,
                obj,
                _request_timeout=(CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S),
                _preload_content=False,
            ),
        )
        return json_body(response, f"create {resource.value}")

    def allowed(self, verb: str, resource: Resource) -> bool | None:
        """Whether the server lets this client ``verb`` the cluster-scoped ``resource``.

        A SelfSubjectAccessReview, which every authenticated user may create (RBAC's
        ``system:basic-user``); None where the server gives no answer (no authorization
        API, the review itself refused). A temporary failure raises
        :class:`KubeTemporaryError`: ask again later.
        """
        group = "" if resource is Resource.NODES else GROUP
        review = {
            "apiVersion": "authorization.k8s.io/v1",
            "kind": "SelfSubjectAccessReview",
            "spec": {"resourceAttributes": {
                "group": group, "resource": resource.value, "verb": verb}},
        }
        kind = ReviewResource.SELF_SUBJECT_ACCESS_REVIEWS
        path = f"/apis/authorization.k8s.io/v1/{kind.value}"
        try:
            response = self._call("create", kind, lambda: self._send("POST", path, review))
        except KubeTemporaryError:
            raise
        except KubeError:
            return None
        status = json_object(response.data, f"create {kind.value}").get("status") or {}
        allowed = status.get("allowed") if isinstance(status, dict) else None
        return allowed if isinstance(allowed, bool) else None

    def served(self) -> set[str]:
        """The ``joulie.io/v1alpha1`` resources the server serves (API discovery).

        A server without any Joulie CRD answers 404 for the group version: an
        empty set, not an error. Subresources (``nodetwins/status``) are listed too.
        """
        path = f"/apis/{GROUP}/{VERSION}"
        if self._limiter is not None:
            self._limiter.wait()
        try:
            response = self._custom.get_api_resources(
                GROUP,
                VERSION,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S),
            )
        except ApiException as exc:
            self._on_request("get", "discovery", int(exc.status or 0))
            wrapped = _wrap(exc, f"discover {path}")
            self.reachability.heard(int(exc.status or 0), str(wrapped))
            if exc.status == 404:
                return set()
            raise wrapped from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._on_request("get", "discovery", 0)
            raise self._unanswered(exc, f"discover {path}") from exc
        self._on_request("get", "discovery", int(getattr(response, "status", 200) or 200))
        self.reachability.answered()
        body = json_body(response, f"discover {path}")
        return {str(r.get("name")) for r in body.get("resources") or [] if isinstance(r, dict)}

    def readyz(self) -> tuple[int, str]:
        """The server's ``/readyz``: its status and body (the checks that fail), whatever
        the status (``system:public-info-viewer`` lets every client read it by default)."""
        if self._limiter is not None:
            self._limiter.wait()
        request = self._client.param_serialize(
            "GET", "/readyz", header_params={"Accept": "text/plain"}, auth_settings=["BearerToken"]
        )
        try:
            response = self._client.call_api(
                *request, _request_timeout=(CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S)
            )
            data = response.read()
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._on_request("get", "readyz", 0)
            raise self._unanswered(exc, "get /readyz") from exc
        status = int(response.status)
        self._on_request("get", "readyz", status)
        self.reachability.heard(status, f"get /readyz: HTTP {status}")
        return status, bytes(data or b"").decode("utf-8", "replace")


def again_if_expired[T](list_pages: Callable[[], T]) -> T:
    """``list_pages()``, started again once if its ``continue`` token expired meanwhile
    (410 Gone: etcd compacted past it); a second expiry is raised."""
    for attempt in (1, 2):
        try:
            return list_pages()
        except KubePermanentError as exc:
            if exc.status != 410 or attempt == 2:
                raise
    raise AssertionError("unreachable")


def _fresh(text: str) -> str:
    """A copy of ``text`` that is no part of the decoded page it came from."""
    return text.encode().decode()


def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    """The selector arguments of a list or watch call; empty ones are left out."""
    given = {"label_selector": label_selector, "field_selector": field_selector}
    return {key: value for key, value in given.items() if value}


_ABORTED: weakref.WeakSet[Any] = weakref.WeakSet()
"""Responses :func:`abort_read` cut: their reader's error is no outage."""


def abort_read(response: Any) -> None:
    """Unblock a thread reading ``response`` by shutting its socket down.

    ``close()`` from another thread would wait for the reader's buffer lock
    and so hang with it; ``shutdown()`` makes the blocked read return at once.
    """
    _ABORTED.add(response)
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: the reader is unblocked either way
