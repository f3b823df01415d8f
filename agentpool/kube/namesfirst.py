"""List the few objects a pod wants out of many: every name first, then each wanted one by name.

A pod of a static pool of many shards owns one node in ``POOL_SHARDS`` of those its selector
picks, and tells which by name alone (``fnv32a(name) % POOL_SHARDS``). Listing the selector's
Nodes whole to keep a fiftieth of them made the API server read, encode and send every
managed node's 14 KB (a real Node's images and conditions) and the pod decode it: 1.6 to
2.2 s of a 5,000-node cluster's start, most of a pool pod's time to ready. Asked as a Table
without the rows' objects (``includeObject=None``, what ``kubectl get`` reads), the same list
is about 200 bytes a node and takes 0.5 to 0.7 s; each owned node is then read by name, a
few at once (55 of them in 0.06 to 0.13 s), measured on a real kube-apiserver 1.20 with
5,000 such nodes (BENCHMARKS.md). ``PartialObjectMetadata`` was measured too: a node's
metadata is a third of it (managed fields, annotations), 0.9 to 1.4 s.

The objects read by name are each at least as new as the names' snapshot, and the watch
resumes from the snapshot, so it replays what changed since: an object may step back to
the version of a change replayed, for that moment, and then forward to its latest (the
replay comes at once, before any later event). One gone meanwhile is not listed (its
deletion, replayed, concerns nothing the cache holds); one made meanwhile comes as ADDED.

A server that answers no Table (406, or the objects themselves: it ignored the ``Accept``
header, as the simulation kit's API emulator does) is listed whole instead, once told.
"""

from __future__ import annotations

import functools
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

from agentpool.errors import KubePermanentError
from agentpool.kube.api import KubeApi, Listing, Resource, again_if_expired

NAMES_PAGE_SIZE = 500
"""Rows per page of a Table (client-go's reflector's page): 500 rows are about 100 KB."""

BY_NAME_AT_ONCE = 4
"""Objects read by name at once: enough to overlap the round trips, few enough that the
API server, on the cores it shares on a small control plane, still answers others."""


@dataclass(frozen=True)
class Names:
    """The names a list holds, and the resourceVersion of its snapshot."""

    names: list[str]
    resource_version: str


def list_names(
    api: KubeApi,
    resource: Resource,
    label_selector: str | None = None,
    field_selector: str | None = None,
    page_size: int = NAMES_PAGE_SIZE,
) -> Names | None:
    """The names of the objects the selectors pick, in pages of one snapshot; None where the
    server answers no Table of them.

    A ``continue`` token that expired meanwhile (410 Gone) starts the list again, once, as
    :meth:`KubeApi.list` does."""
    return again_if_expired(
        functools.partial(_names, api, resource, label_selector, field_selector, page_size))


def _names(
    api: KubeApi,
    resource: Resource,
    label_selector: str | None,
    field_selector: str | None,
    page_size: int,
) -> Names | None:
    names: list[str] = []
    version = ""
    token: str | None = None
    while True:
        try:
            page = api.table_page(resource, label_selector, field_selector, page_size, token)
        except KubePermanentError as exc:
            if exc.status == 406:  # Not Acceptable: no Tables here
                return None
            raise
        column = _name_column(page)
        if column is None:
            return None
        rows = page.get("rows") or []
        names.extend(str(row["cells"][column]) for row in rows if _has_cell(row, column))
        meta = page.get("metadata") or {}
        version = version or str(meta.get("resourceVersion") or "")
        token = str(meta.get("continue") or "") or None
        if not token:
            return Names(names, version)


def _name_column(page: dict[str, Any]) -> int | None:
    """Which cell of a Table's rows holds the object's name (the column of format ``name``);
    None if the answer is no Table or has no such column."""
    if page.get("kind") != "Table":
        return None
    columns = page.get("columnDefinitions")
    if not isinstance(columns, list):
        return None
    for index, column in enumerate(columns):
        if isinstance(column, dict) and column.get("format") == "name":
            return index
    return None


def _has_cell(row: Any, column: int) -> bool:
    cells = row.get("cells") if isinstance(row, dict) else None
    return isinstance(cells, list) and len(cells) > column and isinstance(cells[column], str)


def list_wanted(
    api: KubeApi,
    resource: Resource,
    wants: Callable[[str], bool],
    label_selector: str | None = None,
    keep: Callable[[dict[str, Any]], bool] | None = None,
    trim: Callable[[dict[str, Any]], dict[str, Any]] | None = None,
) -> Listing | None:
    """The objects of ``resource`` the selector picks whose names ``wants`` (and ``keep``
    keeps), each cut down by ``trim``; None where the server answers no Table of names."""
    named = list_names(api, resource, label_selector)
    if named is None:
        return None

    def one(name: str) -> list[dict[str, Any]]:
        # A list by metadata.name is the one object, or none once it left the selector or
        # is gone (a field selector on the name is a single read in the API server's store).
        return api.list(resource, label_selector, f"metadata.name={name}", keep=keep,
                        trim=trim).items

    wanted = [name for name in named.names if wants(name)]
    with ThreadPoolExecutor(BY_NAME_AT_ONCE, thread_name_prefix=f"list-{resource}") as pool:
        items = [item for found in pool.map(one, wanted) for item in found]
    return Listing(items, named.resource_version)
