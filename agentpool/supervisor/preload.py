"""Imported by the fork server only: load everything a worker needs, warm it, then freeze.

``gc.freeze()`` moves every object allocated so far to a permanent
generation the collector never scans, so a forked worker's garbage
collections do not touch (and copy-on-write duplicate) the shared pages.
Never import this from the supervisor itself.

What a worker would otherwise do for itself, once per process, is done here
once for all of them: import ``encodings.idna`` (http.client encodes the host
name with it on the first request, pulling in ``stringprep`` and
``unicodedata``), and run the HTTP client's parsing and request-building
code on canned bytes, so its caches are filled and its bytecode is already
specialised when the workers fork; then drive throwaway node controllers
through every tick path (:mod:`agentpool.supervisor.warmup`). What that
saves: BENCHMARKS.md. Best effort: a failure here only costs that memory.
"""

import encodings.idna  # noqa: F401 - see the module docstring
import gc

import agentpool.controller.node
import agentpool.metrics
import agentpool.supervisor.worker_process  # noqa: F401 - imported for its side effect of loading

WARM_ROUNDS = 20
"""More than CPython's warm-up threshold, so the exercised code is specialised."""


def _warm_http_client() -> None:
    import io
    import json
    import urllib.request
    from datetime import UTC, datetime
    from http.client import HTTPResponse

    class _CannedSocket:
        def __init__(self, data: bytes) -> None:
            self._file = io.BytesIO(data)

        def makefile(self, mode: str) -> io.BytesIO:
            return self._file

    body = json.dumps({"result": "applied", "message": "ok", "state": {"capWatts": 1.0}})
    raw = (
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: "
        + str(len(body)).encode()
        + b"\r\nDate: x\r\nServer: y\r\n\r\n"
        + body.encode()
    )
    for _ in range(WARM_ROUNDS):
        response = HTTPResponse(_CannedSocket(raw), method="POST")  # type: ignore[arg-type]
        response.begin()
        json.loads(response.read())
        response.close()
        urllib.request.Request(
            "http://127.0.0.1:1/control/warm-up",
            data=b"{}",
            method="POST",
            headers={"Content-Type": "application/json"},
        )
        urllib.request.build_opener()
        now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        json.dumps({"node": "warm-up", "capWatts": 1.0, "throttlePct": -1, "ts": now})
        "127.0.0.1".encode("idna")


try:
    _warm_http_client()
except Exception:  # best effort: never keep the fork server from starting
    pass
try:
    from agentpool.supervisor.warmup import warm_up

    warm_up()
except Exception:  # best effort, as above
    pass

gc.collect()
gc.freeze()
