"""Structured log lines: ``event key=value ...`` as the message (readable in any handler) and
the same fields in ``extra`` (for JSON formatters)."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from runnerq_django.scheduler.schedules import format_instant


def _text(value: Any) -> str:
    if isinstance(value, datetime):
        return format_instant(value) or ""
    if isinstance(value, bool):
        return "true" if value else "false"
    if value is None:
        return "-"
    text = str(value)
    return f'"{text}"' if (" " in text or not text) else text


def log_event(logger: logging.Logger, level: int, event: str, **fields: Any) -> None:
    if not logger.isEnabledFor(level):
        return
    message = " ".join([event, *(f"{name}={_text(value)}" for name, value in fields.items())])
    extra = {"event": event, **{f"periodic_{name}": value for name, value in fields.items()}}
    logger.log(level, message, extra=extra)
