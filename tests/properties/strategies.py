"""Hypothesis strategies shared by the property suites: JSON values and objects bent at a path.

``json_values`` is what a field of a custom resource can hold once the JSON
is decoded: any JSON value, with numbers biased to the edges that matter
here (the bounds of the CRDs, float limits, subnormals, integers past
float range and past int64) and strings that look like numbers or enum
values. ``bent`` takes a valid object and replaces or deletes the values
at a few of its known field paths, so each example is mostly valid and
the error it causes has a field to name.
"""

from __future__ import annotations

import copy
import math
from collections.abc import Sequence
from typing import Any

from hypothesis import strategies as st

EDGE_NUMBERS: tuple[float | int, ...] = (
    0, -0.0, 1, 0.9999999, 1.0000001, 100, 100.000001, 99.9999, 300, 300.0001, -1, 2, 1e-9,
    1e308, 1.7976931348623157e308, 3.5e-320, 5e-324, 2.2250738585072014e-308,
    2**31, 2**32, 2**53 + 1, 2**63 - 1, 2**63, 2**64, -(2**63), 10**20, 10**400,
    math.inf, -math.inf, math.nan,
)  # fmt: skip
"""Bounds of the CRDs (1 W, 0 < pct <= 100, 0 < timeout <= 300), float and integer limits."""

NUMBER_WORDS = (
    "120", "1e308", "NaN", "nan", "Infinity", "-inf", "0x10", "1_000", " 120 ", "120W", "",
    "eco", "performance", "ECO", " eco", "http", "host", "none", "auto", "rapl", "dvfs",
    "powercap", "clocks", "prometheus", "node", "cluster", "true", "null", "٣",
)  # fmt: skip
"""Strings a careless parser might read as a number or an enum value."""

numbers: st.SearchStrategy[Any] = st.one_of(
    st.sampled_from(EDGE_NUMBERS),
    st.integers(),
    st.integers(min_value=10**300, max_value=10**330),
    st.floats(),
    st.floats(min_value=-1e3, max_value=1e3),
)

long_strings = st.integers(1_000, 200_000).map(lambda n: "x" * n)
"""A value far longer than any message should quote."""

scalars: st.SearchStrategy[Any] = st.one_of(
    st.none(), st.booleans(), numbers, st.sampled_from(NUMBER_WORDS), st.text(max_size=12),
    long_strings,
)

json_values: st.SearchStrategy[Any] = st.recursive(
    scalars,
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(NUMBER_WORDS) | st.text(max_size=6), inner, max_size=3),
    ),
    max_leaves=6,
)
"""Any decoded JSON value (NaN and Infinity included: Python's json accepts them)."""

finite_json_values: st.SearchStrategy[Any] = st.recursive(
    st.one_of(
        st.none(),
        st.booleans(),
        st.sampled_from([n for n in EDGE_NUMBERS if abs(n) < 2**63 and not math.isnan(n)]),
        st.integers(min_value=-(2**63), max_value=2**63 - 1),
        st.floats(allow_nan=False, allow_infinity=False),
        st.sampled_from(NUMBER_WORDS),
        st.text(max_size=12),
    ),
    lambda inner: st.one_of(
        st.lists(inner, max_size=3),
        st.dictionaries(st.sampled_from(NUMBER_WORDS) | st.text(max_size=6), inner, max_size=3),
    ),
    max_leaves=6,
)
"""JSON a real API server can carry: finite numbers within int64 / float64."""

DELETE = object()
"""A bend that removes the field instead of replacing its value."""


def get_path(obj: Any, path: str) -> Any:
    for key in path.split("."):
        if not isinstance(obj, dict) or key not in obj:
            return DELETE
        obj = obj[key]
    return obj


def set_path(obj: dict[str, Any], path: str, value: Any) -> bool:
    """Set (or with :data:`DELETE` remove) ``path``; False where a parent is not an object."""
    *parents, last = path.split(".")
    node: Any = obj
    for key in parents:
        if not isinstance(node, dict):
            return False
        node = node.setdefault(key, {})
    if not isinstance(node, dict):
        return False
    if value is DELETE:
        node.pop(last, None)
    else:
        node[last] = value
    return True


@st.composite
def bent(
    draw: st.DrawFn,
    base: st.SearchStrategy[dict[str, Any]],
    paths: Sequence[str],
    values: st.SearchStrategy[Any] = json_values,
    max_bends: int = 3,
) -> tuple[dict[str, Any], list[str]]:
    """A valid object from ``base`` with 1 to ``max_bends`` of ``paths`` replaced or removed;
    returns it and the paths actually bent."""
    obj = copy.deepcopy(draw(base))
    chosen = draw(st.lists(st.sampled_from(list(paths)), min_size=1, max_size=max_bends,
                           unique=True))
    done = []
    for path in sorted(chosen, key=lambda p: p.count(".")):
        value = draw(st.one_of(st.just(DELETE), values))
        if set_path(obj, path, value):
            done.append(path)
    return obj, done


def related(field: str, paths: Sequence[str]) -> bool:
    """Whether ``field`` is one of ``paths``, inside one, or holds one (``spec.cpu`` for a
    bent ``spec.cpu.packagePowerCapWatts`` that turned its parent into a non-object)."""
    return any(
        field == p or field.startswith(p + ".") or p.startswith(field + ".") for p in paths
    )
