"""HTTP telemetry and control answers: any status, header and body gives a reading, no
reading, or an HttpBackendError, within the endpoint's timeout; never another exception,
never a hang, never a cap written from a bad reading.

The endpoint is a raw TCP server (tests/support/rawhttp.py) that sends
whatever bytes the example says, in slow pieces or held open. Where the
answer is well-formed HTTP, the result is also checked against the body
decoded by the test itself.
"""

from __future__ import annotations

import json
import math
import time
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.backends import cpu_http, gpu_http, httpclient
from agentpool.errors import HttpBackendError
from agentpool.resources.routing import HttpEndpoint
from agentpool.results import Result
from tests.properties.strategies import json_values
from tests.support.budget import examples
from tests.support.rawhttp import OVERRUN_S, Answer, RawServer

TIMEOUT_S = 0.25
MAX_MESSAGE = 600
MAX_STATE_BYTES = 4096
NODE = "worker-0"

STATUS_LINES = st.one_of(
    st.builds(
        "HTTP/1.1 {} {}".format,
        st.sampled_from([200, 200, 201, 204, 299, 300, 302, 400, 401, 403, 404, 429, 500, 503,
                         100, 999, 0]),
        st.sampled_from(["OK", "X", ""]),
    ),
    st.sampled_from(["HTTP/1.0 200 OK", "HTTP/1.1 abc X", "garbage", "", "HTTP/1.1 200",
                     "HTTP/2 200 OK", "ICY 200 OK", "HTTP/1.1 -200 OK"]),
)
EXTRA_HEADERS = st.lists(
    st.sampled_from([
        "Content-Type: application/json", "Content-Type: text/html; charset=latin-1",
        "Content-Type: application/json; charset=utf-16", "Connection: keep-alive",
        "X-Long: " + "a" * 70_000, "a header line without a colon", "Location: http://elsewhere/",
        "Content-Encoding: gzip", ": empty name",
    ]),
    max_size=3,
)  # fmt: skip
GPU_KEYS = ("present", "vendor", "count", "powerWattsTotal", "capWattsPerGpuApplied",
            "minCapWattsPerGpu", "maxCapWattsPerGpu", "defaultCapWattsPerGpu")
FRAMINGS = ("length", "length", "short", "long", "junk-length", "negative", "chunked",
            "bad-chunked", "close", "two-lengths")


def telemetry_documents() -> st.SearchStrategy[Any]:
    reading = json_values
    return st.one_of(
        st.fixed_dictionaries({"packagePowerWatts": reading}),
        st.fixed_dictionaries({"cpu": st.fixed_dictionaries({"packagePowerWatts": reading})}),
        st.fixed_dictionaries(
            {"packagePowerWatts": reading, "cpu": st.one_of(
                st.fixed_dictionaries({"packagePowerWatts": reading,
                                       "packagePowerMaxWatts": reading}), json_values)}
        ),
        st.fixed_dictionaries({"gpu": st.one_of(json_values, st.fixed_dictionaries(
            dict.fromkeys(GPU_KEYS, json_values)))}),
        json_values,
    )


def control_documents() -> st.SearchStrategy[Any]:
    return st.one_of(
        st.fixed_dictionaries(
            {},
            optional={
                "result": st.sampled_from(["applied", "blocked", "error", "none", "APPLIED", ""])
                | json_values,
                "message": json_values | st.integers(10_000, 100_000).map(lambda n: "m" * n),
                "state": json_values,
            },
        ),
        json_values,
    )


def encode(document: Any) -> bytes:
    text = json.dumps(document)  # NaN, Infinity and huge integers as Python writes them
    return text.encode()


def bodies(documents: st.SearchStrategy[Any]) -> st.SearchStrategy[bytes]:
    return st.one_of(
        documents.map(encode),
        documents.map(encode).flatmap(lambda b: st.integers(0, len(b)).map(lambda n: b[:n])),
        st.sampled_from([b"", b"{", b"null", b"[]", b"1e400", b'{"packagePowerWatts": 1e400}',
                         b'{"packagePowerWatts": -1e400}', b"\xff\xfe{}", b"{}" * 3,
                         b'{"cpu": {"packagePowerWatts": 12}}\x00',
                         b'{"packagePowerWatts": 1' + b"0" * 400 + b"}"]),
        st.binary(max_size=64),
        st.just(b"[" + b"1," * 600_000 + b"1]"),  # more than the 1 MiB the client reads
    )


