"""The property suites' Hypothesis profile is loaded before any of them is collected."""

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support import budget  # noqa: F401 - registers and loads the profile


@pytest.fixture(scope="module")
def fake_nvml_state(tmp_path_factory: pytest.TempPathFactory) -> Iterator[object]:
    """The fake libnvidia-ml.so.1 loaded in this process, its state file in the environment
    for the module (one file, rewritten by each example)."""
    pytest.importorskip("pynvml", reason="nvidia-ml-py (agentpool[nvidia]) is not installed")
    from tests.support.fake_nvml import FakeNvml, build, preload

    directory: Path = tmp_path_factory.mktemp("fake-nvml")
    library = build(directory)
    preload(library)
    nvml = FakeNvml(library, directory / "state")
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("FAKE_NVML_STATE", str(nvml.state))
        yield nvml
