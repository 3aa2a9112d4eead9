"""Durable execution: checkpoints, dependencies, parking (sleep / signal / await), signals, and
reading results back."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterable
from datetime import UTC, datetime
from typing import Any

from runnerq_django.spec import events as spec_events
from runnerq_django.spec.constants import work_channel
from runnerq_django.spec.keys import checkpoint_id
from runnerq_django.storage import config, db, decode, errors
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import durable as sql_durable
from runnerq_django.storage.types import Claim, StoredResult

# A step key is "<prefix><root>:<parent>:<step>", about 80 bytes more than the step name.
MAX_STEP_BYTES = 2048
# The Yielded event of a signal or await park without a timeout: the events schema requires a
# wake_at, and the row's NULL scheduled_at (never due) has no date to put there.
NO_TIMEOUT = datetime(9999, 12, 31, 23, 59, 59, 999999, tzinfo=UTC)


def _claim_lost(claim: Claim) -> errors.StorageError:
    return errors.ClaimLost(f"claim {claim.token!r} no longer owns activity {claim.id}")


@db.operation
def checkpoint(
    queue: str,
    claim: Claim,
    result_id: uuid.UUID,
    *,
    state: str,
    data: Any,
    step: str,
    using: str | None = None,
) -> None:
    """Store a step's outcome under ``result_id`` (normally ``checkpoint_id(activity, kind, name)``),
    owned by the claim's activity. Immutable: the same state and data again is a no-op, anything
    else ``CheckpointConflict``; a stale claim is ``ClaimLost``."""
    queue = check.queue_name(queue)
    claim = check.claim(claim)
    result_id = check.activity_id("result_id", result_id)
    if state not in check.RESULT_STATES:
        raise check.invalid("state", f"must be 'Ok' or 'Err', got {state!r}")
    check.text("step", step, MAX_STEP_BYTES)
    params = {
        "queue": queue,
        "id": claim.id,
        "token": claim.token,
        "result_id": result_id,
        "state": state,
        "data": check.json_text("data", data, check.MAX_VALUE_BYTES),
        "step": step,
        "work_channel": work_channel(queue),
    }
    alias = db.alias_for(using)
    owned, written, _ = db.fetch_row(alias, sql_durable.CHECKPOINT, params)
    if not owned:
        raise _claim_lost(claim)
    if written:
        return
    # Already stored: by this step before (fine if equal), or just now by a concurrent writer
    # whose row this statement's snapshot could not see -- a fresh statement sees it.
    same = db.fetch_one(alias, sql_durable.CHECKPOINT_SAME, params)
    if same is None or not same[0]:
        raise errors.CheckpointConflict(f"checkpoint {result_id} ({step}) already holds a different outcome")


@db.operation
def register_dependency(
    queue: str, claim: Claim, producer_id: uuid.UUID, *, using: str | None = None
) -> None:
    """Record that the claim's activity waits on ``producer_id``'s own result (a child), so the
    producer's result wakes it and retention keeps the producer's tree while it waits.
    Idempotent; ``ClaimLost`` for a stale claim, ``NotFound`` for an unknown producer."""
    queue = check.queue_name(queue)
    claim = check.claim(claim)
    producer_id = check.activity_id("producer_id", producer_id)
    owned, producer_exists = db.fetch_row(
        db.alias_for(using),
        sql_durable.REGISTER_DEPENDENCY,
        {"queue": queue, "id": claim.id, "token": claim.token, "producer": producer_id},
    )
    if not owned:
        raise _claim_lost(claim)
    if not producer_exists:
        raise errors.NotFound(f"producer activity {producer_id} does not exist in queue {queue!r}")


@db.operation
def register_dependencies(
    queue: str, claim: Claim, producer_ids: Iterable[uuid.UUID], *, using: str | None = None
) -> None:
    """``register_dependency`` for up to ``MAX_BATCH`` producers in one statement (a wait on
    several children): the same rows, one per producer. Idempotent; ``ClaimLost`` for a stale
    claim, ``NotFound`` naming the producers not in the queue (the others are registered)."""
    queue = check.queue_name(queue)
    claim = check.claim(claim)
    ids = [check.activity_id(f"producer_ids[{i}]", p) for i, p in enumerate(producer_ids)]
    check.integer("len(producer_ids)", len(ids), 1, check.MAX_BATCH)
    owned, found = db.fetch_row(
        db.alias_for(using),
        sql_durable.REGISTER_DEPENDENCIES,
        {"queue": queue, "id": claim.id, "token": claim.token, "producers": [str(i) for i in ids]},
    )
    if not owned:
        raise _claim_lost(claim)
    unknown = sorted(set(ids) - {uuid.UUID(str(i)) for i in found}, key=str)
    if unknown:
        raise errors.NotFound(
            f"producer activities {', '.join(map(str, unknown))} do not exist in queue {queue!r}"
        )


@db.operation
def park(
    queue: str,
    claim: Claim,
    *,
    kind: str,
    step: str,
    wake_at: datetime | str | None = None,
    result_id: uuid.UUID | None = None,
    producer_id: uuid.UUID | None = None,
    using: str | None = None,
) -> bool:
    """End the attempt by parking, without counting an attempt; returns whether it now waits.

    ``sleep``: waiting until ``wake_at`` (required). ``signal`` / ``await``: waiting for
    ``result_id`` (``checkpoint_id(self, "signal", name)`` / the child's id, with
    ``producer_id``) until it is stored or the optional timeout ``wake_at`` passes (without one,
    ``scheduled_at`` stays NULL: never due, only the result wakes it) -- unless it is already
    stored, in which case the activity stays runnable (``pending``, returns ``False``). One
    ``Yielded`` event (its ``wake_at`` is ``NO_TIMEOUT`` without one). Repeating the park under
    the same claim (a lost reply) is a no-op; a stale claim is ``ClaimLost``.
    """
    queue = check.queue_name(queue)
    claim = check.claim(claim)
    if kind not in check.PARK_KINDS:
        raise check.invalid("kind", f"must be one of {', '.join(check.PARK_KINDS)}, got {kind!r}")
    check.text("step", step, MAX_STEP_BYTES)
    if wake_at is None and kind == "sleep":
        raise check.invalid(
            "wake_at", "is required for a sleep (for signal and await it is an optional timeout)"
        )
    if wake_at is not None:
        wake_at = check.timestamp("wake_at", wake_at)
    if kind == "sleep":
        if result_id is not None or producer_id is not None:
            raise check.invalid(
                "result_id", "a sleep waits for no result: leave result_id and producer_id unset"
            )
    else:
        if result_id is None:
            raise check.invalid("result_id", f"is required to park for {kind!r}")
        result_id = check.activity_id("result_id", result_id)
    if producer_id is not None:
        producer_id = check.activity_id("producer_id", producer_id)
    params = {
        "queue": queue,
        "id": claim.id,
        "token": claim.token,
        "wake_at": wake_at,
        "result_id": result_id,
        "producer": producer_id,
        "work_channel": work_channel(queue),
        "detail_waiting": json.dumps(
            spec_events.yielded_detail(kind, step, wake_at or NO_TIMEOUT, result_id, False)
        ),
        "detail_ready": json.dumps(
            spec_events.yielded_detail(kind, step, wake_at or NO_TIMEOUT, result_id, True)
        ),
    }
    alias = db.alias_for(using)
    with db.atomic(alias):
        if result_id is not None:
            # Before our own row (writers lock the producer, then its waiters): a completion in
            # flight finishes first and PARK sees its result; a later one waits for our commit.
            db.fetch_all(alias, sql_durable.PARK_PRODUCER_LOCK, params)
        row = db.fetch_one(alias, sql_durable.PARK_LOCK, params)
        if row is None:
            raise _claim_lost(claim)
        live, status, _started_at, parked_before = row
        if not live:
            if parked_before:
                return bool(status == "waiting")
            raise _claim_lost(claim)
        ready, _ = db.fetch_row(alias, sql_durable.PARK, params)
        return not ready


@db.operation
def signal(
    queue: str,
    target_id: uuid.UUID,
    name: str,
    payload: Any,
    *,
    command_id: str = "",
    reason: str | None = None,
    using: str | None = None,
) -> bool:
    """Deliver signal ``name`` to ``target_id``: its payload is stored (last one wins) under
    ``checkpoint_id(target, "signal", name)``; a target parked on it wakes. A signal that
    arrives before the park is kept for it. Returns whether it woke the target; ``NotFound``
    when the target doesn't exist."""
    queue = check.queue_name(queue)
    target_id = check.activity_id("target_id", target_id)
    check.text("name", name, MAX_STEP_BYTES)
    check.text("command_id", command_id, MAX_STEP_BYTES, allow_empty=True)
    if reason is not None:
        check.text("reason", reason, check.MAX_VALUE_BYTES, allow_empty=True)
    signal_id = checkpoint_id(target_id, "signal", name)
    params = {
        "queue": queue,
        "target": target_id,
        "signal_id": signal_id,
        "step": f"signal:{name}",
        "payload": check.json_text("payload", payload, config.active().max_payload_bytes),
        "work_channel": work_channel(queue),
        "detail_woke": json.dumps(spec_events.signaled_detail(name, signal_id, True, command_id, reason)),
        "detail_kept": json.dumps(spec_events.signaled_detail(name, signal_id, False, command_id, reason)),
    }
    found, woke, _ = db.fetch_row(db.alias_for(using), sql_durable.SIGNAL, params)
    if not found:
        raise errors.NotFound(f"signal target {target_id} does not exist in queue {queue!r}")
    return bool(woke)


