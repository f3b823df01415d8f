"""What start-up does before the supervisor's heavy imports: the fork server, launched first.

The fork server needs seconds before it can fork (its imports, warm-up, code packing
and heap layout: :mod:`agentpool.worker.forking.preload`), and no worker starts before
it is ready. The supervisor's own imports (the Kubernetes client above all) and its
first lists take about as long, so the server is launched here, from the command line
right after the settings parse, for the two to overlap instead of adding up.

A worker inherits two things from the server that must be in place before it is
launched: the descriptor limit, raised to the hard limit here, and
``PROMETHEUS_MULTIPROC_DIR``, naming the multiprocess directory prepared here (an
unusable one is a :class:`ConfigError` naming the variable, before anything started).
Deliberately light: the command line imports this before anything heavy.
"""

from __future__ import annotations

import contextlib
import os
import resource
import shutil
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

from agentpool.config.settings import DiagnosticsSettings
from agentpool.errors import ConfigError
from agentpool.supervisor.forkclient import ForkServer

RESERVED_FDS = 256
"""Descriptors for everything but the workers: API and HTTP sockets, logs, the selector."""
FDS_PER_NODE = 5
"""A worker's pipe and exit sentinel, and its three metrics files the collector keeps open."""


def raise_fd_limit() -> int:
    """Raise the soft ``RLIMIT_NOFILE`` to the hard limit; the soft limit now in force."""
    hard = resource.getrlimit(resource.RLIMIT_NOFILE)[1]
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_NOFILE, (hard, hard))
    return resource.getrlimit(resource.RLIMIT_NOFILE)[0]


def node_capacity(fd_limit: int) -> int:
    """How many nodes a process with ``fd_limit`` descriptors can control."""
    if fd_limit == resource.RLIM_INFINITY:
        return sys.maxsize
    return max(0, (fd_limit - RESERVED_FDS) // FDS_PER_NODE)


def usable_dir(variable: str, configured: str) -> Path:
    """``configured`` as a directory this process can write, created if missing; a
    ConfigError naming ``variable`` when it cannot be (a file in the way, a read-only
    mount, a name too long). Written to once here, because the workers write there
    later, where a failure would be one per node rather than one at start."""
    path = Path(configured)
    try:
        path.mkdir(parents=True, exist_ok=True)
        fd, probe = tempfile.mkstemp(prefix=".agentpool-probe-", dir=path)
        os.close(fd)
        os.unlink(probe)
    except OSError as exc:
        why = exc.strerror or str(exc)
        raise ConfigError(
            variable, configured, f"expected a directory the agent can create and write ({why})"
        ) from None
    return path


def prepare_metrics_dir(configured: str | None) -> tuple[str, bool]:
    """The multiprocess directory, emptied of old ``*.db`` files; True if we created it."""
    if configured:
        path = usable_dir("PROMETHEUS_MULTIPROC_DIR", configured)
        try:
            for old in path.glob("*.db"):
                old.unlink(missing_ok=True)
        except OSError as exc:  # a *.db that is a directory, or not ours to remove
            problem = f"expected a directory whose old *.db files can be removed ({exc})"
            raise ConfigError("PROMETHEUS_MULTIPROC_DIR", configured, problem) from None
        return str(path), False
    return tempfile.mkdtemp(prefix="agentpool-metrics-"), True


@dataclass
class Prelaunch:
    """What :func:`prelaunch` set up; whoever runs the agent owns it from then on."""

    capacity: int
    """Nodes the raised descriptor limit covers (:func:`node_capacity`)."""
    metrics_dir: str
    private_metrics: bool
    """The metrics directory is a temporary one of ours, removed at exit."""
    fork_server: ForkServer

    def close(self) -> None:
        """Stop the fork server and remove a private metrics directory (for a caller that
        does not get as far as running the agent)."""
        self.fork_server.stop()
        if self.private_metrics:
            shutil.rmtree(self.metrics_dir, ignore_errors=True)


def prelaunch(multiproc_dir: str | None, diagnostics: DiagnosticsSettings | None = None
              ) -> Prelaunch:
    """Raise the descriptor limit, prepare the metrics directory (``multiproc_dir``, or a
    temporary one) and put it in the environment, then launch the fork server (with
    ``diagnostics``)."""
    capacity = node_capacity(raise_fd_limit())
    metrics_dir, private = prepare_metrics_dir(multiproc_dir)
    os.environ["PROMETHEUS_MULTIPROC_DIR"] = metrics_dir
    fork_server = ForkServer(diagnostics)
    try:
        fork_server.ensure_running()
    except BaseException:
        if private:
            shutil.rmtree(metrics_dir, ignore_errors=True)
        raise
    return Prelaunch(capacity, metrics_dir, private, fork_server)
