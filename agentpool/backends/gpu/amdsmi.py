"""AMD GPU power caps through AMD SMI, with AMD's own binding (``amdsmi``).

The same semantics as :mod:`agentpool.backends.gpu.nvml`: per device read the
power-cap constraints (``amdsmi_get_power_cap_info``: min, max, default and
current cap, in microwatts on bare metal), resolve and clamp the cap, journal
the original, set it (``amdsmi_set_power_cap``, sensor 0) and read it back.
``NOT_SUPPORTED`` and ``NO_PERM`` make a device ``blocked``; a cap that
reads back different or another failure makes it ``error``; others go on.

The binding is an optional extra (``agentpool[amd]``). It loads
``libamd_smi.so`` when imported, printing to stdout and failing with a
``KeyError`` when it cannot; either way :meth:`AmdSmiGpus.apply` raises
:class:`GpuUnavailableError` saying the library is missing (status
``blocked``). The binding can be passed in (``binding=``): the tests hand
it a stand-in of the module, because a fake ``libamd_smi.so`` would have to
export every one of the hundreds of symbols the binding resolves at import.
"""

from __future__ import annotations

import contextlib
import importlib
import io
import logging
from types import ModuleType
from typing import Any

from agentpool.backends.gpu.host import (
    DeviceInfo,
    DeviceOutcome,
    journal_key,
    journal_owner,
    journaled,
)
from agentpool.backends.gpucaps import DeviceLimits, limits_problem, resolve_cap
from agentpool.backends.sysfs.files import Originals
from agentpool.errors import GpuUnavailableError, shown
from agentpool.jsonnumbers import json_count, json_number
from agentpool.resources.desired import GpuCap
from agentpool.results import GpuBackend, Result

log = logging.getLogger(__name__)

JOURNAL = "amdsmi"
READBACK_TOLERANCE_UW = 1_000_000
SENSOR = 0
_BLOCKING = ("AMDSMI_STATUS_NOT_SUPPORTED", "AMDSMI_STATUS_NO_PERM")


def _load_binding() -> ModuleType:
    chatter = io.StringIO()
    try:
        # The binding prints its own loader error to stdout; keep it for our message instead.
        with contextlib.redirect_stdout(chatter):
            return importlib.import_module("amdsmi")
    except ImportError as exc:
        raise GpuUnavailableError(
            "AMD SMI binding not installed (install agentpool[amd], i.e. amdsmi)"
        ) from exc
    except (OSError, KeyError, AttributeError) as exc:
        said = " ".join(chatter.getvalue().split()) or str(exc)
        raise GpuUnavailableError(f"AMD SMI library missing: {said}") from exc


def _microwatts(info: Any, key: str) -> int | None:
    """An integer microwatt field of the binding's answer; None for "N/A" or anything else."""
    value = json_count(info.get(key) if isinstance(info, dict) else None)
    return value if value is not None and value >= 0 else None


def _watts(value: Any) -> float | None:
    return json_number(value)  # the binding answers "N/A" where a device has no value


