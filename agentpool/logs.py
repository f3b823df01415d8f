"""Logging setup shared by the supervisor and its workers: text or one JSON object per line."""

from __future__ import annotations

import json
import logging
import os
import sys
from datetime import UTC, datetime

from agentpool.config.options import LogFormat


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry: dict[str, object] = {
            "ts": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname.lower(),
            "logger": record.name,
            "pid": record.process,
            "msg": record.getMessage(),
        }
        node = getattr(record, "node", None)
        if node is not None:
            entry["node"] = node
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, ensure_ascii=False)


class _NodeField(logging.Filter):
    """Give every record of a worker process its node (JSON logs then carry ``node``)."""

    def __init__(self, node: str) -> None:
        super().__init__()
        self.node = node

    def filter(self, record: logging.LogRecord) -> bool:
        if getattr(record, "node", None) is None:
            record.node = self.node
        return True


def setup_logging(
    fmt: LogFormat, level: str, role: str = "supervisor", node: str | None = None
) -> None:
    """Configure the root logger; ``role`` tags text lines, ``node`` a worker's records."""
    handler = logging.StreamHandler(sys.stderr)
    if node is not None:
        handler.addFilter(_NodeField(node))
    if fmt is LogFormat.JSON:
        handler.setFormatter(JsonFormatter())
    else:
        handler.setFormatter(
            logging.Formatter(
                f"%(asctime)s %(levelname)-7s {role}[{os.getpid()}] %(name)s: %(message)s"
            )
        )
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    # urllib3 logs every retried connection at WARNING; our own retry logs say it once.
    logging.getLogger("urllib3").setLevel(logging.ERROR)
