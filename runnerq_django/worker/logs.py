"""Structured log lines for the worker: one line per state change, as ``text`` (``event
key=value ...``) or ``json`` (one object per line, for log shippers). The fields are the
``extra`` of each log call, so both formats carry the same facts."""

from __future__ import annotations

import json
import logging
import sys
from datetime import datetime, timezone

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


def extra_fields(record: logging.LogRecord) -> dict:
    return {key: value for key, value in vars(record).items() if key not in _STANDARD}


def _timestamp(record: logging.LogRecord) -> str:
    return datetime.fromtimestamp(record.created, timezone.utc).isoformat(timespec="milliseconds").replace("+00:00", "Z")


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname, record.getMessage()]
        for key, value in extra_fields(record).items():
            text = str(value)
            parts.append(f"{key}={json.dumps(text) if (' ' in text or not text) else text}")
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {"ts": _timestamp(record), "level": record.levelname.lower(), "logger": record.name,
                 "event": record.getMessage(), **extra_fields(record)}
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


FORMATS = {"text": TextFormatter, "json": JsonFormatter}


def configure(log_format: str, level: int) -> None:
    """Send ``runnerq_django`` logs to stderr in ``log_format``. ``django`` leaves the project's
    ``LOGGING`` alone (only the level is set)."""
    logger = logging.getLogger("runnerq_django")
    logger.setLevel(level)
    if log_format == "django":
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(FORMATS[log_format]())
    logger.handlers = [handler]
    logger.propagate = False
