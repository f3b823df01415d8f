"""Joulie's hardware catalog (``HARDWARE_CATALOG_PATH``): CPU and GPU models by name.

The file is Joulie's own format (its chart mounts it from a ConfigMap): a
``catalogVersion`` and two maps, ``cpuModels`` and ``gpuModels``, from a model
key (``AMD_EPYC_9654``) to its ``aliases`` and its ``official`` figures
(``tdpW``, ``baseGHz``, ``boostGHz`` of a CPU; ``maxBoardPowerW`` and optionally
``minBoardPowerW`` of a GPU). A raw model name (an NFD label, NVML's device
name) matches a key or an alias after the normalisation Joulie applies (case,
``(R)``, ``®``, ``™`` dropped, brackets, dashes, underscores, slashes and
commas as spaces), so that NodeHardware's ``model`` fields carry the key
Joulie's operator and scheduler look up.

The checks are Joulie's: a catalog it refuses (no ``catalogVersion``, a CPU
without a positive ``tdpW``, ``baseGHz`` or ``boostGHz``, an empty measured
curve, a GPU without a positive ``maxBoardPowerW``) is refused whole. Field
names match case-insensitively, as Go's decoder matches them. Never: guesses
a figure the file does not give.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from agentpool.errors import ConfigError, shown

ENV = "HARDWARE_CATALOG_PATH"
MAX_BYTES = 16 << 20
"""A ConfigMap holds at most 1 MiB; a file far beyond that is not a catalog."""

_DROPPED = ("(r)", "®", "™")
_SPACED = ("(", ")", "-", "_", "/", ",")
_SPACES = re.compile(r"\s+")


def normalise(raw: str) -> str:
    """A model name as Joulie compares them (``hwinv.normalizeName``)."""
    name = raw.strip().lower()
    for token in _DROPPED:
        name = name.replace(token, "")
    for token in _SPACED:
        name = name.replace(token, " ")
    return _SPACES.sub(" ", name).strip()


@dataclass(frozen=True)
class CpuModel:
    key: str
    tdp_watts: float


@dataclass(frozen=True)
class GpuModel:
    key: str
    max_watts: float
    """``maxBoardPowerW``: the board's power limit ceiling."""
    min_watts: float | None
    """``minBoardPowerW`` where the catalog gives it."""




class Catalog:
    """The models of one catalog file, indexed by normalised key and alias."""

    def __init__(self, version: str, cpus: list[tuple[CpuModel, list[str]]],
                 gpus: list[tuple[GpuModel, list[str]]]) -> None:
        self.version = version
        self._cpus = _index(cpus)
        self._gpus = _index(gpus)

    def match_cpu(self, raw: str | None) -> CpuModel | None:
        return self._cpus.get(normalise(raw)) if raw else None

    def match_gpu(self, raw: str | None) -> GpuModel | None:
        return self._gpus.get(normalise(raw)) if raw else None


def _index[M: (CpuModel, GpuModel)](models: list[tuple[M, list[str]]]) -> dict[str, M]:
    # The first model naming a normalised name wins (Joulie's map order is random).
    index: dict[str, M] = {}
    for model, aliases in models:
        index.setdefault(normalise(model.key), model)
        for alias in aliases:
            index.setdefault(normalise(alias), model)
    index.pop("", None)
    return index


def _field(block: Mapping[str, Any], name: str) -> Any:
    """``block[name]``, else the first key equal to it but for case (Go's json decoding)."""
    if name in block:
        return block[name]
    lowered = name.lower()
    return next((v for k, v in block.items() if str(k).lower() == lowered), None)


