"""Give every type its attribute-cache version tag in the fork server, not in each worker.

Why: CPython tags a type with a version (``tp_version_tag``) the first time
an attribute is looked up on it after it was created or modified, and the
specialised bytecode and the method cache key on that tag. A type the fork
server never looked up anything on since (a class whose attributes were set
at import, say) is tagged by the first worker that does, in every worker:
two words written into the type object, and its page copied. Measured,
18 to 27 pages of a worker's ~560 private ones were copied for such writes
(BENCHMARKS.md, issue 26).

How: one lookup of a name no type has on every live type (``_PyType_Lookup``,
so that no metaclass code runs), which assigns the tag as any lookup would.
Only on the interpreters it was tested on
(:mod:`~agentpool.worker.forking.interpreters`); elsewhere nothing is done.
"""

from __future__ import annotations

import ctypes
import sys

from agentpool.worker.forking import interpreters

_NAME = sys.intern("__agentpool_no_such_attribute__")
"""Interned, as a name must be for the lookup to use (and tag for) the method cache."""


def all_types() -> list[type]:
    """Every live type: ``object`` and, transitively, its subclasses."""
    found: dict[int, type] = {}
    pending: list[type] = [object]
    while pending:
        cls = pending.pop()
        if id(cls) in found:
            continue
        found[id(cls)] = cls
        try:
            pending.extend(type.__subclasses__(cls))
        except TypeError:
            continue
    return list(found.values())


def assign() -> str:
    """Tag every type; one line saying what was done (or why not)."""
    why = interpreters.unsupported(interpreters.Step.TAG_TYPES)
    if why is not None:
        return f"type version tags left to the workers: {why}"
    try:
        lookup = ctypes.pythonapi._PyType_Lookup
    except AttributeError:
        return "type version tags left to the workers: no _PyType_Lookup"
    lookup.argtypes = [ctypes.py_object, ctypes.py_object]
    lookup.restype = ctypes.c_void_p  # a borrowed reference, or NULL: never touched
    types = all_types()
    for cls in types:
        lookup(cls, _NAME)
    return f"type version tags: {len(types)} types looked up"
