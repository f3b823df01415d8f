"""Values Joulie's agent runs with that the parsers refuse: what agentpool runs with instead.

Joulie's agent reads its environment with Go's parsers and no checks: a
blank variable is unset, and text its parser refuses is its default; a
number in no sensible range is used as it is. A pod configured for it must
not crash-loop here, so the options table gives each variable that agent
reads a :data:`Fallback`: called where the option's parser refused a value,
it says what to parse instead and why, and :func:`agentpool.config.settings.load_settings`
logs that once at start. A fallback that raises the error again keeps exit 2:
for a value that would leave the agent useless or unsafe (docs/joulie-compatibility.md
says which, and why). Nothing here reads the environment.
"""

from __future__ import annotations

import math
import re
import socket
from collections.abc import Callable
from dataclasses import dataclass

from agentpool.durations import parse_duration
from agentpool.errors import ConfigError


@dataclass(frozen=True)
class Instead:
    """What is parsed in place of a refused value, and the log's account of it."""

    raw: str | None
    """The text parsed instead; None: the option's default."""
    says: str
    """Why, and what Joulie's agent does with the value (completes ``VAR='value': ...``)."""


Fallback = Callable[[str, ConfigError], Instead]
"""``(refused text, the parser's error) -> Instead``, or the error raised again."""

UNREAD: dict[str, str] = {
    "TELEMETRY_GPU_CONTROL_MODE": "Joulie's agent reads it and acts on none of its values",
    "JOULIE_TELEMETRY_SOURCE_TYPE": "no revision of Joulie's agent reads it either; "
    "TELEMETRY_CPU_SOURCE is the variable",
    "JOULIE_TELEMETRY_HTTP_ENDPOINT": "no revision of Joulie's agent reads it either; "
    "TELEMETRY_CPU_HTTP_ENDPOINT is the variable",
    "JOULIE_CONTROL_TYPE": "no revision of Joulie's agent reads it either; "
    "TELEMETRY_CPU_CONTROL is the variable",
    "JOULIE_CONTROL_HTTP_ENDPOINT": "no revision of Joulie's agent reads it either; "
    "TELEMETRY_CPU_CONTROL_HTTP_ENDPOINT is the variable",
    "JOULIE_CONTROL_MODE": "no revision of Joulie's agent reads it either; "
    "TELEMETRY_CPU_CONTROL_MODE is the variable",
}
"""Variables Joulie's examples and experiments set that neither agent acts on: said once at
start, so that a user who relies on one learns it is not read."""

IGNORED = "Joulie's agent ignores a value its parser refuses and takes its default"

GO_INT = re.compile(r"^[+-]?\d+$")
"""What Go's ``strconv.Atoi`` reads: an optional sign and decimal digits."""


def _go_int(text: str) -> int:
    if not GO_INT.match(text):
        raise ValueError(text)
    return int(text)


def _go_float(text: str) -> float:
    """Go's ``strconv.ParseFloat`` for what a user writes (it reads ``inf`` and ``nan`` too)."""
    if "_" in text:
        raise ValueError(text)
    return float(text)


def _when_unparsed(read: Callable[[str], object], default: str | None = None) -> Fallback:
    """The option's default (or ``default``: Joulie's, where ours is unset) where Joulie's
    parser (``read``) refuses the text too; what it reads but ours refuses (out of range)
    stays an error."""

    def fallback(raw: str, error: ConfigError) -> Instead:
        try:
            read(raw.strip())
        except ValueError:
            return Instead(default, IGNORED)
        raise error

    return fallback


integer = _when_unparsed(_go_int)
number = _when_unparsed(_go_float)


def reconcile_interval(raw: str, error: ConfigError) -> Instead:
    try:
        seconds = parse_duration(raw)
    except ValueError:
        return Instead(None, IGNORED)
    if seconds <= 0:
        return Instead(None, "Joulie's agent would reconcile without pausing at all")
    raise error


def not_negative(then: str) -> Fallback:
    """A duration below zero is zero to Joulie's agent (``then`` says what it does)."""

    def fallback(raw: str, error: ConfigError) -> Instead:
        try:
            seconds = parse_duration(raw)
        except ValueError:
            return Instead(None, IGNORED)
        if seconds < 0:
            return Instead("0s", f"below zero, which Joulie's agent takes as 0 ({then})")
        raise error

    return fallback


def simulate_only(raw: str, error: ConfigError) -> Instead:
    return Instead("false", "Joulie's agent simulates only for 'true', and enforces otherwise")


def min_freq_khz(raw: str, error: ConfigError) -> Instead:
    try:
        value = _go_int(raw.strip())
    except ValueError:
        return Instead(None, IGNORED)
    if value <= 0:
        # Both agents write max(cpuinfo_min_freq, min(cpuinfo_max_freq, this)): 1 kHz is 0.
        return Instead("1", "throttled policies get their cpuinfo_min_freq, as with Joulie's "
                       "agent")
    raise error


def pool_shard_id(raw: str, error: ConfigError) -> Instead:
    try:
        _go_int(raw.strip())
    except ValueError:
        return Instead("", "not an integer: Joulie's agent then takes the shard from "
                       "POD_NAME's ordinal, and so does agentpool")
    raise error


def metrics_addr(raw: str, error: ConfigError) -> Instead:
    """``8080`` is a port and ``0.0.0.0`` a host (Joulie's agent cannot listen on either
    and runs without metrics); a port named by a service (``:http``) is that service's, as
    Go resolves it. Anything else stays an error: /healthz and /readyz are served there."""
    text = raw.strip()
    if ":" not in text:
        if text.isdigit():
            return Instead(f":{text}", "no colon: Joulie's agent then serves no metrics at "
                           "all; agentpool takes it as the port")
        return Instead(f"{text}:8080", "no port: Joulie's agent then serves no metrics at "
                       "all; agentpool takes it as the host, on port 8080")
    host, _, name = text.rpartition(":")
    if name and not name.isdigit():
        try:
            port = socket.getservbyname(name, "tcp")
        except (OSError, UnicodeError):
            raise error from None
        return Instead(f"{host}:{port}", f"a service name, port {port} to Joulie's agent")
    raise error


JOULIE_QPS = 50.0
JOULIE_BURST = 100
"""Joulie's agent's defaults for ``KUBE_CLIENT_QPS`` and ``KUBE_CLIENT_BURST``."""
CLIENT_GO_QPS = 5.0
CLIENT_GO_BURST = 10
"""client-go's ``rest.DefaultQPS`` and ``DefaultBurst``: what 0 means to it."""

kube_qps = _when_unparsed(_go_float, f"{JOULIE_QPS:g}")
kube_burst = _when_unparsed(_go_int, str(JOULIE_BURST))


def client_limit(qps: float | None, burst: int | None) -> tuple[float, int] | None:
    """The client-side limit (requests per second, burst) these settings mean; None: none.

    Neither set: none (agentpool's default, docs/joulie-compatibility.md says why). One
    set: the other is Joulie's default. Then as client-go reads ``rest.Config``: a QPS of
    0 is 5 and a burst of 0 is 10; a negative or infinite QPS is no limit.
    """
    if qps is None and burst is None:
        return None
    rate = JOULIE_QPS if qps is None else qps
    size = JOULIE_BURST if burst is None else burst
    rate = CLIENT_GO_QPS if rate == 0 else rate
    size = CLIENT_GO_BURST if size == 0 else size
    if rate < 0 or math.isinf(rate):
        return None
    return rate, size
