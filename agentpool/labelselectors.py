"""Kubernetes label selectors: parse the string form and match label maps.

The agent re-checks ``POOL_NODE_SELECTOR`` on every node it is sent, because
some API servers and emulators ignore ``labelSelector`` on watches; a node
that does not match must never get a controller. Grammar (as the API server's
``labels.Parse``): comma-separated requirements, all of which must hold::

    key            key exists
    !key           key does not exist
    key=value      key==value      key!=value
    key in (a,b)   key notin (a,b)
    key>3          key<3        (integer comparisons, as the API server allows)

The simulation kit's API emulator has its own implementation
(:mod:`agentpool.sim.apiserver.labelselector`), and tests/support/selector_cases.py
holds the cases both must get right.
"""

from __future__ import annotations

import enum
import re
from collections.abc import Mapping
from dataclasses import dataclass

from agentpool.errors import SelectorError


class Op(enum.Enum):
    EXISTS = "exists"
    NOT_EXISTS = "!"
    EQUALS = "="
    NOT_EQUALS = "!="
    IN = "in"
    NOT_IN = "notin"
    GREATER = ">"
    LESS = "<"


@dataclass(frozen=True)
class Requirement:
    key: str
    op: Op
    values: frozenset[str] = frozenset()

    def matches(self, labels: Mapping[str, str]) -> bool:
        present = self.key in labels
        if self.op is Op.EXISTS:
            return present
        if self.op is Op.NOT_EXISTS:
            return not present
        if self.op in (Op.EQUALS, Op.IN):
            return present and labels[self.key] in self.values
        if self.op in (Op.NOT_EQUALS, Op.NOT_IN):
            # != and notin also match objects without the key, as in Kubernetes.
            return not present or labels[self.key] not in self.values
        if not present:
            return False
        try:
            actual, bound = int(labels[self.key]), int(next(iter(self.values)))
        except ValueError:
            return False
        return actual > bound if self.op is Op.GREATER else actual < bound


@dataclass(frozen=True)
class Selector:
    requirements: tuple[Requirement, ...]

    def matches(self, labels: Mapping[str, str] | None) -> bool:
        labels = labels or {}
        return all(r.matches(labels) for r in self.requirements)

    @property
    def empty(self) -> bool:
        return not self.requirements


_KEY = r"[A-Za-z0-9]([-A-Za-z0-9_./]*[A-Za-z0-9])?"
_VALUE = r"([A-Za-z0-9]([-A-Za-z0-9_.]*[A-Za-z0-9])?)?"
_SET = re.compile(rf"^\s*(?P<key>{_KEY})\s+(?P<op>in|notin)\s*\((?P<values>[^)]*)\)\s*$")
_BINARY = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>==|=|!=)\s*(?P<value>{_VALUE})\s*$")
# The bound must be a label value too, so no sign: the API server refuses "cores>-1".
_COMPARE = re.compile(rf"^\s*(?P<key>{_KEY})\s*(?P<op>[<>])\s*(?P<value>\d+)\s*$")
_EXISTS = re.compile(rf"^\s*(?P<neg>!?)\s*(?P<key>{_KEY})\s*$")
_VALUE_ONLY = re.compile(rf"^{_VALUE}$")


def _split(text: str) -> list[str]:
    """Split on commas that are not inside a ``(...)`` value set."""
    parts: list[str] = []
    depth = 0
    current: list[str] = []
    for char in text:
        if char == "(":
            depth += 1
        elif char == ")":
            depth -= 1
            if depth < 0:
                raise SelectorError(f"unbalanced ')' in {text!r}")
        if char == "," and depth == 0:
            parts.append("".join(current))
            current = []
        else:
            current.append(char)
    if depth:
        raise SelectorError(f"unbalanced '(' in {text!r}")
    parts.append("".join(current))
    return parts


def parse_selector(text: str) -> Selector:
    """Parse a label selector; the empty string selects everything."""
    if not text.strip():
        return Selector(())
    requirements: list[Requirement] = []
    for part in _split(text):
        if not part.strip():
            raise SelectorError(f"empty requirement in {text!r}")
        if match := _SET.match(part):
            values = [v.strip() for v in match.group("values").split(",")]
            if values == [""]:
                raise SelectorError(f"empty value set in {part.strip()!r}")
            if any(not _VALUE_ONLY.match(v) for v in values):
                raise SelectorError(f"bad value in {part.strip()!r}")
            op = Op.IN if match.group("op") == "in" else Op.NOT_IN
            requirements.append(Requirement(match.group("key"), op, frozenset(values)))
        elif match := _BINARY.match(part):
            op = Op.NOT_EQUALS if match.group("op") == "!=" else Op.EQUALS
            requirements.append(
                Requirement(match.group("key"), op, frozenset({match.group("value")}))
            )
        elif match := _COMPARE.match(part):
            op = Op.GREATER if match.group("op") == ">" else Op.LESS
            requirements.append(
                Requirement(match.group("key"), op, frozenset({match.group("value")}))
            )
        elif match := _EXISTS.match(part):
            op = Op.NOT_EXISTS if match.group("neg") else Op.EXISTS
            requirements.append(Requirement(match.group("key"), op))
        else:
            raise SelectorError(f"cannot parse {part.strip()!r}")
    return Selector(tuple(requirements))