@st.composite
def answers(draw: st.DrawFn, documents: st.SearchStrategy[Any]) -> tuple[Answer, bytes | None]:
    """A raw answer, and the body it carries when it is well-formed HTTP (else None)."""
    status = draw(STATUS_LINES)
    body = draw(bodies(documents))
    framing = draw(st.sampled_from(FRAMINGS))
    headers = draw(EXTRA_HEADERS)
    if draw(st.integers(0, 9)) == 0:
        headers = headers + [f"X-{i}: {i}" for i in range(150)]  # more than http.client takes
    payload = body
    if framing == "length":
        headers.append(f"Content-Length: {len(body)}")
    elif framing == "short":
        headers.append(f"Content-Length: {max(0, len(body) - 3)}")
    elif framing == "long":
        headers.append(f"Content-Length: {len(body) + 10}")
    elif framing == "junk-length":
        headers.append("Content-Length: twelve")
    elif framing == "negative":
        headers.append("Content-Length: -5")
    elif framing == "two-lengths":
        headers += [f"Content-Length: {len(body)}", f"Content-Length: {len(body) + 1}"]
    elif framing in ("chunked", "bad-chunked"):
        headers.append("Transfer-Encoding: chunked")
        size = f"{len(body):x}" if framing == "chunked" else "zz"
        payload = f"{size}\r\n".encode() + body + b"\r\n0\r\n\r\n"
    else:  # close: the end of the body is the end of the connection
        headers.append("Connection: close")
    data = (status + "\r\n" + "".join(h + "\r\n" for h in headers) + "\r\n").encode() + payload
    drip = draw(st.booleans())
    hold = draw(st.integers(0, 4)) == 0
    answer = Answer(
        data,
        pieces=draw(st.integers(2, 24)) if drip else 1,
        delay_s=0.2 if drip else 0.0,  # 24 pieces of it outlast timeout + OVERRUN_S
        hold=hold or framing in ("long", "close"),  # a 'close' answer that never closes, too
    )
    code = status.split(" ")[1] if status.startswith("HTTP/1.") and status.count(" ") >= 1 else ""
    clean = (
        answer.pieces * answer.delay_s <= TIMEOUT_S / 2  # it all arrives well in time
        and framing == "length"
        and code.isdigit()
        and 200 <= int(code) <= 599
        and int(code) not in (204, 304)
        and len(status.split(" ")) >= 3
        and not any(h.startswith(("X-Long", "a header", ": empty", "Content-Encoding"))
                    for h in headers)
        and len(headers) < 50
    )
    return answer, body if clean else None


def _status(answer: Answer) -> int:
    return int(answer.data.split(b" ", 2)[1])


def finite_json(value: Any) -> bool:
    try:
        json.dumps(value, allow_nan=False)
    except (ValueError, TypeError):
        return False
    return True


def expected_reading(body: bytes) -> tuple[str, float | None]:
    """What the contract makes of a 2xx body: ('reading', watts), ('none', None) or
    ('error', None). Decoded here, with the standard library, not with the agent's code."""
    try:
        doc = json.loads(body)
    except ValueError:
        return "error", None
    if not isinstance(doc, dict):
        return "error", None
    cpu = doc.get("cpu")
    value = cpu.get("packagePowerWatts") if isinstance(cpu, dict) else None
    if value is None:
        value = doc.get("packagePowerWatts")
    if value is None:
        return "none", None
    if (isinstance(value, bool) or not isinstance(value, int | float)
            or not -1.8e308 < value < 1.8e308 or math.isnan(value) or value < 0):
        return "error", None
    return "reading", float(value)


def timed(call: Any) -> tuple[Any, BaseException | None, float]:
    httpclient.close_connections()  # each example on a fresh connection
    started = time.monotonic()
    try:
        return call(), None, time.monotonic() - started
    except HttpBackendError as exc:
        return None, exc, time.monotonic() - started


