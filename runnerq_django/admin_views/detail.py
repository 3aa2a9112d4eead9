"""Everything the activity detail page shows, read with indexed queries only: the input and the
result, the event timeline, durable steps and signals, the tree, dependencies both ways, the
workers that touched it, and why it is blocked right now. Each read starts at ``guard.rows``: the
read replica when one is configured (the page is stale by its lag; actions re-read the primary).

Stored values are read through ``safe.safe_rows``: JSON comes pretty-printed and cut by Postgres,
infinite timestamps as ``None`` with their text, so no stored value can break or bloat the page."""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from datetime import UTC, datetime
from typing import Any

from django.db.models import Q, QuerySet
from django.utils import timezone

from runnerq_django.admin_views import batches, fork, guard, progress
from runnerq_django.admin_views import windows as windows_admin
from runnerq_django.admin_views.safe import (
    ACTIVITY_TIMES,
    MAX_JSON_CHARS,
    MAX_TEXT_CHARS,
    ROW_JSON_CHARS,
    decoded,
    lengths_of,
    pretty_of,
    safe_rows,
    visible,
)
from runnerq_django.models import Activity, Dependency, Event, Idempotency, Input, Result
from runnerq_django.spec import keys
from runnerq_django.spec.events import canonical_event
from runnerq_django.spec.statuses import TERMINAL, canonical_status

TREE_LIMIT = 500
EVENT_LIMIT = 500
STEP_LIMIT = 500


def _activities(queryset: QuerySet[Activity]) -> QuerySet[Activity]:
    """Other activities the page names: their status and type (cut), never their stored values."""
    return safe_rows(
        queryset,
        times=ACTIVITY_TIMES,
        skip=("metadata", "last_error"),
        ids=("activity_type", "current_worker_id", "last_worker_id"),
    )


def _results(queryset: QuerySet[Result], limit: int) -> QuerySet[Result]:
    return safe_rows(queryset, times=("created_at",), pretty={"data": limit}, ids=("step",))


@dataclass
class TreeNode:
    id: uuid.UUID
    activity_type: str
    status: str
    depth: int
    parent_id: uuid.UUID | None
    created_at: datetime
    children: list[TreeNode] = field(default_factory=list)
    level: int = 0

    @property
    def canonical(self) -> str:
        return canonical_status(self.status)


