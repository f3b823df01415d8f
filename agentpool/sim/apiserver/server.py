"""The HTTP face of the emulator: aiohttp routes speaking the Kubernetes REST API.

Owns the mapping from requests to store operations: URL layout (core
``/api/v1/nodes``, ``/apis/joulie.io/v1alpha1/...``, namespaced
``/apis/<group>/<version>/namespaces/<ns>/<plural>`` with ``/status`` and
``/scale``, discovery,
``/version``), verbs, query parameters (``labelSelector``, ``fieldSelector``,
``watch``, ``resourceVersion``, ``timeoutSeconds``), JSON bodies, ``Status``
error bodies, newline-delimited watch streams, and where injected faults cut
in. It never keeps object state itself: that is :mod:`.store`'s, shared by
every app built here, so the emulator can be stopped and started again with its
objects intact.

Ignored on purpose (the agent does not use them): ``limit``/``continue``
(everything comes in one page), ``dryRun``, ``fieldManager``,
``allowWatchBookmarks`` (no BOOKMARK events), server-side apply.
"""

from __future__ import annotations

import asyncio
import contextlib
import functools
import json
from collections.abc import Awaitable, Callable, Mapping
from typing import Any, NoReturn

from aiohttp import web

from agentpool.sim.apiserver import resources
from agentpool.sim.apiserver.counters import Counters
from agentpool.sim.apiserver.errors import ApiError, BadRequestError, GoneError
from agentpool.sim.apiserver.faults import FaultKind, FaultRule, FaultTable, reason_for
from agentpool.sim.apiserver.patching import apply_patch
from agentpool.sim.apiserver.resources import ResourceType
from agentpool.sim.apiserver.selectors import ObjectFilter
from agentpool.sim.apiserver.store import KubeObject, Store
from agentpool.sim.apiserver.watch import Watcher, encode, translate
from agentpool.sim.apiserver.workloads import apply_scale, to_scale

STARTING_PHASES = {
    "crd-informer": (
        "[+]ping ok\n[+]log ok\n[+]etcd ok\n[-]informer-sync failed: reason withheld\n"
        "[-]poststarthook/crd-informer-synced failed: reason withheld\n"
        "[-]autoregister-completion failed: reason withheld\n[+]shutdown ok\n"
        "readyz check failed\n"
    ),
    "crd-discovery": (
        "[+]ping ok\n[+]log ok\n[+]etcd ok\n[+]informer-sync ok\n"
        "[+]poststarthook/crd-informer-synced ok\n"
        "[-]autoregister-completion failed: reason withheld\n[+]shutdown ok\n"
        "readyz check failed\n"
    ),
}
"""The phases of a kube-apiserver 1.20 start that custom resources meet, as measured on
envtest's (tests/envtest/test_discovery_restart.py runs the real one), each with the body
of its ``/readyz`` (500 throughout): while the CRD informer syncs, every ``joulie.io``
path answers 503 "server is starting"; then, until the CRDs' discovery is registered,
404; ``/readyz`` fails for seconds more. Core paths are served all along."""

DEFAULT_WATCH_TIMEOUT = 1800.0
"""Seconds a watch without ``timeoutSeconds`` lasts (the apiserver picks 30-60 min)."""

DISCONNECT_POLL = 0.25
"""How often an idle watch checks whether its client went away, so that
:meth:`Counters.open_watches` drops soon after a client closes its stream."""

Handler = Callable[[web.Request], Awaitable[web.StreamResponse]]


def _json(body: Any, status: int = 200, headers: Mapping[str, str] | None = None) -> web.Response:
    return web.Response(
        body=json.dumps(body, separators=(",", ":")).encode(), status=status,
        content_type="application/json", headers=headers,
    )


def _const(document: Any, _request: web.Request) -> Any:
    """A discovery document that does not depend on the request."""
    return document


def error_response(exc: ApiError) -> web.Response:
    headers = {"Retry-After": str(exc.retry_after)} if exc.retry_after is not None else None
    return _json(exc.status(), exc.code, headers)


def _drop(request: web.Request) -> NoReturn:
    """Close the connection without an answer.

    Raising CancelledError is how aiohttp's own protocol ends a handler whose
    client vanished: it closes the connection quietly, with no 500 written.
    """
    if request.transport is not None:
        request.transport.close()
    raise asyncio.CancelledError


