"""The real ``agentpool`` command as a subprocess, as a pod runs it, seen from outside.

Its logs go to a file, its metrics and probes are read over HTTP, and it is
stopped with the signals a kubelet sends.
"""

from __future__ import annotations

import contextlib
import signal
import socket
import subprocess
import urllib.error
import urllib.request
from pathlib import Path

from prometheus_client.parser import text_string_to_metric_families

from agentpool.sim.polling import wait_until


def free_port() -> int:
    """A port that was free a moment ago (the agent binds it right after)."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def worker_pids(metrics_text: str) -> dict[str, int]:
    """node -> pid of its live worker, from the ``agentpool_worker_pid`` series."""
    pids: dict[str, int] = {}
    for family in text_string_to_metric_families(metrics_text):
        if family.name == "agentpool_worker_pid":
            for sample in family.samples:
                pids[sample.labels["node"]] = int(sample.value)
    return pids


class AgentProcess:
    """One ``agentpool`` supervisor subprocess and its metrics address."""

    def __init__(self, argv: list[str], env: dict[str, str], port: int, log_path: Path) -> None:
        self.port = port
        self.log_path = log_path
        self._log = open(log_path, "ab")  # noqa: SIM115 - kept open for the child's lifetime
        self.process = subprocess.Popen(
            argv, env=env, stdout=self._log, stderr=subprocess.STDOUT, start_new_session=True
        )

    @property
    def pid(self) -> int:
        return self.process.pid

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/metrics"

    def get(self, path: str, timeout: float = 10.0) -> tuple[int, str]:
        try:
            url = f"http://127.0.0.1:{self.port}{path}"
            with urllib.request.urlopen(url, timeout=timeout) as response:
                return response.status, response.read().decode()
        except urllib.error.HTTPError as exc:
            return exc.code, exc.read().decode()

    def metrics(self) -> str:
        return self.get("/metrics")[1]

    def worker_pids(self) -> dict[str, int]:
        """node -> pid of its live worker, from the agent's ``/metrics``."""
        return worker_pids(self.metrics())

    def wait_ready(self, timeout: float = 30.0) -> None:
        def ready() -> bool:
            if self.process.poll() is not None:
                raise RuntimeError(f"agent exited with {self.process.returncode}:\n{self.logs()}")
            with contextlib.suppress(OSError):
                return self.get("/readyz", timeout=1.0)[0] == 200
            return False

        wait_until(ready, timeout)

    def logs(self) -> str:
        if not self._log.closed:
            self._log.flush()
        return self.log_path.read_text(errors="replace")

    def terminate(self, timeout: float = 30.0) -> int:
        """SIGTERM and wait; returns the exit status (SIGKILL after ``timeout``)."""
        if self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout)
            except subprocess.TimeoutExpired:
                self.process.kill()
                self.process.wait(5)
        self._log.close()
        return self.process.returncode

    def kill(self) -> None:
        """SIGKILL the supervisor only (its workers must notice by themselves)."""
        self.process.kill()
        self.process.wait(5)
