"""Merge the workers' prometheus_client multiprocess files into ``/metrics`` text.

The merge rules are those of ``prometheus_client.multiprocess.
MultiProcessCollector`` (tests/supervisor/test_collector.py compares the two
over the same directory, value for value), with the work a scrape repeats
cached across scrapes:

- A file is append-only and an entry's offset never moves, so each entry's
  JSON key is decoded once, and its ``name{labels}`` text rendered once; a
  scrape re-reads only the doubles and formats numbers.
- Only the used part of a file is read (``os.pread``), and files stay open
  between scrapes, keyed by inode from the directory listing: an unchanged
  file costs one read. A replaced file (a restarted worker's gauges, after
  ``mark_process_dead``) has a new inode and is reopened; a deleted one is
  closed.

A gauge sample whose value is NaN is a tombstone (see :mod:`agentpool.controller.metrics`)
and is dropped. The files are read without locks, like the stock collector:
a writer appends the entry before bumping ``used``, so a reader sees either
the old or the new length.

The on-disk layout is prometheus_client's ``mmap_dict`` format, which is not
a public API: it is read in :func:`_parse` and :meth:`FastMultiProcessCollector._load`
only, and setup.cfg pins prometheus-client to the versions the tests ran against.
"""

from __future__ import annotations

import json
import os
import struct
from dataclasses import dataclass, field

from prometheus_client.openmetrics.exposition import (
    UNDERSCORES,
    escape_label_name,
    escape_metric_name,
)
from prometheus_client.utils import floatToGoString

_INT = struct.Struct("i")
_FIRST_READ = 4096
"""Bytes read first; files are preallocated far larger than their used part, which a
worker's few series keep to a few KiB, so a bigger read only copies zeros."""

Labels = tuple[tuple[str, str], ...]

# How one entry merges across files (MultiProcessCollector._accumulate_metrics).
_SUM, _GAUGE_SUM, _GAUGE_SET, _GAUGE_MIN, _GAUGE_MAX, _GAUGE_RECENT, _BUCKET = range(7)


@dataclass(frozen=True)
class _Step:
    """One entry of a file, planned once: how to merge it and the text it renders as."""

    op: int
    index: int
    """Index of the value as a double in the file (entries are 8-byte aligned)."""
    metric: str
    line: str
    """``name{labels}`` as ``generate_latest`` writes it."""
    group: str | None = None
    """For a histogram bucket: the ``_count`` line of its label group."""
    bound: float = 0.0
    """For a histogram bucket: its upper bound."""


@dataclass
class _FileCache:
    inode: int
    kind: str
    """Metric type, from the file name: ``counter``, ``gauge``, ``histogram``, ``summary``."""
    mode: str
    """A gauge's multiprocess mode without ``live`` (``sum``, ``all``, ...); else ''."""
    ident: str
    """The process identifier in the file name (the ``pid`` label of ``all`` gauges)."""
    fd: int | None = None
    """Kept open across scrapes (None beyond ``max_open``: opened per read)."""
    parsed_to: int = 8
    plan: list[_Step] = field(default_factory=list)
    metrics: dict[str, tuple[str, str]] = field(default_factory=dict)
    """Metric -> (kind, help) of the planned entries, in first-seen order."""
    groups: dict[str, dict[str, dict[float, str]]] = field(default_factory=dict)
    """Histogram metric -> ``_count`` line of a label group -> bound -> bucket line."""

    @classmethod
    def for_file(cls, name: str, inode: int, fd: int | None) -> _FileCache:
        # <type>_<id>.db, or gauge_<mode>_<id>.db (prometheus_client's file naming).
        parts = name[:-3].split("_")
        mode = parts[1].removeprefix("live") if parts[0] == "gauge" else ""
        return cls(inode, parts[0], mode, parts[-1], fd)

    def reset(self) -> None:
        self.parsed_to, self.plan, self.metrics, self.groups = 8, [], {}, {}


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


def _plan(cache: _FileCache, index: int, metric: str, sample: str, labels: Labels) -> _Step:
    if cache.kind == "gauge":
        if cache.mode == "all":
            line = _series(sample, (*labels, ("pid", cache.ident)))
            return _Step(_GAUGE_SET, index, metric, line)
        op = {"min": _GAUGE_MIN, "max": _GAUGE_MAX, "mostrecent": _GAUGE_RECENT}.get(
            cache.mode, _GAUGE_SUM
        )
        return _Step(op, index, metric, _series(sample, labels))
    le = dict(labels).get("le")
    if cache.kind == "histogram" and le is not None:
        without_le = tuple(item for item in labels if item[0] != "le")
        bound = float(le)
        le_text = floatToGoString(bound)  # type: ignore[no-untyped-call]
        bucket = _series(metric + "_bucket", (*without_le, ("le", le_text)))
        return _Step(_BUCKET, index, metric, bucket, _series(metric + "_count", without_le), bound)
    return _Step(_SUM, index, metric, _series(sample, labels))