# -- reads --------------------------------------------------------------------------------------


def _result(row: tuple[Any, ...]) -> StoredResult:
    """``SerializationError`` for a value Python can't read (``storage.decode``): it fails the
    reader that needs it, not a whole read of several results."""
    result_id, state, data, serialization, step = row
    try:
        value = decode.json_value(f"result {result_id}", data)
    except decode.Undecodable as exc:
        raise errors.SerializationError(str(exc)) from None
    return StoredResult(state=state, data=value, serialization=serialization, step=step)


@db.operation
def get_result(queue: str, result_id: uuid.UUID, *, using: str | None = None) -> StoredResult | None:
    """An activity's result, a checkpoint or a signal payload; ``None`` when not stored (yet)."""
    return get_results(queue, [result_id], using=using).get(check.activity_id("result_id", result_id))


@db.operation
def get_results(
    queue: str, ids: Iterable[uuid.UUID], *, using: str | None = None
) -> dict[uuid.UUID, StoredResult]:
    """The stored results among ``ids``, by id (missing ids are absent from the dict)."""
    queue = check.queue_name(queue)
    wanted = [check.activity_id(f"ids[{i}]", value) for i, value in enumerate(ids)]
    if len(wanted) > check.MAX_BATCH:
        raise check.invalid("ids", f"at most {check.MAX_BATCH} per call, got {len(wanted)}")
    if not wanted:
        return {}
    rows = db.fetch_all(db.alias_for(using), sql_durable.GET_RESULTS, {"queue": queue, "ids": wanted})
    return {row[0]: _result(row) for row in rows}


@db.operation
def list_checkpoints(
    queue: str, owner_id: uuid.UUID, *, using: str | None = None
) -> dict[uuid.UUID, StoredResult]:
    """Every checkpoint and signal result owned by ``owner_id``, by result id, oldest first
    (what a replaying handler needs in one round trip)."""
    queue = check.queue_name(queue)
    owner_id = check.activity_id("owner_id", owner_id)
    rows = db.fetch_all(
        db.alias_for(using), sql_durable.LIST_CHECKPOINTS, {"queue": queue, "owner": owner_id}
    )
    return {row[0]: _result(row) for row in rows}
