"""The report of bench/scale.py: one row per quantity, judged against its goal.

:func:`rows` is the table (label, goal, how to show a :class:`Run`'s value,
whether the goal is met); :func:`markdown` writes its section of BENCHMARKS.md around it.
"""

from __future__ import annotations

import datetime as dt
import math
from collections.abc import Callable
from dataclasses import dataclass

from measure import machine
from scale_steps import Options, Run


def fmt(value: float | None, spec: str) -> str:
    if value is None or (isinstance(value, float) and math.isnan(value)):
        return "-"
    return format(value, spec)


@dataclass(frozen=True)
class Row:
    label: str
    goal: str
    show: Callable[[Run], str]
    met: Callable[[Run], bool] | None = None


def _v(run: Run, key: str) -> float | None:
    return run.values.get(key)


def _ms(key: str) -> Callable[[Run], str]:
    def show(run: Run) -> str:
        value = _v(run, key)
        return fmt(None if value is None else value * 1000, ".0f")

    return show


def _num(key: str, spec: str) -> Callable[[Run], str]:
    return lambda run: fmt(_v(run, key), spec)


def _pair(first: Callable[[Run], str], second: Callable[[Run], str]) -> Callable[[Run], str]:
    return lambda run: f"{first(run)} / {second(run)}"


def _check(key: str, ok: Callable[[float], bool]) -> Callable[[Run], bool]:
    def met(run: Run) -> bool:
        value = _v(run, key)
        return value is not None and not math.isnan(value) and ok(value)

    return met


def _speedup(run: Run) -> str:
    value = _v(run, "scrape_speedup")
    return "-" if value is None else f"{value:.1f}x"


def _files_bounded(run: Run) -> bool:
    before, after = _v(run, "files_before"), _v(run, "files_after")
    return before is not None and after is not None and after <= before


def rows(opts: Options) -> list[Row]:
    return _agent_rows(opts) + _metrics_rows(opts)


def _agent_rows(opts: Options) -> list[Row]:
    iv = f"{opts.interval_s:g} s"
    hung = f"{opts.hung_fraction:.0%}"
    # CPU is measured at the bench interval; at <= 20 s that is at least the goal's tick rate.
    cpu_met = _check("cpu_pct", lambda v: v < 50.0) if opts.interval_s <= 20 else None
    return [
        Row(
            "start-up: all workers running and caps applied (s)",
            "< 15 s",
            _num("startup_s", ".1f"),
            _check("startup_s", lambda v: v < 15.0),
        ),
        Row("  of which: last cap applied (s)", "", _num("startup_caps_s", ".1f")),
        Row(
            "median worker PSS (MiB)",
            "<= 4 MiB",
            _num("pss_median_mib", ".2f"),
            _check("pss_median_mib", lambda v: v <= 4.0),
        ),
        Row("p95 worker PSS (MiB)", "", _num("pss_p95_mib", ".2f")),
        Row(
            "median / p95 worker USS (MiB)",
            "",
            _pair(_num("uss_median_mib", ".2f"), _num("uss_p95_mib", ".2f")),
        ),
        Row("total PSS of the agent's processes (MiB)", "", _num("pss_total_mib", ".0f")),
        Row(
            f"API requests per node per tick, steady ({opts.steady_intervals} x {iv})",
            "<= 0.05",
            _num("api_per_node_tick", ".4f"),
            _check("api_per_node_tick", lambda v: v <= 0.05),
        ),
        Row(
            f"API requests per node per minute, the same window ({opts.steady_intervals} x {iv})",
            "",
            _num("api_per_node_minute", ".3f"),
        ),
        Row(
            "open watches: max per resource kind / total",
            "<= 1 per kind",
            _pair(_num("watches_max", ".0f"), _num("watches_total", ".0f")),
            _check("watches_max", lambda v: v <= 1),
        ),
        Row("control ticks per node per interval (~1)", "", _num("ticks_per_node_interval", ".2f")),
        Row(
            f"steady CPU, supervisor + workers (% of one core, at {iv})",
            "< 50% at 20 s",
            _num("cpu_pct", ".1f"),
            cpu_met,
        ),
        Row("  of which supervisor (%)", "", _num("cpu_sup_pct", ".1f")),
        Row(
            f"profile change -> control request p50 / p99 (ms), {opts.changes} at once",
            "p99 < 2 s",
            _pair(_ms("change_p50_s"), _ms("change_p99_s")),
            _check("change_p99_s", lambda v: v < 2.0),
        ),
        Row(
            f"tick slip of healthy nodes with {hung} of controls hung: mean / p99 (%)",
            "mean < 10%",
            _pair(_num("slip_mean_pct", "+.2f"), _num("slip_p99_pct", "+.2f")),
            _check("slip_mean_pct", lambda v: abs(v) < 10.0),
        ),
    ]


