"""agentpool's own table of GPU board power (agentpool/hardware/boards.py): every product
Joulie's operator, scheduler and simulated clusters name, found under the names the device
libraries and the GPU operators' labels give, with the data sheets' figures; a mounted
catalog ranks above it.

The figures below are stated from the vendors' data sheets as the expectations, not read
from the table.
"""

from __future__ import annotations

import pytest

from agentpool.hardware.boards import BOARDS, BoardPower, board_power, match_board
from agentpool.hardware.catalog import normalise, parse_catalog

# The GPU products Joulie's code, chart and examples name (its operator's built-in catalog,
# its simulator's clusters), as the labels of its examples spell them: our own fixture.
JOULIES_GPUS = {
    "NVIDIA-H100-NVL": 400.0,
    "NVIDIA-H100-80GB-HBM3": 700.0,
    "NVIDIA-H100-SXM": 700.0,
    "NVIDIA-L40S": 350.0,
    "AMD-Instinct-MI300X": 750.0,
    "AMD_Instinct_MI300X": 750.0,
    "AMD-Radeon-PRO-W7900": 295.0,
}


@pytest.mark.parametrize(("label", "max_watts"), sorted(JOULIES_GPUS.items()))
def test_every_gpu_joulie_names_has_a_row(label: str, max_watts: float) -> None:
    board = match_board(label)
    assert board is not None, label
    assert board.max_watts == max_watts


@pytest.mark.parametrize(
    ("name", "product", "low", "high"),
    [
        # NVML's device name, and GPU Feature Discovery's label (spaces as dashes)
        ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB", 200.0, 700.0),
        ("NVIDIA-H100-PCIe", "NVIDIA H100 PCIe", 200.0, 350.0),
        ("NVIDIA-A100-SXM4-80GB", "NVIDIA A100 SXM4 80GB", 100.0, 400.0),
        ("NVIDIA A100-PCIE-40GB", "NVIDIA A100 PCIe 40GB", 150.0, 250.0),
        ("NVIDIA-A100-80GB-PCIe", "NVIDIA A100 80GB PCIe", 150.0, 300.0),
        ("NVIDIA-L4", "NVIDIA L4", 40.0, 72.0),
        ("Tesla-T4", "NVIDIA T4", 60.0, 70.0),
        ("NVIDIA-B200", "NVIDIA B200", 200.0, 1000.0),
        ("NVIDIA-H200", "NVIDIA H200 SXM 141GB", None, 700.0),
        # GPU Feature Discovery with MIG's single strategy, and with shared GPUs
        ("NVIDIA-A100-SXM4-40GB-MIG-1g.5gb", "NVIDIA A100 SXM4 40GB", 100.0, 400.0),
        ("Tesla-T4-SHARED", "NVIDIA T4", 60.0, 70.0),
        ("NVIDIA-A100-SXM4-40GB-MIG-3g.20gb-SHARED", "NVIDIA A100 SXM4 40GB", 100.0, 400.0),
        # AMD's node labeller and AMD SMI
        ("AMD_Instinct_MI300X_OAM", "AMD Instinct MI300X", None, 750.0),
        ("AMD Instinct MI250X", "AMD Instinct MI250X", None, 560.0),
        ("MI210", "AMD Instinct MI210", None, 300.0),
    ],
)
def test_products_are_found_under_the_names_devices_and_labels_give(
    name: str, product: str, low: float | None, high: float
) -> None:
    board = match_board(name)
    assert board is not None, name
    assert (board.product, board.min_watts, board.max_watts) == (product, low, high)


@pytest.mark.parametrize(
    "name", [None, "", "NVIDIA H100", "NVIDIA-GeForce-RTX-4090", "Fake_GPU", "MIG-1g.5gb",
             "NVIDIA-H100-80GB-HBM3-extra"])
def test_anything_else_is_no_row(name: str | None) -> None:
    assert match_board(name) is None


def test_each_name_names_one_board_and_each_row_is_sane_and_sourced() -> None:
    seen: dict[str, str] = {}
    for board in BOARDS:
        for name in (board.product, *board.names):
            key = normalise(name)
            assert seen.setdefault(key, board.product) == board.product, name
        assert board.max_watts > 0
        if board.min_watts is None:
            # Said in the row: a minimum the vendor does not publish is not invented.
            assert "no minimum published" in board.source, board.product
        else:
            assert 0 < board.min_watts < board.max_watts, board.product
        if board.default_watts is not None:
            assert (board.min_watts or 0) <= board.default_watts <= board.max_watts
        assert any(word in board.source for word in (
            "datasheet", "data sheet", "product brief", "user guide", "specifications"
        )), board.product


CATALOG = parse_catalog(
    "catalogVersion: test\n"
    "gpuModels:\n"
    "  MY_H100:\n"
    "    aliases: [NVIDIA-H100-80GB-HBM3]\n"
    "    official: {maxBoardPowerW: 650, minBoardPowerW: 250}\n"
)


def test_a_mounted_catalog_ranks_above_the_table() -> None:
    assert board_power("NVIDIA-H100-80GB-HBM3", CATALOG) == BoardPower(
        650.0, 250.0, None, "hardware catalog: MY_H100", heuristic=False)
    # What the catalog lacks, the table has.
    l40s = board_power("NVIDIA-L40S", CATALOG)
    assert l40s is not None
    assert (l40s.max_watts, l40s.min_watts, l40s.heuristic) == (350.0, None, True)
    assert l40s.source.startswith("built-in table: NVIDIA L40S (NVIDIA L40S datasheet")
    h100 = board_power("NVIDIA-H100-80GB-HBM3", None)
    assert h100 is not None
    assert (h100.max_watts, h100.min_watts, h100.default_watts) == (700.0, 200.0, 700.0)
    assert board_power("Fake_GPU", None) is None
    assert board_power(None, CATALOG) is None
