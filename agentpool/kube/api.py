"""A narrow, typed facade over the kubernetes client: list, watch, patch status.

Why raw JSON (``_preload_content=False``) instead of the client's models:
the agent forwards objects to worker processes and indexes a few fields, so
deserialising thousands of nodes into ``V1Node`` would cost CPU and memory
for nothing. Why our own watch loop instead of ``kubernetes.watch.Watch``:
it needs an explicit relist on 410 Gone, a client-side read timeout, and
its ``deserialize=False`` path cannot report ERROR events.

Traps handled here: ``timeout_seconds`` is only a server-side timeout, so
every call also passes ``_request_timeout`` or a dropped connection would
hang forever; urllib3's own retries are disabled (``retries=0``) so that
tenacity, one level up, is the only retry policy.
"""

from __future__ import annotations

import enum
import json
import socket
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any

import urllib3
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines

from agentpool.errors import KubeError, KubeTemporaryError

GROUP = "joulie.io"
VERSION = "v1alpha1"
CONNECT_TIMEOUT_S = 5.0
CONNECTION_POOL_SIZE = 32
"""Connections kept per API server: each informer's watch holds one and the status writer
writes several at once; the client's default (5 per CPU) would make urllib3 discard
connections, with a warning each time, on a pod limited to one CPU."""
REQUEST_TIMEOUT_S = 30.0


class Resource(enum.StrEnum):
    NODES = "nodes"
    NODE_POWER_PROFILES = "nodepowerprofiles"
    TELEMETRY_PROFILES = "telemetryprofiles"
    NODE_TWINS = "nodetwins"
    """Joulie's current API: desired state in spec, the agent's feedback in status."""
    NODE_HARDWARES = "nodehardwares"
    """Joulie's current API: what the agent found on each node."""


class PoolResource(enum.StrEnum):
    """Namespaced kinds only an elastic pool reads (README: elastic pool)."""

    LEASES = "leases"
    """``coordination.k8s.io/v1``: one per pool pod."""
    STATEFULSETS = "statefulsets"
    """``apps/v1``: the pool's own, for ``spec.replicas``."""


AnyResource = Resource | PoolResource


RequestHook = Callable[[str, str, int], None]
"""Called after every request with (verb, resource, HTTP code or 0 for no answer)."""


@dataclass(frozen=True)
class Listing:
    items: list[dict[str, Any]]
    resource_version: str


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
        return KubeError(reason, status)
    return KubeTemporaryError(f"{what}: {type(exc).__name__}: {exc}", None)


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
        raise KubeError(f"cannot load Kubernetes configuration from {source}: {exc}") from exc
    except Exception as exc:
        # The client reads the file's YAML with no shape check of its own: a file that is
        # not a kubeconfig (a scalar, a list, undecodable bytes, a mapping of wrong types)
        # raises whatever its code trips over (YAMLError, TypeError, UnicodeDecodeError...).
        raise KubeError(
            f"cannot load Kubernetes configuration from {source}: "
            f"not a kubeconfig ({type(exc).__name__}: {exc})"
        ) from exc
    configuration.retries = 0
    configuration.connection_pool_maxsize = CONNECTION_POOL_SIZE
    return client.ApiClient(configuration)