async def _body(request: web.Request) -> Any:
    raw = await request.read()
    if not raw:
        return None
    try:
        return json.loads(raw)
    except ValueError as exc:
        raise BadRequestError(f"request body is not JSON: {exc}") from exc


async def _object_body(request: web.Request) -> KubeObject:
    body = await _body(request)
    if not isinstance(body, dict):
        raise BadRequestError("the request body must be a JSON object")
    return body


def _since(query: Mapping[str, str]) -> int | None:
    """The watch's starting resourceVersion; None for "now, with current objects"."""
    raw = query.get("resourceVersion", "")
    if raw in ("", "0"):
        return None
    if not raw.isdigit():
        raise BadRequestError(f"invalid resourceVersion {raw!r}")
    return int(raw)


class ApiApp:
    """Builds one aiohttp application over a shared store, fault table and counters."""

    def __init__(
        self,
        store: Store,
        faults: FaultTable,
        counters: Counters,
        default_watch_timeout: float = DEFAULT_WATCH_TIMEOUT,
        served: Callable[[], tuple[ResourceType, ...]] = lambda: resources.RESOURCES,
        starting: Callable[[], str | None] = lambda: None,
    ) -> None:
        self._served = served
        """Asked on every request, so a test can "install a CRD" while clients run."""
        self._starting = starting
        """The phase of a kube-apiserver start answered as, asked on every request
        (:data:`STARTING_PHASES`); None: serving."""
        self._store = store
        self._faults = faults
        self._counters = counters
        self._default_watch_timeout = default_watch_timeout
        self._watchers: set[Watcher] = set()
        self._stopping = asyncio.Event()

    def build(self) -> web.Application:
        app = web.Application()
        app.on_shutdown.append(self._on_shutdown)
        documents: dict[str, Callable[[web.Request], Any]] = {
            "/version": lambda _: resources.version_info(),
            "/api": lambda request: resources.core_versions(request.host),
            "/api/v1": lambda _: resources.resource_list("", "v1", self._served()),
            "/apis": lambda _: resources.api_group_list(self._served()),
            f"/apis/{resources.JOULIE_GROUP}": lambda _: (
                resources.api_group() if resources.serves_group(self._served()) else None
            ),
            f"/apis/{resources.JOULIE_GROUP}/{resources.JOULIE_VERSION}": lambda _: (
                resources.resource_list(
                    resources.JOULIE_GROUP, resources.JOULIE_VERSION, self._served()
                )
                if resources.serves_group(self._served())
                else None
            ),
        }
        for group, version in resources.GROUPS:
            if group == resources.JOULIE_GROUP:
                continue  # above: present only where the shape serves a Joulie kind
            group_doc = resources.api_group(group, version)
            documents[f"/apis/{group}"] = functools.partial(_const, group_doc)
            documents[f"/apis/{group}/{version}"] = functools.partial(
                _const, resources.resource_list(group, version)
            )
        for path, document in documents.items():
            # The Python client asks for "/version/" and "/apis/" with a trailing slash.
            joulie = path.startswith(f"/apis/{resources.JOULIE_GROUP}")
            app.router.add_get(path, self._document(document, joulie))
            app.router.add_get(path + "/", self._document(document, joulie))
        for path in ("/healthz", "/livez"):
            app.router.add_get(path, self._ok)
        app.router.add_get("/readyz", self._readyz)
        for rt in resources.RESOURCES:
            # A namespaced kind's collection across namespaces serves list and watch only.
            app.router.add_route("*", rt.base_path, self._handler(rt, named=False))
            base = rt.namespaced_path if rt.namespaced else rt.base_path
            if rt.namespaced:
                app.router.add_route("*", base, self._handler(rt, named=False))
            app.router.add_route("*", base + "/{name}", self._handler(rt, named=True))
            for sub, served in (("status", rt.status_subresource), ("scale", rt.scale_subresource)):
                if served:
                    handler = self._handler(rt, named=True, sub=sub)
                    app.router.add_route("*", f"{base}/{{name}}/{sub}", handler)
        # Anything else is a Status 404, not aiohttp's plain-text page.
        app.router.add_route("*", "/{tail:.*}", self._not_found)
        return app

    # -- plumbing ------------------------------------------------------------

    def _document(self, make: Callable[[web.Request], Any], joulie: bool = False) -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            starting = self._while_starting() if joulie else None
            if starting is not None:
                return starting
            body = make(request)
            if body is None:  # a group that is not installed
                return await self._not_found(request)
            return _json(body)

        return handler

    @staticmethod
    async def _ok(request: web.Request) -> web.StreamResponse:
        return web.Response(text="ok")

    async def _readyz(self, request: web.Request) -> web.StreamResponse:
        phase = self._starting()
        if phase is None:
            return web.Response(text="ok")
        return web.Response(status=500, text=STARTING_PHASES[phase])

    def _while_starting(self) -> web.StreamResponse | None:
        """A ``joulie.io`` path's answer in a phase of the server's start; None: served."""
        phase = self._starting()
        if phase == "crd-informer":
            return error_response(
                ApiError(503, "ServiceUnavailable", "server is starting", retry_after=10)
            )
        if phase == "crd-discovery":
            return error_response(
                ApiError(404, "NotFound", "the server could not find the requested resource")
            )
        return None

    @staticmethod
    async def _not_found(request: web.Request) -> web.StreamResponse:
        return error_response(
            ApiError(404, "NotFound", "the server could not find the requested resource")
        )

    async def _on_shutdown(self, app: web.Application) -> None:
        # Open watches and hung requests would otherwise hold stop() for the
        # whole shutdown timeout.
        self._stopping.set()
        for watcher in list(self._watchers):
            watcher.end()

    async def _pause(self, seconds: float | None) -> None:
        """Sleep ``seconds`` (None: forever), cut short when the server stops."""
        with contextlib.suppress(TimeoutError):
            await asyncio.wait_for(self._stopping.wait(), seconds)

    @staticmethod
    def _verb(method: str, named: bool, query: Mapping[str, str]) -> str | None:
        if method == "GET":
            if named:
                return "get"
            # The Python client sends watch=True; kubectl watch=true; some 1.
            return "watch" if query.get("watch", "").lower() in ("true", "1") else "list"
        if method == "POST":
            return None if named else "create"
        verbs = {"PUT": "update", "PATCH": "patch", "DELETE": "delete"}
        # Collection-wide PUT/PATCH/DELETE (deletecollection) are not served.
        return verbs.get(method) if named else None

    def _handler(self, rt: ResourceType, *, named: bool, sub: str = "") -> Handler:
        async def handler(request: web.Request) -> web.StreamResponse:
            if rt not in self._served():  # as a cluster without that CRD installed
                return await self._not_found(request)
            starting = self._while_starting() if rt.group == resources.JOULIE_GROUP else None
            if starting is not None:
                return starting
            verb = self._verb(request.method, named, request.query)
            if rt.namespaced and "namespace" not in request.match_info and verb not in (
                "list", "watch",
            ):
                verb = None  # creating needs a namespace in the URL
            if verb is None or (sub and verb not in ("get", "update", "patch")):
                return error_response(ApiError(
                    405, "MethodNotAllowed",
                    f"the server does not allow this method on the requested resource "
                    f"({request.method})",
                ))
            name = request.match_info.get("name")
            self._counters.request(verb, f"{rt.plural}/{sub}" if sub else rt.plural)
            rule = self._faults.take(verb, rt.plural, sub, name)
            try:
                if rule is not None:
                    faulted = await self._fault(request, rule, verb)
                    if faulted is not None:
                        return faulted
                return await self._serve(request, rt, verb, name, sub)
            except ApiError as exc:
                return error_response(exc)

        return handler

    async def _fault(
        self, request: web.Request, rule: FaultRule, verb: str
    ) -> web.StreamResponse | None:
        """Answer ``request`` as ``rule`` says; None when it may proceed afterwards."""
        if rule.kind is FaultKind.SLOW:
            await self._pause(0.5 if rule.delay is None else rule.delay)
            return None
        if rule.kind is FaultKind.HANG:
            await self._pause(rule.delay)
            _drop(request)
        if rule.kind is FaultKind.DROP:
            _drop(request)
        retry_after = rule.retry_after
        if retry_after is None and rule.code == 429:
            retry_after = 1
        if verb == "watch" and rule.code == 410:
            gone = GoneError("too old resource version (injected fault)")
            return await self._stream_error(request, gone)
        reason = reason_for(rule.code)
        error = ApiError(
            rule.code, reason, f"injected fault: {rule.code} {reason}", retry_after=retry_after
        )
        return error_response(error)

    # -- verbs ---------------------------------------------------------------

    async def _serve(
        self, request: web.Request, rt: ResourceType, verb: str, name: str | None, sub: str
    ) -> web.StreamResponse:
        query = request.query
        namespace = request.match_info.get("namespace")
        if verb in ("watch", "list"):
            flt = ObjectFilter.parse(query.get("labelSelector"), query.get("fieldSelector"))
            if namespace:
                flt = flt.in_namespace(namespace)
        if verb == "watch":
            return await self._watch(request, rt, flt, _since(query), query.get("timeoutSeconds"))
        if verb == "list":
            items, rv = self._store.list_objects(rt, flt)
            return _json({
                "kind": rt.list_kind, "apiVersion": rt.api_version,
                "metadata": {"resourceVersion": str(rv)}, "items": items,
            })
        if verb == "create":
            return _json(self._store.create(rt, await _object_body(request), namespace), 201)
        assert name is not None  # the remaining verbs are on named routes
        if sub == "scale":
            return await self._scale(request, rt, verb, name, namespace)
        if verb == "get":
            return _json(self._store.get(rt, name, namespace))
        if verb == "update":
            body = await _object_body(request)
            return _json(self._store.update(
                rt, name, lambda _current: body, sub or None, namespace,
            ))
        if verb == "patch":
            patch = await _body(request)
            content_type = request.headers.get("Content-Type", "")
            return _json(self._store.update(
                rt, name, lambda current: apply_patch(content_type, current, patch), sub or None,
                namespace,
            ))
        options = await _body(request) or {}
        preconditions = options.get("preconditions") or {} if isinstance(options, dict) else {}
        return _json(self._store.delete(
            rt, name, preconditions.get("resourceVersion"), preconditions.get("uid"), namespace,
        ))

    async def _scale(
        self, request: web.Request, rt: ResourceType, verb: str, name: str, namespace: str | None,
    ) -> web.StreamResponse:
        """``/scale``: an ``autoscaling/v1`` Scale read from and written to ``spec.replicas``."""
        if verb == "get":
            return _json(to_scale(self._store.get(rt, name, namespace)))
        body = await _body(request)
        content_type = request.headers.get("Content-Type", "")

        def compute(current: KubeObject) -> KubeObject:
            scale = body if verb == "update" else apply_patch(content_type, to_scale(current), body)
            return apply_scale(current, scale)

        return _json(to_scale(self._store.update(rt, name, compute, None, namespace)))

    async def _stream_error(self, request: web.Request, error: ApiError) -> web.StreamResponse:
        """A watch that ends at once with an ERROR event, as the apiserver sends 410s."""
        response = await self._open_stream(request)
        await response.write(encode({"type": "ERROR", "object": error.status()}))
        await response.write_eof()
        return response

    @staticmethod
    async def _open_stream(request: web.Request) -> web.StreamResponse:
        response = web.StreamResponse(headers={"Content-Type": "application/json"})
        response.enable_chunked_encoding()
        await response.prepare(request)
        return response

    async def _watch(
        self, request: web.Request, rt: ResourceType, flt: ObjectFilter, since: int | None,
        timeout_seconds: str | None,
    ) -> web.StreamResponse:
        try:
            timeout = float(timeout_seconds) if timeout_seconds else self._default_watch_timeout
        except ValueError:
            raise BadRequestError(f"invalid timeoutSeconds {timeout_seconds!r}") from None
        loop = asyncio.get_running_loop()
        watcher = Watcher(rt, flt, loop)
        try:
            initial = self._store.subscribe(rt, since, watcher)
        except GoneError as exc:
            return await self._stream_error(request, exc)
        self._watchers.add(watcher)
        self._counters.watch_opened(rt.plural)
        response: web.StreamResponse | None = None
        try:
            response = await self._open_stream(request)
            for event in initial:
                if (out := translate(event, flt)) is not None:
                    await response.write(encode(out))
            deadline = loop.time() + timeout
            while (remaining := deadline - loop.time()) > 0 and not self._stopping.is_set():
                live = await watcher.next(min(remaining, DISCONNECT_POLL))
                if live is None:
                    if watcher.ended or request.transport is None or request.transport.is_closing():
                        break
                    continue
                if (out := translate(live, flt)) is not None:
                    await response.write(encode(out))
            await response.write_eof()
        except ConnectionError:
            pass  # the client went away mid-write (aiohttp's reset error is a ConnectionError)
        finally:
            self._store.unsubscribe(rt, watcher)
            self._watchers.discard(watcher)
            self._counters.watch_closed(rt.plural)
        if response is None:
            _drop(request)  # the client left before the stream even started
        return response
