"""Argument checks at the storage edge: a bad argument raises ``InvalidArgument`` naming the field
and the limit before any SQL runs, so nothing is written.

The bounds are the storage protocol's (SPEC.md section (h)) where it has one, and the column
types' otherwise; a value Postgres would refuse mid-statement must be refused here instead, with a
message a user can act on.
"""

from __future__ import annotations

import json
import math
import re
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from runnerq_django.storage import config
from runnerq_django.storage.errors import InvalidArgument
from runnerq_django.storage.types import Claim, NewActivity, OnDuplicate

QUEUE_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]{0,47}")
MAX_TYPE_BYTES = 512
MAX_TOKEN_BYTES = 512
# Tokens are "<worker_id>:<32 hex>", so the worker id leaves room for the suffix.
MAX_WORKER_ID_BYTES = MAX_TOKEN_BYTES - 33
MAX_INT4 = 2_147_483_647
MAX_DURATION_SECONDS = 315_360_000  # ten years: the protocol's TimeoutSeconds/RetryDelaySeconds bound
MAX_DEPTH = 32_767  # int2
MAX_LEASE_MS = 24 * 3600 * 1000  # the protocol's "durations <= 24 h"
MAX_BATCH = 1000  # the protocol's page/batch bound
# A btree entry must fit in a third of a page (2,704 bytes); the PRIMARY KEY (queue_name,
# idempotency_key) of runnerq_idempotency holds the stored key, which for an application key is
# base64 of "<n>:<key><type>" (4/3 of the bytes, plus the prefix). 1,024 bytes of key with a
# 512-byte type store as about 2,070 bytes, so a key inside this limit always fits.
MAX_KEY_BYTES = 1024
# Any stored key (step keys are spawned children's raw keys) fits the same btree entry with room
# for the queue name and the tuple headers.
MAX_STORED_KEY_BYTES = 2400
# Operator commands: the command id is part of the ledger's primary key; a reason is a note.
MAX_COMMAND_ID_BYTES = 512
MAX_REASON_BYTES = 4096
# The storage protocol's body limit; results and checkpoints larger than that could not travel.
MAX_VALUE_BYTES = 4 * 1024 * 1024
RESULT_STATES = ("Ok", "Err")
PARK_KINDS = ("sleep", "signal", "await")


def invalid(field: str, message: str) -> InvalidArgument:
    return InvalidArgument(f"{field}: {message}", field=field)


def queue_name(queue: Any) -> str:
    if not isinstance(queue, str) or not QUEUE_NAME.fullmatch(queue):
        raise invalid(
            "queue",
            f"must be 1-48 characters of letters, digits and underscores, starting with a "
            f"letter or underscore (it names the LISTEN channels), got {queue!r}",
        )
    return queue


