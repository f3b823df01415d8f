"""The board power range of a GPU product: a mounted hardware catalog's, else our own table's.

Joulie's chart mounts no hardware catalog by default, and Joulie's operator
then falls back to one built into its binary; agentpool keeps its own table
instead (:data:`BOARDS`), written from the vendors' public data sheets, so
that a GPU node the agent reaches only over HTTP still gets a
``capRangePerGpu`` (Joulie's scheduler reads its maximum, the operator its
range) and a percent cap a maximum to resolve against. Each row names its
products as NVML and AMD SMI name the devices, which is also what NVIDIA's
GPU Feature Discovery (``nvidia.com/gpu.product``, spaces as dashes,
``-MIG-<profile>`` or ``-SHARED`` appended when the GPUs are partitioned or shared)
and AMD's node labeller give as labels, and says where each figure comes
from. A minimum is given only where the vendor publishes one (a data sheet,
a product brief, NVIDIA's system guides, or the ``Min Power Limit`` that
``nvidia-smi -q`` reports for the board); elsewhere it is None, and a cap is
then not raised to any guessed floor.

The figures are a board's nominal ones: a board in a particular server may
have other limits (a VBIOS, a custom thermal design). What the host or the
telemetry measures always wins over the table (:mod:`.nodehardware`), a
mounted catalog wins over it (:func:`board_power`), and whatever comes from
the table is reported as ``heuristic``.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from agentpool.hardware.catalog import Catalog, normalise

_NO_MIN = "no minimum published"


@dataclass(frozen=True)
class Board:
    """One GPU product's board power, as its vendor publishes it."""

    product: str
    """The product as its data sheet names it."""
    names: tuple[str, ...]
    """What the device is called (NVML / AMD SMI names, hence the labels), matched after
    the catalog's normalisation (:func:`~agentpool.hardware.catalog.normalise`)."""
    max_watts: float
    """The highest board power limit (TDP / TBP)."""
    min_watts: float | None
    """The lowest power limit the board accepts; None where none is published."""
    default_watts: float | None
    """The limit the board starts with, where published."""
    source: str
    """Where the figures come from."""


NVIDIA_SMI_MIN = "minimum: nvidia-smi -q 'Min Power Limit' of the board"

