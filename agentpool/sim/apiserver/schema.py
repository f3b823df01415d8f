"""Structural-schema pruning and validation of custom resources, as kube-apiserver does it.

Owns what a real apiserver does with a CRD's ``openAPIV3Schema`` on every
write: drop fields the schema does not declare (unless
``x-kubernetes-preserve-unknown-fields``), then validate the rest and answer
422 ``Invalid`` with one cause per violation, worded as the apiserver words
them (``Required value``, ``Unsupported value: ...``, ``Invalid value: ...``)
because clients and people read those messages.

The subset implemented is the one the chart's CRDs use: ``type`` (and
``nullable``), ``properties``, ``required``, ``additionalProperties``,
``items``, ``enum``, ``minimum``/``maximum`` (with ``exclusive*``),
``minLength``/``maxLength``. Formats, patterns, ``anyOf`` (the
TelemetryProfile's "nodeName when scope is node"), CEL rules
(``x-kubernetes-validations``, which Kubernetes 1.20 ignores as well) and
defaults are not checked. Nothing here imports agentpool's own parsers: this
is an oracle for them.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

Schema = dict[str, Any]

_ROOT_META = ("apiVersion", "kind", "metadata")
"""Handled by the server itself, never pruned at the root (ObjectMeta is not in the schema)."""


@dataclass(frozen=True)
class Cause:
    """One violation, as in a Status's ``details.causes``."""

    reason: str
    message: str
    field: str

    def as_dict(self) -> dict[str, str]:
        return {"reason": self.reason, "message": self.message, "field": self.field}

    def line(self) -> str:
        return f"{self.field}: {self.message}"


def prune(value: Any, schema: Schema, root: bool = False) -> Any:
    """A copy of ``value`` without the object fields ``schema`` does not declare."""
    if isinstance(value, dict):
        props: dict[str, Schema] = schema.get("properties") or {}
        extra = schema.get("additionalProperties")
        keep_unknown = bool(schema.get("x-kubernetes-preserve-unknown-fields"))
        out: dict[str, Any] = {}
        for key, item in value.items():
            if root and key in _ROOT_META:
                out[key] = item
            elif key in props:
                out[key] = prune(item, props[key])
            elif isinstance(extra, dict):
                out[key] = prune(item, extra)
            elif keep_unknown or extra is True:
                out[key] = item
        return out
    if isinstance(value, list) and isinstance(schema.get("items"), dict):
        return [prune(item, schema["items"]) for item in value]
    return value


def validate(value: Any, schema: Schema, path: str = "") -> list[Cause]:
    """Every violation of ``schema`` in ``value`` (already pruned)."""
    causes: list[Cause] = []
    type_ok = _check_type(value, schema, path, causes)
    _check_enum(value, schema, path, causes)
    if not type_ok:
        return causes
    if isinstance(value, dict):
        _check_object(value, schema, path, causes)
    elif isinstance(value, list) and isinstance(schema.get("items"), dict):
        for index, item in enumerate(value):
            causes.extend(validate(item, schema["items"], f"{path}[{index}]"))
    elif isinstance(value, str):
        _check_length(value, schema, path, causes)
    elif isinstance(value, int | float) and not isinstance(value, bool):
        _check_bounds(value, schema, path, causes)
    return causes


def _type_name(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "boolean"
    if isinstance(value, int):
        return "integer"
    if isinstance(value, float):
        return "integer" if value.is_integer() else "number"
    if isinstance(value, str):
        return "string"
    if isinstance(value, list):
        return "array"
    return "object"


def _check_type(value: Any, schema: Schema, path: str, causes: list[Cause]) -> bool:
    wanted = schema.get("type")
    if not wanted:
        return True
    actual = _type_name(value)
    if actual == "null" and schema.get("nullable"):
        return True
    if actual == wanted or (wanted == "number" and actual == "integer"):
        return True
    causes.append(Cause(
        "FieldValueInvalid",
        f'Invalid value: "{actual}": {path} in body must be of type {wanted}: "{actual}"',
        path,
    ))
    return False


def _check_enum(value: Any, schema: Schema, path: str, causes: list[Cause]) -> None:
    allowed = schema.get("enum")
    if allowed is None or value in allowed:
        return
    supported = ", ".join(_show(v) for v in allowed)
    causes.append(Cause(
        "FieldValueNotSupported",
        f"Unsupported value: {_show(value)}: supported values: {supported}",
        path,
    ))


def _check_object(value: dict[str, Any], schema: Schema, path: str, causes: list[Cause]) -> None:
    prefix = f"{path}." if path else ""
    for key in schema.get("required") or []:
        if key not in value:
            causes.append(Cause("FieldValueRequired", "Required value", prefix + key))
    props: dict[str, Schema] = schema.get("properties") or {}
    extra = schema.get("additionalProperties")
    for key, item in value.items():
        sub = props.get(key, extra if isinstance(extra, dict) else None)
        if sub is not None and not (path == "" and key in _ROOT_META):
            causes.extend(validate(item, sub, prefix + key))


def _check_length(value: str, schema: Schema, path: str, causes: list[Cause]) -> None:
    shortest, longest = schema.get("minLength"), schema.get("maxLength")
    if shortest is not None and len(value) < shortest:
        causes.append(_invalid(value, f"{path} in body should be at least {shortest} chars long",
                               path))
    if longest is not None and len(value) > longest:
        causes.append(_invalid(value, f"{path} in body should be at most {longest} chars long",
                               path))


def _check_bounds(value: float, schema: Schema, path: str, causes: list[Cause]) -> None:
    low, high = schema.get("minimum"), schema.get("maximum")
    if low is not None:
        exclusive = bool(schema.get("exclusiveMinimum"))
        if value < low or (exclusive and value == low):
            words = "greater than" if exclusive else "greater than or equal to"
            causes.append(_invalid(value, f"{path} in body should be {words} {_num(low)}", path))
    if high is not None:
        exclusive = bool(schema.get("exclusiveMaximum"))
        if value > high or (exclusive and value == high):
            words = "less than" if exclusive else "less than or equal to"
            causes.append(_invalid(value, f"{path} in body should be {words} {_num(high)}", path))


def _invalid(value: Any, why: str, path: str) -> Cause:
    return Cause("FieldValueInvalid", f"Invalid value: {_show(value)}: {why}", path)


def _show(value: Any) -> str:
    """A value as Go's field errors print it: strings quoted, numbers bare."""
    if isinstance(value, float) and value.is_integer():
        return str(int(value))
    return json.dumps(value, ensure_ascii=False)


def _num(value: float) -> str:
    return str(int(value)) if float(value).is_integer() else repr(value)


def invalid_message(kind: str, group: str, name: str, causes: list[Cause]) -> str:
    """The Status message: one cause bare, several in brackets, as the apiserver joins them."""
    lines = [c.line() for c in causes]
    body = lines[0] if len(lines) == 1 else "[" + ", ".join(lines) + "]"
    qualified = f"{kind}.{group}" if group else kind
    return f'{qualified} "{name}" is invalid: {body}'


def crd_schemas(crd: dict[str, Any]) -> tuple[str, Schema]:
    """(plural, openAPIV3Schema of the storage version) of a CustomResourceDefinition."""
    spec = crd["spec"]
    versions = spec.get("versions") or []
    stored = [v for v in versions if v.get("storage")] or versions
    schema: Schema = ((stored[0].get("schema") or {}).get("openAPIV3Schema")) or {}
    return spec["names"]["plural"], schema
