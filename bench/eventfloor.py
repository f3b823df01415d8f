"""What receiving one watch event costs, by client: the floor under issue 46's per-write goal.

A pool pod that watches the kinds whole receives every NodeTwin and NodeHardware watch
event of the cluster (no API server filters by a hash shard), so its CPU per write about
an unowned node has a floor: what any client pays to receive one (docs/modes.md says which
pods watch their nodes' objects by name instead, and receive none). This measures it on
a real etcd + kube-apiserver (envtest, ``KUBEBUILDER_ASSETS``) with the chart's CRDs and
``--nodes`` nodes' NodeTwins and NodeHardwares (``clusterobjects.py``, about 2 KB each),
while their statuses are written at ``--rate`` per second, for four clients, one at a
time, each holding the same two watches for ``--seconds``:

- ``curl``: C (libcurl, OpenSSL), each stream written to a pipe and its lines counted
  (skipped where curl is not installed);
- ``socket``: Python, a TLS socket read into one buffer, events counted, nothing parsed
  (the least a Python client can do);
- ``http.client``: Python's standard library, each event's line read
  (``apifloor.py watch``, the floor ``clustersize.py`` prints);
- ``kubernetes``: the kubernetes client's watch stream, each line as the agent reads it
  (``kubernetes.watch.watch.iter_resp_lines`` over urllib3), not decoded.

Each client runs twice, the same window without writes and then with them: its CPU
(user + system, the process's own) with writes less its CPU without, per event received,
is what the events themselves cost (starting, connecting and waiting taken off);
``--rounds`` repeats the four. No agent code runs here. Goals are not asserted;
the exit status is 1 only when the run itself failed. It replaces its section of
BENCHMARKS.md (``--output -``: none).

    KUBEBUILDER_ASSETS=... .venv/bin/python bench/eventfloor.py        # about 7 minutes
    .venv/bin/python bench/eventfloor.py --nodes 20 --rate 20 --seconds 3 --rounds 1 --output -
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import tempfile
import threading
from collections.abc import Callable, Iterator
from pathlib import Path
from urllib.parse import urlsplit

from apifloor import JOULIE, Server, _pages, cpu_of
from clusterobjects import Churn, Connections, seed
from kubernetes import client
from kubernetes.watch.watch import iter_resp_lines
from measure import machine
from report import replace_section

from agentpool.sim.clusterapi import chart_crds
from agentpool.sim.envtest import ADMIN, EnvtestServer

ROOT = Path(__file__).resolve().parents[1]
PATHS = (f"{JOULIE}/nodetwins", f"{JOULIE}/nodehardwares")
READERS = ("curl", "socket", "http.client", "kubernetes")


def _query(index: int, version: int, seconds: float) -> str:
    return f"{PATHS[index]}?watch=true&resourceVersion={version}&timeoutSeconds={int(seconds)}"


def _socket(url: str, token: str, ca: str, path: str, count: list[int]) -> None:
    parts = urlsplit(url)
    host = parts.hostname or "127.0.0.1"
    context = ssl.create_default_context(cafile=ca)
    with context.wrap_socket(socket.create_connection((host, parts.port or 443)),
                             server_hostname=host) as conn:
        conn.sendall((f"GET {path} HTTP/1.1\r\nHost: {host}\r\nAuthorization: Bearer {token}\r\n"
                      "Accept: application/json\r\nConnection: close\r\n\r\n").encode())
        buffer = bytearray(1 << 16)
        view = memoryview(buffer)
        while size := conn.recv_into(buffer):
            count[0] += bytes(view[:size]).count(b'{"type":')


def _kubernetes(url: str, token: str, ca: str, path: str, count: list[int]) -> None:
    config = client.Configuration()
    config.host, config.ssl_ca_cert = url, ca
    config.api_key = {"authorization": f"Bearer {token}"}
    api = client.CustomObjectsApi(client.ApiClient(config))
    query = dict(pair.split("=", 1) for pair in path.split("?", 1)[1].split("&"))
    response = api.list_cluster_custom_object(
        "joulie.io", "v1alpha1", path.split("?", 1)[0].rsplit("/", 1)[1], watch=True,
        resource_version=query["resourceVersion"], timeout_seconds=int(query["timeoutSeconds"]),
        _preload_content=False)
    for _ in iter_resp_lines(response):  # type: ignore[no-untyped-call]  # (unannotated)
        count[0] += 1


def read(kind: str, url: str, token: str, ca: str, paths: list[str]) -> dict[str, float]:
    """One Python client's watches, each in a thread; its events and CPU."""
    target: Callable[[str, str, str, str, list[int]], None] = (
        _socket if kind == "socket" else _kubernetes)
    counts = [[0] for _ in paths]
    threads = [threading.Thread(target=target, args=(url, token, ca, path, counts[i]))
               for i, path in enumerate(paths)]
    print("listed", flush=True)
    cpu = cpu_of(threads)
    return {"events": float(sum(c[0] for c in counts)), "cpu_s": cpu}