def integer(field: str, value: Any, low: int, high: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise invalid(field, f"must be a whole number {low}..{high}, got {value!r}")
    if not low <= value <= high:
        raise invalid(field, f"must be {low}..{high}, got {value}")
    return int(value)


def number(field: str, value: Any, low: float, high: float) -> float:
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        raise invalid(field, f"must be a number {low}..{high}, got {value!r}")
    if not low <= value <= high:
        raise invalid(field, f"must be {low}..{high}, got {value}")
    return value


def text(field: str, value: Any, max_bytes: int, *, allow_empty: bool = False) -> str:
    if not isinstance(value, str):
        raise invalid(field, f"must be a string, got {type(value).__name__}")
    if not value and not allow_empty:
        raise invalid(field, "must not be empty")
    size = utf8_size(field, value)
    if size > max_bytes:
        raise invalid(field, f"must be at most {max_bytes} bytes, got {size}")
    if "\x00" in value:
        raise invalid(field, "must not contain NUL characters (Postgres text cannot store them)")
    return value


def utf8_size(field: str, value: str) -> int:
    """The UTF-8 length of ``value``; a lone surrogate (``json.loads('"\\ud83d"')`` makes one) has no
    UTF-8 form, and Postgres text and jsonb refuse it, so it is an invalid argument."""
    try:
        return len(value.encode())
    except UnicodeEncodeError as exc:
        raise invalid(
            field,
            f"must be valid Unicode: it contains the lone surrogate U+{ord(exc.object[exc.start]):04X}, "
            "which UTF-8 (and Postgres) cannot store",
        ) from None


def activity_id(field: str, value: Any) -> uuid.UUID:
    if isinstance(value, str):
        try:
            value = uuid.UUID(value)
        except ValueError:
            raise invalid(field, f"must be a UUID, got {value!r}") from None
    if not isinstance(value, uuid.UUID):
        raise invalid(field, f"must be a UUID, got {type(value).__name__}")
    if value.int == 0:
        raise invalid(field, "must not be the nil UUID")
    return value


def claim(value: Any, field: str = "claim") -> Claim:
    if not isinstance(value, Claim):
        raise invalid(field, f"must be a Claim(id, token), got {type(value).__name__}")
    activity_id(f"{field}.id", value.id)
    text(f"{field}.token", value.token, MAX_TOKEN_BYTES)
    return value if isinstance(value.id, uuid.UUID) else Claim(uuid.UUID(str(value.id)), value.token)


def claims(values: Iterable[Any], field: str = "claims") -> list[Claim]:
    items = list(values)
    if len(items) > MAX_BATCH:
        raise invalid(field, f"at most {MAX_BATCH} per call, got {len(items)}")
    return [claim(item, f"{field}[{index}]") for index, item in enumerate(items)]


def max_json_depth() -> int:
    return config.active().max_json_depth


def too_deep(field: str, limit: int) -> InvalidArgument:
    return invalid(field, f"must be nested at most {limit} arrays/objects deep (RUNNERQ['MAX_JSON_DEPTH'])")


def json_depth(field: str, value: Any, limit: int) -> None:
    """Refuse ``value`` nested more than ``limit`` arrays/objects deep. Iterative, so a deep value
    cannot exhaust the stack (``json.dumps`` raises ``RecursionError`` near depth 990, and other
    SDKs and the admin would have to read what it wrote)."""
    stack = [(value, 1)] if isinstance(value, (dict, list, tuple)) else []
    while stack:
        item, depth = stack.pop()
        if depth > limit:
            raise too_deep(field, limit)
        children = item.values() if isinstance(item, dict) else item
        stack.extend((child, depth + 1) for child in children if isinstance(child, (dict, list, tuple)))


# JavaScript's Number.MAX_SAFE_INTEGER: the TypeScript SDK refuses json-v1 integers beyond it.
MAX_SAFE_INTEGER = 2**53 - 1
# In JSON text, what any unsafe number needs: 16 digits in a row, or a positive exponent. Text
# without either (nearly every value) skips the walk of safe_numbers.
MAYBE_UNSAFE = re.compile(r"[0-9]{16}|e\+")


def safe_numbers(field: str, value: Any) -> None:
    """Refuse a number the TypeScript SDK can't read back: an integer outside
    ±``MAX_SAFE_INTEGER``, or a float beyond it. Every float past 2**53 is a whole number, and
    JavaScript reads ``9500000000000000.0`` as the unsafe integer 9500000000000000 (the SDK
    refuses the input, or throws reading the result). Python writes a float of 1e16 or more in
    exponent form (``1e+16``), and jsonb stores that as the integer it equals
    (``10000000000000000``), which reads back in Python as an ``int`` too."""
    stack: list[tuple[Any, tuple[Any, ...]]] = [(value, ())]
    while stack:
        item, path = stack.pop()
        if isinstance(item, dict):  # dict.items: a subclass's items() may not be read twice
            stack.extend((child, (*path, key)) for key, child in dict.items(item))
        elif isinstance(item, (list, tuple)):
            stack.extend((child, (*path, index)) for index, child in enumerate(item))
        elif isinstance(item, bool):
            continue
        elif isinstance(item, int) and not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
            raise _unsafe(field, path, f"integer {item}")
        elif isinstance(item, float) and not -MAX_SAFE_INTEGER <= item <= MAX_SAFE_INTEGER:
            shown = repr(item)
            if "e+" in shown:
                shown += f" (jsonb stores it as the integer {int(item)})"
            raise _unsafe(field, path, f"float {shown}")


def _unsafe(field: str, path: tuple[Any, ...], what: str) -> InvalidArgument:
    where = "$" + "".join(f"[{p}]" if isinstance(p, int) else f".{p}" for p in path)
    return invalid(
        field,
        f"{what} at {where} is outside +-(2**53 - 1), which the TypeScript SDK can't read "
        f"(send it as a string, or set RUNNERQ['ALLOW_UNSAFE_INTEGERS'] = True for queues "
        f"only Python reads)",
    )


def allow_unsafe_integers() -> bool:
    return config.active().allow_unsafe_integers


# json.dumps(value, ensure_ascii=False, allow_nan=False, separators=(",", ":")), without building
# an encoder per call (the encoder keeps no state between calls: one serves every thread).
_ENCODER = json.JSONEncoder(ensure_ascii=False, allow_nan=False, separators=(",", ":"))


def json_text(
    field: str, value: Any, max_bytes: int, depth_limit: int | None = None, *, limit_name: str = ""
) -> str:
    """``value`` as the JSON text Postgres stores (``json-v1``), refusing what jsonb can't hold
    and (unless ``RUNNERQ['ALLOW_UNSAFE_INTEGERS']``) numbers other SDKs can't read.
    ``depth_limit``: ``RUNNERQ['MAX_JSON_DEPTH']``, read once by a caller checking many values.
    ``limit_name``: the setting ``max_bytes`` comes from, named by the error of a value too large.

    The value is encoded first and walked only when its text could be too deep (it opens more
    arrays and objects than the limit) or when encoding fails; the checks then run in the order
    of ``_json_text_in_order``, so a refused value gets the same error either way."""
    limit = max_json_depth() if depth_limit is None else depth_limit
    try:
        encoded = _ENCODER.encode(value)
    except Exception:  # not JSON, or deep enough to exhaust the encoder's stack: the full checks say which
        return _json_text_in_order(field, value, max_bytes, limit, limit_name)
    if encoded.count("[") + encoded.count("{") > limit:  # the nesting is at most the containers opened
        json_depth(field, value, limit)
    return _checked_text(field, value, encoded, max_bytes, limit_name)


def _json_text_in_order(field: str, value: Any, max_bytes: int, limit: int, limit_name: str) -> str:
    json_depth(field, value, limit)
    try:
        encoded = _ENCODER.encode(value)
    except (TypeError, ValueError) as exc:
        raise not_json(field, value, exc) from None
    return _checked_text(field, value, encoded, max_bytes, limit_name)


def _checked_text(field: str, value: Any, encoded: str, max_bytes: int, limit_name: str = "") -> str:
    if MAYBE_UNSAFE.search(encoded) and not allow_unsafe_integers():
        safe_numbers(field, value)
    # jsonb refuses the NUL code point, even escaped; json.dumps escapes it as \u0000.
    if "\\u0000" in encoded:
        raise invalid(field, "must not contain NUL characters (\\u0000): Postgres jsonb cannot store them")
    size = len(encoded) if encoded.isascii() else utf8_size(field, encoded)
    if size > max_bytes:
        named = f" ({limit_name})" if limit_name else ""
        raise invalid(field, f"JSON text must be at most {max_bytes} bytes{named}, got {size}")
    return encoded


# What to send instead of a value JSON can't carry, by its type's name (and its bases' names).
_JSON_FIXES = {
    "datetime": "send value.isoformat() (datetime.fromisoformat() reads it back)",
    "date": "send value.isoformat() (date.fromisoformat() reads it back)",
    "time": "send value.isoformat() (time.fromisoformat() reads it back)",
    "timedelta": "send value.total_seconds()",
    "UUID": "send str(value) (uuid.UUID() reads it back)",
    "Decimal": "send str(value) (Decimal() reads it back exactly)",
    "set": "send a list: sorted(value) or list(value)",
    "frozenset": "send a list: sorted(value) or list(value)",
    "bytes": "send text: value.decode() for text, base64.b64encode(value).decode() for binary",
    "bytearray": "send text: base64.b64encode(value).decode()",
    "Model": "send its primary key (value.pk) and load the row in the handler",
    "Enum": "send value.value",
    "PurePath": "send str(value)",
}


def _json_fix(item: Any) -> str:
    for kind in type(item).__mro__:
        if fix := _JSON_FIXES.get(kind.__name__):
            return f"; {fix}"
    return ""


def not_json(field: str, value: Any, exc: Exception) -> InvalidArgument:
    """The error for a value ``json.dumps`` refused, naming the path of the first part it can't
    write and, for the usual types, what to send instead (``payload['when']: datetime is not
    JSON-serializable (json-v1); send value.isoformat() ...``)."""
    stack: list[tuple[Any, str, frozenset[int]]] = [(value, field, frozenset())]
    while stack:
        item, path, seen = stack.pop()
        if isinstance(item, (dict, list, tuple)):
            if id(item) in seen:
                return invalid(path, "refers to itself (a circular reference is not JSON)")
            inner = seen | {id(item)}
            if isinstance(item, dict):
                for key in dict.keys(item):
                    if not isinstance(key, (str, int, float, bool)) and key is not None:
                        return invalid(path, f"has the key {key!r}: JSON object keys are strings")
                children = [(child, f"{path}[{key!r}]") for key, child in dict.items(item)]
            else:
                children = [(child, f"{path}[{index}]") for index, child in enumerate(item)]
            stack.extend((child, where, inner) for child, where in reversed(children))
        elif isinstance(item, float) and not math.isfinite(item):
            return invalid(path, f"{item!r} is not JSON (json-v1 has no NaN or Infinity)")
        elif not isinstance(item, (str, int, float, bool)) and item is not None:
            return invalid(path, f"{type(item).__name__} is not JSON-serializable (json-v1){_json_fix(item)}")
    return invalid(field, f"must be JSON-serializable (json-v1): {exc}")


def metadata(value: Any, max_bytes: int, field: str = "metadata") -> str | None:
    """Metadata as stored JSON text; bounded like a payload (``RUNNERQ['MAX_PAYLOAD_BYTES']``)."""
    if value is None:
        return None
    if not isinstance(value, dict) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise invalid(field, "must be a map of strings to strings")
    return json_text(field, value, max_bytes)


def timestamp(field: str, value: Any) -> datetime:
    if isinstance(value, str):
        try:
            value = datetime.fromisoformat(value.replace("z", "Z"))
        except ValueError:
            raise invalid(field, f"must be an RFC 3339 timestamp, got {value!r}") from None
    if not isinstance(value, datetime):
        raise invalid(field, f"must be a datetime, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise invalid(field, "must carry a time zone (a naive datetime names no instant)")
    try:
        value.astimezone(UTC)
    except OverflowError:  # 9999-12-31T23:59:59-14:00 is in year 10000 in UTC
        raise invalid(
            field,
            f"must be between 0001-01-01T00:00:00Z and 9999-12-31T23:59:59.999999Z, got {value.isoformat()}",
        ) from None
    return value


def types_filter(types: Any, field: str = "types") -> list[str] | None:
    if types is None:
        return None
    if isinstance(types, str) or not isinstance(types, (list, tuple, set, frozenset)):
        raise invalid(
            field, f"must be None (any type) or a list of activity types, got {type(types).__name__}"
        )
    if not types:
        raise invalid(field, "must be None (any type) or a non-empty list: an empty list would claim nothing")
    if len(types) > MAX_BATCH:
        raise invalid(field, f"at most {MAX_BATCH} types, got {len(types)}")
    # Dict order keeps the caller's order (deterministic SQL text) while dropping duplicates.
    return list(dict.fromkeys(text(f"{field}[]", item, MAX_TYPE_BYTES) for item in types))


def new_activity(activity: Any, index: int | None = None) -> NewActivity:
    """Check every field of one activity to submit; returns it with ``id`` as a ``uuid.UUID``."""
    prefix = "" if index is None else f"activities[{index}]."
    if not isinstance(activity, NewActivity):
        raise invalid(
            prefix.rstrip(".") or "activity", f"must be a NewActivity, got {type(activity).__name__}"
        )
    a = activity
    activity_id(f"{prefix}id", a.id)
    text(f"{prefix}activity_type", a.activity_type, MAX_TYPE_BYTES)
    integer(f"{prefix}priority", a.priority, 1, 4)
    integer(f"{prefix}max_retries", a.max_retries, 0, MAX_INT4)
    integer(f"{prefix}timeout_seconds", a.timeout_seconds, 0, MAX_DURATION_SECONDS)
    integer(f"{prefix}retry_delay_seconds", a.retry_delay_seconds, 0, MAX_DURATION_SECONDS)
    integer(f"{prefix}max_retry_delay_seconds", a.max_retry_delay_seconds, 0, MAX_DURATION_SECONDS)
    number(f"{prefix}delay_seconds", a.delay_seconds, 0, MAX_DURATION_SECONDS)
    integer(f"{prefix}depth", a.depth, 0, MAX_DEPTH)
    if a.parent_id is not None:
        activity_id(f"{prefix}parent_id", a.parent_id)
    if a.root_id is not None:
        activity_id(f"{prefix}root_id", a.root_id)
        if a.parent_id is None and str(a.root_id) != str(a.id):
            raise invalid(f"{prefix}root_id", "a root (no parent_id) is its own root: leave root_id unset")
    if a.parent_id is None and a.depth:
        raise invalid(f"{prefix}depth", "must be 0 for a root (no parent_id)")
    if a.parent_id is not None and a.depth < 1:
        raise invalid(f"{prefix}depth", f"must be at least 1 for a child (parent_id is set), got {a.depth}")
    if a.idempotency_key is not None and a.raw_idempotency_key is not None:
        raise invalid(f"{prefix}idempotency_key", "set idempotency_key or raw_idempotency_key, not both")
    if a.idempotency_key is not None:
        text(f"{prefix}idempotency_key", a.idempotency_key, MAX_KEY_BYTES)
    if a.raw_idempotency_key is not None:
        text(f"{prefix}raw_idempotency_key", a.raw_idempotency_key, MAX_STORED_KEY_BYTES)
    try:
        OnDuplicate(a.on_duplicate)
    except ValueError:
        raise invalid(
            f"{prefix}on_duplicate", f"must be an OnDuplicate (0..3), got {a.on_duplicate!r}"
        ) from None
    if a.metadata is not None and not (
        isinstance(a.metadata, dict)
        and all(isinstance(k, str) and isinstance(v, str) for k, v in a.metadata.items())
    ):
        raise invalid(f"{prefix}metadata", "must be a map of strings to strings")
    return a
