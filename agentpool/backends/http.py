"""The Joulie HTTP telemetry/control protocol, as a client.

Telemetry: ``GET`` -> JSON with ``packagePowerWatts`` under ``cpu`` or at top
level (the ``cpu`` one wins: on GPU nodes the top level is CPU + GPU).
Control: ``POST`` ``{"node", "action", "capWatts", "throttlePct", "ts"}``; a 2xx
JSON answer may carry ``result``/``message``/``state``.

Uses the standard library's urllib: each call is one short request from a
worker process that owns a single node, so a connection pool would buy
nothing, and the worker stays small. Bodies are read up to a bound so a
misbehaving endpoint cannot balloon a worker's memory.

Every request says who sent it: ``User-Agent: agentpool/<version> (<pod
name>, shard <id>)`` (:func:`user_agent`), so a BMC gateway's or the
simulator's log shows which pool pod acted on a node.
"""

from __future__ import annotations

import json
import math
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from agentpool import __version__
from agentpool.backends.httpauth import HttpAuth, HttpAuthSettings
from agentpool.errors import HttpBackendError
from agentpool.model import HttpEndpoint, Result

MAX_BODY_BYTES = 1 << 20
RAPL_ACTION = "rapl.set_power_cap_watts"
DVFS_ACTION = "dvfs.set_throttle_pct"


DEFAULT_USER_AGENT = f"agentpool/{__version__}"


def user_agent(pod_name: str, shard_id: int) -> str:
    """The User-Agent of every telemetry and control request of this pod."""
    return f"{DEFAULT_USER_AGENT} ({pod_name}, shard {shard_id})"


@dataclass(frozen=True)
class ControlAnswer:
    result: Result
    message: str
    state: dict[str, Any] = field(default_factory=dict)


def _now_rfc3339() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


_auth = HttpAuth(HttpAuthSettings())
"""The credentials of this process's requests (one worker, one node): see :func:`configure`."""


def configure(settings: HttpAuthSettings) -> None:
    """Use these credentials for every later request of this process."""
    global _auth
    if settings != _auth.settings:
        _auth = HttpAuth(settings)


def _refusal(code: int) -> str:
    what = "not authenticated" if code == 401 else "not allowed"
    return f"refused the agent's credentials ({what}: check HTTP_TOKEN_FILE and the client cert)"


def _exchange(request: urllib.request.Request, timeout: float) -> bytes:
    url = request.full_url
    for name, value in _auth.headers(url).items():
        request.add_unredirected_header(name, value)  # never forwarded on a redirect
    try:
        context = _auth.context(url)
        with urllib.request.urlopen(request, timeout=timeout, context=context) as response:
            body: bytes = response.read(MAX_BODY_BYTES + 1)
    except urllib.error.HTTPError as exc:
        exc.close()
        problem = f"HTTP {exc.code} {exc.reason}"
        if exc.code in (401, 403):
            problem += f": {_refusal(exc.code)}"
        raise HttpBackendError(url, problem, status=exc.code) from exc
    except TimeoutError as exc:
        raise HttpBackendError(url, f"timed out after {timeout:g}s") from exc
    except urllib.error.URLError as exc:
        if isinstance(exc.reason, TimeoutError):  # a connect timeout arrives wrapped
            raise HttpBackendError(url, f"timed out after {timeout:g}s") from exc
        raise HttpBackendError(url, f"unreachable: {exc.reason}") from exc
    except (OSError, ValueError) as exc:  # reset mid-body, malformed URL...
        raise HttpBackendError(url, f"request failed: {exc}") from exc
    if len(body) > MAX_BODY_BYTES:
        raise HttpBackendError(url, f"answer larger than {MAX_BODY_BYTES} bytes")
    return body


def _json(url: str, body: bytes) -> Any:
    try:
        return json.loads(body)
    except ValueError as exc:
        snippet = body[:60].decode("utf-8", "replace")
        raise HttpBackendError(url, f"answer is not JSON: {snippet!r}") from exc


def _telemetry(
    endpoint: HttpEndpoint, node: str, agent: str = DEFAULT_USER_AGENT
) -> tuple[str, dict[str, Any]]:
    url = endpoint.url(node)
    request = urllib.request.Request(
        url, headers={"Accept": "application/json", "User-Agent": agent}
    )
    payload = _json(url, _exchange(request, endpoint.timeout_s))
    if not isinstance(payload, dict):
        raise HttpBackendError(url, "answer is not a JSON object")
    return url, payload


def read_cpu_maximum(
    endpoint: HttpEndpoint, node: str, agent: str = DEFAULT_USER_AGENT
) -> float | None:
    """The node's CPU package maximum, ``cpu.packagePowerMaxWatts`` of the telemetry.

    None when the answer does not carry a positive number: the agent never guesses one.
    """
    _, payload = _telemetry(endpoint, node, agent)
    cpu = payload.get("cpu")
    value = cpu.get("packagePowerMaxWatts") if isinstance(cpu, dict) else None
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    return float(value) if math.isfinite(value) and value > 0 else None


def read_package_power(
    endpoint: HttpEndpoint, node: str, agent: str = DEFAULT_USER_AGENT
) -> float | None:
    """Watts from the telemetry endpoint; None when the answer has no reading."""
    url, payload = _telemetry(endpoint, node, agent)
    # On a GPU node the top-level reading is CPU + GPU (Joulie's simulator), so the
    # CPU's own reading wins when the answer has one.
    cpu = payload.get("cpu")
    value = cpu.get("packagePowerWatts") if isinstance(cpu, dict) else None
    if value is None:
        value = payload.get("packagePowerWatts")
    if value is None:
        return None
    # json.loads accepts NaN and Infinity; one such reading would poison the DVFS EMA
    # for good (every comparison with NaN is false), so they are refused like any non-number.
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise HttpBackendError(url, f"packagePowerWatts is not a number: {value!r}")
    return float(value)


def post_control(
    endpoint: HttpEndpoint,
    node: str,
    action: str,
    cap_watts: float,
    throttle_pct: int,
    agent: str = DEFAULT_USER_AGENT,
) -> ControlAnswer:
    """POST one control action; honours ``result``/``message`` in a JSON answer."""
    url = endpoint.url(node)
    body = json.dumps(
        {
            "node": node,
            "action": action,
            "capWatts": cap_watts,
            "throttlePct": throttle_pct,
            "ts": _now_rfc3339(),
        }
    ).encode()
    request = urllib.request.Request(
        url, data=body, method="POST",
        headers={"Content-Type": "application/json", "User-Agent": agent},
    )
    return parse_answer(url, action, _exchange(request, endpoint.timeout_s))


def parse_answer(url: str, action: str, raw: bytes) -> ControlAnswer:
    """A control answer: empty or non-object bodies mean accepted; ``result`` is honoured."""
    if not raw.strip():
        return ControlAnswer(Result.APPLIED, f"{action} accepted")
    payload = _json(url, raw)
    if not isinstance(payload, dict):
        return ControlAnswer(Result.APPLIED, f"{action} accepted")
    raw_result = payload.get("result", Result.APPLIED.value)
    try:
        result = Result(raw_result)
    except ValueError:
        raise HttpBackendError(url, f"unknown result {raw_result!r} in answer") from None
    if result is Result.NONE:
        result = Result.APPLIED
    message = str(payload.get("message") or f"{action} {result.value}")
    state = payload.get("state")
    return ControlAnswer(result, message, state if isinstance(state, dict) else {})
