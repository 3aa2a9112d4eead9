"""Rows in any state, written straight to the tables (a test fixture, not a state transition:
a dead letter or a parked parent is quicker to set up this way than by driving a worker)."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import connection

QUEUE = "adminq"


def now() -> datetime:
    return datetime.now(UTC)


def make_activity(
    status: str = "pending",
    *,
    queue: str = QUEUE,
    activity_type: str = "Charge",
    payload: Any = None,
    parent: uuid.UUID | None = None,
    root: uuid.UUID | None = None,
    **columns: Any,
) -> uuid.UUID:
    """Insert one activity (and its input row) in ``status``; columns override the defaults."""
    activity_id = columns.pop("id", None) or uuid.uuid4()
    row: dict[str, Any] = {
        "id": activity_id,
        "queue_name": queue,
        "activity_type": activity_type,
        "status": status,
        "priority": 2,
        "max_retries": 3,
        "parent_activity_id": parent,
        "root_activity_id": root or (activity_id if parent is None else parent),
        "depth": 0 if parent is None else 1,
    }
    if status in ("completed", "failed", "dead_letter", "cancelled"):
        row["completed_at"] = now()
    if status in ("scheduled", "retrying"):
        row["scheduled_at"] = now() + timedelta(hours=1)
    if status == "processing":
        row["current_worker_id"] = f"tok-{uuid.uuid4().hex[:8]}"
        row["started_at"] = now()
        row["lease_deadline_ms"] = int(now().timestamp() * 1000) + 60_000
    if status in ("failed", "dead_letter"):
        row["last_error"] = "boom"
        row["last_error_at"] = now()
        row["retry_count"] = 2
    row.update(columns)
    if isinstance(row.get("metadata"), dict):
        row["metadata"] = json.dumps(row["metadata"])
    cols = ", ".join(row)
    marks = ", ".join("%s" for _ in row)
    with connection.cursor() as cur:
        cur.execute(f"INSERT INTO runnerq_activities ({cols}) VALUES ({marks})", list(row.values()))
        cur.execute(
            "INSERT INTO runnerq_inputs (activity_id, queue_name, payload) VALUES (%s, %s, %s::jsonb)",
            [activity_id, queue, json.dumps(payload)],
        )
    return activity_id


def add_result(
    activity_id: uuid.UUID,
    *,
    queue: str = QUEUE,
    state: str = "Ok",
    data: Any = None,
    owner: uuid.UUID | None = None,
    step: str | None = None,
) -> None:
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO runnerq_results (activity_id, queue_name, state, data, owner_activity_id, step)"
            " VALUES (%s, %s, %s, %s::jsonb, %s, %s)",
            [activity_id, queue, state, json.dumps(data), owner or activity_id, step],
        )


def add_event(
    activity_id: uuid.UUID, event_type: str, detail: dict, *, queue: str = QUEUE, worker_id: str | None = None
) -> None:
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO runnerq_events (activity_id, queue_name, event_type, worker_id, detail)"
            " VALUES (%s, %s, %s, %s, %s::jsonb)",
            [activity_id, queue, event_type, worker_id, json.dumps(detail)],
        )


def add_dependency(
    waiter: uuid.UUID, result_id: uuid.UUID, *, producer: uuid.UUID | None = None, queue: str = QUEUE
) -> None:
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO runnerq_dependencies (queue_name, waiter_activity_id, result_id, producer_activity_id)"
            " VALUES (%s, %s, %s, %s)",
            [queue, waiter, result_id, producer],
        )


def row(activity_id: uuid.UUID) -> dict[str, Any]:
    with connection.cursor() as cur:
        cur.execute("SELECT to_jsonb(a) FROM runnerq_activities a WHERE id = %s", [activity_id])
        found = cur.fetchone()
    if found is None:
        return {}
    value = found[0]
    return json.loads(value) if isinstance(value, str) else value


def events(activity_id: uuid.UUID) -> list[tuple[str, dict, str | None]]:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT event_type, detail, worker_id FROM runnerq_events WHERE activity_id = %s ORDER BY id",
            [activity_id],
        )
        return [(t, json.loads(d) if isinstance(d, str) else d, w) for t, d, w in cur.fetchall()]


def result_row(result_id: uuid.UUID) -> dict[str, Any] | None:
    with connection.cursor() as cur:
        cur.execute("SELECT to_jsonb(r) FROM runnerq_results r WHERE activity_id = %s", [result_id])
        found = cur.fetchone()
    if found is None:
        return None
    return json.loads(found[0]) if isinstance(found[0], str) else found[0]


def ledger(command_id: str, queue: str = QUEUE) -> dict[str, Any] | None:
    with connection.cursor() as cur:
        cur.execute(
            "SELECT kind, fingerprint, result FROM runnerq_commands WHERE queue_name = %s AND command_id = %s",
            [queue, command_id],
        )
        found = cur.fetchone()
    if found is None:
        return None
    kind, fingerprint, result = found
    return {
        "kind": kind,
        "fingerprint": fingerprint,
        "result": json.loads(result) if isinstance(result, str) else result,
    }