BOARDS: tuple[Board, ...] = (
    # -- NVIDIA Hopper, Blackwell ---------------------------------------------------------------
    Board("NVIDIA H100 SXM5 80GB",
          ("NVIDIA H100 80GB HBM3", "NVIDIA H100 SXM5 80GB", "NVIDIA H100 SXM"),
          700, 200, 700,
          f"NVIDIA H100 Tensor Core GPU datasheet (SXM: max TDP up to 700 W, configurable); "
          f"{NVIDIA_SMI_MIN}"),
    Board("NVIDIA H100 PCIe", ("NVIDIA H100 PCIe",), 350, 200, 350,
          "NVIDIA H100 PCIe product brief PB-11133 (total board power 350 W default and "
          "maximum, 200 W minimum)"),
    Board("NVIDIA H100 NVL", ("NVIDIA H100 NVL",), 400, 200, 400,
          "NVIDIA H100 NVL product brief (max TDP 350-400 W, configurable; 400 W default, "
          "200 W minimum)"),
    Board("NVIDIA H200 SXM 141GB", ("NVIDIA H200", "NVIDIA H200 141GB HBM3e", "NVIDIA H200 SXM"),
          700, None, None,
          f"NVIDIA H200 Tensor Core GPU datasheet (SXM: max TDP up to 700 W, configurable); "
          f"{_NO_MIN}"),
    Board("NVIDIA H200 NVL", ("NVIDIA H200 NVL",), 600, None, None,
          f"NVIDIA H200 Tensor Core GPU datasheet (NVL: max TDP up to 600 W, configurable); "
          f"{_NO_MIN}"),
    Board("NVIDIA B200", ("NVIDIA B200",), 1000, 200, None,
          "NVIDIA DGX B200 user guide, Managing Power Capping (GPU power limit allowable "
          "200-1000 W); NVIDIA HGX B200 datasheet (up to 1,000 W per GPU)"),
    # -- NVIDIA Ampere --------------------------------------------------------------------------
    Board("NVIDIA A100 SXM4 40GB", ("NVIDIA A100-SXM4-40GB",), 400, 100, 400,
          f"NVIDIA A100 Tensor Core GPU datasheet (SXM: max TDP 400 W; boards with custom "
          f"thermal solutions go up to 500 W, which NVML or the telemetry then show); "
          f"{NVIDIA_SMI_MIN}"),
    Board("NVIDIA A100 SXM4 80GB", ("NVIDIA A100-SXM4-80GB",), 400, 100, 400,
          f"NVIDIA A100 Tensor Core GPU datasheet (SXM: max TDP 400 W; boards with custom "
          f"thermal solutions go up to 500 W, which NVML or the telemetry then show); "
          f"{NVIDIA_SMI_MIN}"),
    Board("NVIDIA A100 PCIe 40GB", ("NVIDIA A100-PCIE-40GB",), 250, 150, 250,
          f"NVIDIA A100 Tensor Core GPU datasheet (PCIe 40GB: max TDP 250 W); {NVIDIA_SMI_MIN}"),
    Board("NVIDIA A100 80GB PCIe", ("NVIDIA A100 80GB PCIe", "NVIDIA A100-PCIE-80GB"),
          300, 150, 300,
          "NVIDIA A100 80GB PCIe product brief PB-10577 (total board power 300 W default and "
          "maximum, 150 W minimum)"),
    Board("NVIDIA A30", ("NVIDIA A30",), 165, None, None,
          f"NVIDIA A30 Tensor Core GPU datasheet (max TDP 165 W); {_NO_MIN}"),
    Board("NVIDIA A40", ("NVIDIA A40",), 300, None, None,
          f"NVIDIA A40 product brief PB-09976 (maximum power consumption 300 W); {_NO_MIN}"),
    Board("NVIDIA A10", ("NVIDIA A10",), 150, None, None,
          f"NVIDIA A10 Tensor Core GPU datasheet (max TDP 150 W); {_NO_MIN}"),
    Board("NVIDIA A2", ("NVIDIA A2",), 60, 40, None,
          "NVIDIA A2 Tensor Core GPU datasheet (max TDP 40-60 W, configurable)"),
    # -- NVIDIA Ada Lovelace, Turing, Volta -----------------------------------------------------
    Board("NVIDIA L40S", ("NVIDIA L40S",), 350, None, None,
          f"NVIDIA L40S datasheet (max power consumption 350 W); {_NO_MIN}"),
    Board("NVIDIA L40", ("NVIDIA L40",), 300, None, None,
          f"NVIDIA L40 datasheet (max power consumption 300 W); {_NO_MIN}"),
    Board("NVIDIA L4", ("NVIDIA L4",), 72, 40, 72,
          f"NVIDIA L4 Tensor Core GPU datasheet (max TDP 72 W); {NVIDIA_SMI_MIN}"),
    Board("NVIDIA T4", ("Tesla T4", "NVIDIA T4"), 70, 60, 70,
          f"NVIDIA T4 Tensor Core GPU datasheet (max power 70 W); {NVIDIA_SMI_MIN}"),
    Board("NVIDIA V100 SXM2", ("Tesla V100-SXM2-16GB", "Tesla V100-SXM2-32GB"), 300, 150, 300,
          f"NVIDIA Tesla V100 datasheet (SXM2: max power 300 W); {NVIDIA_SMI_MIN}"),
    Board("NVIDIA V100 PCIe", ("Tesla V100-PCIE-16GB", "Tesla V100-PCIE-32GB"), 250, 100, 250,
          f"NVIDIA Tesla V100 datasheet (PCIe: max power 250 W); {NVIDIA_SMI_MIN}"),
    # -- AMD Instinct (OAM and PCIe), Radeon PRO ------------------------------------------------
    Board("AMD Instinct MI325X", ("AMD Instinct MI325X", "AMD Instinct MI325X OAM", "MI325X"),
          1000, None, None,
          f"AMD Instinct MI325X data sheet (peak total board power 1000 W); {_NO_MIN}"),
    Board("AMD Instinct MI300X", ("AMD Instinct MI300X", "AMD Instinct MI300X OAM", "MI300X"),
          750, None, None,
          f"AMD Instinct MI300X data sheet (peak total board power 750 W); {_NO_MIN}"),
    Board("AMD Instinct MI250X", ("AMD Instinct MI250X", "AMD Instinct MI250X OAM", "MI250X"),
          560, None, None,
          f"AMD Instinct MI250X data sheet (total board power 500 W, 560 W peak); {_NO_MIN}"),
    Board("AMD Instinct MI250", ("AMD Instinct MI250", "AMD Instinct MI250 OAM", "MI250"),
          560, None, None,
          f"AMD Instinct MI250 data sheet (total board power 500 W, 560 W peak); {_NO_MIN}"),
    Board("AMD Instinct MI210", ("AMD Instinct MI210", "MI210"), 300, None, None,
          f"AMD Instinct MI210 data sheet (total board power 300 W); {_NO_MIN}"),
    Board("AMD Instinct MI100", ("AMD Instinct MI100", "MI100"), 300, None, None,
          f"AMD Instinct MI100 data sheet (total board power 300 W); {_NO_MIN}"),
    Board("AMD Radeon PRO W7900", ("AMD Radeon PRO W7900", "W7900"), 295, None, None,
          f"AMD Radeon PRO W7900 specifications (total board power 295 W; a workstation "
          f"card, in Joulie's simulated clusters); {_NO_MIN}"),
)

