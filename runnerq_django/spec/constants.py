"""The spec's ``constants/constants.json`` as Python names (one source: the packaged copy).

The values are read from ``spec/data/constants/constants.json`` rather than retyped, so the spec's
own file is the only place they live.
"""

from __future__ import annotations

from typing import Any

from runnerq_django.spec.catalog import load

_RAW = load("constants/constants.json")
_VALUES = {entry["name"]: entry for entry in _RAW["constants"]}


def _value(name: str) -> Any:
    entry = _VALUES[name]
    return int(entry["value"]) if entry["type"] in ("int", "int64") else entry["value"]


SCHEMA_ADVISORY_LOCK_KEY: int = _value("schema_advisory_lock_key")
WORK_CHANNEL_PREFIX: str = _value("work_channel_prefix")
RESULT_CHANNEL_PREFIX: str = _value("result_channel_prefix")
DEFAULT_MAX_RETRY_DELAY_SECONDS: int = _value("default_max_retry_delay_seconds")
BUSINESS_KEY_PREFIX: str = _value("business_key_prefix")
STEP_KEY_PREFIX: str = _value("step_key_prefix")
SERIALIZATION_JSON: str = _value("serialization_json")
SERIALIZATION_SUPERJSON: str = _value("serialization_superjson")

# The storage error kinds and their frozen numbers (stored and sent on the wire).
STORAGE_ERROR_KINDS: dict[str, int] = {
    value["name"]: value["value"]
    for enum in _RAW["enums"]
    if enum["name"] == "storage_error_kind"
    for value in enum["values"]
}

# Postgres truncates identifiers (channel names included) past 63 bytes; queue names are limited
# to 48 characters so that prefix + queue always fits.
MAX_CHANNEL_BYTES = 63


def work_channel(queue: str) -> str:
    """The LISTEN/NOTIFY channel that announces committed runnable work on ``queue``."""
    return _channel(WORK_CHANNEL_PREFIX, queue)


def result_channel(queue: str) -> str:
    """The LISTEN/NOTIFY channel that announces committed results on ``queue`` (payload: ids joined by ``,``)."""
    return _channel(RESULT_CHANNEL_PREFIX, queue)


def _channel(prefix: str, queue: str) -> str:
    if not queue:
        raise ValueError("queue name must not be empty")
    channel = prefix + queue
    if len(channel.encode()) > MAX_CHANNEL_BYTES:
        # A truncated channel would silently listen to a different name than other SDKs notify.
        raise ValueError(
            f"channel {channel!r} is longer than Postgres's {MAX_CHANNEL_BYTES}-byte identifier limit"
        )
    return channel
