"""The status table (kubectl's look: upper-case headers, columns 3 spaces apart) and JSON."""

from __future__ import annotations

import json
from collections.abc import Sequence

from agentpool.kubectl.pools import Pools
from agentpool.kubectl.rows import NodeRow, short_duration

COLUMNS = ("NODE", "OWNER", "API", "CPU CAP", "GPU CAP", "RESULT", "BACKEND", "POWER", "AGE")
WIDE = ("GPU RESULT", "MESSAGE")


def _dash(value: object) -> str:
    return "-" if value is None or value == "" else str(value)


def _owner(row: NodeRow) -> str:
    if row.owner is None:
        return "none" if row.owner_live is False else "-"
    return row.owner if row.owner_live is not False else f"{row.owner} (dead)"


def _cells(row: NodeRow, wide: bool) -> list[str]:
    power = None if row.power_w is None else f"{row.power_w:.0f} W"
    if power is not None and row.whole_node_power:
        power += " (node)"
    cells = [
        row.node, _owner(row), row.api.value, _dash(row.cpu_cap), _dash(row.gpu_cap),
        _dash(row.result), _dash(row.backend), _dash(power),
        _dash(None if row.age_s is None else short_duration(row.age_s)),
    ]
    if wide:
        cells += [_dash(row.gpu_result), _dash(row.message)]
    return cells


def table(rows: Sequence[NodeRow], wide: bool = False) -> str:
    header = list(COLUMNS + WIDE if wide else COLUMNS)
    lines = [header, *(_cells(row, wide) for row in rows)]
    widths = [max(len(line[i]) for line in lines) for i in range(len(header))]
    out = []
    for line in lines:
        padded = [cell.ljust(width) for cell, width in zip(line, widths, strict=True)]
        out.append("   ".join(padded).rstrip())
    return "\n".join(out) + "\n"


def as_json(rows: Sequence[NodeRow], pools: Pools | None = None) -> str:
    problems = sum(1 for row in rows if row.problems)
    pools = pools or Pools()
    document = {
        "nodes": [row.as_json() for row in rows],
        "problemNodes": problems,
        "shards": [pool.as_json() for pool in pools.pools],
        "notes": list(pools.notes),
    }
    return json.dumps(document, indent=2) + "\n"
