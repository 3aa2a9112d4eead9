"""Stored events (SPEC.md section (c), ``events.schema.json``): names, canonical types, details.

Only what the activity row can't say is stored. Every stored event's ``detail`` must match its
``$defs`` entry exactly (no extra keys), whichever SDK wrote it, so the storage layer builds
details only through the functions here. Optional keys are left out when ``None``; date-times
are RFC 3339 UTC strings; UUIDs are lowercase strings.
"""

from __future__ import annotations

import uuid
from datetime import UTC, datetime
from typing import Any

RETRYING = "Retrying"
FAILED = "Failed"
DEAD_LETTER = "DeadLetter"
REQUEUED = "Requeued"
YIELDED = "Yielded"
SIGNALED = "Signaled"
SPAWN_LINKED = "SpawnLinked"
CANCELLED = "Cancelled"
RETRIED = "Retried"
REDRIVEN = "Redriven"
RUN_NOW = "RunNow"
RESCHEDULED = "Rescheduled"
PRIORITY_CHANGED = "PriorityChanged"

# Stored event type -> the canonical type queries, streams and the console report.
CANONICAL_EVENTS: dict[str, str] = {
    RETRYING: "attempt.failed",
    FAILED: "attempt.failed",
    DEAD_LETTER: "dead_letter.entered",
    REQUEUED: "attempt.lease_expired",
    YIELDED: "wait.parked",
    SIGNALED: "signal.received",
    SPAWN_LINKED: "child.linked",
    CANCELLED: "activity.cancelled",
    RETRIED: "activity.retried",
    REDRIVEN: "dead_letter.redriven",
    RUN_NOW: "activity.run_now",
    RESCHEDULED: "activity.rescheduled",
    PRIORITY_CHANGED: "activity.priority_changed",
}
STORED_EVENT_TYPES: tuple[str, ...] = tuple(CANONICAL_EVENTS)

OTHER_PREFIX = "other."

DEAD_LETTER_REASONS = ("attempts_exhausted", "lease_expired")
REQUEUED_REASON = "lease_expired"
YIELD_KINDS = ("sleep", "signal", "await")


def canonical_event(event_type: str) -> str:
    """The canonical type of a stored event type; unknown types become ``other.<lowercase>``."""
    return CANONICAL_EVENTS.get(event_type, OTHER_PREFIX + event_type.lower())


def internal_events(canonical: str) -> list[str]:
    """The stored event types that map to ``canonical``, sorted (the inverse of ``canonical_event``).

    Facts that are never stored (``activity.created``, ``attempt.started`` ...) give none;
    ``other.<rest>`` gives ``[<rest>]`` on a best-effort basis.
    """
    matches = sorted(stored for stored, target in CANONICAL_EVENTS.items() if target == canonical)
    if matches:
        return matches
    if canonical.startswith(OTHER_PREFIX) and len(canonical) > len(OTHER_PREFIX):
        return [canonical[len(OTHER_PREFIX) :]]
    return []


# -- detail builders, one per stored event type ---------------------------------------------


def retrying_detail(
    started_at: datetime | str,
    error: str,
    retry_count: int,
    scheduled_at: datetime | str,
    failure: Any = None,
) -> dict[str, Any]:
    """``Retrying``: the attempt failed retryably; ``retry_count`` is failed attempts so far (>= 1)."""
    detail = {
        "started_at": rfc3339(started_at),
        "error": error,
        "retry_count": _at_least_one(retry_count, "retry_count"),
        "scheduled_at": rfc3339(scheduled_at),
    }
    return _with_optional(detail, failure=failure)


def failed_detail(started_at: datetime | str, error: str, failure: Any = None) -> dict[str, Any]:
    """``Failed``: the attempt failed non-retryably."""
    return _with_optional({"started_at": rfc3339(started_at), "error": error}, failure=failure)


def dead_letter_detail(
    started_at: datetime | str, error: str, reason: str, failure: Any = None
) -> dict[str, Any]:
    """``DeadLetter``: ``reason`` is ``attempts_exhausted`` or ``lease_expired``."""
    detail = {
        "started_at": rfc3339(started_at),
        "error": error,
        "reason": _one_of(reason, DEAD_LETTER_REASONS, "reason"),
    }
    return _with_optional(detail, failure=failure)


