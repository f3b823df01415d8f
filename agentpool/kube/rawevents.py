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
"""

from __future__ import annotations

import re

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
