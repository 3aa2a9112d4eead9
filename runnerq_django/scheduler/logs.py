"""Structured log lines, in the project's convention: the message is the event name and the
facts are the record's ``extra`` (``runworker``/``runscheduler --log-format text|json`` print them
as ``key=value`` or JSON). Instants are ISO strings, so every format shows the same text."""

from __future__ import annotations

import logging
from datetime import datetime
from typing import Any

from runnerq_django.scheduler.schedules import format_instant


def _value(value: Any) -> Any:
    if isinstance(value, datetime):
        return format_instant(value)
    return value


def log_event(logger: logging.Logger, level: int, event: str, **fields: Any) -> None:
    if logger.isEnabledFor(level):
        logger.log(level, event, extra={name: _value(value) for name, value in fields.items()})

