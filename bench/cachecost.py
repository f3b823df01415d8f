"""What the supervisor's caches of a cluster cost when it keeps every node's objects.

An elastic pool pod keeps every managed node's objects (docs/modes.md: what a
pod costs as the cluster grows), so its memory grows with the cluster.
``bench/clustersize.py`` runs this module as a process of its own: it builds the
supervisor's own informers (``agentpool.supervisor.main``'s factory, with the
narrowing of an elastic pool pod), its event feed and its ClusterView, lets them
list and watch the cluster of ``--kubeconfig`` until every cache is synced and
quiet, and prints its RSS as JSON. No worker, fork server or HTTP server is
started: the difference between two cluster sizes is what the caches cost.

    .venv/bin/python bench/cachecost.py --kubeconfig K [--settle 10]
"""

from __future__ import annotations

import argparse
import json
import sys
import time

from agentpool.config.settings import load_settings
from agentpool.kube.api import KubeApi, Resource, load_client
from agentpool.supervisor.clusterview import ClusterView
from agentpool.supervisor.echoes import EventFeed
from agentpool.supervisor.main import _informer_factory
from agentpool.supervisor.nodefamily import NodeFamily
from agentpool.supervisor.selfmetrics import ApiCounters

KINDS = (Resource.NODES, Resource.NODE_TWINS, Resource.NODE_HARDWARES,
         Resource.NODE_POWER_PROFILES, Resource.TELEMETRY_PROFILES)


def rss() -> int:
    with open("/proc/self/status", encoding="ascii") as f:
        for line in f:
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--kubeconfig", required=True)
    p.add_argument("--settle", type=float, default=10.0, help="seconds after the sync (10)")
    p.add_argument("--shards", type=int, default=0,
                   help="a static pool's shard 0 of this many instead (0: an elastic pool)")
    a = p.parse_args(argv)
    pool = ({"POOL_SHARDS": str(a.shards), "POOL_SHARD_ID": "0"} if a.shards else
            {"POOL_MEMBERSHIP": "lease", "POD_NAME": "agent-pool-0", "POD_NAMESPACE": "default"})
    settings = load_settings({"KUBECONFIG": a.kubeconfig, "AGENT_MODE": "pool", **pool})
    before = rss()
    api = KubeApi(load_client(a.kubeconfig))
    view = ClusterView(settings)
    feed = EventFeed(lambda: None)
    make = _informer_factory(settings, api, feed, ApiCounters(), lambda: None)
    informers = [make(kind) for kind in KINDS]
    started = time.monotonic()
    for informer in informers:
        informer.start()
    for informer in informers:  # Nodes first: a family has its members once they listed
        for member in informer.members() if isinstance(informer, NodeFamily) else [informer]:
            member.synced.wait(600)
    synced_s = time.monotonic() - started
    deadline = time.monotonic() + a.settle
    while time.monotonic() < deadline:
        while not feed.events.empty():
            view.apply(feed.events.get_nowait())
        time.sleep(0.2)
    result = {"rss_before": before, "rss": rss(), "synced_s": synced_s,
              "nodes": len(view.labels), "twins": len(view.twins.twins)}
    for informer in informers:
        informer.stop()
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
