"""The parsers of the options table: raw text in, a value or a :class:`ConfigError` out.

Each takes the variable's name (for the error) and the raw text, so that every
message names the variable, the bad value and what is accepted. They hold no
defaults and know no option: :mod:`agentpool.config.options` pairs them with
their variables.
"""

from __future__ import annotations

import enum
import importlib
import math
from collections.abc import Callable
from typing import Any

from agentpool.durations import parse_duration
from agentpool.errors import ConfigError, SelectorError
from agentpool.labelselectors import parse_selector

Parser = Callable[[str, str], Any]
"""``(variable, raw text) -> value``; raises :class:`ConfigError` naming the variable."""

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off"}


def boolean(env: str, raw: str) -> bool:
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ConfigError(env, raw, "expected true or false")


def integer(minimum: int, maximum: int | None = None) -> Parser:
    def parse(env: str, raw: str) -> int:
        try:
            value = int(raw.strip())
        except ValueError:
            raise ConfigError(env, raw, "expected an integer") from None
        if value < minimum or (maximum is not None and value > maximum):
            accepted = f">= {minimum}" if maximum is None else f"from {minimum} to {maximum}"
            raise ConfigError(env, raw, f"expected an integer {accepted}")
        return value

    return parse


def number(check: Callable[[float], bool], accepted: str) -> Parser:
    def parse(env: str, raw: str) -> float:
        try:
            value = float(raw.strip())
        except ValueError:
            raise ConfigError(env, raw, f"expected a number, {accepted}") from None
        if not math.isfinite(value) or not check(value):
            raise ConfigError(env, raw, f"expected a number, {accepted}")
        return value

    return parse


def rate(env: str, raw: str) -> float:
    """Requests per second: any number but NaN (what 0, negative values and ``inf`` mean is
    client-go's: :func:`agentpool.config.joulie.client_limit`)."""
    try:
        value = float(raw.strip())
    except ValueError:
        raise ConfigError(env, raw, "expected a number of requests per second") from None
    if math.isnan(value):
        raise ConfigError(env, raw, "expected a number of requests per second")
    return value


def duration(positive: bool) -> Parser:
    """Seconds in a Go duration; ``positive`` refuses 0 as well as negative values."""

    def parse(env: str, raw: str) -> float:
        try:
            value = parse_duration(raw)
        except ValueError:
            raise ConfigError(
                env, raw, "expected a Go duration such as 500ms, 20s or 1m30s"
            ) from None
        if value < 0 or (positive and value == 0):
            raise ConfigError(env, raw, "expected a positive duration such as 500ms, 20s or 1m")
        return value

    return parse


def one_of[E: enum.StrEnum](kind: type[E]) -> Parser:
    def parse(env: str, raw: str) -> E:
        try:
            return kind(raw.strip().lower())
        except ValueError:
            accepted = ", ".join(m.value for m in kind)
            raise ConfigError(env, raw, f"expected one of {accepted}") from None

    return parse


def optional(parser: Parser | None = None) -> Parser:
    """A setting without a default: blank means unset (None), anything else is parsed."""

    def parse(env: str, raw: str) -> Any:
        text = raw.strip()
        if not text:
            return None
        return parser(env, raw) if parser is not None else text

    return parse


def path(env: str, raw: str) -> str:
    """A required path: blank is refused."""
    value = raw.strip()
    if not value:
        raise ConfigError(env, value, "expected a directory path")
    return value


def metrics_addr(env: str, raw: str) -> tuple[str, int]:
    host, sep, port = raw.strip().rpartition(":")
    if not sep:
        raise ConfigError(env, raw, "expected [host]:port, for example :8080 or 127.0.0.1:9090")
    host = host.strip("[]")
    try:
        value = int(port)
    except ValueError:
        raise ConfigError(env, raw, "expected [host]:port with a numeric port") from None
    if not 0 <= value <= 65535:
        raise ConfigError(env, raw, "expected a port between 0 and 65535")
    return host, value


def selector(env: str, raw: str) -> str:
    try:
        parse_selector(raw)
    except SelectorError as exc:
        raise ConfigError(env, raw, f"expected a Kubernetes label selector ({exc})") from None
    return raw.strip()


def load_hook(spec: str) -> Callable[[str], Any]:
    """The worker hook ``spec`` names: ``module:function`` or ``module:function=argument``;
    ``function(argument)`` ("" without one) makes it. Raises whatever loading it raises."""
    target, _, argument = spec.strip().partition("=")
    module, sep, name = target.partition(":")
    if not (sep and module and name):
        raise ValueError("no module:function")
    made = getattr(importlib.import_module(module), name)(argument)
    if not callable(made):
        raise TypeError(f"{target}({argument!r}) returned {type(made).__name__}, not a hook")
    return made  # type: ignore[no-any-return]


def hook(env: str, raw: str) -> str:
    """A worker hook's ``spec`` (:func:`load_hook`), checked by loading it once here."""
    try:
        load_hook(raw)
    except Exception as exc:  # an import or a factory of someone else's: anything at all
        problem = f"{type(exc).__name__}: {exc}"
        raise ConfigError(
            env, raw, f"expected module:function[=argument] naming a hook that loads ({problem})"
        ) from None
    return raw.strip()


def log_level(env: str, raw: str) -> str:
    level = raw.strip().lower()
    if level not in {"debug", "info", "warning", "error"}:
        raise ConfigError(env, raw, "expected debug, info, warning or error")
    return level

