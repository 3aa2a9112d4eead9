"""An attempt's life: claim, lease renewal, release, success, failure, and the reaper for
attempts whose worker vanished."""

from __future__ import annotations

import functools
import json
import logging
import uuid
from collections.abc import Callable, Iterable
from datetime import datetime, timedelta
from typing import Any, Unpack

from runnerq_django.logs import log_event
from runnerq_django.spec import events as spec_events
from runnerq_django.spec.constants import result_channel, work_channel
from runnerq_django.spec.retry import attempts_remain, retry_delay
from runnerq_django.storage import config, db, decode, errors
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import claims as sql_claims
from runnerq_django.storage.sql import completions as sql_completions
from runnerq_django.storage.sql import fast_forward as sql_fast_forward
from runnerq_django.storage.sql import leases as sql_leases
from runnerq_django.storage.types import Claim, ClaimedActivity, ClaimFilters

logger = logging.getLogger("runnerq_django.storage")

LEASE_EXPIRED_ERROR = "lease expired"
# A claim of several types reads up to limit + this many candidates (sql_claims.claim_any_of; the head of
# the queue in sql_claims.claim_many_types): room for the rows concurrent claimers hold (a batch is at
# most MAX_BATCH). They are read on demand.
CANDIDATES_BEYOND_LIMIT = check.MAX_BATCH
# A claim of several types walks each type, locking as it goes, and sorts the rows the walks
# found (sql_claims.claim_each_type) while types x limit is at most this many rows: that bounds what it
# reads, locks and sorts, and Postgres counts that sort at full cost (~45 a row), so past it the
# estimate would pass jit_above_cost (100,000) and the claim would be JIT-compiled on a session
# that has JIT on (~300 ms). Larger claims read their candidates unlocked, in claim order, and
# lock them one by one: up to MAX_MERGED_TYPES types, one walk per type merged
# (sql_claims.claim_any_of); past it, the head of the queue, then one walk per type past it
# (sql_claims.claim_many_types; a filtered walk of the order index read every row of other types ahead
# of them: 50-60 ms for a claim of 100 naming 20 types that are 1% of a 100,000-activity queue,
# bench/claims.py --limit 100).
MAX_TYPE_WALK_ROWS = 1500
MAX_MERGED_TYPES = 8
# Up to this many types, a claim's types are written into its statement (sql_claims.type_literal), so
# that Postgres plans each type's walk for that type (one statement per set of types; a worker's
# are fixed). Past it they are a parameter, and the statement's size stays the same however many
# there are, but Postgres plans a walk for a type it can't see: on a queue that holds one type,
# as a walk of the order index filtering the type, which reads the whole queue for a type the
# queue doesn't hold (sql_claims.claim_any_of). The claim then walks the head of the queue and sorts the
# first ``limit`` rows of each type past it, or merges their walks when types x limit passes
# MAX_TYPE_WALK_ROWS.
MAX_LITERAL_TYPES = 64
OUTCOMES = {
    spec_events.RETRYING: "retrying",
    spec_events.FAILED: "failed",
    spec_events.DEAD_LETTER: "dead_letter",
}


# -- claim --------------------------------------------------------------------------------------


def claim_statement(queue: str, **filters: Unpack[ClaimFilters]) -> tuple[str, dict[str, Any]]:
    """The exact SQL and parameters ``claim`` runs (so tests and operators can EXPLAIN it); the
    row bounds are literals in the SQL (``sql_claims.with_bounds``)."""
    statement, params = _checked_claim_statement(queue, filters)
    return statement, dict(params)


def _checked_claim_statement(queue: str, filters: ClaimFilters) -> tuple[str, dict[str, Any]]:
    """``claim_statement``, with parameters that must not be changed: the calls with the same
    plain arguments share them. A worker claims with the same ones every time, and checking them
    again and building the statement was a fifth of an idle claim's Python."""
    unknown = sorted(set(filters) - set(ClaimFilters.__annotations__))
    if unknown:  # **filters takes any keyword at run time; a misspelt one must not pass unseen
        raise TypeError(f"claim() got unexpected keyword arguments: {', '.join(unknown)}")
    types = filters.get("types")
    limit = filters.get("limit", 1)
    lease_ms = filters.get("lease_ms", 30000)
    worker_id = filters.get("worker_id", "")
    root_id = filters.get("root_id")
    # Only arguments whose equality means the same checks: exactly str and int (True == 1), the
    # types a list or tuple of strings (hashable once made a tuple).
    if (
        type(queue) is str
        and type(limit) is int
        and type(lease_ms) is int
        and type(worker_id) is str
        and root_id is None
        and (types is None or (type(types) in (list, tuple) and all(type(name) is str for name in types)))
    ):
        return _plain_claim_statement(
            queue, None if types is None else tuple(types), limit, lease_ms, worker_id
        )
    statement, params = _claim_statement(queue, types, limit, lease_ms, worker_id, root_id)
    return sql_claims.with_bounds(statement, params), params


