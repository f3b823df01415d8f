"""Joulie's hardware catalog format (HARDWARE_CATALOG_PATH): models by key and alias, and
the catalogs Joulie refuses refused, naming the variable and the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from agentpool.errors import ConfigError
from agentpool.hardware.catalog import CpuModel, GpuModel, load_catalog, normalise, parse_catalog

CATALOG = Path(__file__).with_name("catalog.yaml")


def test_models_match_by_key_and_alias_as_joulie_normalises_names() -> None:
    catalog = load_catalog(str(CATALOG))
    assert catalog.version == "test-1"
    xeon = CpuModel("XEON_PLAT_8480P", 350.0)
    # NFD's cpu-model.name, with the trademark signs, case and spacing Joulie ignores.
    assert catalog.match_cpu("Intel(R) Xeon(R) Platinum 8480+") == xeon
    assert catalog.match_cpu("intel xeon(r)   platinum 8480+") == xeon
    assert catalog.match_cpu("xeon-plat-8480p") == xeon  # the key itself, dashes as spaces
    assert catalog.match_cpu("Xeon Platinum 8480") is None
    assert catalog.match_cpu(None) is None
    h100 = GpuModel("H100_SXM_80G", 700.0, 200.0)
    assert catalog.match_gpu("NVIDIA-H100-80GB-HBM3") == h100  # GPU Feature Discovery's
    assert catalog.match_gpu("NVIDIA H100 80GB HBM3") == h100  # NVML's device name
    assert catalog.match_gpu("AMD Instinct MI300X") == GpuModel("MI300X_OAM", 750.0, None)
    assert catalog.match_gpu("") is None


def test_normalisation() -> None:
    assert normalise("  AMD EPYC™ 9654 (96-Core), Processor® ") == "amd epyc 9654 96 core processor"
    assert normalise("Intel(R)_Xeon(R)/Gold") == "intel xeon gold"


def test_field_names_match_without_case_as_gos_decoder_matches_them() -> None:
    catalog = parse_catalog(
        "CatalogVersion: v1\nGPUModels:\n  X:\n    Official: {MaxBoardPowerW: 300}\n"
    )
    assert catalog.match_gpu("x") == GpuModel("X", 300.0, None)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("cpuModels: {}\n", "catalogVersion is required"),
        ("catalogVersion: 1\n", "catalogVersion is required"),
        ("catalogVersion: v1\ncpuModels:\n  A: {official: {baseGHz: 2, boostGHz: 3}}\n",
         "cpuModels.A.official.tdpW must be > 0"),
        ("catalogVersion: v1\ncpuModels:\n  A: {official: {tdpW: 200, boostGHz: 3}}\n",
         "cpuModels.A.official.baseGHz must be > 0"),
        ("catalogVersion: v1\ncpuModels:\n  A:\n    official: {tdpW: 2, baseGHz: 2, "
         "boostGHz: 3}\n    measuredCurves: {node2S: {points: []}}\n",
         "cpuModels.A.measuredCurves.node2S has no points"),
        ("catalogVersion: v1\ngpuModels:\n  G: {official: {minBoardPowerW: 100}}\n",
         "gpuModels.G.official.maxBoardPowerW must be > 0"),
        ("catalogVersion: v1\ngpuModels:\n  G: {official: {maxBoardPowerW: lots}}\n",
         "gpuModels.G.official.maxBoardPowerW is not a number: 'lots'"),
        ("catalogVersion: v1\ngpuModels:\n  G: {aliases: H100, official: {maxBoardPowerW: 1}}\n",
         "gpuModels.G.aliases is not a list of names"),
        ("catalogVersion: v1\ngpuModels: [a, b]\n", "gpuModels is not a map"),
        ("catalogVersion: [unclosed\n", "not YAML"),
    ],
)
def test_catalogs_joulie_refuses_are_refused_naming_the_problem(text: str, problem: str) -> None:
    with pytest.raises(ConfigError) as caught:
        parse_catalog(text, "/etc/joulie/hardware.yaml")
    assert caught.value.variable == "HARDWARE_CATALOG_PATH"
    assert problem in str(caught.value)


def test_an_unreadable_file_names_the_variable(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        load_catalog(str(tmp_path / "missing.yaml"))
    assert "HARDWARE_CATALOG_PATH" in str(caught.value)
    assert "cannot read the hardware catalog: No such file or directory" in str(caught.value)
