"""A stand-in of AMD's ``amdsmi`` binding module, for the AMD SMI backend.

The real binding resolves hundreds of symbols of ``libamd_smi.so`` when imported, so
no small fake library can stand in for it (as one does for NVML): this module has the
binding's function names, dictionaries, units (microwatts) and exception shape.
"""

from __future__ import annotations

import types
from typing import Any

NOT_SUPPORTED, NO_PERM = 2, 10


class AmdSmiException(Exception):  # noqa: N818 - the binding's own name
    pass


class AmdSmiLibraryException(AmdSmiException):
    def __init__(self, err_code: int) -> None:
        super().__init__(err_code)
        self.err_code = err_code

    def __str__(self) -> str:
        return f"Error code:\n\t{self.err_code} | AMDSMI_STATUS_{self.err_code}"


class Device:
    def __init__(self, uuid: str, lo: float, hi: float, cap: float, fail: int | None = None):
        self.uuid, self.fail = uuid, fail
        self.info = {
            "power_cap": int(cap * 1e6),
            "default_power_cap": int(cap * 1e6),
            "dpm_cap": 0,
            "min_power_cap": int(lo * 1e6),
            "max_power_cap": int(hi * 1e6),
        }


def binding(devices: list[Device]) -> types.ModuleType:
    """A stand-in of the ``amdsmi`` module: the calls the backend makes, nothing else."""
    smi = types.ModuleType("amdsmi")
    calls: list[str] = []

    def set_power_cap(handle: Device, sensor: int, cap: int) -> None:
        assert sensor == 0
        assert isinstance(cap, int)  # the binding refuses anything else
        calls.append(f"set {handle.uuid} {cap}")
        if handle.fail is not None:
            raise AmdSmiLibraryException(handle.fail)
        handle.info["power_cap"] = cap

    attrs: dict[str, Any] = {
        "AmdSmiException": AmdSmiException,
        "AMDSMI_STATUS_NOT_SUPPORTED": NOT_SUPPORTED,
        "AMDSMI_STATUS_NO_PERM": NO_PERM,
        "amdsmi_init": lambda: calls.append("init"),
        "amdsmi_get_processor_handles": lambda: list(devices),
        "amdsmi_get_gpu_device_uuid": lambda h: h.uuid,
        "amdsmi_get_gpu_asic_info": lambda h: {"market_name": "Fake MI300X"},
        "amdsmi_get_power_cap_info": lambda h: dict(h.info),
        "amdsmi_get_power_info": lambda h: {
            "current_socket_power": "N/A",
            "average_socket_power": 321,
        },
        "amdsmi_set_power_cap": set_power_cap,
        "calls": calls,
    }
    for name, value in attrs.items():
        setattr(smi, name, value)
    return smi
