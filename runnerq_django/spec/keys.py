"""Key encodings of SPEC.md section (d): business keys, application keys, step keys, checkpoint ids.

These strings and UUIDs are shared with the Go and TypeScript SDKs through the database, so they
must match ``vectors/business_key.json``, ``application_key.json``, ``step_key.json`` and
``checkpoint_id.json`` byte for byte.
"""

from __future__ import annotations

import base64
import binascii
import uuid

from runnerq_django.spec.constants import BUSINESS_KEY_PREFIX, STEP_KEY_PREFIX


def business_key(key: str, activity_type: str) -> str:
    """The stored idempotency key for application key ``key`` of ``activity_type``.

    The byte-length prefix makes the split unambiguous, so keys are per type without any
    separator the key itself could contain.
    """
    if not key:
        raise ValueError("business key: key must not be empty")
    if not activity_type:
        raise ValueError("business key: activity_type must not be empty")
    return _encode(key, activity_type)


def _encode(key: str, activity_type: str) -> str:
    raw = f"{len(key.encode())}:{key}{activity_type}".encode()
    return BUSINESS_KEY_PREFIX + base64.b64encode(raw).decode().rstrip("=")


def decode_business_key(stored: str) -> tuple[str, str] | None:
    """``(key, activity_type)`` of a canonical business key, ``None`` for anything else.

    Canonical means re-encoding reproduces ``stored`` exactly, which rules out padding, other
    alphabets, and length prefixes such as ``05`` or ``+5``.
    """
    if not stored.startswith(BUSINESS_KEY_PREFIX):
        return None
    encoded = stored[len(BUSINESS_KEY_PREFIX) :]
    try:
        raw = base64.b64decode(encoded + "=" * (-len(encoded) % 4), validate=True)
    except (binascii.Error, ValueError):
        return None
    length, colon, rest = raw.partition(b":")
    if not colon or not length.isdigit():
        return None
    n = int(length)
    if n > len(rest):
        return None
    try:
        key, activity_type = rest[:n].decode(), rest[n:].decode()
    except UnicodeDecodeError:
        return None
    if _encode(key, activity_type) != stored:
        return None
    return key, activity_type


def application_key(stored: str, activity_type: str) -> str:
    """The key the application set, recovered from a stored idempotency key (what queries report)."""
    if not stored or stored.startswith(STEP_KEY_PREFIX):
        return ""
    if stored.startswith(BUSINESS_KEY_PREFIX):
        decoded = decode_business_key(stored)
        if decoded is not None and decoded[1] == activity_type:
            return decoded[0]
        return stored
    # The 0.1.0 "<key>-<activity_type>" rule: still in vectors/application_key.json (SPEC.md
    # caveat 1). Newer SDKs never write it, so recognising it costs nothing.
    suffix = "-" + activity_type
    if activity_type and stored.endswith(suffix) and len(stored) > len(suffix):
        return stored[: -len(suffix)]
    return stored


def step_key(root_id: uuid.UUID | str, parent_id: uuid.UUID | str, step: str) -> str:
    """The idempotency key of the child a step spawns, so spawning the same step again finds it."""
    return f"{STEP_KEY_PREFIX}{_canonical_uuid(root_id)}:{_canonical_uuid(parent_id)}:{step}"


def checkpoint_id(activity_id: uuid.UUID | str, kind: str, name: str) -> uuid.UUID:
    """The UUIDv5 a checkpoint, durable sleep or signal result of ``activity_id`` is stored under."""
    namespace = activity_id if isinstance(activity_id, uuid.UUID) else uuid.UUID(activity_id)
    return uuid.uuid5(namespace, f"{kind}:{name}")


def _canonical_uuid(value: uuid.UUID | str) -> str:
    return str(value if isinstance(value, uuid.UUID) else uuid.UUID(value))
