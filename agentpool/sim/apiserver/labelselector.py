"""The emulator's own ``labelSelector``: a lexer and parser shaped like the apiserver's.

Deliberately independent of :mod:`agentpool.labelselectors`: the emulator is the
oracle the agent's selector handling is tested against, so it must not share
the agent's parser (a bug there would be in the oracle too). It follows
Kubernetes' ``labels.Parse`` instead: a lexer turns the text into identifier
and operator tokens, a recursive-descent parser builds requirements, and keys
and values are validated as label keys and values. Grammar::

    selector    := [ requirement ( "," requirement )* ]
    requirement := [ "!" ] KEY
                 | KEY ( "=" | "==" | "!=" ) VALUE
                 | KEY ( "in" | "notin" ) "(" [ VALUE ( "," VALUE )* ] ")"
                 | KEY ( ">" | "<" ) INTEGER

As on kube-apiserver, ``in ()`` is the set holding the empty value, and the
bound of ``>``/``<`` must be a valid label value as well as an integer (so
``-1`` is refused).

tests/support/selector_cases.py holds the cases both implementations must agree on.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping

Matcher = Callable[[Mapping[str, str]], bool]

_OPERATOR_CHARS = "!=<>(),"
_TWO_CHAR = ("==", "!=")
_NAME = re.compile(r"[A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?")
_DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?")


class LabelSelectorError(ValueError):
    """The selector does not parse (the apiserver answers 400)."""


def _tokens(text: str) -> list[str]:
    """Operators, ``(``, ``)``, ``,`` and identifiers; whitespace only separates."""
    out: list[str] = []
    i = 0
    while i < len(text):
        char = text[i]
        if char.isspace():
            i += 1
        elif text[i : i + 2] in _TWO_CHAR:
            out.append(text[i : i + 2])
            i += 2
        elif char in _OPERATOR_CHARS:
            out.append(char)
            i += 1
        else:
            start = i
            while i < len(text) and not text[i].isspace() and text[i] not in _OPERATOR_CHARS:
                i += 1
            out.append(text[start:i])
    return out


def _is_identifier(token: str | None) -> bool:
    return token is not None and token[0] not in _OPERATOR_CHARS


def _key(token: str | None) -> str:
    """A label key: an optional DNS-subdomain prefix and ``/``, then a name of <= 63."""
    if not _is_identifier(token):
        raise LabelSelectorError(f"expected a label key, found {token!r}")
    assert token is not None
    prefix, slash, name = token.rpartition("/")
    if slash and not (
        0 < len(prefix) <= 253 and all(_DNS_LABEL.fullmatch(p) for p in prefix.split("."))
    ):
        raise LabelSelectorError(f"invalid label key prefix {token!r}")
    if len(name) > 63 or not _NAME.fullmatch(name):
        raise LabelSelectorError(f"invalid label key {token!r}")
    return token


def _value(token: str) -> str:
    if token and (len(token) > 63 or not _NAME.fullmatch(token)):
        raise LabelSelectorError(f"invalid label value {token!r}")
    return token


class _Parser:
    def __init__(self, text: str) -> None:
        self.tokens = _tokens(text)
        self.pos = 0

    def peek(self) -> str | None:
        return self.tokens[self.pos] if self.pos < len(self.tokens) else None

    def take(self) -> str | None:
        token = self.peek()
        self.pos += 1
        return token

    def selector(self) -> list[Matcher]:
        matchers: list[Matcher] = []
        if self.peek() is None:
            return matchers
        while True:
            matchers.append(self.requirement())
            token = self.take()
            if token is None:
                return matchers
            if token != ",":
                raise LabelSelectorError(f"expected ',' or the end, found {token!r}")

    def requirement(self) -> Matcher:
        if self.peek() == "!":
            self.take()
            key = _key(self.take())
            return lambda labels: key not in labels
        key = _key(self.take())
        op = self.peek()
        if op is None or op == ",":
            return lambda labels: key in labels
        self.take()
        if op in ("=", "==", "!="):
            token = self.peek()
            value = _value(self.take() or "") if _is_identifier(token) else ""
            if op == "!=":
                return lambda labels: labels.get(key) != value
            return lambda labels: key in labels and labels[key] == value
        if op in ("in", "notin"):
            values = self.value_set()
            if op == "in":
                return lambda labels: key in labels and labels[key] in values
            return lambda labels: key not in labels or labels[key] not in values
        if op in (">", "<"):
            bound = self.integer()
            greater = op == ">"
            return lambda labels: _compare(labels.get(key), bound, greater)
        raise LabelSelectorError(f"unknown operator {op!r}")

    def value_set(self) -> frozenset[str]:
        if self.take() != "(":
            raise LabelSelectorError("expected '(' after in/notin")
        values: list[str] = []
        while True:
            token = self.take()
            if token is None:
                raise LabelSelectorError("unclosed value set")
            if _is_identifier(token):
                values.append(_value(token))
                token = self.take()
            if token == ")":
                break
            if token != ",":
                raise LabelSelectorError(f"expected ',' or ')' in a value set, found {token!r}")
        return frozenset(values or [""])

    def integer(self) -> int:
        token = self.take()
        try:
            return int(_value(token or ""))
        except ValueError:
            raise LabelSelectorError(f"expected an integer, found {token!r}") from None


def _compare(actual: str | None, bound: int, greater: bool) -> bool:
    try:
        number = int(actual) if actual is not None else None
    except ValueError:
        return False  # not an integer: no match, as the apiserver does
    if number is None:
        return False
    return number > bound if greater else number < bound


def parse(text: str) -> Matcher:
    """A matcher of label maps; the empty selector matches everything."""
    matchers = _Parser(text).selector()
    return lambda labels: all(m(labels) for m in matchers)
