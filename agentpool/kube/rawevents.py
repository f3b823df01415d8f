"""A watch event's type, name and resourceVersion, read off its line before decoding it.

The API server encodes a built-in kind (a Node) from its Go struct: compact JSON,
fields in declaration order, so every watch line of one begins alike::

    {"type":"MODIFIED","object":{"kind":"Node","apiVersion":"v1",
     "metadata":{"name":"worker-7","uid":"...","resourceVersion":"4711",...

:func:`head` reads those three values with one anchored match, which lets a pool
pod pass over an event about a node it does not own (a 14 KB Node, decoded in
about a tenth of a millisecond) in a few microseconds. Anything that does not
match exactly (another encoder, a field order this module does not know, a
custom resource: those are encoded from maps, keys sorted, ``name`` after
``managedFields``) gives None, and the caller decodes the line as usual: the
head is an optimisation, never a second parser the answer depends on.

Custom resources (a NodeTwin, about 2 KB) have no such head; :func:`glance` reads
every node name and name a line holds instead, so that an event about an object of
no node of this pod's is passed over undecoded too.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

_HEAD = re.compile(
    r'\{"type":"(ADDED|MODIFIED|DELETED)","object":\{"kind":"[A-Za-z]+",'
    r'"apiVersion":"[^"\\]+","metadata":\{"name":"([^"\\]+)"'
    r'(?:,"generateName":"[^"\\]*")?(?:,"namespace":"[^"\\]*")?(?:,"selfLink":"[^"\\]*")?'
    r',"uid":"[^"\\]*","resourceVersion":"([0-9]+)"'
)


def head(line: str) -> tuple[str, str, str] | None:
    """(type, name, resourceVersion) of a built-in object's watch line; None if the line
    does not begin exactly as the API server writes one."""
    match = _HEAD.match(line)
    if match is None:
        return None
    kind, name, version = match.groups()
    return kind, name, version


_NODE_NAME = re.compile(r'"nodeName":"([^"\\]*)"')
_NAME = re.compile(r'"name":"([^"\\]*)"')
_VERSION = re.compile(r'"resourceVersion":"([0-9]+)"')


@dataclass(frozen=True)
class Glance:
    """What a custom resource's watch line says of its place, read without decoding it."""

    version: str
    """Its resourceVersion (the line holds exactly one)."""
    names: frozenset[str]
    """Every ``"name"`` value in the line: the object's, and any other (a policy's)."""
    nodes: frozenset[str]
    """Every ``"nodeName"`` value in the line (``spec.nodeName``, ``spec.target.nodeName``)."""


def glance(line: str) -> Glance | None:
    """The names, node names and resourceVersion a custom resource's watch line holds; None
    where they cannot be read safely, and the caller decodes the line.

    Safe because the API server writes compact JSON (``"key":"value"``, no space), so
    every key of the object appears as ``"key":"`` and no text inside a string can look
    like one without a backslash: a line with a backslash anywhere (an escaped value, a
    ``last-applied-configuration`` annotation), a space after a key (another encoder),
    or not exactly one ``resourceVersion`` is left to the decoder. Over-reading is
    harmless: a ``"name"`` that is not the object's only makes the caller decode more.
    """
    if "\\" in line or '": ' in line:
        return None
    versions = _VERSION.findall(line)
    if len(versions) != 1:
        return None
    return Glance(versions[0], frozenset(_NAME.findall(line)),
                  frozenset(_NODE_NAME.findall(line)))
