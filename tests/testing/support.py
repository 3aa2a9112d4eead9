"""Reading what a run stored, for the testing toolkit's tests."""

from __future__ import annotations

import re

from runnerq_django.models import Activity, Event, Result

_UUID = re.compile(r"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
_TIMESTAMP = re.compile(r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d+)?(Z|[+-]\d\d:\d\d)?")


def event_types(activity_id) -> list[str]:
    return list(
        Event.objects.filter(activity_id=activity_id).order_by("id").values_list("event_type", flat=True)
    )


def normalised(value):
    """``value`` with ids and timestamps replaced by placeholders (they differ run to run)."""
    if isinstance(value, dict):
        return {key: normalised(item) for key, item in value.items()}
    if isinstance(value, list):
        return [normalised(item) for item in value]
    if isinstance(value, str):
        return _TIMESTAMP.sub("<time>", _UUID.sub("<id>", value))
    return value


def tree_snapshot(root_id) -> list[dict]:
    """Everything stored about a tree that a worker decides: each activity's row, result,
    checkpoints and events, ids and times normalised, in a run-independent order."""
    rows = Activity.objects.filter(id=root_id) | Activity.objects.filter(root_activity_id=root_id)
    snapshot = []
    for row in rows:
        results = Result.objects.filter(owner_activity_id=row.id).order_by("step")
        own = Result.objects.filter(activity_id=row.id).first()
        snapshot.append(
            normalised(
                {
                    "type": row.activity_type,
                    "status": row.status,
                    "depth": row.depth,
                    "retry_count": row.retry_count,
                    "max_retries": row.max_retries,
                    "priority": row.priority,
                    "last_error": row.last_error,
                    "has_idempotency_key": row.idempotency_key is not None,
                    "result": own and {"state": own.state, "data": own.data},
                    "checkpoints": [{"step": r.step, "state": r.state, "data": r.data} for r in results],
                    "events": [
                        {"type": e.event_type, "detail": e.detail}
                        for e in Event.objects.filter(activity_id=row.id).order_by("id")
                    ],
                }
            )
        )
    return sorted(snapshot, key=lambda item: (item["depth"], item["type"], repr(item["result"])))
