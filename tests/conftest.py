"""Fixtures shared by every test package; each lives with its own package and is imported here."""

from tests.sim.fixtures import api_emulator, backend, envtest_server, kube_api

__all__ = ["api_emulator", "backend", "envtest_server", "kube_api"]