class AmdSmiGpus:
    """The AMD GPUs of this host. Not thread safe; one per worker."""

    kind = GpuBackend.HOST_AMD

    def __init__(self, originals: Originals, binding: ModuleType | None = None) -> None:
        self._originals = originals
        self._binding = binding
        self._ready = False

    def _session(self) -> ModuleType:
        smi = self._binding or _load_binding()
        self._binding = smi
        if not self._ready:
            try:
                smi.amdsmi_init()
            except smi.AmdSmiException as exc:
                raise GpuUnavailableError(f"AMD SMI unavailable: {exc}") from exc
            self._ready = True
        return smi

    def _handles(self, smi: ModuleType) -> list[Any]:
        try:
            return list(smi.amdsmi_get_processor_handles())
        except smi.AmdSmiException as exc:
            self._ready = False
            raise GpuUnavailableError(f"AMD SMI unavailable: {exc}") from exc

    def models(self) -> list[str]:
        smi = self._session()
        names = []
        for handle in self._handles(smi):
            try:
                names.append(str(smi.amdsmi_get_gpu_asic_info(handle)["market_name"]))
            except (smi.AmdSmiException, KeyError) as exc:
                names.append(f"unknown ({exc})")
        return names

    def survey(self) -> list[DeviceInfo]:
        """Every device's cap range, current cap and power, read only (``agentpool inspect``)."""
        smi = self._session()
        devices = []
        for index, handle in enumerate(self._handles(smi)):
            ident, name, limits, current = f"index-{index}", "?", None, None
            try:
                ident = str(smi.amdsmi_get_gpu_device_uuid(handle))
                name = str(smi.amdsmi_get_gpu_asic_info(handle).get("market_name", "?"))
                info = smi.amdsmi_get_power_cap_info(handle)
                current = info["power_cap"] / 1e6
                limits = DeviceLimits(info["min_power_cap"] / 1e6, info["max_power_cap"] / 1e6,
                                      info["default_power_cap"] / 1e6)
            except smi.AmdSmiException as exc:
                devices.append(DeviceInfo(index, ident, name, limits, current, None,
                                          f"AMD SMI: {' '.join(str(exc).split())}"))
                continue
            devices.append(DeviceInfo(index, ident, name, limits, current,
                                      self._power(smi, handle)))
        return devices

    def apply(self, cap: GpuCap) -> list[DeviceOutcome]:
        smi = self._session()
        return [self._apply_one(smi, i, h, cap) for i, h in enumerate(self._handles(smi))]

    def _apply_one(self, smi: ModuleType, index: int, handle: Any, cap: GpuCap) -> DeviceOutcome:
        ident, name, limits, target = f"index-{index}", "?", None, None
        try:
            ident = str(smi.amdsmi_get_gpu_device_uuid(handle))
            name = str(smi.amdsmi_get_gpu_asic_info(handle).get("market_name", "?"))
            info = smi.amdsmi_get_power_cap_info(handle)
            # The binding reports "N/A" for what a device does not know: no number at all.
            low, high = _microwatts(info, "min_power_cap"), _microwatts(info, "max_power_cap")
            current = _microwatts(info, "power_cap")
            if low is None or high is None or current is None:
                reason = f"AMD SMI reports no power cap range: {shown(info)}"
                return DeviceOutcome(index, ident, name, None, None, None, None,
                                     Result.BLOCKED, reason)
            default = _microwatts(info, "default_power_cap")
            limits = DeviceLimits(low / 1e6, high / 1e6, None if default is None else default / 1e6)
            problem = limits_problem(limits)
            if problem is not None:
                return DeviceOutcome(index, ident, name, limits, None, None, None,
                                     Result.BLOCKED, f"AMD SMI {problem}")
            target, clamped = resolve_cap(cap, limits)
            wanted = round(clamped * 1e6)
            if current != wanted:
                key = journal_key(JOURNAL, ident)
                fresh = self._originals.remember(key, current, journal_owner(JOURNAL))
                try:
                    smi.amdsmi_set_power_cap(handle, SENSOR, wanted)
                except smi.AmdSmiException:
                    if fresh:
                        self._originals.forget(key)
                    raise
            back = _microwatts(smi.amdsmi_get_power_cap_info(handle), "power_cap")
            if back is None:
                reason = "AMD SMI reads no power cap back after setting it"
                return DeviceOutcome(index, ident, name, limits, target, None, None,
                                     Result.ERROR, reason)
        except smi.AmdSmiException as exc:
            code = getattr(exc, "err_code", None)
            blocking = code in {getattr(smi, n, object()) for n in _BLOCKING}
            result = Result.BLOCKED if blocking else Result.ERROR
            reason = f"AMD SMI: {' '.join(str(exc).split())}"
            return DeviceOutcome(index, ident, name, limits, target, None, None, result, reason)
        power = self._power(smi, handle)
        applied = back / 1e6
        if abs(back - wanted) > READBACK_TOLERANCE_UW:
            reason = f"cap reads back {applied:g} W after setting {wanted / 1e6:g} W"
            return DeviceOutcome(
                index, ident, name, limits, target, applied, power, Result.ERROR, reason
            )
        return DeviceOutcome(index, ident, name, limits, target, applied, power, Result.APPLIED)

    def _power(self, smi: ModuleType, handle: Any) -> float | None:
        try:
            info = smi.amdsmi_get_power_info(handle)
        except smi.AmdSmiException:
            return None
        # "N/A" is what the binding reports for a missing sensor: no reading, never 0 W.
        return _watts(info.get("current_socket_power")) or _watts(info.get("average_socket_power"))

    def restore(self) -> list[str]:
        owned = self._originals.items(journal_owner(JOURNAL))
        todo = [(p, journaled(p, JOURNAL), v) for p, v in owned]
        todo = [(p, uuid, v) for p, uuid, v in todo if uuid is not None]
        if not todo:
            return []
        try:
            smi = self._session()
        except GpuUnavailableError as exc:
            return [f"GPU {uuid}: {exc}" for _, uuid, _ in todo]
        try:
            handles = {str(smi.amdsmi_get_gpu_device_uuid(h)): h for h in self._handles(smi)}
        except (GpuUnavailableError, smi.AmdSmiException) as exc:
            return [f"GPU {uuid}: {exc}" for _, uuid, _ in todo]
        problems: list[str] = []
        for path, uuid, microwatts in todo:
            handle = handles.get(str(uuid))
            if handle is None:
                problems.append(f"GPU {uuid}: not found to restore {microwatts / 1e6:g} W")
                continue
            try:
                smi.amdsmi_set_power_cap(handle, SENSOR, microwatts)
            except smi.AmdSmiException as exc:
                problems.append(f"GPU {uuid}: restoring {microwatts / 1e6:g} W: AMD SMI: {exc}")
                continue
            self._originals.forget(path)
        return problems
