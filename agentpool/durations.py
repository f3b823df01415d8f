"""The agent's time formats: Go-style durations (``500ms``, ``20s``, ``1m30s``), the
format the Joulie chart already uses, and RFC 3339 UTC timestamps."""

from __future__ import annotations

import re
from datetime import UTC, datetime

_UNITS = {
    "ns": 1e-9,
    "us": 1e-6,
    "µs": 1e-6,
    "μs": 1e-6,
    "ms": 1e-3,
    "s": 1.0,
    "m": 60.0,
    "h": 3600.0,
}
_PART = re.compile(r"(\d+(?:\.\d*)?|\.\d+)(ns|us|µs|μs|ms|s|m|h)")


def parse_duration(text: str) -> float:
    """Seconds in a Go duration string; raises ValueError on anything else.

    Like Go's ``time.ParseDuration``: an optional sign, then one or more
    number+unit parts; a bare ``0`` is allowed. Negative values parse (the
    caller decides whether they are in range).
    """
    s = text.strip()
    sign = 1.0
    if s[:1] in "+-" and s:
        sign = -1.0 if s[0] == "-" else 1.0
        s = s[1:]
    if s == "0":
        return 0.0
    if not s:
        raise ValueError(f"empty duration {text!r}")
    pos = 0
    total = 0.0
    while pos < len(s):
        match = _PART.match(s, pos)
        if match is None:
            raise ValueError(f"invalid duration {text!r}")
        total += float(match.group(1)) * _UNITS[match.group(2)]
        pos = match.end()
    return sign * total


def format_duration(seconds: float) -> str:
    """A short Go-style rendering, for logs and --help defaults."""
    if seconds and seconds < 1:
        return f"{seconds * 1000:g}ms"
    if seconds >= 60 and seconds % 60 == 0:
        return f"{seconds / 60:g}m"
    return f"{seconds:g}s"


def utc_timestamp(micro: bool = False) -> str:
    """Now in RFC 3339 UTC: seconds (Kubernetes ``Time``: status ``updatedAt``), or with
    ``micro`` microseconds (``MicroTime``: Lease renewals; the HTTP control ``ts``)."""
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ" if micro else "%Y-%m-%dT%H:%M:%SZ")
