"""The scripted HTTP endpoint's script (the server is the ``scripted`` fixture)."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

OK_S = 10.0
"""Timeout of requests that should succeed: generous, so a loaded CI box cannot fail them."""


@dataclass
class Scripted:
    """What the tiny server answers, and what it was asked."""

    status: int = 200
    body: bytes = b""
    content_type: str = "application/json"
    requests: list[tuple[str, str, dict[str, str], bytes]] = field(default_factory=list)


def answer(script: Scripted, payload: Any, status: int = 200) -> None:
    script.status = status
    script.body = payload if isinstance(payload, bytes) else json.dumps(payload).encode()
