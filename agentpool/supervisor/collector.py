"""Merge the workers' prometheus_client multiprocess files, fast, for ``/metrics``.

Same file format and merge semantics as ``prometheus_client.multiprocess.
MultiProcessCollector``, with two differences that matter at 1,000 workers:

- Parsed keys are cached across scrapes. A file is append-only (the first
  4 bytes say how much is used; each entry is a 4-byte key length, the JSON
  key padded to 8 bytes, then two doubles: value and timestamp), so an entry's
  offset never moves: a scrape re-reads only the doubles, and JSON-decodes
  only entries appended since the last scrape. The stock collector decodes
  every key on every scrape.
- Only the used part of each file is read (``os.pread``), never the mmap's
  whole preallocated size, and files stay open across scrapes: the directory
  listing gives each file's inode, so an unchanged file costs one ``pread``
  per scrape instead of open/fstat/read/close (3,000 files at 1,000 workers).
  A replaced file (a restarted worker's gauges, after ``mark_process_dead``)
  has a new inode and is reopened; a deleted one is closed.
- :meth:`FastMultiProcessCollector.render` writes the text exposition
  directly: each entry's ``name{labels}`` is rendered once and cached with
  it, so a scrape only formats numbers. Going through ``collect()`` and
  ``generate_latest`` builds and sorts a Sample per series per scrape, which
  at 1,000 workers (~20,000 series) cost as much as the stock collector.
  ``render()`` merges exactly like ``collect()`` (same order, same bytes as
  ``generate_latest`` over it); ``collect()`` stays for registries and tests.

A gauge sample whose value is NaN is a tombstone (see :mod:`agentpool.metrics`)
and is dropped. The layout is read without locks, like the stock collector:
a writer appends the entry before bumping ``used``, so a reader sees either
the old or the new length.
"""

from __future__ import annotations

import json
import math
import os
import struct
from collections import defaultdict
from collections.abc import Iterable, Iterator
from dataclasses import dataclass, field

from prometheus_client.metrics_core import Metric
from prometheus_client.openmetrics.exposition import (
    UNDERSCORES,
    escape_label_name,
    escape_metric_name,
)
from prometheus_client.registry import Collector
from prometheus_client.samples import Sample
from prometheus_client.utils import floatToGoString

_INT = struct.Struct("i")
_DOUBLES = struct.Struct("dd")
_FIRST_READ = 4096
"""Bytes read first; files are preallocated far larger than their used part, which a
worker's few series keep to 1-3 KiB, so a bigger read only copies zeros."""

Labels = tuple[tuple[str, str], ...]


@dataclass(frozen=True)
class _Entry:
    value_pos: int
    metric: str
    sample: str
    labels: Labels
    help: str


# How render() merges one entry (the same rules as _Merge.add).
_SUM, _GAUGE_SUM, _GAUGE_SET, _GAUGE_MIN, _GAUGE_MAX, _GAUGE_RECENT, _BUCKET, _SKIP = range(8)

_Step = tuple[int, int, str, str, str | None, float]
"""(op, index of the value as a double, metric, ``name{labels}``, for a histogram bucket
the ``_count`` line of its label group, and its bound)."""


@dataclass
class _FileCache:
    inode: int
    fd: int | None = None
    """Kept open across scrapes (None beyond ``max_open``: opened per read)."""
    parsed_to: int = 8
    entries: list[_Entry] = field(default_factory=list)
    plan: list[_Step] = field(default_factory=list)
    """Parallel to ``entries``, extended by ``render()`` as entries appear."""
    metrics: dict[str, tuple[str, str]] = field(default_factory=dict)
    groups: dict[str, dict[str, dict[float, str]]] = field(default_factory=dict)
    """Histogram metric -> ``_count`` line of a label group -> bound -> bucket line."""
    """Metric -> (kind, help) of the planned entries, in first-seen order."""


def _escape_value(value: str) -> str:
    return value.replace("\\", r"\\").replace("\n", r"\n").replace('"', r"\"")