@functools.lru_cache(maxsize=256)
def _plain_claim_statement(
    queue: str, types: tuple[str, ...] | None, limit: int, lease_ms: int, worker_id: str
) -> tuple[str, dict[str, Any]]:
    statement, params = _claim_statement(queue, types, limit, lease_ms, worker_id, None)
    return sql_claims.with_bounds(statement, params), params


def _claim_statement(
    queue: str, types: Any, limit: Any, lease_ms: Any, worker_id: Any, root_id: Any
) -> tuple[str, dict[str, Any]]:
    queue = check.queue_name(queue)
    wanted = check.types_filter(types)
    check.integer("limit", limit, 1, check.MAX_BATCH)
    check.integer("lease_ms", lease_ms, 1, check.MAX_LEASE_MS)
    check.text("worker_id", worker_id, check.MAX_WORKER_ID_BYTES, allow_empty=True)
    params: dict[str, Any] = {"queue": queue, "limit": limit, "lease_ms": lease_ms}
    if worker_id:
        params["token_prefix"] = worker_id + ":"
        token = sql_claims.TOKEN_FROM_WORKER
    else:
        token = sql_claims.TOKEN_ANONYMOUS
    if root_id is not None:  # one tree only: runnerq_django.testing's immediate mode
        params["root"] = check.activity_id("root_id", root_id)
        if wanted is None:
            return sql_claims.claim(f"{sql_fast_forward.IN_TREE} {sql_claims.ANY_TYPE}", token), params
        params["types"] = wanted
        return sql_claims.claim(f"{sql_fast_forward.IN_TREE} {sql_claims.LISTED_TYPES}", token), params
    if wanted is None:
        return sql_claims.claim(sql_claims.ANY_TYPE, token), params
    if len(wanted) == 1:
        params["type"] = wanted[0]
        return sql_claims.claim(sql_claims.ONE_TYPE, token), params
    if len(wanted) <= MAX_LITERAL_TYPES and len(wanted) * limit <= MAX_TYPE_WALK_ROWS:
        return sql_claims.claim_each_type(tuple(wanted), token), params
    params["candidates"] = limit + CANDIDATES_BEYOND_LIMIT
    if len(wanted) <= MAX_MERGED_TYPES:
        return sql_claims.claim_any_of(tuple(wanted), token), params
    if len(wanted) <= MAX_LITERAL_TYPES:
        return sql_claims.claim_many_types(token, tuple(wanted)), params
    params["types"] = wanted
    if len(wanted) * limit <= MAX_TYPE_WALK_ROWS:
        return sql_claims.claim_many_types(token), params
    # Too many rows to sort past the head: merge one walk per type there instead (a statement
    # text per number of types, prepared once per connection).
    params.update({f"type_{index}": name for index, name in enumerate(wanted)})
    return sql_claims.claim_many_types(token, merged=len(wanted)), params


