"""The API server's part of the agent's figures: what receiving alone costs, and takes.

``bench/clustersize.py`` runs this module as a process of its own, beside the agent's
figures, for the floor under them (no agent code is used here, only the standard
library):

- ``watch``: the watches a pool pod holds on NodeTwins and NodeHardwares, one thread
  each, every event's line read and nothing else done with it (no JSON decoded), for
  ``--seconds`` while another process writes statuses (it prints ``listed`` when its
  watches are about to open); prints the events received and the CPU spent on them.
  Its CPU per event is what any client pays to receive one on this machine (a TLS
  record and a thread's wake-up).
- ``list``: the lists a pool pod makes at start (its selector's Nodes, every NodeTwin
  and NodeHardware), in parallel, in the agent's page sizes, each page read and not
  decoded; prints how long the API server took to answer them all, then the Nodes
  alone (what a pod that watches its nodes' objects by name waits for before those),
  then the Nodes' names alone (the Table without objects such a pod asks for instead,
  in pages of 500: ``agentpool.kube.namesfirst``).

    .venv/bin/python bench/apifloor.py watch --url U --token T --ca CA --seconds 30
    .venv/bin/python bench/apifloor.py list --url U --token T --ca CA
"""

from __future__ import annotations

import argparse
import http.client
import json
import re
import resource
import ssl
import sys
import threading
import time
from urllib.parse import quote, urlsplit

JOULIE = "/apis/joulie.io/v1alpha1"
LISTS = (("/api/v1/nodes", "joulie.io/managed=true", 100), (f"{JOULIE}/nodetwins", "", 100),
         (f"{JOULIE}/nodehardwares", "", 100))
"""The agent's page sizes (``agentpool.kube.api``)."""
_VERSION = re.compile(rb'"resourceVersion":"([0-9]+)"')
_CONTINUE = re.compile(rb'"continue":"([^"]*)"')


class Server:
    def __init__(self, url: str, token: str, ca: str) -> None:
        parts = urlsplit(url)
        self.host, self.port = parts.hostname or "127.0.0.1", parts.port or 443
        self.headers = {"Authorization": f"Bearer {token}", "Accept": "application/json"}
        self.context = ssl.create_default_context(cafile=ca)

    def get(self, path: str, timeout: float = 120.0, accept: str = "application/json",
            ) -> http.client.HTTPResponse:
        conn = http.client.HTTPSConnection(self.host, self.port, context=self.context,
                                           timeout=timeout)
        conn.request("GET", path, headers={**self.headers, "Accept": accept})
        answer = conn.getresponse()
        if answer.status != 200:
            raise RuntimeError(f"GET {path}: HTTP {answer.status}")
        return answer


TABLE = "application/json;as=Table;v=v1;g=meta.k8s.io"


def _pages(server: Server, path: str, selector: str, limit: int, names: bool = False) -> int:
    """Every page of one list (``names``: a Table of names only), read and dropped; the
    list's resourceVersion."""
    token, version = "", 0
    while True:
        query = f"?limit={limit}" + (f"&labelSelector={quote(selector)}" if selector else "")
        query += "&includeObject=None" if names else ""
        page = path + query + (f"&continue={quote(token)}" if token else "")
        body = server.get(page, accept=TABLE if names else "application/json").read()
        if not version:
            found = _VERSION.findall(body)
            version = int(found[-1]) if found else 0
        tokens = _CONTINUE.findall(body)
        token = tokens[-1].decode() if tokens else ""
        if not token:
            return version


def lists(server: Server) -> dict[str, float]:
    started = time.monotonic()
    threads = [threading.Thread(target=_pages, args=(server, *spec)) for spec in LISTS]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    together = time.monotonic() - started
    started = time.monotonic()
    _pages(server, *LISTS[0])
    nodes = time.monotonic() - started
    started = time.monotonic()
    _pages(server, LISTS[0][0], LISTS[0][1], 500, names=True)
    return {"lists_s": together, "nodes_s": nodes, "names_s": time.monotonic() - started}


def watches(server: Server, seconds: float) -> dict[str, float]:
    paths = (f"{JOULIE}/nodetwins", f"{JOULIE}/nodehardwares")
    versions = [_pages(server, path, "", 500) for path in paths]
    counts = [0] * len(paths)

    def read(index: int) -> None:
        answer = server.get(f"{paths[index]}?watch=true&resourceVersion={versions[index]}"
                            f"&timeoutSeconds={int(seconds)}", timeout=seconds + 30)
        while answer.readline():
            counts[index] += 1

    threads = [threading.Thread(target=read, args=(i,)) for i in range(len(paths))]
    print("listed", flush=True)  # the caller starts writing now
    cpu = cpu_of(threads)
    return {"events": float(sum(counts)), "cpu_s": cpu}


def cpu_of(threads: list[threading.Thread]) -> float:
    """Start the threads, wait for them all, and return the process's CPU meanwhile."""
    usage = resource.getrusage(resource.RUSAGE_SELF)
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    after = resource.getrusage(resource.RUSAGE_SELF)
    return after.ru_utime + after.ru_stime - usage.ru_utime - usage.ru_stime


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("what", choices=("watch", "list"))
    p.add_argument("--url", required=True)
    p.add_argument("--token", required=True)
    p.add_argument("--ca", required=True)
    p.add_argument("--seconds", type=float, default=30.0)
    a = p.parse_args(argv)
    server = Server(a.url, a.token, a.ca)
    result = lists(server) if a.what == "list" else watches(server, a.seconds)
    print(json.dumps(result))
    return 0


if __name__ == "__main__":
    sys.exit(main())
