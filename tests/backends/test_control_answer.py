"""A control request's body and a control answer's state (backends/httpclient.py), on the
paths a steady tick takes: the body encoded once while only its ``ts`` changes, a state
kept by the answer's text alone when nothing in it can grow past the bound or fail to
store. Each fast path must agree with the exact one it stands in for."""

from __future__ import annotations

import json
import re
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from agentpool.backends import httpclient
from agentpool.backends.httpclient import (
    MAX_STATE_BYTES,
    _action_body,
    _portable_json,
    _state_kept,
    _suspect,
    parse_answer,
)
from agentpool.durations import utc_timestamp
from agentpool.results import Result
from tests.support.budget import examples

TS = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z")


def exact_kept(state: dict[str, object]) -> bool:
    encoded = _portable_json(state)
    return bool(encoded) and len(encoded) <= MAX_STATE_BYTES


def test_the_body_is_the_request_json_whatever_changed_since_the_last() -> None:
    ts = utc_timestamp(micro=True)
    assert TS.fullmatch(ts), ts
    cases: list[tuple[str, str, dict[str, Any]]] = [
        ("n1", "rapl.set_power_cap_watts", {"capWatts": 120.0, "throttlePct": -1}),
        ("n1", "rapl.set_power_cap_watts", {"capWatts": 120.0, "throttlePct": -1}),
        ("n1", "rapl.set_power_cap_watts", {"capWatts": 95.5, "throttlePct": -1}),
        ("n1", "dvfs.set_throttle_pct", {"capWatts": 95.5, "throttlePct": 30}),
        ("n1", "dvfs.set_throttle_pct", {"capWatts": 95, "throttlePct": True}),  # equal, unlike
        ("n\u00e9-\"2\"", "gpu.set_power_cap_watts", {"capWattsPerGpu": 1e308, "gpus": [0, 1]}),
    ]
    for node, action, fields in cases:
        body = _action_body(node, action, fields, ts)
        assert json.loads(body) == {"node": node, "action": action, **fields, "ts": ts}
        assert body == json.dumps({"node": node, "action": action, **fields, "ts": ts}).encode()


def test_the_timestamp_is_now_to_the_microsecond_across_seconds() -> None:
    from datetime import UTC, datetime

    for _ in range(3):
        before = datetime.now(UTC)
        got = datetime.strptime(utc_timestamp(micro=True), "%Y-%m-%dT%H:%M:%S.%fZ")
        after = datetime.now(UTC)
        assert before.replace(tzinfo=None) <= got <= after.replace(tzinfo=None)
        seconds = datetime.strptime(utc_timestamp(), "%Y-%m-%dT%H:%M:%SZ")
        assert abs((seconds - got.replace(microsecond=0)).total_seconds()) <= 1


def test_a_steady_answer_keeps_its_state_without_encoding_it_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    raw = (b'{"result":"applied","message":"RAPL cap set to 120 W","state":{"capWatts":120.0,'
           b'"throttlePct":0.0,"packagePowerWatts":118.25,"gpuCapWattsPerGpuApplied":null}}')
    encodings: list[object] = []

    def counted(state: dict[str, object]) -> str:
        encodings.append(state)
        return json.dumps(state)

    monkeypatch.setattr(httpclient, "_portable_json", counted)
    got = parse_answer("http://x/n", "rapl.set_power_cap_watts", raw)
    assert got.result is Result.APPLIED
    assert got.state == json.loads(raw)["state"]
    assert encodings == []  # the answer's text alone decided it


def test_values_a_status_cannot_store_are_always_looked_at() -> None:
    for text in (b'{"a": NaN}', b'{"a": -Infinity}', b'{"a": 1e999}', b'{"a": 1E+308}',
                 b'{"a": 9223372036854775808}', b'{"a": 1234567890123456789.5}'):
        assert _suspect(text), text
    assert not _suspect(b'{"a": 1e15, "b": -12.5e-7, "c": "Infinite"}')
    assert not _state_kept(json.loads(b'{"a": 1e999}'), b'{"a": 1e999}')
    big = {"a": 9223372036854775808}
    assert not _state_kept(big, json.dumps(big).encode())
    # The text that grows the most when encoded again (1e15 is 1000000000000000.0, each
    # comma gains a space), as long as the fast path takes: still within the bound.
    raw = b'{"state":{"v":[' + b",".join([b"1e15"] * 160) + b"]}}"
    assert len(raw) * 5 <= MAX_STATE_BYTES
    assert not _suspect(raw)
    state = json.loads(raw)["state"]
    assert _state_kept(state, raw)
    assert len(json.dumps(state)) <= MAX_STATE_BYTES


json_values = st.recursive(
    st.none() | st.booleans() | st.integers(-(2**70), 2**70)
    | st.floats(allow_nan=True, allow_infinity=True) | st.text(max_size=40),
    lambda children: st.lists(children, max_size=6)
    | st.dictionaries(st.text(max_size=12), children, max_size=6),
    max_leaves=60,
)


@settings(max_examples=examples(300))
@given(state=st.dictionaries(st.text(max_size=12), json_values, max_size=8),
       compact=st.booleans(), ascii_only=st.booleans())
def test_the_fast_answer_check_agrees_with_the_exact_one(
    state: dict[str, object], compact: bool, ascii_only: bool
) -> None:
    separators = (",", ":") if compact else None
    raw = json.dumps({"result": "applied", "state": state}, separators=separators,
                     ensure_ascii=ascii_only).encode()
    parsed = json.loads(raw)["state"]
    assert _state_kept(parsed, raw) == exact_kept(parsed)


growing = st.sampled_from(
    [b"1e15", b"1E9", b"-1e14", b"0", b"[]", b"{}", b'"x"', '"\u00e9\u00e9"'.encode(),
     '"\U0001f600"'.encode(), b"true", b"null"]
)


@settings(max_examples=examples(200))
@given(items=st.tuples(growing, st.integers(1, 1200), st.lists(growing, max_size=30)).map(
    lambda t: [t[0]] * t[1] + t[2]))
def test_answers_near_the_size_bound_are_kept_exactly_when_they_fit(items: list[bytes]) -> None:
    """Compact text of the values that grow most when encoded again, from a few bytes to
    several times the bound: the fast path must never keep one that does not fit."""
    raw = b'{"state":{"v":[' + b",".join(items) + b"]}}"
    state = json.loads(raw)["state"]
    assert _state_kept(state, raw) == exact_kept(state)