_SUFFIX = re.compile(r" (?:shared|mig \S+)$")
"""What GPU Feature Discovery appends to the product: ``-SHARED`` (time-slicing, MPS),
``-MIG-<profile>`` (MIG's single strategy); normalised, dashes are spaces."""


_BY_NAME = {normalise(name): board for board in BOARDS for name in (board.product, *board.names)}
"""Every name of every board, normalised (each names one board: tests/hardware/test_boards.py)."""


def match_board(raw: str | None) -> Board | None:
    """The table's board for a device or label name (``NVIDIA-H100-80GB-HBM3``), or None."""
    if not raw:
        return None
    name = normalise(raw)
    while (board := _BY_NAME.get(name)) is None:
        shorter = _SUFFIX.sub("", name)
        if shorter == name:
            return None
        name = shorter
    return board


@dataclass(frozen=True)
class BoardPower:
    """A GPU product's board power range known without measuring it."""

    max_watts: float
    min_watts: float | None
    default_watts: float | None
    source: str
    """Where it comes from, for a status or a warning: ``hardware catalog: KEY`` or
    ``built-in table: PRODUCT (data sheet)``."""
    heuristic: bool
    """From our own table, not from the catalog the user mounted."""


def board_power(raw: str | None, catalog: Catalog | None) -> BoardPower | None:
    """The range of the product ``raw``: the mounted catalog's model, else the table's row.

    The one place where the two are ranked; what the host or the telemetry measured is
    ranked above both by the callers, which have it.
    """
    model = catalog.match_gpu(raw) if catalog is not None else None
    if model is not None:
        return BoardPower(model.max_watts, model.min_watts, None,
                          f"hardware catalog: {model.key}", heuristic=False)
    board = match_board(raw)
    if board is None:
        return None
    return BoardPower(board.max_watts, board.min_watts, board.default_watts,
                      f"built-in table: {board.product} ({board.source})", heuristic=True)
