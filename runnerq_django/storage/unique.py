"""Unique while active: an enqueue whose key returns the activity holding it while
that one is unfinished (pending, scheduled, running, retrying or waiting), and creates a new
activity, the key pointing at it, once the holder has finished (completed, failed, dead-lettered,
cancelled) or is gone.

Built on the spec's idempotency table: the key is stored as ``BusinessKey(key, type)`` in
``runnerq_idempotency``, an ordinary key to every SDK (a Go or TypeScript submit of the same key
with ``return_existing`` gets the same holder). What differs is only this SDK's choice when the
holder has finished. Concurrent submits of one key serialise on the key row: the first takes it
(``TAKE_KEY`` makes the others wait for its commit), the others lock it (``KEY_HOLDER``) and read
the holder's status in a statement of their own, whose snapshot sees the committed holder.
"""

from __future__ import annotations

from runnerq_django.spec.statuses import PENDING, PROCESSING, RETRYING, SCHEDULED, WAITING
from runnerq_django.storage import db, errors
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import keys as sql_keys

# The submit module's own steps (its name is shadowed by the submit() operation in the package).
from runnerq_django.storage.submit import _insert, _max_payload_bytes, _row, _validated
from runnerq_django.storage.types import NewActivity, SubmitResult

__all__ = ["ACTIVE_STATUSES", "submit_unique_while_active"]

ACTIVE_STATUSES = frozenset({PENDING, SCHEDULED, PROCESSING, RETRYING, WAITING})


@db.operation
def submit_unique_while_active(
    queue: str, activity: NewActivity, *, using: str | None = None
) -> SubmitResult:
    """Submit ``activity`` (a root, with an ``idempotency_key``) unless the key's holder is still
    active: then its id, ``created=False``. One transaction (joins the caller's)."""
    queue, [item], _ = _validated(queue, [activity], None)
    if item.idempotency_key is None or item.raw_idempotency_key is not None:
        raise check.invalid("unique_key", "is required")
    if item.parent_id is not None:
        raise check.invalid("unique_key", "applies to root activities, not to spawned children")
    alias = db.alias_for(using)
    row = _row(item, 0, _max_payload_bytes(), "")
    params = {"queue": queue, "key": row["idempotency_key"], "id": item.id}
    with db.atomic(alias):
        if db.fetch_one(alias, sql_keys.TAKE_KEY, params) is not None:
            _insert(alias, queue, [row], None)
            return SubmitResult(item.id, True)
        holder = db.fetch_one(alias, sql_keys.KEY_HOLDER, params)  # locks the key row until commit
        if holder is not None:
            status = db.fetch_one(alias, sql_keys.HOLDER_STATUS, {"holder": holder[0], "queue": queue})
            if status is not None and status[0] in ACTIVE_STATUSES:
                return SubmitResult(holder[0], False)
            if holder[0] == item.id and status is not None:  # the same submission again
                return SubmitResult(item.id, False)
            db.fetch_one(alias, sql_keys.REPOINT_KEY, params)
        elif db.fetch_one(alias, sql_keys.TAKE_KEY, params) is None:  # the key row vanished meanwhile
            raise errors.Conflict(f"idempotency key {row['idempotency_key']!r} is changing hands; retry")
        _insert(alias, queue, [row], None)
        return SubmitResult(item.id, True)
