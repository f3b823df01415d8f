"""The CPU floor of ``bench/floor.py``: the requests of every node's tick, in one bare loop.

Reads node names from stdin, then for ``--seconds`` makes, once per node and
``--interval``, what an enforcing tick of the agent asks of the outside:
with ``--endpoint``, the control POST (the agent's JSON, a kept-alive
connection per origin written and read by the agent's own wire code,
:mod:`agentpool.backends.http11`, the JSON answer parsed); with
``--zone ENERGY=LIMIT`` pairs, a read of each package zone's energy counter
and a write of its share of the cap. Prints its own CPU seconds (user +
system) and the node-ticks made. Nothing else: no controller, no metrics, no
reports, which is what the agent's CPU per node-tick is compared with.
"""

from __future__ import annotations

import argparse
import datetime
import json
import sys
import time
from urllib.parse import quote, urlsplit

from agentpool.backends import http11


def main() -> int:
    p = argparse.ArgumentParser()
    p.add_argument("--interval", type=float, required=True)
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--cap", type=float, required=True)
    p.add_argument("--endpoint")
    p.add_argument("--zone", action="append", default=[])
    args = p.parse_args()
    nodes = sys.stdin.read().split()
    zones = [tuple(z.split("=", 1)) for z in args.zone]
    connections: dict[str, http11.Connection] = {}

    def post(node: str) -> None:
        assert args.endpoint is not None
        url = urlsplit(args.endpoint.replace("{node}", quote(node, safe="")))
        conn = connections.get(url.netloc)
        if conn is None:
            conn = connections[url.netloc] = http11.Connection(url.hostname or "", url.port or 80)
            conn.connect(5)
        ts = datetime.datetime.now(datetime.UTC).isoformat(timespec="microseconds")
        body = json.dumps({"node": node, "action": "rapl.set_power_cap_watts",
                           "capWatts": args.cap, "throttlePct": -1, "ts": ts}).encode()
        data = http11.request_bytes("POST", url.path, url.netloc,
                                    {"Content-Type": "application/json"}, body)
        json.loads(conn.exchange(data, time.monotonic() + 5, 1 << 20).body)

    per_node = len(zones) // max(1, len(nodes))
    share = int(args.cap * 1e6)  # the cap on every package zone, as the agent writes it

    def host(index: int) -> None:
        for energy, limit in zones[index * per_node:(index + 1) * per_node]:
            with open(energy, encoding="ascii") as f:
                int(f.read())
            with open(limit, "w", encoding="ascii") as f:
                f.write(f"{share}\n")

    ticks = 0
    started = time.monotonic()
    cpu0 = time.process_time()
    next_round = started
    while time.monotonic() - started < args.seconds:
        for index, node in enumerate(nodes):
            if args.endpoint:
                post(node)
            else:
                host(index)
            ticks += 1
        next_round += args.interval
        time.sleep(max(0.0, next_round - time.monotonic()))
    print(f"{time.process_time() - cpu0:.6f} {ticks}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