def json_body(response: Any, what: str) -> dict[str, Any]:
    """A raw response's JSON object (the connection released); KubeTemporaryError if not one."""
    try:
        body = json.loads(response.data)
    except ValueError as exc:
        raise KubeTemporaryError(f"{what}: answer is not JSON") from exc
    finally:
        response.release_conn()
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
    ) -> None:
        self._client = api_client
        self._core = client.CoreV1Api(api_client)
        self._custom = client.CustomObjectsApi(api_client)
        self.coordination = client.CoordinationV1Api(api_client)
        self._apps = client.AppsV1Api(api_client)
        self.namespace = namespace
        """Where the namespaced :class:`PoolResource` kinds are read."""
        self._on_request = on_request or (lambda verb, resource, code: None)

    def close(self) -> None:
        self._client.close()

    def _lister(self, resource: AnyResource) -> Callable[..., Any]:
        if resource is Resource.NODES:
            return self._core.list_node
        if isinstance(resource, PoolResource):
            namespace = self.namespace
            if namespace is None:
                raise KubeError(f"{resource.value} are namespaced: the KubeApi has no namespace")
            if resource is PoolResource.LEASES:
                return lambda **kw: self.coordination.list_namespaced_lease(namespace, **kw)
            return lambda **kw: self._apps.list_namespaced_stateful_set(namespace, **kw)

        def custom(**kwargs: Any) -> Any:
            return self._custom.list_cluster_custom_object(GROUP, VERSION, resource.value, **kwargs)

        return custom

    def call(self, verb: str, resource: AnyResource, fn: Callable[[], Any]) -> Any:
        """Run one request: errors wrapped into our tree, the request hook told."""
        return self._call(verb, resource, fn)

    def _call(self, verb: str, resource: AnyResource, fn: Callable[[], Any]) -> Any:
        try:
            response = fn()
        except ApiException as exc:
            self._on_request(verb, resource.value, int(exc.status or 0))
            raise _wrap(exc, f"{verb} {resource.value}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._on_request(verb, resource.value, 0)
            raise _wrap(exc, f"{verb} {resource.value}") from exc
        self._on_request(verb, resource.value, int(getattr(response, "status", 200) or 200))
        return response

    def list(
        self,
        resource: AnyResource,
        label_selector: str | None = None,
        field_selector: str | None = None,
    ) -> Listing:
        kwargs: dict[str, Any] = {
            "_preload_content": False,
            "_request_timeout": (CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S),
        }
        kwargs.update(_selectors(label_selector, field_selector))
        lister = self._lister(resource)
        response = self._call("list", resource, lambda: lister(**kwargs))
        body = json_body(response, f"list {resource.value}")
        items = body.get("items") or []
        rv = str((body.get("metadata") or {}).get("resourceVersion") or "")
        return Listing([i for i in items if isinstance(i, dict)], rv)

    def watch(
        self,
        resource: AnyResource,
        resource_version: str,
        timeout_s: float,
        label_selector: str | None = None,
        field_selector: str | None = None,
        on_open: Callable[[Any], None] | None = None,
    ) -> Iterator[dict[str, Any]]:
        """Yield raw watch events until the server ends the stream.

        The read timeout is the server-side timeout plus a margin, so a watch
        that goes silent with its connection open is noticed. ``on_open``
        receives the response so another thread can close it to stop us.
        """
        kwargs: dict[str, Any] = {
            "watch": True,
            "resource_version": resource_version,
            "timeout_seconds": int(max(1, timeout_s)),
            "allow_watch_bookmarks": True,
            "_preload_content": False,
            # Long enough that a quiet but healthy stream is not cut, short enough to notice a
            # silent one soon after the server should have ended it.
            "_request_timeout": (CONNECT_TIMEOUT_S, timeout_s + min(10.0, timeout_s)),
        }
        kwargs.update(_selectors(label_selector, field_selector))
        lister = self._lister(resource)
        response = self._call("watch", resource, lambda: lister(**kwargs))
        if on_open is not None:
            on_open(response)
        try:
            for line in iter_resp_lines(response):
                try:
                    event = json.loads(line)
                except ValueError as exc:
                    raise KubeTemporaryError(f"watch {resource.value}: bad event line") from exc
                if isinstance(event, dict):
                    yield event
        except (urllib3.exceptions.HTTPError, OSError, AttributeError) as exc:
            # AttributeError: urllib3 raises it reading a response another thread closed.
            raise _wrap(exc, f"watch {resource.value}") from exc
        finally:
            response.close()
            response.release_conn()

    def patch_status(self, resource: Resource, name: str, status: dict[str, Any]) -> None:
        """JSON merge patch of ``status`` through the status subresource (never a PUT).

        The client sends a dict body to ``patch_*`` as a merge patch: keys not in
        ``status`` are left as they are, which is what keeps other writers' fields.
        """
        self._call(
            "patch",
            resource,
            lambda: self._custom.patch_cluster_custom_object_status(
                GROUP,
                VERSION,
                resource.value,
                name,
                {"status": status},
                _request_timeout=(CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S),
                _preload_content=False,
            ),
        )

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

    def served(self) -> set[str]:
        """The ``joulie.io/v1alpha1`` resources the server serves (API discovery).

        A server without any Joulie CRD answers 404 for the group version: an
        empty set, not an error. Subresources (``nodetwins/status``) are listed too.
        """
        path = f"/apis/{GROUP}/{VERSION}"
        try:
            response = self._custom.get_api_resources(
                GROUP,
                VERSION,
                _preload_content=False,
                _request_timeout=(CONNECT_TIMEOUT_S, REQUEST_TIMEOUT_S),
            )
        except ApiException as exc:
            self._on_request("get", "discovery", int(exc.status or 0))
            if exc.status == 404:
                return set()
            raise _wrap(exc, f"discover {path}") from exc
        except (urllib3.exceptions.HTTPError, OSError) as exc:
            self._on_request("get", "discovery", 0)
            raise _wrap(exc, f"discover {path}") from exc
        self._on_request("get", "discovery", int(getattr(response, "status", 200) or 200))
        body = json_body(response, f"discover {path}")
        return {str(r.get("name")) for r in body.get("resources") or [] if isinstance(r, dict)}

def _selectors(label_selector: str | None, field_selector: str | None) -> dict[str, str]:
    """The selector arguments of a list or watch call; empty ones are left out."""
    given = {"label_selector": label_selector, "field_selector": field_selector}
    return {key: value for key, value in given.items() if value}


def abort_read(response: Any) -> None:
    """Unblock a thread reading ``response`` by shutting its socket down.

    ``close()`` from another thread would wait for the reader's buffer lock
    and so hang with it; ``shutdown()`` makes the blocked read return at once.
    """
    sock = getattr(getattr(response, "connection", None), "sock", None)
    if sock is None:
        return
    try:
        sock.shutdown(socket.SHUT_RDWR)
    except OSError:
        pass  # already closed: the reader is unblocked either way
