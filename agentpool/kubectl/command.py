"""The ``status`` command, shared by ``agentpool status`` and the ``kubectl-agentpool`` plugin.

kubectl runs an executable named ``kubectl-<name>`` found on PATH as ``kubectl
<name>``, so installing the package makes ``kubectl agentpool status`` work
with the user's kubeconfig and context, like any kubectl command.

Exit status: 0 when every managed node has a live owner and no result is
``error``; 1 when one does not (each problem on stderr); 2 for a usage
error; 3 when the cluster cannot be read.
"""

from __future__ import annotations

import logging
import signal
import sys
import time
from datetime import UTC, datetime
from types import FrameType
from typing import Any

import click

from agentpool import __version__
from agentpool.config.options import option
from agentpool.durations import parse_duration
from agentpool.errors import KubeError
from agentpool.kubectl.pools import Pools, find_pools
from agentpool.kubectl.render import as_json, table
from agentpool.kubectl.rows import NodeRow, Options, build_rows, parse_time

EXIT_PROBLEMS = 1
EXIT_UNREADABLE = 3
HEARTBEAT_S = 300.0
"""How often a live agent rewrites an unchanged status (agentpool.kube.status.HEARTBEAT_S;
repeated here so that ``--help`` needs no Kubernetes client)."""
STALE_DEFAULT = "11m"
"""Two heartbeats and a minute: a status older than that has nobody keeping it."""
CLEAR = "\x1b[H\x1b[2J"


def _duration(ctx: click.Context, param: click.Parameter, value: str) -> float:
    text = value.strip()
    if text.replace(".", "", 1).isdigit():
        text += "s"
    try:
        seconds = parse_duration(text)
    except ValueError:
        raise click.BadParameter(f"{value!r}: expected a duration such as 2s or 11m") from None
    if seconds <= 0:
        raise click.BadParameter(f"{value!r}: expected a positive duration")
    return seconds


def _now(ctx: click.Context, param: click.Parameter, value: str | None) -> datetime | None:
    if value is None:
        return None
    parsed = parse_time(value)
    if parsed is None:
        raise click.BadParameter(f"{value!r}: expected an RFC 3339 time")
    return parsed


def _snapshot(
    kubeconfig: str | None, context: str | None, selector: str, namespace: str | None,
    shards: int | None, now: datetime, stale_s: float,
) -> tuple[list[NodeRow], Pools]:
    # The Kubernetes client only now: --help and usage errors stay fast.
    from agentpool.kube.api import KubeApi
    from agentpool.kube.clusterread import read_cluster, user_client

    # The agent's account of an outage (kube.reachability) is for a long-running process's
    # log; this command says itself, on every failed read, that the cluster cannot be read.
    logging.getLogger("agentpool.kube.reachability").disabled = True
    api = KubeApi(user_client(kubeconfig, context))
    try:
        objects = read_cluster(api, selector or None, namespace, statefulsets=shards is None)
    finally:
        api.close()
    pools = find_pools(objects.statefulsets, objects.unreadable, bool(objects.leases),
                       namespace, shards)
    rows = build_rows(objects.nodes, objects.power_profiles, objects.telemetry_profiles,
                      objects.node_twins, objects.leases, Options(now, pools, stale_s))
    return rows, pools


def _show(rows: list[NodeRow], pools: Pools, output: str, watching: bool) -> None:
    if output == "json":
        click.echo(as_json(rows, pools), nl=False)
        return
    if watching and sys.stdout.isatty():
        click.echo(CLEAR, nl=False)
    elif watching:
        click.echo()
    for note in pools.notes:  # where the shard counts come from: beside, not in, the table
        click.echo(note, err=True)
    click.echo(table(rows, wide=output == "wide"), nl=False)
    for row in rows:
        for problem in row.problems:
            click.echo(f"{row.node}: {problem}", err=True)


@click.command("status")
@click.option("--kubeconfig", type=click.Path(dir_okay=False), default=None,
              help="kubeconfig file  [default: KUBECONFIG, else ~/.kube/config]")
