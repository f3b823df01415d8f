"""Label and field selectors, parsed and matched as the apiserver does.

The ``labelSelector`` grammar is the emulator's own (:mod:`.labelselector`,
independent of the agent's :mod:`agentpool.labelselectors` so that it can serve as
the agent's test oracle); this module owns the small ``fieldSelector`` subset
cluster-scoped objects support (``metadata.name`` and ``metadata.namespace``
with ``=``, ``==``, ``!=``).
A malformed selector raises :class:`~.errors.BadRequestError`, as the apiserver
answers 400 rather than silently matching everything.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from agentpool.sim.apiserver import labelselector
from agentpool.sim.apiserver.errors import BadRequestError


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


def parse_label_selector(selector: str | None) -> labelselector.Matcher | None:
    """Parse a ``labelSelector``; empty or None (no matcher) selects everything."""
    if not selector or not selector.strip():
        return None
    try:
        return labelselector.parse(selector)
    except labelselector.LabelSelectorError as exc:
        raise BadRequestError(f"unable to parse label selector {selector!r}: {exc}") from None


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

    labels: labelselector.Matcher | None = None
    fields: tuple[tuple[str, bool, str], ...] = ()

    @classmethod
    def parse(cls, label_selector: str | None, field_selector: str | None) -> ObjectFilter:
        return cls(parse_label_selector(label_selector), parse_field_selector(field_selector))

    def in_namespace(self, namespace: str) -> ObjectFilter:
        """This filter restricted to one namespace (a namespaced collection URL)."""
        return ObjectFilter(self.labels, (*self.fields, ("metadata.namespace", True, namespace)))

    @property
    def everything(self) -> bool:
        return self.labels is None and not self.fields

    def matches(self, obj: Mapping[str, Any]) -> bool:
        if self.everything:
            return True
        metadata = obj.get("metadata") or {}
        labels = metadata.get("labels") or {}
        if self.labels is not None and not self.labels(labels):
            return False
        for field, equal, value in self.fields:
            actual = metadata.get(field.partition(".")[2]) or ""
            if (actual == value) != equal:
                return False
        return True
