"""How the demo shows itself: a live table on a terminal, plain lines in a pipe.

On a TTY the screen is redrawn in place every second with ANSI escapes (home,
clear to end), which every terminal emulator understands, so no curses is
needed. Without a TTY (CI logs, ``| tee``) timeline events are printed as they
happen and the table every few seconds, so the output reads as a log.
"""

from __future__ import annotations

import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol, TextIO

from agentpool.demo.observe import NodeRow, Snapshot

HOME_CLEAR = "\x1b[H\x1b[J"
HIDE_CURSOR = "\x1b[?25l"
SHOW_CURSOR = "\x1b[?25h"
TTY_REFRESH_S = 1.0
PLAIN_TABLE_EVERY_S = 5.0
COLUMNS = (
    "NODE", "SHARD", "API", "PROFILE", "CAP", "BACKEND", "THROTTLE", "POWER", "RESULT", "PID",
    "RESTARTS",
)


@dataclass(frozen=True)
class ShardInfo:
    shard: int
    pid: int
    metrics_url: str


@dataclass(frozen=True)
class Header:
    """The parts of the header that do not change during a run."""

    nodes: int
    unmanaged: int
    interval: str
    api_url: str
    kubeconfig: str
    power_url: str
    shards: Sequence[ShardInfo]

    def lines(self, snap: Snapshot | None) -> list[str]:
        at = f"t+{snap.at:.0f}s" if snap is not None else "starting"
        lines = [
            f"agentpool demo  {at}  {self.nodes} managed + {self.unmanaged} unmanaged "
            f"KWOK nodes, {len(self.shards)} shards, reconcile every {self.interval}",
            f"  API server    {self.api_url}   KUBECONFIG={self.kubeconfig}",
            f"  power sim     {self.power_url}",
        ]
        for info in self.shards:
            workers = "?"
            if snap is not None and snap.shards[info.shard].up:
                workers = str(len(snap.shards[info.shard].pids))
            lines.append(
                f"  shard {info.shard}  agent pid {info.pid}  workers {workers}  "
                f"merged metrics {info.metrics_url}"
            )
        return lines


def _cells(row: NodeRow) -> list[str]:
    def dash(value: object) -> str:
        return "-" if value is None or value == "" else str(value)

    result = row.result or "pending"
    if not row.managed:
        result = "unmanaged"
    return [
        row.node,
        dash(row.shard),
        dash(row.api),
        dash(row.profile),
        f"{row.cap:g} W" if row.cap is not None else "-",
        dash(row.backend if row.managed else None),
        f"{row.throttle_pct:g} %",
        f"{row.power_w:.1f} W",
        result,
        dash(row.pid),
        dash(row.restarts),
    ]


def table(snap: Snapshot, with_message: bool = False) -> list[str]:
    """The node table, columns sized to their content; a GPU column when any node has GPUs."""
    gpus = any(row.gpu for row in snap.rows)
    columns = [*COLUMNS, "GPU"] if gpus else list(COLUMNS)
    header = columns + (["MESSAGE"] if with_message else [])
    body = [
        _cells(row) + ([row.gpu or "-"] if gpus else []) + ([row.message] if with_message else [])
        for row in snap.rows
    ]
    widths = [max(len(r[i]) for r in [header, *body]) for i in range(len(columns))]
    lines = []
    for cells in [header, *body]:
        parts = [cell.ljust(width) for cell, width in zip(cells, widths, strict=False)]
        parts += cells[len(widths) :]
        lines.append("  ".join(parts).rstrip())
    return lines


class View(Protocol):
    def event(self, at: float, text: str) -> None:
        """Something happened (printed at once, or kept for the next redraw)."""

    def tick(self, snap: Snapshot) -> None:
        """A fresh observation; the view decides whether to draw it."""

    def close(self, snap: Snapshot | None) -> None:
        """The live part is over; leave the terminal tidy and the last state visible."""

    def message(self, text: str) -> None:
        """A line outside the live view (startup, shutdown, summary)."""


def stamp(at: float, text: str) -> str:
    return f"[t+{at:4.1f}s] {text}"


class PlainView:
    """For pipes: events as lines, the table every :data:`PLAIN_TABLE_EVERY_S`."""

    def __init__(self, header: Header, out: TextIO = sys.stdout) -> None:
        self._header = header
        self._out = out
        self._last_table: float | None = None

    def _print(self, lines: Sequence[str]) -> None:
        self._out.write("".join(line + "\n" for line in lines))
        self._out.flush()

    def message(self, text: str) -> None:
        self._print([text])

    def event(self, at: float, text: str) -> None:
        self._print([stamp(at, text)])

    def tick(self, snap: Snapshot) -> None:
        if self._last_table is None:
            self._print(self._header.lines(None))
        elif snap.at - self._last_table < PLAIN_TABLE_EVERY_S:
            return
        self._last_table = snap.at
        self._print([f"--- t+{snap.at:.0f}s ---", *table(snap)])

    def close(self, snap: Snapshot | None) -> None:
        if snap is not None:
            self._print([f"--- final state, t+{snap.at:.0f}s ---", *table(snap)])


class TtyView:
    """For terminals: header, table and the latest events, redrawn in place."""

    def __init__(self, header: Header, out: TextIO = sys.stdout) -> None:
        self._header = header
        self._out = out
        self._events: list[str] = []
        self._last_draw: float | None = None
        self._shown = 0
        """How many of the latest events the last redraw had room for."""
        self._out.write(HIDE_CURSOR)

    def message(self, text: str) -> None:
        self._out.write(text + "\n")
        self._out.flush()

    def event(self, at: float, text: str) -> None:
        self._events.append(stamp(at, text))

    def tick(self, snap: Snapshot) -> None:
        if self._last_draw is not None and snap.at - self._last_draw < TTY_REFRESH_S:
            return
        self._last_draw = snap.at
        self._draw(snap)

    def _draw(self, snap: Snapshot) -> None:
        size = shutil.get_terminal_size()
        lines = [*self._header.lines(snap), "", *table(snap, with_message=True), ""]
        # Two lines for "timeline:" and "Ctrl-C to stop", one for the final newline.
        room = max(3, size.lines - len(lines) - 3)
        shown = self._events[-room:]
        self._shown = len(shown)
        lines += ["timeline:", *shown]
        lines.append("Ctrl-C to stop")
        clipped = [line[: size.columns] for line in lines]
        self._out.write(HOME_CLEAR + "\n".join(clipped) + "\n")
        self._out.flush()

    def close(self, snap: Snapshot | None) -> None:
        if snap is not None:
            self._draw(snap)
        if self._shown < len(self._events):
            # Older events scrolled off the live view; the scrollback keeps them all.
            self._out.write("\n".join(["full timeline:", *self._events]) + "\n")
        self._out.write(SHOW_CURSOR)
        self._out.flush()


def make_view(header: Header, out: TextIO = sys.stdout) -> View:
    if out.isatty():
        return TtyView(header, out)
    return PlainView(header, out)
