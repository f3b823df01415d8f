"""NVIDIA GPU power limits through NVML, with NVIDIA's own binding (``nvidia-ml-py``).

Per device: read the power-management limit constraints (min, max) and the
default limit, resolve the desired cap against that device and clamp it,
remember the limit found before the first write (journal), set the limit in
milliwatts and read it back. A limit that reads back different is an error,
never ``applied``: NVML's and ``nvidia-smi``'s exit codes are not trusted
on their own. Each device is handled apart, so one that refuses
(``NOT_SUPPORTED``, ``NO_PERMISSION``, lost) leaves the others capped.

The binding is an optional extra (``agentpool[nvidia]``) and loads
``libnvidia-ml.so.1`` itself; without either, or with the driver not
loaded, :meth:`NvmlGpus.apply` raises :class:`GpuUnavailableError` and the
node's GPU status is ``blocked`` saying why.
"""

from __future__ import annotations

import importlib
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
from agentpool.errors import GpuUnavailableError
from agentpool.resources.desired import GpuCap
from agentpool.results import GpuBackend, Result

log = logging.getLogger(__name__)

JOURNAL = "nvml"
READBACK_TOLERANCE_MW = 1000
"""NVML stores milliwatts, but boards round limits to their own step; 1 W is generous."""

# NVML return codes that mean "this device will not do it" (status blocked), as opposed
# to a failure worth reporting as an error. Names, not numbers: the binding defines them.
_BLOCKING = ("NVML_ERROR_NOT_SUPPORTED", "NVML_ERROR_NO_PERMISSION")
_UNAVAILABLE = (
    "NVML_ERROR_DRIVER_NOT_LOADED",
    "NVML_ERROR_LIBRARY_NOT_FOUND",
    "NVML_ERROR_UNINITIALIZED",
    "NVML_ERROR_FUNCTION_NOT_FOUND",
)


def _load_binding() -> ModuleType:
    try:
        return importlib.import_module("pynvml")
    except ImportError as exc:
        raise GpuUnavailableError(
            "NVML binding not installed (install agentpool[nvidia], i.e. nvidia-ml-py)"
        ) from exc


