"""Logging set-up shared by every command: text or JSON lines, secrets redacted."""

from __future__ import annotations

import json
import logging
import sys
from datetime import UTC, datetime

_SECRETS: set[str] = set()
REDACTED = "***"


def register_secret(value: str | None) -> None:
    """Never let this value reach a log line (API keys, passwords)."""
    if value:
        _SECRETS.add(value)


def redact(text: str) -> str:
    for secret in _SECRETS:
        text = text.replace(secret, REDACTED)
    return text


class _RedactingFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        return redact(super().format(record))


class _JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        doc = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        if record.exc_info:
            doc["exception"] = self.formatException(record.exc_info)
        return redact(json.dumps(doc, ensure_ascii=False))


def setup_logging(fmt: str = "text", level: str = "INFO") -> None:
    """Configure the root logger once, in a command's main()."""
    handler = logging.StreamHandler(sys.stderr)
    if fmt == "json":
        handler.setFormatter(_JsonFormatter())
    else:
        handler.setFormatter(_RedactingFormatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    root = logging.getLogger()
    root.handlers[:] = [handler]
    root.setLevel(level.upper())
    for noisy in ("aiokafka", "faust", "mode", "httpx", "httpcore"):
        logging.getLogger(noisy).setLevel(max(logging.WARNING, root.level))
