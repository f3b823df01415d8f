"""The ``agentpool`` command line: thin, it only parses and dispatches.

``agentpool`` with no subcommand runs the supervisor (the container
entrypoint); ``agentpool status`` is the ``kubectl agentpool status`` plugin
(:mod:`agentpool.kubectl`). Every setting is a flag generated from
:data:`~agentpool.config.options.OPTIONS`,
with its environment variable; flags win. Configuration errors exit 2.

The settings' variables are read here rather than through click's
``envvar=``: click reinterprets the variable of a flag option as a boolean,
while every value a user sets (``SIMULATE_ONLY=maybe``) must reach the
table's parser, to fail naming the variable or to be read as Joulie's agent
reads it (:mod:`agentpool.config.joulie`). The variables Joulie's examples
set and no agent reads are passed on too, to be said so once. The
subcommands' own flags use click's types.
"""

from __future__ import annotations

import logging
import os
import socket
import sys
from pathlib import Path
from typing import Any, NoReturn

import click

from agentpool import __version__
from agentpool.config.joulie import UNREAD
from agentpool.config.options import OPTIONS, option
from agentpool.config.parsers import duration
from agentpool.config.settings import Settings, load_settings
from agentpool.errors import CONFIG_EXIT, ConfigError
from agentpool.kubectl.command import status
from agentpool.pool.assignment import Assignment, member_order, owner_of, shard_of

KIT_MODULES = ("agentpool.demo", "agentpool.sim", "aiohttp", "yaml")
"""What ``agentpool demo`` needs besides the agent: the simulation kit, the demo and the
'sim' extra's dependencies."""
NO_KIT_EXIT = 2
"""``agentpool demo`` where the kit is not installed (the runtime image): it cannot run here."""


def _settings_options(func: Any) -> Any:
    for opt in reversed(OPTIONS):
        default = f"default {opt.default}" if opt.default is not None else "no default"
        help_text = f"{opt.help}  [env {opt.env}; {default}]"
        if opt.flag_value:
            func = click.option(
                opt.flag,
                opt.env,
                is_flag=False,
                flag_value="true",
                default=None,
                metavar="[true|false]",
                help=help_text,
            )(func)
        else:
            func = click.option(opt.flag, opt.env, default=None, metavar="TEXT", help=help_text)(
                func
            )
    return func


def settings_from(flags: dict[str, str | None]) -> Settings:
    """Merge flags over the environment and validate; exits 2 on a bad value."""
    raw: dict[str, str | None] = {env: os.environ.get(env) for env in UNREAD}
    for opt in OPTIONS:
        flag = flags.get(opt.env)
        raw[opt.env] = flag if flag is not None else os.environ.get(opt.env)
    try:
        return load_settings(raw)
    except ConfigError as exc:
        _config_exit(exc)


@click.group(invoke_without_command=True, context_settings={"max_content_width": 110})
@_settings_options
@click.version_option(__version__, prog_name="agentpool")
@click.pass_context
def cli(ctx: click.Context, /, **flags: str | None) -> None:
    """Joulie node power agent: a supervisor running one worker process per node.

    With no subcommand, runs the agent (daemonset or pool mode).
    """
    if ctx.invoked_subcommand is not None:
        return
    settings = settings_from(flags)
    # The metrics port opens before the heavy imports, so a probe is queued, not refused.
    from agentpool.supervisor.httpserver import listen

    listener: socket.socket | None
    try:
        listener = listen(settings.metrics_host, settings.metrics_port)
    except OSError:
        listener = None  # start-up binds again, and says why it cannot
    # The fork server first: its preload then overlaps the heavy imports below.
    from agentpool.supervisor.prelaunch import prelaunch

    try:
        early = prelaunch(settings.multiproc_dir, settings.diagnostics)
        from agentpool.supervisor.main import run  # heavy imports only when running

        code = run(settings, listener, early)
    except ConfigError as exc:  # a value found unusable at start, everything stopped again
        _config_exit(exc)
    # Everything is stopped, only the metrics server still answers (see run). Tearing the
    # interpreter down (the kubernetes client's modules) would take most of a second more.
    logging.shutdown()
    sys.stdout.flush()
    sys.stderr.flush()
    os._exit(code)