@db.operation
def claim(queue: str, *, using: str | None = None, **filters: Unpack[ClaimFilters]) -> list[ClaimedActivity]:
    """Claim up to ``limit`` due activities (of ``types``, or any type when ``None``), in claim
    order: priority, then attempts already made, then age. Each gets its own token
    (``"<worker_id>:<hex>"``, or a UUID without a worker id) and a lease of ``lease_ms``.
    One round trip, payloads included: a ``superjson-v1`` input (the TypeScript SDK's default)
    is decoded per ``RUNNERQ['SUPERJSON']``.

    A claimed row holding a value Python can't read (``storage.decode``: a number past Python's
    limit, jsonb nested too deep, an infinite timestamp, with ``RUNNERQ['SUPERJSON'] = 'typed'`` a
    SuperJSON type without a Python counterpart) is not returned: it is failed at once,
    non-retryably, with the reason (``Failed`` event, Err result), and the rest of the batch is
    returned as usual. With ``root_id``, only activities of that tree (the root and its
    descendants) are claimed."""
    statement, params = _checked_claim_statement(queue, filters)
    alias = db.alias_for(using)
    # Prepared: planned once per connection (the planning was a quarter of a claim's Postgres
    # time, and more with many types).
    if filters.get("root_id") is None:
        rows = db.fetch_all_prepared(alias, statement, params)
    else:
        rows = db.fetch_all(alias, statement, params)
    if not rows:
        return []
    load_timestamp = once_per_text(db.timestamptz_loader(alias))
    superjson_mode = config.active().superjson
    claimed: list[tuple[int, ClaimedActivity]] = []
    for row in rows:
        try:
            claimed.append((row[0], _claimed(queue, row, load_timestamp, superjson_mode)))
        except decode.Undecodable as exc:
            _fail_undecodable(queue, Claim(row[1], row[2]), str(exc), alias)
    # Claim order, then the walk's.
    claimed.sort(key=lambda pair: (-pair[1].priority, -pair[1].retry_count, pair[1].due_at, pair[0]))
    return [activity for _, activity in claimed]


def once_per_text(load: Callable[[str], datetime]) -> Callable[[str], datetime]:
    """``load``, each text read once: the rows of a claim share their ``started_at`` (the claim's
    ``now()``), and a batch enqueued together its ``created_at``."""
    loaded: dict[str, datetime] = {}

    def load_once(text: str) -> datetime:
        value = loaded.get(text)
        if value is None:
            value = loaded[text] = load(text)
        return value

    return load_once


# ClaimedActivity without its frozen dataclass __init__, which sets each of its 21 fields
# through object.__setattr__ (1.9 us a row; filling its __dict__: 0.75 us). _claimed gives every
# field (tests/storage/test_claim.py compares the result with the dataclass's own).
_new_claimed_activity = functools.partial(object.__new__, ClaimedActivity)


def _claimed(
    queue: str, r: tuple[Any, ...], load_timestamp: Callable[[str], datetime], superjson_mode: str
) -> ClaimedActivity:
    """One row of the claim statement (sql_claims.CLAIMED_COLUMNS); ``decode.Undecodable`` naming the
    first value of it that Python can't read."""
    payload = decode.stored_value("input", r[18], r[20], superjson_mode)
    metadata = decode.json_value("metadata", r[13])
    if not isinstance(metadata, dict):  # another writer's list, string or number: no map, so none
        metadata = None
    created_at = decode.timestamp("created_at", r[12], load_timestamp)
    if created_at is None:  # NOT NULL in the schema
        raise decode.Undecodable("created_at: NULL")
    scheduled_at = decode.timestamp("scheduled_at", r[19], load_timestamp)
    started_at = load_timestamp(r[11])  # now() of the claim: always in range
    activity = _new_claimed_activity()
    vars(activity).update(
        id=r[1],
        token=r[2],
        queue_name=queue,
        activity_type=r[3],
        priority=r[4],
        retry_count=r[5],
        max_retries=r[6],
        timeout_seconds=r[7],
        retry_delay_seconds=r[8],
        max_retry_delay_seconds=r[9],
        lease_deadline_ms=r[10],
        started_at=started_at,
        created_at=created_at,
        metadata=metadata,
        idempotency_key=r[14],
        parent_activity_id=r[15],
        root_activity_id=r[16],
        depth=r[17],
        payload=payload,
        due_at=scheduled_at or created_at,
        serialization=r[20] or "json-v1",
    )
    return activity


def _fail_undecodable(queue: str, claim_: Claim, reason: str, alias: str) -> None:
    """Fail a claimed row that can't be decoded: it would fail the same way on every attempt.
    Not raised: the other rows of the batch are claimed and must reach the caller. Should the
    failure not be recorded (the database went away, or lost it in a crash: the worker's
    claiming session commits without waiting for the WAL flush), the lease runs out and the
    row comes back to a later claim, which fails it again."""
    try:
        fail(queue, claim_, reason, retryable=False, using=alias)
    except errors.StorageError as exc:
        log_event(
            logger,
            logging.ERROR,
            "activity.undecodable_unrecorded",
            "Could not record the failure of undecodable activity %(activity_id)s of queue %(queue)r"
            " (%(reason)s; it is claimed and failed again once its lease runs out): %(error)s",
            activity_id=str(claim_.id),
            queue=queue,
            reason=reason,
            error=str(exc),
        )
        return
    log_event(
        logger,
        logging.WARNING,
        "activity.failed",
        "Activity %(activity_id)s of queue %(queue)r can't be decoded; failed without retries: %(error)s",
        activity_id=str(claim_.id),
        queue=queue,
        error=reason,
    )


