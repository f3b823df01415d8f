"""Go-style durations (docs/configuration.md: ``500ms``, ``20s``, ``1m``) and RFC 3339 UTC
timestamps."""

from __future__ import annotations

import re
from datetime import UTC, datetime

import pytest

from agentpool.durations import format_duration, parse_duration, utc_timestamp


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("500ms", 0.5),
        ("20s", 20.0),
        ("1m", 60.0),
        ("1m30s", 90.0),
        ("2h45m", 9900.0),
        ("1h", 3600.0),
        ("1.5s", 1.5),
        (".5s", 0.5),
        ("0", 0.0),
        ("0s", 0.0),
        ("+5s", 5.0),
        ("-1s", -1.0),
        ("-1m30s", -90.0),
        (" 20s ", 20.0),
        ("100ns", 1e-7),
        ("250us", 250e-6),
        ("250µs", 250e-6),
        ("1h1m1s1ms", 3661.001),
    ],
)
def test_parse_valid(text: str, seconds: float) -> None:
    assert parse_duration(text) == pytest.approx(seconds, rel=1e-12, abs=1e-15)


@pytest.mark.parametrize(
    "text", ["", " ", "-", "+", "20", "s", "1x", "1m 30s", "1.2.3s", "--1s", "1d", "ms", "1S"]
)
def test_parse_invalid(text: str) -> None:
    with pytest.raises(ValueError, match="duration"):
        parse_duration(text)


@pytest.mark.parametrize(
    ("seconds", "text"),
    [(0.5, "500ms"), (20.0, "20s"), (60.0, "1m"), (120.0, "2m"), (90.0, "90s"), (0.0, "0s")],
)
def test_format(seconds: float, text: str) -> None:
    assert format_duration(seconds) == text
    assert parse_duration(text) == seconds


def test_the_timestamp_is_now_in_utc_to_the_second_or_the_microsecond() -> None:
    micro = utc_timestamp(micro=True)
    assert re.fullmatch(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z", micro), micro
    before = datetime.now(UTC).replace(tzinfo=None)
    got = datetime.strptime(utc_timestamp(micro=True), "%Y-%m-%dT%H:%M:%S.%fZ")
    after = datetime.now(UTC).replace(tzinfo=None)
    assert before <= got <= after
    seconds = datetime.strptime(utc_timestamp(), "%Y-%m-%dT%H:%M:%SZ")
    assert abs((seconds - got.replace(microsecond=0)).total_seconds()) <= 1