def _series(name: str, labels: Labels) -> str:
    """``name{labels}`` as ``generate_latest`` writes it (labels sorted, legacy escaping)."""
    text = escape_metric_name(name, UNDERSCORES)
    if not labels:
        return text
    inner = ",".join(
        f'{escape_label_name(k, UNDERSCORES)}="{_escape_value(v)}"' for k, v in sorted(labels)
    )
    return f"{text}{{{inner}}}"


def _plan_entry(kind: str, mode: str, ident: str, e: _Entry) -> _Step:
    index = e.value_pos // 8
    if kind == "gauge":
        base = mode.removeprefix("live")
        if base == "all":
            return (
                _GAUGE_SET,
                index,
                e.metric,
                _series(e.sample, (*e.labels, ("pid", ident))),
                None,
                0,
            )
        op = {"min": _GAUGE_MIN, "max": _GAUGE_MAX, "mostrecent": _GAUGE_RECENT}.get(
            base, _GAUGE_SUM
        )
        return op, index, e.metric, _series(e.sample, e.labels), None, 0.0
    if kind == "histogram" and e.sample.endswith("_bucket"):
        le = dict(e.labels).get("le")
        if le is None:
            return _SKIP, index, e.metric, "", None, 0.0
        without_le = tuple(item for item in e.labels if item[0] != "le")
        bound = float(le)
        bucket = _series(
            e.metric + "_bucket",
            (*without_le, ("le", floatToGoString(bound))),  # type: ignore[no-untyped-call]
        )
        return _BUCKET, index, e.metric, bucket, _series(e.metric + "_count", without_le), bound
    return _SUM, index, e.metric, _series(e.sample, e.labels), None, 0.0


def _parse(data: bytes, start: int, used: int, into: list[_Entry]) -> int:
    pos = start
    while pos < used:
        (length,) = _INT.unpack_from(data, pos)
        if length <= 0 or pos + 4 + length > used:
            break  # a torn tail: try again at the next scrape
        key = data[pos + 4 : pos + 4 + length].decode("utf-8")
        value_pos = pos + 4 + length + (8 - (length + 4) % 8)
        if value_pos + 16 > used:
            break
        metric, sample, labels, help_text = json.loads(key)
        into.append(_Entry(value_pos, metric, sample, tuple(sorted(labels.items())), help_text))
        pos = value_pos + 16
    return pos