def build(activity: Activity, *, alive_seconds: float = 30.0) -> dict[str, Any]:
    queue = activity.queue_name
    ctx: dict[str, Any] = {
        "activity": activity,
        "canonical_status": canonical_status(activity.status),
        "attempt": activity.retry_count + 1,
        "is_terminal": activity.status in TERMINAL,
    }

    # Input and own result (primary-key lookups).
    inp = safe_rows(
        guard.rows(Input).filter(activity_id=activity.id), pretty={"payload": MAX_JSON_CHARS}
    ).first()
    ctx["input"] = (
        None if inp is None else {"json": pretty_of(inp)["payload"], "serialization": inp.serialization}
    )
    own = _results(guard.rows(Result).filter(activity_id=activity.id), MAX_JSON_CHARS).first()
    ctx["result"] = (
        None
        if own is None
        else {
            "state": own.state,
            "json": pretty_of(own)["data"],
            "row": own,
            "serialization": own.serialization,
        }
    )

    # Idempotency key, decoded as the application key queries report.
    if activity.idempotency_key:
        app_key = keys.application_key(activity.idempotency_key, activity.activity_type)
        holder = (
            guard.rows(Idempotency)
            .filter(queue_name=queue, idempotency_key=activity.idempotency_key)
            .values_list("activity_id", flat=True)
            .first()
        )
        ctx["key"] = {
            "application": app_key,
            "stored": activity.idempotency_key,
            "is_step_key": activity.idempotency_key.startswith("rq:step:"),
            "holder": holder,
            "holds": holder == activity.id,
        }

    # The debounce or throttle window it is the activity of (runnerq_debounce_activity).
    ctx["window"] = windows_admin.window_of(activity.id)
    ctx.update(progress.build(activity))  # ctx.progress() and ctx.publish(): the app's own rows
    ctx.update(fork.build(activity))  # its steps to re-run from, its forks and origin
    ctx.update(batches.build(activity))  # the batches its attempts ran in, with the other members

    # Timeline (idx_runnerq_events_activity).
    events = list(
        safe_rows(
            guard.rows(Event).filter(activity_id=activity.id),
            times=("created_at",),
            texts={"detail": ROW_JSON_CHARS},
            pretty={"detail": ROW_JSON_CHARS},
            ids=("event_type", "worker_id"),
        ).order_by("created_at", "id")[: EVENT_LIMIT + 1]
    )
    ctx["events_truncated"] = len(events) > EVENT_LIMIT
    ctx["events"] = [
        {
            "id": e.id,
            "row": e,
            "event_type": e.event_type,
            "canonical": canonical_event(e.event_type),
            "worker_id": e.worker_id,
            "detail": decoded(e.detail, lengths_of(e)["detail"], ROW_JSON_CHARS),
            "detail_json": pretty_of(e)["detail"],
        }
        for e in events[:EVENT_LIMIT]
    ]

    # Durable steps and signals: results owned by this activity (idx_runnerq_results_by_owner).
    steps: list[dict[str, Any]] = []
    signals: list[dict[str, Any]] = []
    owned = (
        guard.rows(Result)
        .filter(owner_activity_id=activity.id)
        .exclude(activity_id=activity.id)
        .order_by("created_at")
    )
    for r in _results(owned, ROW_JSON_CHARS)[:STEP_LIMIT]:
        kind, _, name = (r.step or "").partition(":")
        row = {
            "id": r.activity_id,
            "kind": kind or "?",
            "name": name or r.step or "",
            "state": r.state,
            "row": r,
            "json": pretty_of(r)["data"],
            "serialization": r.serialization,
        }
        (signals if kind == "signal" else steps).append(row)
    ctx["steps"], ctx["signals"] = steps, signals
    ctx["signal_events"] = [e for e in ctx["events"] if e["event_type"] == "Signaled"]

    # The tree: the root and its descendants (PK + idx_runnerq_root_children).
    root_id = activity.root_activity_id or activity.id
    tree_columns = ("id", "rq_activity_type", "status", "depth", "parent_activity_id", "rq_created_at")
    rows = list(
        _activities(
            guard.rows(Activity).filter(
                Q(id=root_id) | Q(root_activity_id=root_id, parent_activity_id__isnull=False)
            )
        )
        .order_by("depth", "created_at", "id")
        .values_list(*tree_columns)[: TREE_LIMIT + 1]
    )
    ctx["tree_truncated"] = len(rows) > TREE_LIMIT
    nodes = {r[0]: TreeNode(*r) for r in rows[:TREE_LIMIT]}
    roots: list[TreeNode] = []
    for node in nodes.values():
        parent = nodes.get(node.parent_id) if node.parent_id else None
        (parent.children if parent else roots).append(node)
    flat: list[TreeNode] = []

    def walk(node: TreeNode, level: int) -> None:
        node.level = level
        flat.append(node)
        for child in node.children:
            walk(child, level + 1)

    for node in roots:
        walk(node, 0)
    ctx["tree"] = flat if len(flat) > 1 else []
    children = [n for n in flat if n.parent_id == activity.id]
    if ctx["tree_truncated"]:
        children = [
            TreeNode(*r)
            for r in _activities(guard.rows(Activity).filter(parent_activity_id=activity.id))
            .order_by("created_at", "id")
            .values_list(*tree_columns)[:200]
        ]
    ctx["children"] = children
    ctx["parent"] = nodes.get(activity.parent_activity_id) if activity.parent_activity_id else None

    # Dependencies: what it waits for (PK prefix) and who waits for it (idx_runnerq_dependencies_result).
    waits_for: list[dict[str, Any]] = [
        dict(d)
        for d in guard.rows(Dependency)
        .filter(queue_name=queue, waiter_activity_id=activity.id)
        .values("result_id", "producer_activity_id", "created_at")[:200]
    ]
    producers = {
        a.id: a
        for a in _activities(
            guard.rows(Activity).filter(
                id__in=[d["producer_activity_id"] for d in waits_for if d["producer_activity_id"]]
            )
        )
    }
    for d in waits_for:
        d["producer"] = producers.get(d["producer_activity_id"])
    waited_by: list[dict[str, Any]] = [
        dict(d)
        for d in guard.rows(Dependency)
        .filter(queue_name=queue, result_id=activity.id)
        .values("waiter_activity_id", "created_at")[:200]
    ]
    waiters = {
        a.id: a
        for a in _activities(guard.rows(Activity).filter(id__in=[d["waiter_activity_id"] for d in waited_by]))
    }
    for d in waited_by:
        d["waiter"] = waiters.get(d["waiter_activity_id"])
    ctx["waits_for"], ctx["waited_by"] = waits_for, waited_by

    # Workers that touched it: the live and last claim tokens, and every token an event names.
    touched: dict[str, dict[str, Any]] = {}
    if activity.current_worker_id:
        touched.setdefault(activity.current_worker_id, {"token": activity.current_worker_id, "roles": []})[
            "roles"
        ].append("holds the live claim")
    if activity.last_worker_id:
        touched.setdefault(activity.last_worker_id, {"token": activity.last_worker_id, "roles": []})[
            "roles"
        ].append("last claim")
    for e in ctx["events"]:
        if e["worker_id"]:
            touched.setdefault(e["worker_id"], {"token": e["worker_id"], "roles": []})["roles"].append(
                e["event_type"]
            )
    ctx["workers"] = list(touched.values())

    ctx["blocked"] = blocked_reason(activity, ctx, alive_seconds=alive_seconds)
    ctx["metadata_json"] = pretty_of(activity).get("metadata")
    error_length = lengths_of(activity).get("last_error")
    ctx["last_error_cut"] = (
        (MAX_TEXT_CHARS, error_length) if error_length and error_length > MAX_TEXT_CHARS else None
    )
    return ctx