# -- leases -------------------------------------------------------------------------------------


def _claim_arrays(claims: list[Claim]) -> dict[str, list[Any]]:
    return {"ids": [c.id for c in claims], "tokens": [c.token for c in claims]}


@db.operation
def renew(queue: str, claim: Claim, lease_ms: int, *, using: str | None = None) -> bool:
    """Extend a live claim's lease to at least now + ``lease_ms`` (never shortening it). ``False``
    when the claim no longer owns the activity (completed, reaped, reclaimed): stop the work."""
    claim = check.claim(claim)
    check.integer("lease_ms", lease_ms, 1, check.MAX_LEASE_MS)
    return claim.id in renew_many(queue, [claim], lease_ms, using=using)


@db.operation
def renew_many(
    queue: str, claims: Iterable[Claim], lease_ms: int, *, using: str | None = None
) -> set[uuid.UUID]:
    """Renew many leases in one round trip; returns the ids still owned.

    Each renewal is a HOT update (only ``lease_deadline_ms`` changes) in a transaction of its
    own, so that it can prune the row versions the previous renewals left on the page (see
    ``sql_leases.RENEW_ONE``). Inside the caller's transaction they are one statement instead.
    """
    queue = check.queue_name(queue)
    items = check.claims(claims)
    check.integer("lease_ms", lease_ms, 1, check.MAX_LEASE_MS)
    if not items:
        return set()
    alias = db.alias_for(using)
    params: dict[str, Any] = {"queue": queue, "lease_ms": lease_ms}
    if len(items) == 1 or not db.can_run_separate_transactions(alias):
        rows = db.fetch_all(alias, sql_leases.RENEW, {**params, **_claim_arrays(items)})
        return {row[0] for row in rows}
    for index, claim_ in enumerate(items):
        params[f"id_{index}"], params[f"token_{index}"] = claim_.id, claim_.token
    return {row[0] for row in db.fetch_all_in_transactions(alias, sql_leases.renew_each(len(items)), params)}


@db.operation
def release(queue: str, claims: Iterable[Claim], *, using: str | None = None) -> int:
    """Give claims back at shutdown: runnable again at once, no attempt counted, no event.
    Returns how many were still owned."""
    queue = check.queue_name(queue)
    items = check.claims(claims)
    if not items:
        return 0
    params = {"queue": queue, "work_channel": work_channel(queue), **_claim_arrays(items)}
    released, _ = db.fetch_row(db.alias_for(using), sql_leases.RELEASE, params)
    return int(released)


# -- success ------------------------------------------------------------------------------------


# json.dumps of a string, without its dispatch on the value's type (a third of an ack's JSON).
_json_string = json.encoder.encode_basestring_ascii


def _acks(items: list[tuple[Claim, Any]]) -> str:
    """The acks as COMPLETE reads them: a JSON array of ``{id, token, value}``; each id as its 32
    hex digits (which Postgres reads as a uuid), cheaper to make than its hyphenated text."""
    rows = []
    limit = config.active().max_result_bytes
    for index, (claim_, value) in enumerate(items):
        if value is None:  # most handlers return nothing: no serialising and measuring of "null"
            text = "null"
        else:
            text = check.json_text(
                f"value[{index}]" if len(items) > 1 else "value",
                value,
                limit,
                limit_name="RUNNERQ['MAX_RESULT_BYTES']",
            )
        rows.append(f'{{"id":"{claim_.id.hex}","token":{_json_string(claim_.token)},"value":{text}}}')
    return "[" + ",".join(rows) + "]"