@settings(max_examples=examples(50))
@given(case=answers(telemetry_documents()))
def test_any_telemetry_answer_is_a_reading_no_reading_or_an_error(
    case: tuple[Answer, bytes | None],
) -> None:
    answer, clean_body = case
    with RawServer(answer) as server:
        endpoint = HttpEndpoint(server.url, TIMEOUT_S)
        value, error, elapsed = timed(lambda: cpu_http.read_package_power(endpoint, NODE))
    assert elapsed <= TIMEOUT_S + OVERRUN_S, elapsed
    if error is None:
        assert value is None or (isinstance(value, float) and math.isfinite(value))
        assert value is None or value >= 0, value
    else:
        assert len(str(error)) <= MAX_MESSAGE + len(endpoint.url(NODE))
    if clean_body is not None:
        code = _status(answer)
        if not 200 <= code < 300:
            assert error is not None
            assert error.status == code  # type: ignore[attr-defined]
            return
        kind, watts = expected_reading(clean_body)
        if kind == "error" or len(clean_body) > httpclient.MAX_BODY_BYTES:
            assert error is not None, (clean_body[:80], value)
        else:
            assert error is None, (clean_body[:80], error)
            assert value == watts


@settings(max_examples=examples(50))
@given(
    case=answers(control_documents()),
    cap=st.one_of(st.sampled_from([1.0, 120.0, 1e308]), st.floats(1, 1e308)),
    throttle=st.integers(-1, 100),
)
def test_any_control_answer_is_honoured_or_an_error_and_the_request_is_finite_json(
    case: tuple[Answer, bytes | None], cap: float, throttle: int
) -> None:
    answer, clean_body = case
    with RawServer(answer) as server:
        endpoint = HttpEndpoint(server.url, TIMEOUT_S)
        got, error, elapsed = timed(lambda: cpu_http.post_control(
            endpoint, NODE, cpu_http.RAPL_ACTION, cap, throttle))
        requests = list(server.requests)
    assert elapsed <= TIMEOUT_S + OVERRUN_S, elapsed
    for request in requests:  # what the agent sent: JSON with finite numbers only
        body = json.loads(request.partition(b"\r\n\r\n")[2],
                          parse_constant=lambda c: (_ for _ in ()).throw(ValueError(c)))
        assert body["capWatts"] == cap
        assert body["throttlePct"] == throttle
    if error is not None:
        return
    assert got.result in (Result.APPLIED, Result.BLOCKED, Result.ERROR)
    assert isinstance(got.message, str)
    assert len(got.message) <= MAX_MESSAGE
    assert isinstance(got.state, dict)
    assert finite_json(got.state)
    assert len(json.dumps(got.state)) <= MAX_STATE_BYTES
    if clean_body is not None and 200 <= _status(answer) < 300:
        try:
            doc = json.loads(clean_body)
        except ValueError:
            doc = None
        if isinstance(doc, dict) and doc.get("result") in ("blocked", "error"):
            assert got.result.value == doc["result"]


@settings(max_examples=examples(30))
@given(case=answers(telemetry_documents()))
def test_any_gpu_telemetry_answer_is_finite_readings_none_or_an_error(
    case: tuple[Answer, bytes | None],
) -> None:
    answer, _ = case
    with RawServer(answer) as server:
        endpoint = HttpEndpoint(server.url, TIMEOUT_S)
        got, error, elapsed = timed(lambda: gpu_http.read_gpu_telemetry(endpoint, NODE))
        maximum, _, elapsed_max = timed(lambda: cpu_http.read_cpu_maximum(endpoint, NODE))
    assert elapsed <= TIMEOUT_S + OVERRUN_S, elapsed
    assert elapsed_max <= TIMEOUT_S + OVERRUN_S, elapsed_max
    assert maximum is None or (math.isfinite(maximum) and maximum > 0)
    if error is not None or got is None:
        return
    assert got.count is None or (isinstance(got.count, int) and 0 <= got.count < 2**31)
    for watts in (got.power_watts_total, got.avg_power_watts_total, got.cap_applied,
                  got.cap_target, got.min_cap, got.max_cap, got.default_cap):
        assert watts is None or (math.isfinite(watts) and watts >= 0), watts


@settings(max_examples=examples(30))
@given(case=answers(control_documents()), watts=st.floats(1e-300, 1e308))
def test_any_gpu_control_answer_is_honoured_or_an_error(
    case: tuple[Answer, bytes | None], watts: float
) -> None:
    answer, _ = case
    with RawServer(answer) as server:
        endpoint = HttpEndpoint(server.url, TIMEOUT_S)
        got, error, elapsed = timed(lambda: gpu_http.post_gpu_cap(endpoint, NODE, watts))
    assert elapsed <= TIMEOUT_S + OVERRUN_S, elapsed
    if error is None:
        assert got.result in (Result.APPLIED, Result.BLOCKED, Result.ERROR)
        assert len(got.message) <= MAX_MESSAGE
        assert finite_json(got.state)