class NvmlGpus:
    """The NVIDIA GPUs of this host. Not thread safe; one per worker."""

    kind = GpuBackend.HOST_NVIDIA

    def __init__(self, originals: Originals) -> None:
        self._originals = originals
        self._nvml: ModuleType | None = None

    # -- session -----------------------------------------------------------------------------

    def _session(self) -> ModuleType:
        """The initialised binding; (re)initialises after a failure."""
        if self._nvml is not None:
            return self._nvml
        nvml = _load_binding()
        try:
            nvml.nvmlInit()
        except nvml.NVMLError as exc:
            raise GpuUnavailableError(f"NVML unavailable: {exc}") from exc
        self._nvml = nvml
        return nvml

    def _code_in(self, nvml: ModuleType, exc: Any, names: tuple[str, ...]) -> bool:
        return getattr(exc, "value", None) in {getattr(nvml, n, None) for n in names}

    def close(self) -> None:
        if self._nvml is not None:
            try:
                self._nvml.nvmlShutdown()
            except self._nvml.NVMLError as exc:
                log.debug("nvmlShutdown: %s", exc)
            self._nvml = None

    # -- inventory and apply -------------------------------------------------------------------

    def count(self) -> int:
        nvml = self._session()
        try:
            return int(nvml.nvmlDeviceGetCount())
        except nvml.NVMLError as exc:
            self._nvml = None  # a driver unloaded under us: initialise again next time
            raise GpuUnavailableError(f"NVML unavailable: {exc}") from exc

    def models(self) -> list[str]:
        """Device names, in index order (node discovery)."""
        nvml = self._session()
        names: list[str] = []
        for index in range(self.count()):
            try:
                names.append(str(nvml.nvmlDeviceGetName(nvml.nvmlDeviceGetHandleByIndex(index))))
            except nvml.NVMLError as exc:
                names.append(f"unknown ({exc})")
        return names

    def survey(self) -> list[DeviceInfo]:
        """Every device's limits, current limit and power, read only (``agentpool inspect``)."""
        count = self.count()
        nvml = self._session()
        devices = []
        for index in range(count):
            ident, name, limits, current = f"index-{index}", "?", None, None
            try:
                handle = nvml.nvmlDeviceGetHandleByIndex(index)
                ident = str(nvml.nvmlDeviceGetUUID(handle))
                name = str(nvml.nvmlDeviceGetName(handle))
                current = int(nvml.nvmlDeviceGetPowerManagementLimit(handle)) / 1000.0
                low, high = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
                default = nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle)
                limits = DeviceLimits(low / 1000.0, high / 1000.0, default / 1000.0)
            except nvml.NVMLError as exc:
                devices.append(DeviceInfo(index, ident, name, limits, current, None,
                                          f"NVML: {exc}"))
                continue
            devices.append(DeviceInfo(index, ident, name, limits, current,
                                      self._power(nvml, handle)))
        self.close()
        return devices

    def apply(self, cap: GpuCap) -> list[DeviceOutcome]:
        count = self.count()
        nvml = self._session()
        return [self._apply_one(nvml, index, cap) for index in range(count)]

    def _apply_one(self, nvml: ModuleType, index: int, cap: GpuCap) -> DeviceOutcome:
        ident, name, limits, target = f"index-{index}", "?", None, None
        try:
            handle = nvml.nvmlDeviceGetHandleByIndex(index)
            ident = str(nvml.nvmlDeviceGetUUID(handle))
            name = str(nvml.nvmlDeviceGetName(handle))
            low, high = nvml.nvmlDeviceGetPowerManagementLimitConstraints(handle)
            default = nvml.nvmlDeviceGetPowerManagementDefaultLimit(handle)
            limits = DeviceLimits(low / 1000.0, high / 1000.0, default / 1000.0)
            problem = limits_problem(limits)
            if problem is not None:
                return DeviceOutcome(index, ident, name, limits, None, None, None,
                                     Result.BLOCKED, f"NVML {problem}")
            target, clamped = resolve_cap(cap, limits)
            wanted = round(clamped * 1000)
            back = self._set_limit(nvml, handle, ident, wanted)
        except nvml.NVMLError as exc:
            if self._code_in(nvml, exc, _UNAVAILABLE):
                self._nvml = None  # the driver went away: initialise again next tick
            blocking = self._code_in(nvml, exc, _BLOCKING + _UNAVAILABLE)
            result = Result.BLOCKED if blocking else Result.ERROR
            return DeviceOutcome(
                index, ident, name, limits, target, None, None, result, f"NVML: {exc}"
            )
        power = self._power(nvml, handle)
        applied = back / 1000.0
        if abs(back - wanted) > READBACK_TOLERANCE_MW:
            reason = f"limit reads back {applied:g} W after setting {wanted / 1000:g} W"
            return DeviceOutcome(
                index, ident, name, limits, target, applied, power, Result.ERROR, reason
            )
        return DeviceOutcome(index, ident, name, limits, target, applied, power, Result.APPLIED)

    def _set_limit(self, nvml: ModuleType, handle: Any, ident: str, wanted: int) -> int:
        """Write ``wanted`` mW unless already there; returns the limit read back."""
        current = int(nvml.nvmlDeviceGetPowerManagementLimit(handle))
        if current != wanted:
            key = journal_key(JOURNAL, ident)
            fresh = self._originals.remember(key, current, journal_owner(JOURNAL))
            try:
                nvml.nvmlDeviceSetPowerManagementLimit(handle, wanted)
            except nvml.NVMLError:
                if fresh:  # nothing changed: the journal must not claim otherwise
                    self._originals.forget(key)
                raise
        return int(nvml.nvmlDeviceGetPowerManagementLimit(handle))

    def _power(self, nvml: ModuleType, handle: Any) -> float | None:
        try:
            return float(nvml.nvmlDeviceGetPowerUsage(handle)) / 1000.0
        except nvml.NVMLError:
            return None  # a board without a power sensor: no reading, never 0 W

    # -- restore -------------------------------------------------------------------------------

    def restore(self) -> list[str]:
        """Put back every journaled original limit; returns the problems."""
        owned = self._originals.items(journal_owner(JOURNAL))
        entries = [(p, journaled(p, JOURNAL), v) for p, v in owned]
        todo = [(path, uuid, mw) for path, uuid, mw in entries if uuid is not None]
        if not todo:
            return []
        try:
            nvml = self._session()
        except GpuUnavailableError as exc:
            return [f"GPU {uuid}: {exc}" for _, uuid, _ in todo]
        problems: list[str] = []
        for path, uuid, mw in todo:
            try:
                handle = nvml.nvmlDeviceGetHandleByUUID(uuid)
                nvml.nvmlDeviceSetPowerManagementLimit(handle, mw)
            except nvml.NVMLError as exc:
                problems.append(f"GPU {uuid}: restoring {mw / 1000:g} W: NVML: {exc}")
                continue
            self._originals.forget(path)
        self.close()
        return problems