def _curl(server: EnvtestServer, token: str, paths: list[str]) -> dict[str, float]:
    curl = shutil.which("curl")
    assert curl is not None
    procs = [subprocess.Popen([curl, "-sN", "--cacert", str(server.ca_file), "-H",
                               f"Authorization: Bearer {token}", server.url + path],
                              stdout=subprocess.PIPE) for path in paths]
    events = 0
    for proc in procs:
        assert proc.stdout is not None
        events += sum(1 for _ in proc.stdout)
    cpu = 0.0
    for proc in procs:
        # The child's own rusage, as the kernel accounts it at its exit.
        _, status, usage = os.wait4(proc.pid, 0)
        proc.returncode = os.waitstatus_to_exitcode(status)
        if proc.returncode:
            raise RuntimeError(f"curl exited {proc.returncode}")
        cpu += usage.ru_utime + usage.ru_stime
    return {"events": float(events), "cpu_s": cpu}


@contextlib.contextmanager
def _churn(conns: Connections, names: list[str], rate: float) -> Iterator[None]:
    """Statuses written at ``rate`` per second (half NodeTwins, half NodeHardwares)."""
    if rate <= 0:
        yield
        return
    with Churn(conns, names, rate, 0.5):
        yield


def measure(kind: str, server: EnvtestServer, conns: Connections, names: list[str],
            opts: argparse.Namespace, rate: float) -> dict[str, float] | None:
    token = server.users[ADMIN].token
    plain = Server(server.url, token, str(server.ca_file))
    versions = [_pages(plain, path, "", 500) for path in PATHS]
    paths = [_query(i, v, opts.seconds) for i, v in enumerate(versions)]
    if kind == "curl":
        if shutil.which("curl") is None:
            return None
        with _churn(conns, names, rate):
            return _curl(server, token, paths)
    if kind == "http.client":
        command = [sys.executable, str(Path(__file__).with_name("apifloor.py")), "watch",
                   "--url", server.url, "--token", token, "--ca", str(server.ca_file),
                   "--seconds", str(opts.seconds)]
    else:
        command = [sys.executable, __file__, "--read", kind, "--url", server.url, "--token",
                   token, "--ca", str(server.ca_file), *(f"--path={p}" for p in paths)]
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, text=True)
    assert proc.stdout is not None
    if proc.stdout.readline().strip() != "listed":
        raise RuntimeError(f"{kind}: the reader failed to start")
    with _churn(conns, names, rate):
        out, _ = proc.communicate(timeout=opts.seconds + 120)
    if proc.returncode:
        raise RuntimeError(f"{kind}: the reader failed")
    result: dict[str, float] = json.loads(out.strip().splitlines()[-1])
    return result


def parse(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=(__doc__ or "").split("\n\n")[0])
    p.add_argument("--nodes", type=int, default=1000)
    p.add_argument("--rate", type=float, default=100.0, help="status writes per second")
    p.add_argument("--seconds", type=float, default=20.0, help="each client's window")
    p.add_argument("--rounds", type=int, default=2)
    p.add_argument("--output", default=str(ROOT / "BENCHMARKS.md"),
                   help="the report whose section is replaced ('-': none)")
    p.add_argument("--read", choices=("socket", "kubernetes"), help=argparse.SUPPRESS)
    p.add_argument("--url", help=argparse.SUPPRESS)
    p.add_argument("--token", help=argparse.SUPPRESS)
    p.add_argument("--ca", help=argparse.SUPPRESS)
    p.add_argument("--path", action="append", default=[], help=argparse.SUPPRESS)
    return p.parse_args(argv)


def main(argv: list[str] | None = None) -> int:
    opts = parse(argv)
    if opts.read:  # one reader, as a process of its own
        print(json.dumps(read(opts.read, opts.url, opts.token, opts.ca, opts.path)))
        return 0
    names = [f"worker-{i:05d}.dc1.example.com" for i in range(opts.nodes)]
    started = datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC")
    host = machine()
    lines = [f"Run {started} on {host['cpu']} ({host['cores']} cores), curl and Python "
             f"{host['python']}: {opts.nodes:,} NodeTwins and NodeHardwares, "
             f"statuses written at {opts.rate:g}/s, {opts.seconds:g} s per client and window, "
             f"{opts.rounds} round(s).", "",
             "| client | events | CPU idle (s) | CPU with writes (s) | CPU per event |",
             "|---|---|---|---|---|"]
    for line in lines:
        print(line, flush=True)
    with tempfile.TemporaryDirectory(prefix="agentpool-eventfloor-") as tmp, \
            EnvtestServer(workdir=Path(tmp) / "envtest") as server:
        server.api().apply(chart_crds())
        conns = Connections(server.url, server.users[ADMIN].token, server.ssl_context())
        seed(conns, names)
        for _ in range(opts.rounds):
            for kind in READERS:
                # The same window without writes first: what starting, connecting and
                # waiting cost is taken off, so what is left is the events' own CPU.
                idle = measure(kind, server, conns, names, opts, 0.0)
                busy = measure(kind, server, conns, names, opts, opts.rate)
                if idle is None or busy is None:
                    lines.append(f"| {kind} | - | - | - | not installed |")
                else:
                    per_event = 1e6 * (busy["cpu_s"] - idle["cpu_s"]) / max(1.0, busy["events"])
                    lines.append(f"| {kind} | {busy['events']:.0f} | {idle['cpu_s']:.3f} | "
                                 f"{busy['cpu_s']:.3f} | {per_event:.0f} us |")
                print(lines[-1], flush=True)
    if opts.output != "-":
        replace_section(Path(opts.output), "eventfloor.py", "\n".join(lines))
    return 0


if __name__ == "__main__":
    sys.exit(main())