@click.option("--context", default=None, help="kubeconfig context  [default: the current one]")
@click.option("-l", "--selector", default=option("POOL_NODE_SELECTOR").default, show_default=True,
              help="label selector of the managed nodes (the agent's POOL_NODE_SELECTOR)")
@click.option("-n", "--namespace", default=None,
              help="namespace of the agent pool (its Leases or StatefulSet)  "
                   "[default: all namespaces]")
@click.option("--shards", type=click.IntRange(min=1), default=None,
              help="static pool: POOL_SHARDS, to show each node's shard  [default: read "
                   "from the pool's StatefulSet]")
@click.option("-o", "--output", type=click.Choice(["table", "wide", "json"]), default="table",
              show_default=True, help="wide adds the GPU result and the message")
@click.option("-w", "--watch", is_flag=True, help="refresh until Ctrl-C")
@click.option("--interval", default="2s", show_default=True, callback=_duration,
              metavar="DURATION", help="with -w: time between refreshes")
@click.option("--stale", default=STALE_DEFAULT, show_default=True, callback=_duration,
              metavar="DURATION",
              help="a status older than this means no live owner (no elastic pool Leases)")
@click.option("--now", default=None, callback=_now, hidden=True,
              help="pretend it is this RFC 3339 time (reproducible output)")
def status(
    kubeconfig: str | None, context: str | None, selector: str, namespace: str | None,
    shards: int | None, output: str, watch: bool, interval: float, stale: float,
    now: datetime | None,
) -> None:
    """One line per managed node: its owner (shard or pool pod), the Joulie API it follows,
    its desired caps, the result and backend of its status, power, and the status's age.

    Reads only cluster objects with your kubeconfig (nodes, NodeTwins or NodePowerProfiles,
    TelemetryProfile statuses, pool Leases, StatefulSets): no port-forward. Says on stderr
    where the shard counts were found. Exits 1 when a managed node has no live owner or its
    result is error, 3 when the cluster cannot be read.
    """
    code = 0
    stop = _Interrupt() if watch else None
    try:
        while True:
            try:
                rows, pools = _snapshot(kubeconfig, context, selector, namespace, shards,
                                        now or datetime.now(UTC), stale)
            except KubeError as exc:
                click.echo(f"agentpool status: cannot read the cluster: {exc}", err=True)
                code = EXIT_UNREADABLE
                if not watch:
                    break
            else:
                _show(rows, pools, output, watch)
                code = EXIT_PROBLEMS if any(row.problems for row in rows) else 0
            if stop is None or stop.sleep(interval):
                break
    except KeyboardInterrupt:
        pass
    finally:
        if stop is not None:
            stop.restore()
    sys.exit(code)


class _Interrupt:
    """Ctrl-C while watching: ends the loop after the refresh in progress, instead of a
    KeyboardInterrupt raised wherever the client happens to be (which could leave it
    hanging at exit); a second Ctrl-C interrupts at once."""

    def __init__(self) -> None:
        self.requested = False
        self._previous = signal.signal(signal.SIGINT, self._on_signal)

    def _on_signal(self, signum: int, frame: FrameType | None) -> None:
        if self.requested:
            raise KeyboardInterrupt
        self.requested = True

    def sleep(self, seconds: float) -> bool:
        """Wait ``seconds`` (less once interrupted); whether Ctrl-C was pressed."""
        deadline = time.monotonic() + seconds
        while not self.requested and (left := deadline - time.monotonic()) > 0:
            time.sleep(min(left, 0.1))
        return self.requested

    def restore(self) -> None:
        signal.signal(signal.SIGINT, self._previous)


@click.group(context_settings={"max_content_width": 110})
@click.version_option(__version__, prog_name="kubectl-agentpool")
def kubectl_agentpool() -> None:
    """agentpool, the Joulie node power agent, as a kubectl plugin (kubectl agentpool ...)."""


kubectl_agentpool.add_command(status)


def main(argv: Any = None) -> None:
    kubectl_agentpool(args=argv, prog_name="kubectl agentpool")
