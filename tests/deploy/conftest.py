"""Fixtures of the deployment tests: the Helm library, the loaded chart, a renderer."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.chart import (
    CHART_DIR,
    NAMESPACE,
    RELEASE,
    Manifest,
    Render,
    load_helm,
    parse_manifests,
)


@pytest.fixture(scope="session")
def helm() -> Any:
    return load_helm()


@pytest.fixture(scope="session")
def chart(helm: Any) -> Iterator[Any]:
    with helm.Chart.load(CHART_DIR) as loaded:
        yield loaded


@pytest.fixture(scope="session")
def render(chart: Any) -> Render:
    """``render(values, name=RELEASE)`` -> parsed objects."""

    def _render(values: dict[str, Any] | None = None, *, name: str = RELEASE) -> list[Manifest]:
        return parse_manifests(chart.render(values or {}, name=name, namespace=NAMESPACE))

    return _render