def _complete(
    queue: str, items: list[tuple[Claim, Any]], using: str | None
) -> list[tuple[uuid.UUID, bool | None]]:
    """COMPLETE, then WAKE with a snapshot taken after COMPLETE locked the rows (so a park that
    held one of them is seen), in one transaction and one round trip. Returns the acks that
    completed nothing, each with whether it repeats an equal value (a lost reply's repeat:
    True; a different value: False; a lost claim: None)."""
    params = {
        "queue": queue,
        "acks": _acks(items),
        "ids": [claim_.id for claim_, _ in items],
        "result_channel": result_channel(queue),
        "work_channel": work_channel(queue),
    }
    # Prepared: their planning was a third of a completion batch's Postgres time.
    rows, _woken = db.fetch_in_one_transaction_prepared(
        db.alias_for(using), [sql_completions.COMPLETE, sql_completions.WAKE], params
    )
    return [(row[0], row[1]) for row in rows[1:]]  # the first row is the announcement's


@db.operation
def complete(queue: str, claim: Claim, value: Any, *, using: str | None = None) -> None:
    """Complete an attempt with ``value`` (any JSON, ``None`` included): result stored, waiters
    woken, one round trip. Repeating it with an equal value is a no-op (a lost reply); a
    different value is ``CheckpointConflict``; a claim that no longer owns it is ``ClaimLost``."""
    queue = check.queue_name(queue)
    claim = check.claim(claim)
    not_completed = _complete(queue, [(claim, value)], using)
    if not not_completed:
        return
    [(_, repeat_same)] = not_completed
    if repeat_same:
        return
    if repeat_same is False:
        raise errors.CheckpointConflict(
            f"activity {claim.id} already completed under this claim with a different value"
        )
    raise errors.ClaimLost(f"claim {claim.token!r} no longer owns activity {claim.id}")


@db.operation
def complete_many(
    queue: str, items: Iterable[tuple[Claim, Any]], *, using: str | None = None
) -> list[uuid.UUID]:
    """Complete a batch of attempts in one statement. Returns the ids that were *not* completed:
    their claim was lost, or (a repeat) the activity completed earlier with a different value.
    Repeats with an equal value count as completed."""
    queue = check.queue_name(queue)
    pairs = list(items)
    if len(pairs) > check.MAX_BATCH:
        raise check.invalid("items", f"at most {check.MAX_BATCH} per call, got {len(pairs)}")
    checked = [(check.claim(c, f"items[{i}].claim"), v) for i, (c, v) in enumerate(pairs)]
    if not checked:
        return []
    return [activity_id for activity_id, repeat_same in _complete(queue, checked, using) if not repeat_same]


# -- failure ------------------------------------------------------------------------------------