@cli.command()
@click.argument("nodes", nargs=-1, required=True)
@click.option(
    "--shards",
    type=click.IntRange(min=1),
    default=None,
    help="number of shards  [env POOL_SHARDS; default 1]",
)
@click.option(
    "--members",
    default=None,
    help="comma-separated pod names of an elastic pool: print the owning pod instead",
)
@click.option(
    "--assignment",
    default=None,
    help="with --members: modulo or rendezvous  [env POOL_ASSIGNMENT; default rendezvous]",
)
def owner(
    nodes: tuple[str, ...], shards: int | None, members: str | None, assignment: str | None
) -> None:
    """Print who owns each NODE: NODE<TAB>SHARD, or NODE<TAB>POD with --members."""
    if members is not None:
        _owner_among(nodes, members, assignment)
        return
    if assignment is not None:
        raise click.UsageError("--assignment needs --members (the static pool is modulo)")
    if shards is None:
        shards = max(1, _from_env("POOL_SHARDS"))
    for node in nodes:
        click.echo(f"{node}\t{shard_of(node, shards)}")


def _from_env(variable: str) -> Any:
    """A setting's value from the environment, parsed by its option; exits 2 when bad."""
    try:
        return option(variable).value(os.environ.get(variable))
    except ConfigError as exc:
        _config_exit(exc)


def _config_exit(exc: ConfigError) -> NoReturn:
    click.echo(f"agentpool: configuration error: {exc}", err=True)
    sys.exit(CONFIG_EXIT)


def _owner_among(nodes: tuple[str, ...], members: str, assignment: str | None) -> None:
    """The elastic pool's answer: the member each node is assigned to."""
    names = member_order(m.strip() for m in members.split(",") if m.strip())
    if not names:
        raise click.BadParameter(f"{members!r}: expected pod names", param_hint="--members")
    if assignment is None:
        how: Assignment = _from_env("POOL_ASSIGNMENT")
    else:
        try:
            how = Assignment(assignment.strip().lower())
        except ValueError:
            raise click.BadParameter(
                f"{assignment!r}: expected modulo or rendezvous", param_hint="--assignment"
            ) from None
    for node in nodes:
        click.echo(f"{node}\t{owner_of(node, names, how)}")


