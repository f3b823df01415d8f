"""Fixtures shared by every test package; each lives with its own package and is imported here."""

from collections.abc import Iterator

import pytest

from agentpool.backends.httpclient import close_connections
from tests.sim.fixtures import api_emulator, backend, envtest_server, kube_api

__all__ = ["api_emulator", "backend", "envtest_server", "kube_api"]


@pytest.fixture(autouse=True)
def _no_kept_connections() -> Iterator[None]:
    """The HTTP backend keeps connections alive per thread: each test starts without any
    and leaves none open (a test's server is gone after it)."""
    close_connections()
    yield
    close_connections()


def pytest_collection_finish(session: pytest.Session) -> None:
    # Importing the fork server (or its preload) warms, freezes and makes immortal the
    # importing process's heap: in pytest's process that broke Hypothesis's own checks
    # (gc.get_referrers does not see frozen objects). Tests start it as a subprocess.
    import sys

    preloaded = [m for m in ("agentpool.worker.forking.preload",
                             "agentpool.worker.forking.server") if m in sys.modules]
    if preloaded:
        raise pytest.UsageError(f"a test module imported {preloaded} into pytest's process")
