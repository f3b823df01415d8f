"""ClusterApi.wipe on a collection too large to delete within the server's timeout.

A real kube-apiserver answers such a DELETE 504 only with tens of thousands of
objects (10,000 Nodes: a benchmark's clean-up), so a small HTTP server stands in
for it here: it answers discovery, counts a collection as the real one does
(``limit=1``, ``remainingItemCount``) and deletes part of it on each DELETE,
answering 504 until the last part, as the real one does when its timeout ends a
delete part way.
"""

from __future__ import annotations

import ssl
import threading
from collections.abc import Iterator
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import pytest

from agentpool.sim.apiserver.errors import ApiError
from agentpool.sim.clusterapi import ClusterApi
from tests.support.jsonanswer import send_json

NODES = {"kind": "APIResourceList", "groupVersion": "v1", "resources": [
    {"name": "nodes", "kind": "Node", "namespaced": False, "singularName": "node"}]}


class Collection:
    """How many Nodes are left, how many each DELETE removes, and the DELETEs seen."""

    def __init__(self, nodes: int, per_delete: int, refuse: int | None = None) -> None:
        self.nodes = nodes
        self.per_delete = per_delete
        self.refuse = refuse
        self.deletes = 0


def _status(code: int, reason: str) -> dict[str, Any]:
    return {"kind": "Status", "apiVersion": "v1", "status": "Failure", "code": code,
            "reason": reason, "message": f"{reason} (stand-in)"}


def _handler(state: Collection) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def _answer(self, code: int, body: dict[str, Any]) -> None:
            send_json(self, code, body)

        def do_GET(self) -> None:
            if self.path == "/apis":
                self._answer(200, {"kind": "APIGroupList", "groups": []})
            elif self.path == "/api/v1":
                self._answer(200, NODES)
            elif self.path == "/api/v1/nodes?limit=1":
                items = [{"metadata": {"name": "n"}}] if state.nodes else []
                meta = {"remainingItemCount": state.nodes - 1} if state.nodes > 1 else {}
                self._answer(200, {"kind": "NodeList", "metadata": meta, "items": items})
            else:
                self._answer(404, _status(404, "NotFound"))

        def do_DELETE(self) -> None:
            state.deletes += 1
            if state.refuse is not None:
                self._answer(state.refuse, _status(state.refuse, "Forbidden"))
                return
            state.nodes = max(0, state.nodes - state.per_delete)
            if state.nodes:
                self._answer(504, _status(504, "Timeout"))
            else:
                self._answer(200, {"kind": "NodeList", "metadata": {}, "items": []})

        def log_message(self, *args: Any) -> None:
            pass

    return Handler


@pytest.fixture
def served() -> Iterator[tuple[ClusterApi, Collection]]:
    state = Collection(0, 0)
    server = ThreadingHTTPServer(("127.0.0.1", 0), _handler(state))
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        url = f"http://127.0.0.1:{server.server_address[1]}"
        yield ClusterApi(url, "admin-token", ssl.create_default_context()), state
    finally:
        server.shutdown()
        server.server_close()


def test_a_delete_cut_short_by_the_servers_timeout_is_sent_again_until_the_kind_is_empty(
    served: tuple[ClusterApi, Collection],
) -> None:
    api, state = served
    state.nodes, state.per_delete = 10_000, 4_000
    api.wipe(["nodes"])
    assert (state.nodes, state.deletes) == (0, 3)


def test_a_delete_that_times_out_without_progress_is_not_sent_forever(
    served: tuple[ClusterApi, Collection],
) -> None:
    api, state = served
    state.nodes, state.per_delete = 10_000, 0
    with pytest.raises(ApiError) as raised:
        api.wipe(["nodes"])
    assert raised.value.code == 504
    assert state.deletes == 2  # the second try found as many left as the first


def test_any_other_refusal_is_raised_at_once(served: tuple[ClusterApi, Collection]) -> None:
    api, state = served
    state.nodes, state.refuse = 10, 403
    with pytest.raises(ApiError) as raised:
        api.wipe(["nodes"])
    assert (raised.value.code, state.deletes, state.nodes) == (403, 1, 10)