def _parse(data: bytes, used: int, cache: _FileCache) -> None:
    """Plan the entries appended since the last scrape.

    The mmap_dict layout: a 4-byte ``used`` length and 4 bytes of padding,
    then entries of a 4-byte key length, the UTF-8 JSON key
    ``[metric, sample, labels, help]`` padded to 8 bytes, and two doubles
    (value, timestamp).
    """
    pos = cache.parsed_to
    while pos < used:
        (length,) = _INT.unpack_from(data, pos)
        if length <= 0 or pos + 4 + length > used:
            break  # a torn tail: try again at the next scrape
        key = data[pos + 4 : pos + 4 + length].decode("utf-8")
        value_pos = pos + 4 + length + (8 - (length + 4) % 8)
        if value_pos + 16 > used:
            break
        metric, sample, labels, help_text = json.loads(key)
        step = _plan(cache, value_pos // 8, metric, sample, tuple(sorted(labels.items())))
        cache.plan.append(step)
        cache.metrics.setdefault(metric, (cache.kind, help_text))
        if step.group is not None:
            by_group = cache.groups.setdefault(metric, {})
            by_group.setdefault(step.group, {})[step.bound] = step.line
        pos = value_pos + 16
    cache.parsed_to = pos


@dataclass
class _Scrape:
    """What one scrape accumulates over the files, then writes as text."""

    meta: dict[str, tuple[str, str]] = field(default_factory=dict)
    values: dict[str, dict[str, float]] = field(default_factory=dict)
    stamps: dict[str, float] = field(default_factory=dict)
    groups: dict[str, dict[str, dict[float, str]]] = field(default_factory=dict)
    buckets: dict[str, float] = field(default_factory=dict)
    """Bucket line -> count, summed over files (made cumulative when written)."""

    def add_metrics(self, cache: _FileCache) -> None:
        for metric, info in cache.metrics.items():
            if metric not in self.meta:
                self.meta[metric] = info
                self.values[metric] = {}
        for metric, file_groups in cache.groups.items():
            merged = self.groups.setdefault(metric, {})
            for group, bounds in file_groups.items():
                known = merged.get(group)
                if known is None:
                    merged[group] = bounds  # shared with the cache: copied before a merge
                elif known is not bounds:
                    merged[group] = {**known, **bounds}

    def add_values(self, cache: _FileCache, data: bytes) -> None:
        doubles = memoryview(data)[: len(data) - len(data) % 8].cast("d")
        for step in cache.plan:
            value = doubles[step.index]
            line = step.line
            if step.op == _BUCKET:
                self.buckets[line] = self.buckets.get(line, 0.0) + value
                continue
            vals = self.values[step.metric]
            if step.op == _SUM:
                vals[line] = vals.get(line, 0.0) + value
            elif value != value:
                continue  # a NaN gauge is a tombstone
            elif step.op == _GAUGE_SUM:
                vals[line] = vals.get(line, 0.0) + value
            elif step.op == _GAUGE_SET:
                vals[line] = value
            elif step.op == _GAUGE_MIN:
                vals[line] = min(value, vals.get(line, value))
            elif step.op == _GAUGE_MAX:
                vals[line] = max(value, vals.get(line, value))
            else:  # mostrecent: the timestamp follows the value; the stock rule, ties included
                timestamp = doubles[step.index + 1]
                if self.stamps.get(line, 0.0) < timestamp:
                    self.stamps[line] = timestamp
                    vals[line] = value

    def text(self) -> bytes:
        formatted: dict[float, str] = {}  # few distinct values (0, 1, caps, counts) repeat a lot

        def fmt(value: float) -> str:
            text = formatted.get(value)
            if text is None:
                text = formatted[value] = floatToGoString(value)  # type: ignore[no-untyped-call]
            return text

        out: list[str] = []
        for metric, (kind, help_text) in self.meta.items():
            exposed = escape_metric_name(
                metric + "_total" if kind == "counter" else metric, UNDERSCORES
            )
            doc = help_text.replace("\\", r"\\").replace("\n", r"\n")
            out.append(f"# HELP {exposed} {doc}\n# TYPE {exposed} {kind}\n")
            for line, value in self.values[metric].items():
                out.append(f"{line} {fmt(value)}\n")
            for count_line, by_bound in self.groups.get(metric, {}).items():
                acc = 0.0
                for bound in sorted(by_bound):
                    line = by_bound[bound]
                    acc += self.buckets[line]
                    out.append(f"{line} {fmt(acc)}\n")
                out.append(f"{count_line} {fmt(acc)}\n")
        return "".join(out).encode("utf-8")


class FastMultiProcessCollector:
    """Renders a multiprocess directory as Prometheus text; not thread safe (one scrape
    at a time)."""

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
        """The file's cache, its new entries planned, and the used part of its bytes."""
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
                ino = os.fstat(fd).st_ino
                cache = self._files[name] = _FileCache.for_file(name, ino, fd if keep else None)
                opened = not keep
            # One read covers the used part of a worker's files (a few KiB) in the common case;
            # the first 4 bytes of the layout are the used length.
            data = os.pread(fd, max(_FIRST_READ, cache.parsed_to + 1024), 0)
            if len(data) < 4:
                return None
            (used,) = _INT.unpack_from(data, 0)
            data = os.pread(fd, used, 0) if used > len(data) else data[:used]
        finally:
            if opened:
                os.close(fd)
        if cache.parsed_to > len(data):  # rewritten in place: start over
            cache.reset()
        if cache.parsed_to < len(data):
            _parse(data, len(data), cache)
        return cache, data

    def _names(self) -> dict[str, int]:
        """``*.db`` file name -> inode, from the directory entries (no stat per file)."""
        try:
            with os.scandir(self.path) as entries:
                names = {e.name: e.inode() for e in entries if e.name.endswith(".db")}
        except FileNotFoundError:
            names = {}
        for stale in self._files.keys() - names.keys():
            self._drop(stale)
        return names

    def render(self) -> bytes:
        """The merged samples in the Prometheus text format, as ``generate_latest`` writes
        them over ``MultiProcessCollector`` (tombstones dropped)."""
        scrape = _Scrape()
        for name, inode in self._names().items():
            loaded = self._load(name, inode)
            if loaded is not None:
                cache, data = loaded
                scrape.add_metrics(cache)
                scrape.add_values(cache, data)
        return scrape.text()