def requeued_detail(started_at: datetime | str, error: str, retry_count: int) -> dict[str, Any]:
    """``Requeued``: the reaper found the lease expired and made the activity runnable again."""
    return {
        "started_at": rfc3339(started_at),
        "reason": REQUEUED_REASON,
        "error": error,
        "retry_count": _at_least_one(retry_count, "retry_count"),
    }


def yielded_detail(
    kind: str, step: str, wake_at: datetime | str, result_id: uuid.UUID | str | None, ready: bool
) -> dict[str, Any]:
    """``Yielded``: the attempt parked; ``result_id`` is ``None`` for a sleep (stored as JSON null)."""
    return {
        "kind": _one_of(kind, YIELD_KINDS, "kind"),
        "step": step,
        "wake_at": rfc3339(wake_at),
        "result_id": None if result_id is None else _uuid(result_id),
        "ready": bool(ready),
    }


def signaled_detail(
    name: str, signal_id: uuid.UUID | str, woke: bool, command_id: str = "", reason: str | None = None
) -> dict[str, Any]:
    """``Signaled``: ``signal_id`` is ``checkpoint_id(activity, "signal", name)``. ``command_id``
    is optional here and left out when there is none, as the TypeScript SDK writes it."""
    detail = {"name": name, "signal_id": _uuid(signal_id), "woke": bool(woke)}
    return _with_optional(detail, command_id=command_id or None, reason=reason)


def spawn_linked_detail(parent_activity_id: uuid.UUID | str) -> dict[str, Any]:
    """``SpawnLinked``: an existing activity re-linked under a parent through a returned-existing key."""
    return {"parent_activity_id": _uuid(parent_activity_id)}


def cancelled_detail(command_id: str, from_status: str, reason: str | None = None) -> dict[str, Any]:
    return _with_optional({"command_id": command_id, "from": from_status}, reason=reason)


def retried_detail(
    command_id: str, from_status: str, reset_attempts: bool, reason: str | None = None
) -> dict[str, Any]:
    """``Retried``: a failed or cancelled activity made to run again."""
    detail = {"command_id": command_id, "from": from_status, "reset_attempts": bool(reset_attempts)}
    return _with_optional(detail, reason=reason)


def redriven_detail(
    command_id: str, from_status: str, reset_attempts: bool, reason: str | None = None
) -> dict[str, Any]:
    """``Redriven``: a dead-lettered activity made to run again."""
    detail = {"command_id": command_id, "from": from_status, "reset_attempts": bool(reset_attempts)}
    return _with_optional(detail, reason=reason)


def run_now_detail(command_id: str, reason: str | None = None) -> dict[str, Any]:
    return _with_optional({"command_id": command_id}, reason=reason)


def rescheduled_detail(command_id: str, at: datetime | str, reason: str | None = None) -> dict[str, Any]:
    return _with_optional({"command_id": command_id, "at": rfc3339(at)}, reason=reason)


def priority_changed_detail(command_id: str, priority: int, reason: str | None = None) -> dict[str, Any]:
    if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 4:
        raise ValueError(f"priority must be an integer 1..4, got {priority!r}")
    return _with_optional({"command_id": command_id, "priority": priority}, reason=reason)


# -- formatting ------------------------------------------------------------------------------


def rfc3339(value: datetime | str) -> str:
    """An RFC 3339 UTC timestamp with microseconds, e.g. ``2026-01-02T03:04:05.678901Z``.

    Strings are parsed and re-rendered so every detail spells time the same way. Naive datetimes
    are refused: guessing their zone would store a wrong instant that other SDKs would trust.
    """
    if isinstance(value, str):
        value = datetime.fromisoformat(value.replace("z", "Z"))
    if not isinstance(value, datetime):
        raise TypeError(f"expected a datetime or RFC 3339 string, got {type(value).__name__}")
    if value.tzinfo is None or value.utcoffset() is None:
        raise ValueError(f"naive datetime {value!r}: event times must carry a time zone")
    return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def _uuid(value: uuid.UUID | str) -> str:
    return str(value if isinstance(value, uuid.UUID) else uuid.UUID(value))


def _at_least_one(value: int, name: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise ValueError(f"{name} must be an integer >= 1, got {value!r}")
    return value


def _one_of(value: str, allowed: tuple[str, ...], name: str) -> str:
    if value not in allowed:
        raise ValueError(f"{name} must be one of {', '.join(allowed)}, got {value!r}")
    return value


def _with_optional(detail: dict[str, Any], **optional: Any) -> dict[str, Any]:
    detail.update((key, value) for key, value in optional.items() if value is not None)
    return detail