def _seconds_option(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """A positive duration in seconds: a bare number, or Go-style (``20s``, ``1m30s``)."""
    if value is None:
        return None
    text = value.strip()
    # A bare number means seconds, as people type it on a command line.
    if text.replace(".", "", 1).isdigit():
        text += "s"
    try:
        seconds: float = duration(positive=True)(param.name or "", text)
    except ConfigError as exc:
        raise click.BadParameter(f"{value!r}: {exc.accepted}, or bare seconds") from None
    return seconds


def _duration_option(ctx: click.Context, param: click.Parameter, value: str | None) -> float | None:
    """Like _seconds_option, but 0 means no end (None): run until Ctrl-C."""
    if value is not None and value.strip() in ("0", "0s"):
        return None
    return _seconds_option(ctx, param, value)


@cli.command()
@click.option(
    "--nodes",
    type=click.IntRange(min=3),
    default=20,
    show_default=True,
    help="managed KWOK-style nodes (plus 2 unmanaged ones)",
)
@click.option(
    "--shards",
    type=click.IntRange(min=1),
    default=2,
    show_default=True,
    help="pool shards: one agentpool process each",
)
@click.option(
    "--duration",
    default="60",
    show_default=True,
    metavar="SECONDS",
    callback=_duration_option,
    help="stop after this long (15, 90s, 2m); 0 runs until Ctrl-C",
)
@click.option(
    "--interval",
    default="2s",
    show_default=True,
    metavar="DURATION",
    callback=_seconds_option,
    help="RECONCILE_INTERVAL of the agents",
)
@click.option("--seed", type=int, default=0, show_default=True, help="seeds loads and noise")
@click.option(
    "--workdir",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="keep the kubeconfig and agent logs here; default: a temporary directory",
)
@click.option(
    "--apiserver",
    type=click.Choice(["emulator", "envtest"]),
    default="emulator",
    show_default=True,
    help="the API emulator, or a real kube-apiserver from the envtest binaries in "
    "KUBEBUILDER_ASSETS",
)
@click.option(
    "--api",
    type=click.Choice(["profiles", "nodetwin"]),
    default="profiles",
    show_default=True,
    help="Joulie API the cluster serves: profiles, or nodetwin (percent caps, NodeHardware)",
)
def demo(
    nodes: int,
    shards: int,
    duration: float | None,
    interval: float,
    seed: int,
    workdir: Path | None,
    apiserver: str,
    api: str,
) -> None:
    """Run a simulated cluster and the real pool supervisor against it, and watch it work.

    Exits 0 when everything it demonstrates was seen to work (with --duration)
    and every agent stopped cleanly.
    """
    # Imported here: the demo needs the simulation kit and the 'sim' extra, which the
    # runtime image leaves out (Dockerfile, EXTRAS).
    try:
        from agentpool.demo import DemoOptions, run_demo
        from agentpool.sim.envtest import EnvtestUnavailableError, find_assets
    except ModuleNotFoundError as exc:
        if not any(exc.name == m or (exc.name or "").startswith(f"{m}.") for m in KIT_MODULES):
            raise
        click.echo(
            f"agentpool demo: the simulation kit is not installed (no module {exc.name!r}); "
            "in a source checkout run bash scripts/demo, or pip install '.[sim]'",
            err=True,
        )
        sys.exit(NO_KIT_EXIT)
    if apiserver == "envtest":
        try:
            find_assets()
        except EnvtestUnavailableError as exc:
            raise click.BadParameter(str(exc), param_hint="--apiserver") from exc
    options = DemoOptions(nodes, shards, duration, interval or 2.0, seed, workdir, apiserver, api)
    sys.exit(run_demo(options))


@cli.command()
@click.option(
    "--sysfs-root",
    type=click.Path(file_okay=False, path_type=Path),
    default=None,
    help="host /sys mount  [env SYSFS_ROOT; default /host-sys, or /sys when that is absent]",
)
@click.option("--cap", type=click.FloatRange(min=1), default=None, help="a cap in watts to plan")
@click.option(
    "--pct",
    type=click.FloatRange(min=0, max=100, min_open=True),
    default=None,
    help="a cap as percent of the hardware maximum to plan",
)
@click.option("--gpu-cap", type=click.FloatRange(min=0, min_open=True), default=None,
              help="a GPU cap in watts per GPU to plan")
@click.option(
    "--gpu-pct",
    type=click.FloatRange(min=0, max=100, min_open=True),
    default=None,
    help="a GPU cap as percent of each GPU's maximum to plan (--gpu-cap wins)",
)
def inspect(
    sysfs_root: Path | None,
    cap: float | None,
    pct: float | None,
    gpu_cap: float | None,
    gpu_pct: float | None,
) -> None:
    """Print what the agent finds on this node (CPU packages, cpufreq, GPUs) and what it would
    do with a cap; writes nothing."""
    from agentpool.inspection import report
    from agentpool.resources.desired import GpuCap

    if sysfs_root is None:
        configured = os.environ.get("SYSFS_ROOT", "").strip()
        if configured and "{node}" not in configured:
            sysfs_root = Path(configured)
        else:
            sysfs_root = Path("/host-sys") if Path("/host-sys").is_dir() else Path("/sys")
    # Watts win over percent, as in a NodeTwin's spec.gpu.powerCap.
    planned = None
    if gpu_cap is not None:
        planned = GpuCap(watts_per_gpu=gpu_cap)
    elif gpu_pct is not None:
        planned = GpuCap(pct_of_max=gpu_pct)
    click.echo(report(sysfs_root, cap, pct, planned), nl=False)


cli.add_command(status)


def main() -> None:
    cli(prog_name="agentpool")