@db.operation
def fail(
    queue: str,
    claim: Claim,
    reason: str,
    *,
    retryable: bool = True,
    failure: Any = None,
    delay_seconds: float | None = None,
    using: str | None = None,
) -> str:
    """End an attempt with an error; returns the outcome, ``"retrying"``, ``"failed"`` or ``"dead_letter"``.

    Retryable with attempts left: ``retrying`` with the spec's backoff (``spec.retry``), or, given
    ``delay_seconds`` (an activity type's own backoff, sub-second allowed), that many seconds.
    Retryable on the last attempt: ``dead_letter``. Not retryable: ``failed``. Terminal outcomes
    store an Err result ``{"error": reason, "type": ...}`` and wake its waiters. ``failure`` (any
    JSON) is kept in the event detail and the Err result. Repeating the call under the same
    claim (a lost reply) returns the first outcome without counting again.
    """
    queue = check.queue_name(queue)
    claim = check.claim(claim)
    check.text("reason", reason, check.MAX_VALUE_BYTES, allow_empty=True)
    if not isinstance(retryable, bool):
        raise check.invalid("retryable", f"must be True or False, got {retryable!r}")
    if failure is not None:
        check.json_text("failure", failure, check.MAX_VALUE_BYTES)
    if delay_seconds is not None:
        delay_seconds = check.number("delay_seconds", delay_seconds, 0, check.MAX_DURATION_SECONDS)
    alias = db.alias_for(using)
    base = {"queue": queue, "id": claim.id, "token": claim.token, "error": reason}
    with db.atomic(alias):
        row = db.fetch_one(alias, sql_completions.FAIL_READ, base)
        if row is None:
            raise errors.ClaimLost(f"activity {claim.id} does not exist in queue {queue!r}")
        live, retry_count, max_retries, delay_s, max_delay_s, started_at, db_now, earlier = row
        if not live:
            if earlier in OUTCOMES:
                return OUTCOMES[earlier]
            raise errors.ClaimLost(f"claim {claim.token!r} no longer owns activity {claim.id}")
        started_at = started_at or db_now
        if retryable and attempts_remain(retry_count, max_retries):
            if delay_seconds is None:
                # Clamped to the protocol's bound: another writer may have stored up to 2**63 - 1,
                # and a date that far out can't be computed (the failure went unrecorded and the
                # reaper ran the activity again, for ever). Rows within the bound keep their delays.
                delay_seconds = retry_delay(
                    retry_count,
                    min(delay_s, check.MAX_DURATION_SECONDS),
                    min(max_delay_s, check.MAX_DURATION_SECONDS),
                )
            scheduled_at = db_now + timedelta(seconds=delay_seconds)
            detail = spec_events.retrying_detail(started_at, reason, retry_count + 1, scheduled_at, failure)
            db.fetch_one(
                alias,
                sql_completions.FAIL_RETRY,
                {
                    **base,
                    "scheduled_at": scheduled_at,
                    "detail": json.dumps(detail),
                    "work_channel": work_channel(queue),
                },
            )
            return "retrying"
        if retryable:
            status, event_type = "dead_letter", spec_events.DEAD_LETTER
            detail = spec_events.dead_letter_detail(started_at, reason, "attempts_exhausted", failure)
        else:
            status, event_type = "failed", spec_events.FAILED
            detail = spec_events.failed_detail(started_at, reason, failure)
        data = {"error": reason, "type": "dead_letter" if retryable else "non_retryable"}
        if failure is not None:
            data["failure"] = failure
        db.fetch_one(
            alias,
            sql_completions.FAIL_TERMINAL,
            {
                **base,
                "status": status,
                "event_type": event_type,
                "detail": json.dumps(detail),
                "data": json.dumps(data),
                "result_channel": result_channel(queue),
                "work_channel": work_channel(queue),
            },
        )
        return status


# -- reaper -------------------------------------------------------------------------------------


@db.operation
def reap(queue: str, limit: int, *, using: str | None = None) -> int:
    """Handle up to ``limit`` expired leases: each is a retryable failure without backoff, so
    ``pending`` again (``Requeued``, attempt counted) or, on the last attempt, ``dead_letter``
    (Err result, ``DeadLetter`` ``lease_expired``, waiters woken). Returns how many."""
    return len(reap_ids(queue, limit, using=using))


@db.operation
def reap_ids(queue: str, limit: int, *, using: str | None = None) -> list[uuid.UUID]:
    """``reap``, returning the ids of the activities it requeued or dead-lettered."""
    queue = check.queue_name(queue)
    check.integer("limit", limit, 1, check.MAX_BATCH)
    alias = db.alias_for(using)
    with db.atomic(alias):
        expired = db.fetch_all(alias, sql_leases.REAP_READ, {"queue": queue, "limit": limit})
        if not expired:
            return []
        load_timestamp = db.timestamptz_loader(alias)
        decisions = []
        for activity_id, token, retry_count, max_retries, started_text, db_now in expired:
            try:
                started_at = decode.timestamp("started_at", started_text, load_timestamp) or db_now
            except decode.Undecodable:  # only the event's started_at: the decision doesn't need it
                started_at = db_now
            if attempts_remain(retry_count, max_retries):
                detail = spec_events.requeued_detail(started_at, LEASE_EXPIRED_ERROR, retry_count + 1)
                decisions.append({"id": str(activity_id), "token": token, "dead": False, "detail": detail})
            else:
                detail = spec_events.dead_letter_detail(started_at, LEASE_EXPIRED_ERROR, "lease_expired")
                data = {"error": LEASE_EXPIRED_ERROR, "type": "dead_letter"}
                decisions.append(
                    {"id": str(activity_id), "token": token, "dead": True, "detail": detail, "data": data}
                )
        db.fetch_one(
            alias,
            sql_leases.REAP_APPLY,
            {
                "queue": queue,
                "decisions": json.dumps(decisions),
                "error": LEASE_EXPIRED_ERROR,
                "result_channel": result_channel(queue),
                "work_channel": work_channel(queue),
            },
        )
        # REAP_READ locked the rows (FOR UPDATE SKIP LOCKED): every decision applies.
        return [row[0] for row in expired]
