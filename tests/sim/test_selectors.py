"""The API emulator's label selectors against the shared table, through the real client."""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from agentpool.sim.apiserver import ApiEmulator
from tests.selector_cases import INVALID, LABEL_SETS, MATCHES


@pytest.fixture
def core(api_emulator: ApiEmulator, kube_api: client.ApiClient) -> client.CoreV1Api:
    for name, labels in LABEL_SETS.items():
        api_emulator.create("nodes", {"metadata": {"name": name, "labels": labels}})
    return client.CoreV1Api(kube_api)


def test_every_shared_case(core: client.CoreV1Api) -> None:
    # One emulator for the whole table: starting one per case would dominate the run time.
    wrong = {}
    for selector, expected in MATCHES:
        names = {n.metadata.name for n in core.list_node(label_selector=selector).items}
        if names != expected:
            wrong[selector] = sorted(names)
    assert wrong == {}


def test_every_shared_invalid_selector_is_a_400(core: client.CoreV1Api) -> None:
    answers: dict[str, int] = {}
    for selector in INVALID:
        try:
            core.list_node(label_selector=selector)
            answers[selector] = 200
        except ApiException as exc:
            answers[selector] = exc.status
    assert answers == dict.fromkeys(INVALID, 400)