class FastMultiProcessCollector(Collector):
    """A ``Collector`` over a multiprocess directory; not thread safe (one scrape at a time)."""

    def __init__(self, path: str, max_open: int = 4096) -> None:
        self.path = path
        self.max_open = max_open
        """Files kept open between scrapes at most (3 per worker); the rest are opened per read."""
        self._files: dict[str, _FileCache] = {}

    def _drop(self, name: str) -> None:
        cache = self._files.pop(name, None)
        if cache is not None and cache.fd is not None:
            os.close(cache.fd)

    def close(self) -> None:
        """Close the files kept open between scrapes."""
        for name in list(self._files):
            self._drop(name)

    def _load(self, name: str, inode: int) -> tuple[_FileCache, bytes] | None:
        cache = self._files.get(name)
        if cache is not None and cache.inode != inode:
            self._drop(name)  # replaced since the last scrape
            cache = None
        fd = cache.fd if cache is not None else None
        opened = fd is None
        if fd is None:
            try:
                fd = os.open(os.path.join(self.path, name), os.O_RDONLY)
            except FileNotFoundError:
                return None  # marked dead between the listing and now
        try:
            if cache is None:
                # The inode of the file actually opened, in case it was replaced meanwhile.
                keep = len(self._files) < self.max_open
                cache = self._files[name] = _FileCache(os.fstat(fd).st_ino, fd if keep else None)
                opened = not keep
            # One read covers the used part of a worker's files (a few KiB) in the common case.
            data = os.pread(fd, max(_FIRST_READ, cache.parsed_to + 1024), 0)
            if len(data) < 4:
                return None
            (used,) = _INT.unpack_from(data, 0)
            data = os.pread(fd, used, 0) if used > len(data) else data[:used]
        finally:
            if opened:
                os.close(fd)
        if cache.parsed_to > used:  # rewritten in place: start over
            cache.parsed_to, cache.entries, cache.plan = 8, [], []
            cache.metrics, cache.groups = {}, {}
        if cache.parsed_to < used:
            cache.parsed_to = _parse(data, cache.parsed_to, len(data), cache.entries)
        return cache, data

    def _read(self, name: str, inode: int) -> Iterator[tuple[_Entry, float, float]]:
        loaded = self._load(name, inode)
        if loaded is None:
            return
        cache, data = loaded
        for entry in cache.entries:
            if entry.value_pos + 16 <= len(data):
                value, timestamp = _DOUBLES.unpack_from(data, entry.value_pos)
                yield entry, value, timestamp

    def _names(self) -> dict[str, int] | None:
        """``*.db`` file name -> inode, from the directory entries (no stat per file)."""
        try:
            with os.scandir(self.path) as entries:
                names = {e.name: e.inode() for e in entries if e.name.endswith(".db")}
        except FileNotFoundError:
            return None
        for stale in self._files.keys() - names.keys():
            self._drop(stale)
        return names

    def render(self) -> bytes:
        """The merged samples in the Prometheus text format (``generate_latest``'s bytes)."""
        names = self._names()
        if not names:
            return b""
        meta: dict[str, tuple[str, str]] = {}
        values: dict[str, dict[str, float]] = {}
        stamps: dict[str, float] = {}
        groups: dict[str, dict[str, dict[float, str]]] = {}
        bucket_counts: dict[str, float] = {}  # bucket line -> count (not yet cumulative)
        for name, inode in names.items():
            loaded = self._load(name, inode)
            if loaded is None:
                continue
            cache, data = loaded
            if len(cache.plan) < len(cache.entries):
                parts = name[:-3].split("_")
                kind = parts[0]
                mode = parts[1] if kind == "gauge" else ""
                for e in cache.entries[len(cache.plan) :]:
                    cache.plan.append(_plan_entry(kind, mode, parts[-1], e))
                    cache.metrics.setdefault(e.metric, (kind, e.help))
                    op, _, _, line, group, bound = cache.plan[-1]
                    if op == _BUCKET and group is not None:
                        by_group = cache.groups.setdefault(e.metric, {})
                        by_group.setdefault(group, {})[bound] = line
            for metric, info in cache.metrics.items():
                if metric not in meta:
                    meta[metric] = info
                    values[metric] = {}
            for metric, file_groups in cache.groups.items():
                merged = groups.setdefault(metric, {})
                for group, bounds in file_groups.items():
                    known = merged.get(group)
                    if known is None:
                        merged[group] = bounds  # shared with the cache: copied before a merge
                    elif known is not bounds:
                        merged[group] = {**known, **bounds}
            # Entries are 8-byte aligned, so the values are doubles at fixed indexes.
            doubles = memoryview(data)[: len(data) - len(data) % 8].cast("d")
            for op, index, metric, line, _group, _bound in cache.plan:
                value = doubles[index]
                if op == _BUCKET:
                    bucket_counts[line] = bucket_counts.get(line, 0.0) + value
                    continue
                vals = values[metric]
                if op == _SUM:
                    vals[line] = vals.get(line, 0.0) + value
                elif value != value or op == _SKIP:
                    continue  # a NaN gauge is a tombstone
                elif op == _GAUGE_SUM:
                    vals[line] = vals.get(line, 0.0) + value
                elif op == _GAUGE_SET:
                    vals[line] = value
                elif op == _GAUGE_MIN:
                    vals[line] = min(value, vals.get(line, value))
                elif op == _GAUGE_MAX:
                    vals[line] = max(value, vals.get(line, value))
                else:  # mostrecent: the timestamp follows the value
                    timestamp = doubles[index + 1]
                    if timestamp >= stamps.get(line, -math.inf):
                        stamps[line] = timestamp
                        vals[line] = value
        formatted: dict[float, str] = {}  # few distinct values (0, 1, caps, counts) repeat a lot

        def fmt(value: float) -> str:
            text = formatted.get(value)
            if text is None:
                text = formatted[value] = floatToGoString(value)  # type: ignore[no-untyped-call]
            return text

        out: list[str] = []
        for metric, (kind, help_text) in meta.items():
            exposed = escape_metric_name(
                metric + "_total" if kind == "counter" else metric, UNDERSCORES
            )
            doc = help_text.replace("\\", r"\\").replace("\n", r"\n")
            out.append(f"# HELP {exposed} {doc}\n# TYPE {exposed} {kind}\n")
            for line, value in values[metric].items():
                out.append(f"{line} {fmt(value)}\n")
            for count_line, by_bound in groups.get(metric, {}).items():
                acc = 0.0
                for bound in sorted(by_bound):
                    line = by_bound[bound]
                    acc += bucket_counts[line]
                    out.append(f"{line} {fmt(acc)}\n")
                out.append(f"{count_line} {fmt(acc)}\n")
        return "".join(out).encode("utf-8")

    def collect(self) -> Iterable[Metric]:
        names = self._names()
        if names is None:
            return []
        merged = _Merge()
        for name, inode in names.items():
            parts = name[:-3].split("_")
            kind = parts[0]
            mode = parts[1] if kind == "gauge" else ""
            ident = parts[-1]
            for entry, value, timestamp in self._read(name, inode):
                merged.add(kind, mode, ident, entry, value, timestamp)
        return merged.metrics()