def _yield_for(activity: Activity, events: list[dict[str, Any]]) -> dict[str, Any] | None:
    """The latest ``Yielded`` event parked on the activity's current ``waiting_result_id``."""
    wanted = str(activity.waiting_result_id) if activity.waiting_result_id else None
    for e in reversed(events):
        if (
            e["event_type"] == "Yielded"
            and isinstance(e["detail"], dict)
            and e["detail"].get("result_id") == wanted
        ):
            return e["detail"]
    return None


def blocked_reason(activity: Activity, ctx: dict[str, Any], *, alive_seconds: float) -> dict[str, Any] | None:
    """Why the activity is not running right now, in words, with the thing it waits for."""
    now = timezone.now()
    status = activity.status
    at = activity.scheduled_at
    due = at is None or at <= now

    def until_due(kind: str, text: str, **more: Any) -> dict[str, Any]:
        """A reason that ends at the scheduled time (a wait's timer, a backoff, a delay)."""
        return {"kind": kind, "text": text, **more, "until": at, "due": due}

    if status == "waiting":
        if activity.waiting_result_id is None:
            return until_due("sleep", "Sleeping (durable sleep)")
        parked = _yield_for(activity, ctx["events"]) or {}
        step = parked.get("step") or ""
        if parked.get("kind") == "signal" or step.startswith("signal:"):
            name = step.partition(":")[2] or "?"
            return until_due("signal", f"Waiting for signal “{visible(name)}”", name=name)
        target = _activities(guard.rows(Activity).filter(id=activity.waiting_result_id)).first()
        if target is not None:
            relation = "child" if target.parent_activity_id == activity.id else "activity"
            return until_due(
                "await",
                f"Awaiting {relation} {visible(target.activity_type)}",
                target=target,
                target_status=canonical_status(target.status),
            )
        return until_due("result", f"Waiting for result {activity.waiting_result_id}")
    if status == "retrying":
        return until_due("backoff", f"Retry backoff before attempt {activity.retry_count + 1}")
    if status == "scheduled":
        return until_due("scheduled", "Scheduled")
    if status == "processing":
        deadline = (
            datetime.fromtimestamp(activity.lease_deadline_ms / 1000, tz=UTC)
            if activity.lease_deadline_ms
            else None
        )
        expired = deadline is not None and deadline < now
        text = "Running; its lease has expired and the reaper will take it back" if expired else "Running"
        return {"kind": "running", "text": text, "until": deadline, "due": expired, "lease": True}
    if status == "pending":
        from runnerq_django.admin_views.queries import worker_pools

        pools = [
            p
            for p in worker_pools(alive_seconds, activity.activity_type)
            if p["queue_name"] == activity.queue_name and p["alive"]
        ]
        serving = [p for p in pools if p["serves"]]
        if not pools:
            text = f"Runnable, but no live worker serves queue “{visible(activity.queue_name)}”"
        elif not serving:
            text = (
                f"Runnable, but no live worker on “{visible(activity.queue_name)}” handles type "
                f"{visible(activity.activity_type)}"
            )
        else:
            text = f"Runnable; waiting for a free slot ({sum(p['max_workers'] for p in serving)} slots in {len(serving)} live pool(s))"
        return {"kind": "runnable", "text": text, "until": None, "due": True, "no_worker": not serving}
    return None