class _Reader:
    def __init__(self, path: str) -> None:
        self.path = path

    def refuse(self, problem: str) -> ConfigError:
        return ConfigError(ENV, self.path, f"not a usable hardware catalog: {problem}")

    def mapping(self, value: Any, where: str) -> Mapping[str, Any]:
        if value is None:
            return {}
        if not isinstance(value, Mapping):
            raise self.refuse(f"{where} is not a map: {shown(value)}")
        return value

    def number(self, block: Mapping[str, Any], name: str, where: str) -> float:
        value = _field(block, name)
        if value is None:
            return 0.0
        if isinstance(value, bool) or not isinstance(value, int | float):
            raise self.refuse(f"{where}.{name} is not a number: {shown(value)}")
        return float(value)

    def positive(self, block: Mapping[str, Any], name: str, where: str) -> float:
        value = self.number(block, name, where)
        if not value > 0:
            raise self.refuse(f"{where}.{name} must be > 0")
        return value

    def aliases(self, spec: Mapping[str, Any], where: str) -> list[str]:
        value = _field(spec, "aliases") or []
        if not isinstance(value, list) or not all(isinstance(a, str) for a in value):
            raise self.refuse(f"{where}.aliases is not a list of names: {shown(value)}")
        return value

    def models(self, doc: Mapping[str, Any], name: str) -> list[tuple[str, Mapping[str, Any]]]:
        models = self.mapping(_field(doc, name), name)
        out = []
        for key, spec in models.items():
            if not isinstance(key, str) or not key.strip():
                raise self.refuse(f"a key of {name} is empty or not a name: {shown(key)}")
            out.append((key, self.mapping(spec, f"{name}.{key}")))
        return out

    def cpu(self, key: str, spec: Mapping[str, Any]) -> tuple[CpuModel, list[str]]:
        where = f"cpuModels.{key}"
        official = self.mapping(_field(spec, "official"), f"{where}.official")
        tdp = self.positive(official, "tdpW", f"{where}.official")
        self.positive(official, "baseGHz", f"{where}.official")
        self.positive(official, "boostGHz", f"{where}.official")
        curves = self.mapping(_field(spec, "measuredCurves"), f"{where}.measuredCurves")
        node2s = _field(curves, "node2S")
        if node2s is not None:
            points = _field(self.mapping(node2s, f"{where}.measuredCurves.node2S"), "points")
            if not points:
                raise self.refuse(f"{where}.measuredCurves.node2S has no points")
        return CpuModel(key, tdp), self.aliases(spec, where)

    def gpu(self, key: str, spec: Mapping[str, Any]) -> tuple[GpuModel, list[str]]:
        where = f"gpuModels.{key}"
        official = self.mapping(_field(spec, "official"), f"{where}.official")
        high = self.positive(official, "maxBoardPowerW", f"{where}.official")
        low = self.number(official, "minBoardPowerW", f"{where}.official")
        return GpuModel(key, high, low if low > 0 else None), self.aliases(spec, where)


def parse_catalog(text: str, path: str = "<catalog>") -> Catalog:
    """A catalog from its YAML text; :class:`ConfigError` naming the problem otherwise."""
    reader = _Reader(path)
    try:
        doc = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    except yaml.YAMLError as exc:
        raise reader.refuse(f"not YAML ({exc})") from None
    doc = reader.mapping(doc, "the document")
    version = _field(doc, "catalogVersion")
    if not isinstance(version, str) or not version.strip():
        raise reader.refuse("catalogVersion is required")
    cpus = [reader.cpu(k, s) for k, s in reader.models(doc, "cpuModels")]
    gpus = [reader.gpu(k, s) for k, s in reader.models(doc, "gpuModels")]
    return Catalog(version, cpus, gpus)


def load_catalog(path: str) -> Catalog:
    """The catalog in the file ``path``; :class:`ConfigError` naming it when unusable."""
    try:
        with open(Path(path), "rb") as handle:
            data = handle.read(MAX_BYTES + 1)
    except OSError as exc:
        raise ConfigError(ENV, path, f"cannot read the hardware catalog: "
                          f"{exc.strerror or exc}") from None
    if len(data) > MAX_BYTES:
        raise ConfigError(ENV, path, f"a hardware catalog of more than {MAX_BYTES} bytes")
    return parse_catalog(data.decode("utf-8", "replace"), path)
