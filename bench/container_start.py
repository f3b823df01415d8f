"""Container time to ready: ``docker run`` of an image to the first 200 from ``/readyz``.

Needs a Docker engine and a cluster the agent can list (its kubeconfig, read from
the host): the agent runs in pool mode, one shard, on the host network, as root
(to read the kubeconfig's files). Images are taken in turn, round after round, so
a baseline image (an older build) and the one under test see the same load::

    python bench/container_start.py --kubeconfig K agentpool:old agentpool:new --rounds 5

The time includes the engine creating and starting the container; /readyz is
polled every 20 ms.
"""

from __future__ import annotations

import argparse
import os
import socket
import statistics
import subprocess
import time
import urllib.error
import urllib.request


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ready(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/readyz", timeout=1) as answer:
            return bool(answer.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def time_to_ready(docker: str, image: str, kubeconfig: str, timeout_s: float = 120.0) -> float:
    port = _free_port()
    mount = os.path.dirname(os.path.abspath(kubeconfig))
    started = time.monotonic()
    container = subprocess.run(
        [docker, "run", "-d", "--rm", "--network", "host", "--user", "0",
         "-v", f"{mount}:{mount}:ro", "-e", f"KUBECONFIG={os.path.abspath(kubeconfig)}",
         "-e", "AGENT_MODE=pool", "-e", "POOL_SHARDS=1",
         "-e", f"METRICS_ADDR=127.0.0.1:{port}", image],
        capture_output=True, text=True, check=True,
    ).stdout.strip()
    try:
        while not _ready(port):
            if time.monotonic() - started > timeout_s:
                raise TimeoutError(f"{image} not ready in {timeout_s:g}s")
            time.sleep(0.02)
        return time.monotonic() - started
    finally:
        subprocess.run([docker, "stop", "-t", "10", container], capture_output=True, check=False)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("images", nargs="+")
    parser.add_argument("--kubeconfig", required=True)
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--docker", default="/usr/bin/docker")
    args = parser.parse_args()
    times: dict[str, list[float]] = {image: [] for image in args.images}
    for _ in range(args.rounds):
        for image in args.images:
            times[image].append(time_to_ready(args.docker, image, args.kubeconfig))
    for image, samples in times.items():
        print(f"{image}: median {statistics.median(samples):.2f} s, min {min(samples):.2f}, "
              f"max {max(samples):.2f}  ({', '.join(f'{t:.2f}' for t in samples)})")


if __name__ == "__main__":
    main()