class _Merge:
    """Combine samples across files as the stock collector does, per metric type and mode."""

    def __init__(self) -> None:
        self._meta: dict[str, tuple[str, str]] = {}
        self._values: dict[str, dict[tuple[str, Labels], float]] = defaultdict(dict)
        self._stamps: dict[tuple[str, Labels], float] = {}
        self._buckets: dict[str, dict[Labels, dict[float, float]]] = defaultdict(
            lambda: defaultdict(lambda: defaultdict(float))
        )

    def add(
        self, kind: str, mode: str, ident: str, e: _Entry, value: float, timestamp: float
    ) -> None:
        self._meta.setdefault(e.metric, (kind, e.help))
        values = self._values[e.metric]
        key = (e.sample, e.labels)
        if kind == "gauge":
            if math.isnan(value):
                return  # tombstone
            base = mode.removeprefix("live")
            if base == "all":
                values[(e.sample, (*e.labels, ("pid", ident)))] = value
            elif base == "min":
                values[key] = min(value, values.get(key, value))
            elif base == "max":
                values[key] = max(value, values.get(key, value))
            elif base == "mostrecent":
                if timestamp >= self._stamps.get(key, -math.inf):
                    self._stamps[key] = timestamp
                    values[key] = value
            else:
                values[key] = values.get(key, 0.0) + value
        elif kind == "histogram" and e.sample.endswith("_bucket"):
            le = dict(e.labels).get("le")
            without_le = tuple(item for item in e.labels if item[0] != "le")
            if le is not None:
                self._buckets[e.metric][without_le][float(le)] += value
        else:
            values[key] = values.get(key, 0.0) + value

    def metrics(self) -> list[Metric]:
        out: list[Metric] = []
        for name, (kind, help_text) in self._meta.items():
            metric = Metric(name, help_text, kind)
            values = self._values[name]
            for labels, buckets in self._buckets.get(name, {}).items():
                acc = 0.0
                for bound, count in sorted(buckets.items()):
                    acc += count
                    le = floatToGoString(bound)  # type: ignore[no-untyped-call]
                    values[(name + "_bucket", (*labels, ("le", le)))] = acc
                values[(name + "_count", labels)] = acc
            metric.samples = [Sample(s, dict(labels), v) for (s, labels), v in values.items()]
            out.append(metric)
        return out
