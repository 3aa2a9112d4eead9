"""Checks and conversions of what a Django developer passes to ``@activity`` and ``enqueue``.

The storage layer checks every record it writes (``storage/validation.py``, the protocol's
bounds); this module adds what only the public API has: durations as ``timedelta``, delays as a
``datetime`` to run at, and the payload size limit ``RUNNERQ['MAX_PAYLOAD_BYTES']``. Errors are
the storage layer's ``InvalidArgument`` naming the field and the limit; nothing is written.

Internal: not part of the public API.
"""

from __future__ import annotations

import math
from datetime import UTC, datetime, timedelta
from typing import Any

from runnerq_django.storage import validation
from runnerq_django.storage.errors import InvalidArgument
from runnerq_django.storage.validation import (
    MAX_DURATION_SECONDS,
    MAX_INT4,
    MAX_KEY_BYTES,
    MAX_TYPE_BYTES,
    invalid,
)

__all__ = [
    "InvalidArgument",
    "activity_type",
    "delay_seconds",
    "idempotency_key",
    "invalid",
    "json_value",
    "metadata",
    "priority",
    "queue_name",
    "seconds",
    "whole_number",
    "whole_seconds",
]

queue_name = validation.queue_name


def activity_type(value: Any, field: str = "activity_type") -> str:
    return validation.text(field, value, MAX_TYPE_BYTES)


def priority(value: Any, field: str = "priority") -> int:
    return validation.integer(field, value, 1, 4)


def whole_number(value: Any, field: str, *, minimum: int = 0, maximum: int = MAX_INT4) -> int:
    return validation.integer(field, value, minimum, maximum)


def seconds(value: Any, field: str, *, minimum: float = 0, maximum: float = MAX_DURATION_SECONDS) -> float:
    """A duration given as seconds (int/float) or a ``timedelta``, in seconds."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    return float(validation.number(field, value, minimum, maximum))


def whole_seconds(value: Any, field: str, *, minimum: int = 0, maximum: float = MAX_DURATION_SECONDS) -> int:
    """A duration stored in whole seconds (the schema's bigint columns); fractions round up."""
    return math.ceil(seconds(value, field, minimum=minimum, maximum=maximum))


def delay_seconds(value: Any, field: str = "delay") -> float:
    """Seconds from now until an activity may start: ``delay`` as seconds, a ``timedelta``, or an
    aware ``datetime`` to run at (a past one means now)."""
    if value is None:
        return 0.0
    if isinstance(value, datetime):
        validation.timestamp(field, value)
        return max(0.0, (value - datetime.now(UTC)).total_seconds())
    return seconds(value, field)


def metadata(value: Any, field: str = "metadata") -> dict[str, str] | None:
    from runnerq_django import conf

    validation.metadata(value, conf.runnerq_settings().max_payload_bytes, field)
    checked: dict[str, str] | None = value  # validation.metadata refused anything else
    return checked


def idempotency_key(value: Any, field: str = "idempotency_key") -> str | None:
    return None if value is None else validation.text(field, value, MAX_KEY_BYTES)


def json_value(
    value: Any, field: str, *, max_bytes: int = validation.MAX_VALUE_BYTES, limit_name: str = ""
) -> Any:
    """Refuse what json-v1 can't carry (objects, NaN, NUL) and values over ``max_bytes`` as JSON
    text (the error names ``limit_name``, the setting it comes from, when given). ``None``, ints
    and booleans skip the encode: the common cases stay cheap."""
    if value is None or type(value) in (int, bool):
        return value
    validation.json_text(field, value, max_bytes, limit_name=limit_name)
    return value
