"""Numbers in JSON documents: what a parsed JSON value holds when it must be a number.

Custom resources, Leases and the Joulie HTTP telemetry all arrive as parsed
JSON, where a number may be a ``bool``, ``NaN``, ``Infinity`` or an integer too
large for a float. Owns the two readings every reader shares; never raises.
"""

from __future__ import annotations

import math


def json_number(value: object) -> float | None:
    """``value`` when it is a finite JSON number, as a float; None for anything else.

    ``bool`` is an ``int`` subclass in Python, and JSON ``true`` is no wattage;
    ``json.loads`` accepts ``NaN`` and ``Infinity``, and one of those in a
    reading would poison every computation after it (each comparison with NaN
    is false). JSON integers have no limit: one too large for a float (where
    ``float()`` and ``math.isfinite`` raise ``OverflowError``) is no number
    either.
    """
    if isinstance(value, bool) or not isinstance(value, int | float):
        return None
    try:
        number = float(value)
    except OverflowError:
        return None
    return number if math.isfinite(number) else None


def json_count(value: object) -> int | None:
    """``value`` when it is a JSON integer (not ``true``/``false``); None otherwise."""
    return value if isinstance(value, int) and not isinstance(value, bool) else None
