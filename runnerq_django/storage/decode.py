"""Stored values Postgres holds but Python may not read, decoded one row at a time.

Postgres accepts, and other SDKs may write, values Python can't represent: a jsonb number with
more digits than Python's int-from-string limit (``1e5000`` is stored as 5,001 digits), jsonb
nested deeper than Python's recursion limit, a timestamp of ``infinity`` or past year 9999.
Fetched the usual way, one such value makes the whole result raise; so the columns that can
hold one are read as text and decoded here per row, and the row that holds it fails alone.
"""

from __future__ import annotations

import json
from collections.abc import Callable
from datetime import datetime
from typing import Any

from runnerq_django.exceptions import UnsupportedValue
from runnerq_django.spec.serialization import handler_value


class Undecodable(ValueError):
    """A stored value this process can't read; the message names the field and the reason."""


def json_value(field: str, text: str | None) -> Any:
    """A jsonb column read as text (``None`` for SQL NULL)."""
    if text is None:
        return None
    try:
        return json.loads(text)
    except RecursionError:
        raise Undecodable(f"{field}: nested too deep for Python") from None
    except json.JSONDecodeError as exc:
        raise Undecodable(f"{field}: not valid JSON ({exc})") from None
    except ValueError as exc:  # int-from-string conversion past sys.get_int_max_str_digits()
        raise Undecodable(f"{field}: number out of range for Python ({exc})") from None


def stored_value(field: str, text: str | None, serialization: str | None, superjson_mode: str) -> Any:
    """A jsonb value as a handler reads it (``spec.serialization.handler_value``)."""
    try:
        return handler_value(json_value(field, text), serialization or "json-v1", superjson_mode)
    except UnsupportedValue as exc:
        raise Undecodable(f"{field}: {exc}") from None


def timestamp(field: str, text: str | None, load: Callable[[str], datetime]) -> datetime | None:
    """A timestamptz column read as text, turned into a datetime by ``load``
    (``db.timestamptz_loader``: the connection's own loader, so its time zone)."""
    if text is None:
        return None
    try:
        return load(text)
    except ValueError as exc:
        raise Undecodable(f"{field}: out of range for Python ({exc})") from None
