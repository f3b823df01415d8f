"""Label and field selectors, parsed and matched as the apiserver does.

Owns the grammar of ``labelSelector`` (``=``, ``==``, ``!=``, ``in``,
``notin``, ``>``, ``<``, ``key`` exists, ``!key`` does not exist, comma =
AND) and of the small ``fieldSelector`` subset cluster-scoped objects support
(``metadata.name`` and ``metadata.namespace`` with ``=``, ``==``, ``!=``).
A malformed selector raises :class:`~.errors.BadRequestError`, as the apiserver
answers 400 rather than silently matching everything.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentpool.sim.apiserver.errors import BadRequestError

# A qualified label key: optional DNS-subdomain prefix, then a name segment.
_KEY = r"(?:[a-z0-9](?:[-a-z0-9.]*[a-z0-9])?/)?[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?"
_VALUE = r"(?:[A-Za-z0-9](?:[-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_EXISTS = re.compile(rf"^(!?)\s*({_KEY})$")
_SET = re.compile(rf"^({_KEY})\s+(in|notin)\s*\((.*)\)$")
_COMPARE = re.compile(rf"^({_KEY})\s*(==|!=|=|>|<)\s*(\S*)$")
_VALUE_RE = re.compile(rf"^{_VALUE}$")


class Op(enum.Enum):
    IN = "in"
    """``k=v``, ``k==v``, ``k in (a,b)``: the label is present with one of the values."""
    NOT_IN = "notin"
    """``k!=v``, ``k notin (a,b)``: absent, or present with another value."""
    EXISTS = "exists"
    DOES_NOT_EXIST = "!exists"
    GT = "gt"
    """``k>3``: present and an integer greater than the bound."""
    LT = "lt"


@dataclass(frozen=True)
class Requirement:
    key: str
    op: Op
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op is Op.EXISTS:
            return present
        if self.op is Op.DOES_NOT_EXIST:
            return not present
        if self.op is Op.IN:
            return present and labels[self.key] in self.values
        if self.op is Op.NOT_IN:
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        try:
            actual, bound = int(labels[self.key]), int(next(iter(self.values)))
        except ValueError:
            return False
        return actual > bound if self.op is Op.GT else actual < bound


def _split_top_level(text: str) -> list[str]:
    """Split on commas outside parentheses: ``a in (x,y),b`` -> two parts."""
    parts: list[str] = []
    depth, start = 0, 0
    for i, char in enumerate(text):
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
        elif char == "," and depth == 0:
            parts.append(text[start:i])
            start = i + 1
    parts.append(text[start:])
    return [part.strip() for part in parts]


def _values(raw: list[str], selector: str) -> frozenset[str]:
    for value in raw:
        if not _VALUE_RE.match(value):
            raise BadRequestError(f"invalid label value {value!r} in selector {selector!r}")
    return frozenset(raw)


def _parse_requirement(part: str, selector: str) -> Requirement:
    if m := _SET.match(part):
        values = [v.strip() for v in m.group(3).split(",")]
        if values == [""]:
            raise BadRequestError(f"empty value set in selector {selector!r}")
        op = Op.IN if m.group(2) == "in" else Op.NOT_IN
        return Requirement(m.group(1), op, _values(values, selector))
    if m := _COMPARE.match(part):
        key, symbol, value = m.groups()
        if symbol in (">", "<"):
            if not re.fullmatch(r"-?\d+", value):
                raise BadRequestError(f"{symbol} needs an integer in selector {selector!r}")
            return Requirement(key, Op.GT if symbol == ">" else Op.LT, frozenset([value]))
        op = Op.NOT_IN if symbol == "!=" else Op.IN
        return Requirement(key, op, _values([value], selector))
    if m := _EXISTS.match(part):
        return Requirement(m.group(2), Op.DOES_NOT_EXIST if m.group(1) else Op.EXISTS)
    raise BadRequestError(f"unable to parse requirement {part!r} in label selector {selector!r}")


def parse_label_selector(selector: str | None) -> tuple[Requirement, ...]:
    """Parse a ``labelSelector`` string; empty or None selects everything."""
    if not selector or not selector.strip():
        return ()
    return tuple(_parse_requirement(part, selector) for part in _split_top_level(selector))


def parse_field_selector(selector: str | None) -> tuple[tuple[str, bool, str], ...]:
    """Parse a ``fieldSelector`` into (field, equal?, value) triples."""
    if not selector or not selector.strip():
        return ()
    terms: list[tuple[str, bool, str]] = []
    for part in _split_top_level(selector):
        m = re.fullmatch(r"([A-Za-z.]+)\s*(==|!=|=)\s*(\S*)", part)
        if not m:
            raise BadRequestError(f"invalid field selector {selector!r}")
        field, symbol, value = m.groups()
        if field not in ("metadata.name", "metadata.namespace"):
            # The apiserver answers the same for unsupported field labels.
            raise BadRequestError(f'field label not supported: "{field}"')
        terms.append((field, symbol != "!=", value))
    return tuple(terms)


@dataclass(frozen=True)
class ObjectFilter:
    """What a list or watch asked for: all label and field terms must hold."""

    labels: tuple[Requirement, ...] = ()
    fields: tuple[tuple[str, bool, str], ...] = ()

    @classmethod
    def parse(cls, label_selector: str | None, field_selector: str | None) -> ObjectFilter:
        return cls(parse_label_selector(label_selector), parse_field_selector(field_selector))

    @property
    def everything(self) -> bool:
        return not self.labels and not self.fields

    def matches(self, obj: Mapping[str, Any]) -> bool:
        if self.everything:
            return True
        metadata = obj.get("metadata") or {}
        labels = metadata.get("labels") or {}
        if not all(req.matches(labels) for req in self.labels):
            return False
        for field, equal, value in self.fields:
            actual = metadata.get(field.partition(".")[2]) or ""
            if (actual == value) != equal:
                return False
        return True
