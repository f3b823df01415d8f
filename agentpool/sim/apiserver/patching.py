"""Patch documents applied to stored objects.

Owns JSON merge patch (RFC 7386) and JSON patch (RFC 6902). Both return a new
object and never mutate their input, because the store shares unchanged
subtrees between an object's versions and its event history.

Strategic merge patch (what ``CoreV1Api.patch_node`` sends for a dict body)
is applied as a merge patch: the difference is only in how lists of objects
merge by key, and nothing here patches such lists. A real apiserver would
merge ``status.conditions`` by ``type``; ours replaces the list.
"""

from __future__ import annotations

import copy
from typing import Any

from agentpool.sim.apiserver.errors import BadRequestError, UnsupportedMediaTypeError

MERGE = "application/merge-patch+json"
STRATEGIC = "application/strategic-merge-patch+json"
JSON_PATCH = "application/json-patch+json"


def merge_patch(target: Any, patch: Any) -> Any:
    """RFC 7386: objects merge recursively, ``null`` deletes, anything else replaces."""
    if not isinstance(patch, dict):
        return copy.deepcopy(patch)
    result = dict(target) if isinstance(target, dict) else {}
    for key, value in patch.items():
        if value is None:
            result.pop(key, None)
        else:
            result[key] = merge_patch(result.get(key), value)
    return result


def _pointer(path: str) -> list[str]:
    if path == "":
        return []
    if not path.startswith("/"):
        raise BadRequestError(f"invalid JSON pointer {path!r}")
    return [token.replace("~1", "/").replace("~0", "~") for token in path[1:].split("/")]


def _index(container: list[Any], token: str, *, for_add: bool) -> int:
    if for_add and token == "-":
        return len(container)
    if not token.isdigit():
        raise BadRequestError(f"invalid array index {token!r}")
    index = int(token)
    if index > len(container) or (index == len(container) and not for_add):
        raise BadRequestError(f"array index {index} out of range")
    return index


def _parent(doc: Any, tokens: list[str]) -> Any:
    node = doc
    for token in tokens[:-1]:
        if isinstance(node, dict) and token in node:
            node = node[token]
        elif isinstance(node, list):
            node = node[_index(node, token, for_add=False)]
        else:
            raise BadRequestError(f"path element {token!r} not found")
    return node


def _get(doc: Any, tokens: list[str]) -> Any:
    if not tokens:
        return doc
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent[last]
    if isinstance(parent, list):
        return parent[_index(parent, last, for_add=False)]
    raise BadRequestError(f"path element {last!r} not found")


def _remove(doc: Any, tokens: list[str]) -> Any:
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict) and last in parent:
        return parent.pop(last)
    if isinstance(parent, list):
        return parent.pop(_index(parent, last, for_add=False))
    raise BadRequestError(f"cannot remove missing {last!r}")


def _add(doc: Any, tokens: list[str], value: Any) -> Any:
    if not tokens:
        return value
    parent, last = _parent(doc, tokens), tokens[-1]
    if isinstance(parent, dict):
        parent[last] = value
    elif isinstance(parent, list):
        parent.insert(_index(parent, last, for_add=True), value)
    else:
        raise BadRequestError(f"cannot add under a scalar at {last!r}")
    return doc


def json_patch(target: Any, operations: Any) -> Any:
    """RFC 6902 on a deep copy: add, remove, replace, move, copy, test."""
    if not isinstance(operations, list):
        raise BadRequestError("a JSON patch must be a list of operations")
    doc = copy.deepcopy(target)
    for op in operations:
        if not isinstance(op, dict) or "path" not in op:
            raise BadRequestError(f"invalid JSON patch operation {op!r}")
        name, tokens = op.get("op"), _pointer(op["path"])
        if name == "add":
            doc = _add(doc, tokens, copy.deepcopy(op.get("value")))
        elif name == "remove":
            _remove(doc, tokens)
        elif name == "replace":
            _get(doc, tokens)  # RFC 6902: the target must exist
            value = copy.deepcopy(op.get("value"))
            if not tokens:
                doc = value
            else:
                parent = _parent(doc, tokens)
                if isinstance(parent, list):
                    parent[_index(parent, tokens[-1], for_add=False)] = value
                else:
                    parent[tokens[-1]] = value
        elif name in ("move", "copy"):
            source = _pointer(str(op.get("from", "")))
            value = _remove(doc, source) if name == "move" else copy.deepcopy(_get(doc, source))
            doc = _add(doc, tokens, value)
        elif name == "test":
            if _get(doc, tokens) != op.get("value"):
                raise BadRequestError(f"JSON patch test failed at {op['path']!r}")
        else:
            raise BadRequestError(f"unknown JSON patch operation {name!r}")
    return doc


def apply_patch(content_type: str, target: dict[str, Any], patch: Any) -> dict[str, Any]:
    """Apply a PATCH body by its media type (parameters such as charset ignored)."""
    media = content_type.split(";")[0].strip().lower()
    if media in (MERGE, STRATEGIC):
        if not isinstance(patch, dict):
            raise BadRequestError("a merge patch must be a JSON object")
        result = merge_patch(target, patch)
    elif media == JSON_PATCH:
        result = json_patch(target, patch)
    else:
        raise UnsupportedMediaTypeError(content_type)
    if not isinstance(result, dict):
        raise BadRequestError("the patch did not leave an object")
    return result
