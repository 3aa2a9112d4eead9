"""Stored value serializations (SPEC.md section (d), ``serialization/vectors/plain_json.json``).

A Python worker writes ``json-v1`` only; it reads values the TypeScript SDK wrote as
``superjson-v1`` envelopes through ``plain_json``, or, in ``typed`` mode
(``RUNNERQ['SUPERJSON']``), through ``superjson.decode``.
"""

from __future__ import annotations

from typing import Any

from runnerq_django.spec import superjson
from runnerq_django.spec.constants import SERIALIZATION_JSON, SERIALIZATION_SUPERJSON

JSON_V1 = SERIALIZATION_JSON
SUPERJSON_V1 = SERIALIZATION_SUPERJSON


def plain_json(data: Any, serialization: str) -> Any:
    """The plain JSON a stored value shows outside its SDK.

    ``superjson-v1`` gives the envelope's ``json`` member (its JSON-safe part, without the type
    metadata); anything else, and data that is not such an envelope, passes through.
    """
    if serialization == SUPERJSON_V1 and isinstance(data, dict) and "json" in data:
        return data["json"]
    return data


def handler_value(data: Any, serialization: str, mode: str) -> Any:
    """The value a handler gets: ``plain_json``, or with ``mode`` ``"typed"`` SuperJSON's typed
    values as Python's (``UnsupportedValue`` for a type without a counterpart). In either mode a
    SuperJSON ``-0`` (the string ``"-0"`` annotated ``number``) is the number."""
    if serialization == SUPERJSON_V1:
        return superjson.decode(data) if mode == "typed" else superjson.plain(data)
    return data
