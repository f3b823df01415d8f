"""Label selectors of the shared table (tests/support/selector_cases.py) on the API servers.

Run through the real kubernetes client against the emulator (whose selector
code is its own, not the agent's) and against a real kube-apiserver from the
envtest binaries (skipped where they are absent): the real server is the
reference, so a case where it disagrees is a wrong expectation in the table,
which tests/test_labelselectors.py also holds the agent's parser to.
"""

from __future__ import annotations

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from tests.support.apiservers import Backend
from tests.support.selector_cases import (
    INVALID,
    LABEL_SETS,
    MATCHES,
    SERVER_ONLY_INVALID,
    SERVER_ONLY_MATCHES,
)

# Every node of the table carries this label, so the cases see only the table's nodes.
TABLE = {"selector-table": "yes"}


@pytest.fixture
def core(backend: Backend) -> client.CoreV1Api:
    api = client.CoreV1Api(backend.client)
    for name, labels in LABEL_SETS.items():
        meta = client.V1ObjectMeta(name=f"sel-{name}", labels={**labels, **TABLE})
        api.create_node(client.V1Node(metadata=meta))
    return api


def selected(core: client.CoreV1Api, selector: str) -> set[str]:
    items = core.list_node(label_selector=selector).items
    table = [n for n in items if (n.metadata.labels or {}).get("selector-table") == "yes"]
    return {n.metadata.name.removeprefix("sel-") for n in table}


def test_every_shared_case(core: client.CoreV1Api) -> None:
    # One server for the whole table: starting one per case would dominate the run time.
    wrong = {}
    for selector, expected in MATCHES + SERVER_ONLY_MATCHES:
        names = selected(core, selector)
        if names != expected:
            wrong[selector] = sorted(names)
    assert wrong == {}


def test_every_shared_invalid_selector_is_a_400(core: client.CoreV1Api) -> None:
    answers: dict[str, int] = {}
    for selector in INVALID + SERVER_ONLY_INVALID:
        try:
            core.list_node(label_selector=selector)
            answers[selector] = 200
        except ApiException as exc:
            answers[selector] = exc.status
    assert answers == dict.fromkeys(INVALID + SERVER_ONLY_INVALID, 400)