def _metrics_rows(opts: Options) -> list[Row]:
    return [
        Row(
            f"/metrics p50 / p99 (ms), the agent over HTTP, {opts.scrapes} scrapes",
            "",
            _pair(_ms("scrape_p50_s"), _ms("scrape_p99_s")),
        ),
        Row(
            "stock MultiProcessCollector, same dir, p50 / p99 (ms)",
            "",
            _pair(_ms("stock_p50_s"), _ms("stock_p99_s")),
        ),
        Row("  agent's collector in-process, p50 (ms)", "", _ms("fast_p50_s")),
        Row(
            "  joulie_* series differing from stock (must be 0)", "", _num("series_mismatch", ".0f")
        ),
        Row(
            "/metrics p50 speed-up over stock",
            ">= 5x",
            _speedup,
            _check("scrape_speedup", lambda v: v >= 5.0),
        ),
        Row(
            f"multiprocess files: at start / after {opts.restarts} worker SIGKILLs",
            "bounded",
            _pair(_num("files_before", ".0f"), _num("files_after", ".0f")),
            _files_bounded,
        ),
        Row("  stock pid-named files would be (one set per pid)", "", _num("stock_files", ".0f")),
        Row("wall time of this N (s)", "", lambda r: f"{r.seconds:.0f}"),
    ]


def table(runs: list[Run], opts: Options) -> str:
    judged = max(runs, key=lambda r: r.nodes)
    head = ["quantity", f"goal (N={judged.nodes})", *[f"N={r.nodes}" for r in runs], "met"]
    lines = ["| " + " | ".join(head) + " |", "|" + "---|" * len(head)]
    for row in rows(opts):
        cells = [row.show(r) for r in runs]
        met = "" if row.met is None else ("yes" if row.met(judged) else "**no**")
        lines.append("| " + " | ".join([row.label, row.goal, *cells, met]) + " |")
    return "\n".join(lines)


def markdown(runs: list[Run], opts: Options, command: str, wall_s: float) -> str:
    info = machine()
    notes = [note for r in runs for note in r.notes]
    errors = [f"N={r.nodes}: {r.error}" for r in runs if r.error]
    parts = [
        "### Last full run",
        "",
        "Scale of one `agentpool` pool pod (1 shard) against the simulation kit: the API",
        "emulator and the power simulator run in the benchmark process, the agent is the real",
        "`python -m agentpool` subprocess. Method: the docstring of `bench/scale.py`.",
        "",
        f"- date: {dt.datetime.now(dt.UTC).strftime('%Y-%m-%d %H:%M UTC')}",
        f"- machine: {info['cores']} cores ({info['cpu']}), {info['memory']} memory, "
        f"Python {info['python']}, {info['platform']}",
        f"- command: `{command}` ({wall_s / 60:.1f} minutes)",
        f"- reconcile interval {opts.interval_s:g} s; steady state "
        f"{opts.steady_intervals} intervals; status heartbeat 5 min, spread",
        "",
        table(runs, opts),
        "",
        "Notes on reading it:",
        "",
        "- Start-up is measured from launching the agent process (imports included) to the",
        "  later of: the simulator received every node's first control request, and",
        '  `agentpool_workers{state="running"}` reached N.',
        "- API requests are every request the emulator saw in the window (status PATCHes,",
        "  watch re-opens), divided by N x ticks. Status heartbeats are spread over their",
        "  5-minute period, so a short window samples them at their average rate.",
        "- CPU is user + system time of the supervisor, the fork server, the resource tracker and",
        "  every worker (psutil), over the steady window. The goal is stated for a 20 s interval;",
        "  at 10 s every worker ticks twice as often, so the measured share is an upper bound.",
        "- Tick slip: intervals between consecutive control requests of each healthy node at the",
        "  simulator, while 10% of the nodes' control endpoints hang (each hung tick waits for",
        "  the 2 s HTTP timeout), relative to the configured interval.",
        "- The stock collector is `prometheus_client.multiprocess.MultiProcessCollector` over the",
        "  agent's own multiprocess directory, in the benchmark process, interleaved with the",
        "  agent's scrapes. The agent's time includes HTTP and its in-memory `agentpool_*` series.",
        "- Stock file count: a pid-named setup keeps a file set per pid; `mark_process_dead`",
        "  removes only the `gauge_live*` files of a dead pid, so its counter and histogram files",
        "  stay. The agent names files by node (`metrics_id(node)`), so a restart reuses them.",
    ]
    if notes or errors:
        parts += ["", "Run notes:", ""] + [f"- {x}" for x in notes + errors]
    return "\n".join(parts) + "\n"

