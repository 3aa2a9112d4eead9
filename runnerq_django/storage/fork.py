"""Forks: re-run a root activity from a chosen step, keeping what happened before it (DBOS's
``fork_workflow``, Temporal's reset). The fork is a new activity of the same type, queue and
input (or a replacement input); the checkpoints its origin recorded before the chosen step are
copied to it, and the children its origin spawned before that step are recorded as found by
their spawns, so its replay returns their values without running those steps or spawning those
children again, and runs the chosen step and everything after it. Statements in
``storage.sql.fork``; the ledger is the app's own ``runnerq_forks``.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from runnerq_django.spec.constants import STEP_KEY_PREFIX
from runnerq_django.spec.keys import checkpoint_id
from runnerq_django.spec.statuses import TERMINAL
from runnerq_django.storage import db, errors
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import fork as q
from runnerq_django.storage.submit import submit as submit_activity
from runnerq_django.storage.types import NewActivity

__all__ = ["Fork", "ForkRecord", "fork", "forks_of", "steps_of"]

MAX_REASON_BYTES = 2048
MAX_ACTOR_BYTES = 200
_KEEP: Any = ...  # fork(payload=...) not given: the origin's input


@dataclass(frozen=True)
class Step:
    """One recorded step of a run, in order: ``kind`` (run, sleep, signal, deadline, child) and
    ``name``, when it was recorded, and the child's id for a spawn."""

    kind: str
    name: str
    at: datetime
    child_id: uuid.UUID | None = None

    @property
    def label(self) -> str:
        return f"{self.kind}:{self.name}"


@dataclass(frozen=True)
class Fork:
    """A fork made: its id, and how many checkpoints and children it keeps from its origin."""

    id: uuid.UUID
    origin_id: uuid.UUID
    from_step: str
    copied: int
    reused_children: int


@dataclass(frozen=True)
class ForkRecord:
    fork_id: uuid.UUID
    origin_id: uuid.UUID
    from_step: str
    actor: str
    reason: str | None
    created_at: datetime


def _step_of_key(key: str | None, root: uuid.UUID, parent: uuid.UUID) -> str | None:
    prefix = f"{STEP_KEY_PREFIX}{root}:{parent}:"
    return key[len(prefix) :] if key and key.startswith(prefix) else None


def _steps(alias: str, queue: str, origin: uuid.UUID) -> list[Step]:
    params = {"id": origin, "queue": queue}
    steps = []
    for _, step, at in db.fetch_all(alias, q.CHECKPOINTS, params):
        kind, _, name = str(step).partition(":")
        if kind != "spawn":
            steps.append(Step(kind, name, at))
    for child_id, key, at in db.fetch_all(alias, q.CHILDREN, params):
        spawned_by = _step_of_key(key, origin, origin)
        if spawned_by is not None:
            steps.append(Step("child", spawned_by, at, child_id))
    return sorted(steps, key=lambda s: (s.at, s.label))


@db.operation
def steps_of(queue: str, activity_id: uuid.UUID, *, using: str | None = None) -> list[Step]:
    """The recorded steps of root ``activity_id`` in the order they were recorded: what a fork
    can start from."""
    queue = check.queue_name(queue)
    activity_id = check.activity_id("activity_id", activity_id)
    return _steps(db.alias_for(using), queue, activity_id)


def _chosen(steps: list[Step], from_step: str) -> int:
    """The index of the step named ``from_step`` (``kind:name``, or a name of any kind: the
    first such)."""
    for index, step in enumerate(steps):
        if from_step in (step.label, step.name):
            return index
    known = ", ".join(step.label for step in steps[:50]) or "none"
    raise check.invalid("from_step", f"the run recorded no step {from_step!r} (its steps: {known})")


@db.operation
def fork(
    queue: str,
    origin_id: uuid.UUID,
    *,
    from_step: str,
    payload: Any = _KEEP,
    actor: str = "",
    reason: str | None = None,
    using: str | None = None,
) -> Fork:
    """Create a fork of finished root ``origin_id`` that runs again from ``from_step`` (see the
    module): one transaction. The origin must be a root that has ended (completed, failed,
    dead-lettered or cancelled): ``Conflict`` otherwise (cancel it first)."""
    queue = check.queue_name(queue)
    origin_id = check.activity_id("origin_id", origin_id)
    from_step = check.text("from_step", from_step, 2048)
    actor = check.text("actor", actor, MAX_ACTOR_BYTES, allow_empty=True)
    if reason is not None:
        reason = check.text("reason", reason, MAX_REASON_BYTES, allow_empty=True)
    alias = db.alias_for(using)
    with db.atomic(alias):
        row = db.fetch_one(alias, q.ORIGIN, {"id": origin_id, "queue": queue})
        if row is None:
            raise errors.NotFound(f"no activity {origin_id} in queue {queue!r}")
        (activity_type, status, parent, priority, max_retries, timeout, retry_delay, max_delay,
         metadata, stored_payload, serialization) = row  # fmt: skip
        if parent is not None:
            raise check.invalid("origin_id", f"activity {origin_id} is a child: fork its root instead")
        if status not in TERMINAL:
            raise errors.Conflict(
                f"activity {origin_id} is {status}: cancel it first (or let it finish), then fork it"
            )
        if payload is _KEEP:
            if (serialization or "json-v1") != "json-v1":
                raise check.invalid(
                    "payload", f"the origin's input is {serialization}: give the fork's input"
                )
            payload = None if stored_payload is None else json.loads(stored_payload)
        steps = _steps(alias, queue, origin_id)
        chosen = _chosen(steps, from_step)
        kept = [step for step in steps if step.at < steps[chosen].at]  # recorded before it
        new = NewActivity(
            activity_type,
            payload=payload,
            priority=priority,
            max_retries=max_retries,
            timeout_seconds=timeout,
            retry_delay_seconds=retry_delay,
            max_retry_delay_seconds=max_delay,
            metadata=db.loads(metadata),
        )
        created = submit_activity(queue, new, using=alias)
        fork_id = created.id
        copies = [s for s in kept if s.kind != "child"]
        old_ids = [checkpoint_id(origin_id, s.kind, s.name) for s in copies]
        new_ids = [checkpoint_id(fork_id, s.kind, s.name) for s in copies]
        if copies:
            db.fetch_all(alias, q.COPY_CHECKPOINTS, {"fork": fork_id, "old": old_ids, "new": new_ids})
        children = [s for s in kept if s.kind == "child"]
        for child in children:
            db.fetch_all(
                alias,
                q.SPAWN_CHECKPOINT,
                {
                    "id": checkpoint_id(fork_id, "spawn", child.name),
                    "queue": queue,
                    "data": json.dumps({"id": str(child.child_id)}),
                    "fork": fork_id,
                    "step": f"spawn:{child.name}",
                },
            )
        db.fetch_all(
            alias,
            q.RECORD_FORK,
            {
                "fork": fork_id,
                "origin": origin_id,
                "queue": queue,
                "step": steps[chosen].label,
                "copied": len(copies),
                "reused": len(children),
                "actor": actor,
                "reason": reason,
            },
        )
    return Fork(fork_id, origin_id, steps[chosen].label, len(copies), len(children))


@db.operation
def forks_of(queue: str, activity_id: uuid.UUID, *, using: str | None = None) -> list[ForkRecord]:
    """The forks made of ``activity_id``, and the one it is (if it is a fork), newest first."""
    check.queue_name(queue)
    activity_id = check.activity_id("activity_id", activity_id)
    rows = db.fetch_all(db.alias_for(using), q.FORKS_OF, {"id": activity_id})
    return [ForkRecord(*row) for row in rows]
