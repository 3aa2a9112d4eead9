"""Submitting activities: plain batches in one statement, idempotency keys with their four
policies, and spawns fenced by the parent's claim."""

from __future__ import annotations

import hashlib
import json
import os
import uuid
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from dataclasses import replace
from datetime import datetime
from typing import Any

from django.db import connections

from runnerq_django.spec import events as spec_events
from runnerq_django.spec.constants import work_channel
from runnerq_django.spec.keys import business_key
from runnerq_django.storage import config, db, errors
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import keys as sql_keys
from runnerq_django.storage.sql import submit as sql_submit
from runnerq_django.storage.types import Claim, NewActivity, OnDuplicate, SubmitResult

# One statement carries at most this many activities; a larger submit_many is several
# statements in one transaction (the JSON document of a statement stays a few MB at most).
SUBMIT_CHUNK = 1000
# enqueue_many writes a batch of this many plain activities or more (no keys, due at once) with
# COPY (sql_submit.COPY_UNIFORM_ACTIVITIES): three round trips instead of one, which a batch this
# size repays (bench/backlog.py: the bulk enqueue ratio to a COPY into the spec's tables).
COPY_MIN_ROWS = 100
# A holder in one of these states can no longer succeed, so allow_reuse_on_failure may take its key.
FAILED_STATUSES = ("failed", "dead_letter", "cancelled")


def _max_payload_bytes() -> int:
    return config.active().max_payload_bytes


def _row(activity: NewActivity, ord_: int, payload_limit: int, prefix: str) -> dict[str, Any]:
    """One element of the SUBMIT statement's JSON array (payload and metadata checked here)."""
    payload_text = check.json_text(f"{prefix}payload", activity.payload, payload_limit)
    metadata_text = check.metadata(activity.metadata, payload_limit, f"{prefix}metadata")
    return {
        "ord": ord_,
        "id": str(activity.id),
        "activity_type": activity.activity_type,
        # Embedded as parsed JSON so the statement carries one document; checked text above.
        "payload": json.loads(payload_text),
        "priority": int(activity.priority),
        "max_retries": activity.max_retries,
        "timeout_seconds": activity.timeout_seconds,
        "delay_seconds": float(activity.delay_seconds),
        "retry_delay_seconds": activity.retry_delay_seconds,
        "max_retry_delay_seconds": activity.max_retry_delay_seconds,
        "metadata": None if metadata_text is None else json.loads(metadata_text),
        "idempotency_key": stored_key(activity),
        "parent_id": None if activity.parent_id is None else str(activity.parent_id),
        "root_id": None if activity.root_id is None else str(activity.root_id),
        "depth": activity.depth,
    }


def stored_key(activity: NewActivity) -> str | None:
    """The idempotency key as stored: ``BusinessKey(key, type)``, or a raw key (step keys) as is."""
    if activity.raw_idempotency_key is not None:
        return activity.raw_idempotency_key
    if activity.idempotency_key is not None:
        return business_key(activity.idempotency_key, activity.activity_type)
    return None


def _fence_params(fence: Claim | None) -> dict[str, Any]:
    return {
        "fence_id": None if fence is None else fence.id,
        "fence_token": None if fence is None else fence.token,
    }


def _insert(alias: str, queue: str, rows: list[dict[str, Any]], fence: Claim | None) -> None:
    """Insert activities (and their inputs) in one statement; ClaimLost if the fence is stale."""
    params = {
        "queue": queue,
        "activities": json.dumps(rows, separators=(",", ":")),
        "work_channel": work_channel(queue),
        **_fence_params(fence),
    }
    created, fence_live, _, unknown_parent = db.fetch_row(alias, sql_submit.SUBMIT, params)
    if fence is not None and not fence_live:
        raise errors.ClaimLost(f"spawn refused: claim {fence.token!r} no longer owns activity {fence.id}")
    if unknown_parent is not None:
        raise errors.NotFound(f"parent activity {unknown_parent} does not exist in queue {queue!r}")
    if created != len(rows):  # only a stale fence inserts nothing without an error
        raise errors.Internal(f"submit inserted {created} of {len(rows)} activities")


# SUBMIT_ROOT as the libpq-level prepared statement of db.fetch_value_in_autocommit.
_SUBMIT_ROOT = db.TextStatement(
    "runnerq_submit_root_" + hashlib.sha1(sql_submit.SUBMIT_ROOT_POSITIONAL.encode()).hexdigest()[:12],
    sql_submit.SUBMIT_ROOT_POSITIONAL,
)


def _insert_root(alias: str, queue: str, activity: NewActivity, payload_limit: int) -> None:
    """The common enqueue, one root activity with no key or fence, as a prepared statement. The
    payload and metadata are checked as ``_row`` checks them, and the checked text is what is
    sent (no row for a JSON array to build: no parse and re-serialisation of the payload).
    In autocommit, the statement goes straight to libpq with its parameters as text
    (``sql_submit.SUBMIT_ROOT_POSITIONAL``); in the caller's transaction, through a psycopg cursor."""
    payload = check.json_text("payload", activity.payload, payload_limit)
    metadata = check.metadata(activity.metadata, payload_limit, "metadata")
    _send_root(
        alias,
        activity.id,
        payload,
        _root_params(queue, activity, metadata),
        lambda: _root_named(queue, activity, metadata),
    )


def _root_params(queue: str, activity: NewActivity, metadata: str | None) -> list[bytes | None]:
    """``SUBMIT_ROOT_POSITIONAL``'s parameters as text, the id (0) and the payload (10) left
    ``None`` for ``_send_root`` to fill."""
    return [
        None,
        queue.encode(),
        activity.activity_type.encode(),
        str(int(activity.priority)).encode(),
        repr(float(activity.delay_seconds)).encode(),
        str(int(activity.max_retries)).encode(),
        str(int(activity.timeout_seconds)).encode(),
        str(int(activity.retry_delay_seconds)).encode(),
        str(int(activity.max_retry_delay_seconds)).encode(),
        None if metadata is None else metadata.encode(),
        None,
        work_channel(queue).encode(),
    ]


def _root_named(queue: str, activity: NewActivity, metadata: str | None) -> dict[str, Any]:
    """``SUBMIT_ROOT``'s named parameters but the id and the payload."""
    return {
        "queue": queue,
        "activity_type": activity.activity_type,
        "metadata": metadata,
        "priority": int(activity.priority),
        "delay_seconds": float(activity.delay_seconds),
        "max_retries": activity.max_retries,
        "timeout_seconds": activity.timeout_seconds,
        "retry_delay_seconds": activity.retry_delay_seconds,
        "max_retry_delay_seconds": activity.max_retry_delay_seconds,
        "work_channel": work_channel(queue),
    }


def _send_root(
    alias: str,
    activity_id: uuid.UUID,
    payload: str,
    positional: list[bytes | None],
    named: Callable[[], dict[str, Any]],
) -> None:
    """``SUBMIT_ROOT``: ``positional`` (``_root_params``, copied and filled) straight to libpq
    in autocommit, else ``named()`` with the id and payload through a psycopg cursor."""
    params = positional.copy()
    params[0] = str(activity_id).encode()
    params[10] = payload.encode()
    if db.fetch_value_in_autocommit(alias, _SUBMIT_ROOT, params) is not db.NOT_RUN:
        return
    db.fetch_one_prepared(alias, sql_submit.SUBMIT_ROOT, {**named(), "id": activity_id, "payload": payload})


# --- one-by-one enqueue with the fields checked once ------------------------------------------------

# Only root_template and checked_payload make the objects submit_root trusts.
_MINT = object()


class RootTemplate:
    """A root activity (no key, no parent) but its id and payload, checked as ``submit`` checks
    it and encoded as ``SUBMIT_ROOT`` takes it, once, under the active config: the client keeps
    one per activity type and queue for its one-by-one ``enqueue()`` (``client._plan``), and
    :func:`submit_root` sends each activity with it. Made by :func:`root_template` only."""

    __slots__ = ("activity", "config", "named", "params", "queue")

    def __init__(self, queue: str, activity: NewActivity, metadata: str | None, mint: object) -> None:
        if mint is not _MINT:
            raise errors.Internal("a RootTemplate is made by storage.submit.root_template")
        self.queue = queue
        self.activity = activity
        self.params = _root_params(queue, activity, metadata)
        self.named = _root_named(queue, activity, metadata)
        self.config = config.active()


class CheckedPayload:
    """A payload and its JSON text, checked by :func:`checked_payload` under the active config
    (``RUNNERQ['MAX_PAYLOAD_BYTES']``, ``MAX_JSON_DEPTH``, ``ALLOW_UNSAFE_INTEGERS``)."""

    __slots__ = ("config", "text", "value")

    def __init__(self, value: Any, text: str, checked_under: config.StorageConfig, mint: object) -> None:
        if mint is not _MINT:
            raise errors.Internal("a CheckedPayload is made by storage.submit.checked_payload")
        self.value = value
        self.text = text
        self.config = checked_under


def root_template(queue: str, activity: NewActivity) -> RootTemplate:
    """``activity`` (a root without a key; its id and payload are not used) checked as ``submit``
    checks it, for :func:`submit_root`."""
    queue = check.queue_name(queue)
    checked = check.new_activity(activity)
    if checked.parent_id is not None or stored_key(checked) is not None:
        raise errors.Internal("root_template takes a root activity without an idempotency key")
    metadata = check.metadata(checked.metadata, _max_payload_bytes(), "metadata")
    return RootTemplate(queue, checked, metadata, _MINT)


def checked_payload(value: Any) -> CheckedPayload:
    """``value`` checked as ``submit`` checks a payload (the same errors, field ``payload``), with
    the JSON text it is sent as: the one encoding of a one-by-one enqueue's payload."""
    current = config.active()
    return CheckedPayload(
        value,
        check.json_text("payload", value, current.max_payload_bytes, current.max_json_depth),
        current,
        _MINT,
    )


@db.operation
def submit_root(
    template: RootTemplate, activity_id: uuid.UUID, payload: CheckedPayload, *, using: str
) -> SubmitResult:
    """``submit`` of ``template`` with ``activity_id`` (a new ``uuid4``: not checked again) and
    ``payload``, without checking again what ``root_template`` and ``checked_payload`` checked:
    one statement, prepared, the parameters encoded but for the id and the payload. Checked
    under another config than the active one, the activity goes through ``submit`` whole."""
    current = config.active()
    if template.config is not current or payload.config is not current:
        activity = replace(template.activity, id=activity_id, payload=payload.value)
        return submit(template.queue, activity, using=using)
    _send_root(using, activity_id, payload.text, template.params, template.named.copy)
    return SubmitResult(activity_id, True)


def _validated(
    queue: str, activities: list[Any], fence: Claim | None
) -> tuple[str, list[NewActivity], Claim | None]:
    queue = check.queue_name(queue)
    if fence is not None:
        fence = check.claim(fence, "fence")
    single = len(activities) == 1
    checked = [check.new_activity(a, None if single else i) for i, a in enumerate(activities)]
    checked = [a if isinstance(a.id, uuid.UUID) else _with_uuid_ids(a) for a in checked]
    if fence is not None:
        # A fence proves the spawner's claim is live: it vouches only for the spawner's own children.
        for index, activity in enumerate(checked):
            if activity.parent_id != fence.id:
                field = "parent_id" if single else f"activities[{index}].parent_id"
                raise check.invalid(
                    field,
                    f"a spawn fenced by the claim on {fence.id} is that activity's child: "
                    f"parent_id must be {fence.id}, got {activity.parent_id}",
                )
    return queue, checked, fence


def _with_uuid_ids(activity: NewActivity) -> NewActivity:
    from dataclasses import replace

    def as_uuid(value: Any) -> uuid.UUID:
        return value if isinstance(value, uuid.UUID) else uuid.UUID(str(value))

    return replace(
        activity,
        id=as_uuid(activity.id),
        parent_id=None if activity.parent_id is None else as_uuid(activity.parent_id),
        root_id=None if activity.root_id is None else as_uuid(activity.root_id),
    )


@db.operation
def submit(
    queue: str, activity: NewActivity, *, fence: Claim | None = None, using: str | None = None
) -> SubmitResult:
    """Submit one activity (see ``submit_many``)."""
    if fence is None and isinstance(activity, NewActivity) and activity.parent_id is None:
        # The common enqueue, checked as submit_many checks it, without its lists.
        queue = check.queue_name(queue)
        checked = check.new_activity(activity)
        if stored_key(checked) is None:
            if not isinstance(checked.id, uuid.UUID):
                checked = _with_uuid_ids(checked)
            _insert_root(db.alias_for(using), queue, checked, _max_payload_bytes())
            return SubmitResult(checked.id, True)
    return submit_many(queue, [activity], fence=fence, using=using)[0]


@db.operation
def submit_many(
    queue: str, activities: Iterable[NewActivity], *, fence: Claim | None = None, using: str | None = None
) -> list[SubmitResult]:
    """Submit activities; results in the same order.

    Without idempotency keys the whole batch is one ``INSERT ... SELECT FROM jsonb_to_recordset``
    (chunks of ``SUBMIT_CHUNK`` in one transaction beyond that). So is a batch of roots whose
    keys all follow ``return_existing`` (``SUBMIT_RETURNING_EXISTING`` takes the keys, creates
    what they allow and reports the holders of the others); only a key that a concurrent
    transaction committed while it ran goes through the per-key statements after it. Other
    policies and spawns go one by one through their policy in one transaction. ``fence`` (a
    spawn's parent claim) refuses the whole call with ``ClaimLost`` when stale, creating nothing.
    A reused activity id is a ``Conflict``; nothing of the call is written then -- except, in
    autocommit, when it is found by a per-key statement after a keyed batch's statement: that
    statement's activities stay, and a retry of the call returns them as existing.
    """
    queue, items, fence = _validated(queue, list(activities), fence)
    if not items:
        return []
    alias = db.alias_for(using)
    payload_limit = _max_payload_bytes()
    single = len(items) == 1
    keyed = [i for i, a in enumerate(items) if stored_key(a) is not None]
    if single and not keyed and fence is None and items[0].parent_id is None:
        _insert_root(alias, queue, items[0], payload_limit)
        return [SubmitResult(items[0].id, True)]
    rows = [_row(a, i, payload_limit, "" if single else f"activities[{i}].") for i, a in enumerate(items)]
    if not keyed and len(rows) <= SUBMIT_CHUNK:
        _insert(alias, queue, rows, fence)
        return [SubmitResult(a.id, True) for a in items]
    if (
        keyed
        and fence is None
        and all(a.parent_id is None for a in items)
        and all(_returns_existing(items[i]) for i in keyed)
    ):
        return _submit_returning_existing(alias, queue, items, rows, plain_too=len(keyed) < len(items))
    results: list[SubmitResult | None] = [None] * len(items)
    with db.atomic(alias):
        # Checked first: a stale spawn must not even return an existing activity.
        fence_params = {"queue": queue, **_fence_params(fence)}
        if (
            fence is not None
            and keyed
            and db.fetch_one(alias, sql_submit.FENCE_IS_LIVE, fence_params) is None
        ):
            raise errors.ClaimLost(f"spawn refused: claim {fence.token!r} no longer owns activity {fence.id}")
        plain = [i for i in range(len(items)) if i not in set(keyed)]
        for start in range(0, len(plain), SUBMIT_CHUNK):
            chunk = plain[start : start + SUBMIT_CHUNK]
            _insert(alias, queue, [rows[i] for i in chunk], fence)
            for i in chunk:
                results[i] = SubmitResult(items[i].id, True)
        for i in keyed:
            results[i] = _submit_keyed(alias, queue, items[i], rows[i], fence)
    return results  # type: ignore[return-value]


@db.operation
def submit_uniform(
    queue: str,
    template: NewActivity,
    payloads: list[Any],
    keys: list[str | None],
    *,
    check_payload: Callable[[Any], Any] | None = None,
    using: str | None = None,
) -> list[SubmitResult]:
    """Submit root activities that differ only in payload, id and application key (one per
    payload; ``None`` for none): enqueue_many's batch. ``template`` carries every other field, and
    its id is the first activity's; the others get new ids. Results in input order, the rows and
    errors those of ``submit_many`` for the same activities (``check_payload`` runs on each
    payload before its JSON checks, as the client's checks of a payload run).

    The template is checked once; each payload's JSON and each key are checked. Without keys,
    or with ``return_existing`` keys, each ``SUBMIT_CHUNK`` is one prepared statement with the
    ids, payloads and keys as binary arrays (``SUBMIT_UNIFORM`` ...). Other policies, and
    connections without prepared statements, go through ``submit_many``."""
    queue = check.queue_name(queue)
    template = check.new_activity(template)
    if template.parent_id is not None or template.raw_idempotency_key is not None or template.idempotency_key:
        raise errors.Internal("submit_uniform takes root activities with their keys given apart")
    if len(keys) != len(payloads):
        raise errors.Internal(f"submit_uniform: {len(keys)} keys for {len(payloads)} payloads")
    if not payloads:
        return []
    limit = _max_payload_bytes()
    depth = check.max_json_depth()
    ids = [template.id, *_uuid4s(len(payloads) - 1)]
    texts: list[str] = []
    stored: list[str | None] = []
    checked = payloads if check_payload is None else []
    activity_type = template.activity_type
    for payload, key in zip(payloads, keys, strict=True):
        if check_payload is not None:
            payload = check_payload(payload)
            checked.append(payload)
        texts.append(check.json_text("payload", payload, limit, depth))
        if key is None:
            stored.append(None)
        else:
            stored.append(
                business_key(check.text("idempotency_key", key, check.MAX_KEY_BYTES), activity_type)
            )
    alias = db.alias_for(using)
    keyed = any(key is not None for key in stored)
    if not db.prepared_statements() or (keyed and not _returns_existing(template)):
        items = [
            replace(template, id=id_, payload=payload, idempotency_key=key)
            for id_, payload, key in zip(ids, checked, keys, strict=True)
        ]
        return submit_many(queue, items, using=using)
    params = {
        "queue": queue,
        "activity_type": activity_type,
        "priority": int(template.priority),
        "delay_seconds": float(template.delay_seconds),
        "max_retries": template.max_retries,
        "timeout_seconds": template.timeout_seconds,
        "retry_delay_seconds": template.retry_delay_seconds,
        "max_retry_delay_seconds": template.max_retry_delay_seconds,
        "metadata": check.metadata(template.metadata, limit, "metadata"),
        "work_channel": work_channel(queue),
    }
    order = sorted(range(len(ids)), key=lambda i: (stored[i] or "", i)) if keyed else list(range(len(ids)))
    chunks = [order[start : start + SUBMIT_CHUNK] for start in range(0, len(order), SUBMIT_CHUNK)]
    results: list[SubmitResult | None] = [None] * len(ids)
    unresolved: list[int] = []
    # As in submit_many: several statements are one transaction; so is a keyed batch with plain
    # activities in it outside the caller's transaction (per-key statements may follow).
    own_transaction = len(chunks) > 1 or (keyed and None in stored and not db.in_transaction(alias))
    if not keyed and len(ids) >= COPY_MIN_ROWS and float(template.delay_seconds) <= 0:
        _copy_uniform(alias, params, ids, texts)
        return [SubmitResult(id_, True) for id_ in ids]
    with db.atomic(alias) if own_transaction else nullcontext():
        for chunk in chunks:
            if keyed:
                unresolved += _uniform_keyed_chunk(alias, params, chunk, ids, texts, stored, results)
                continue
            chunk_params = {
                **params,
                "ords": chunk,
                "ids": [ids[i] for i in chunk],
                "keys": [None] * len(chunk),
            }
            chunk_params["payloads"] = [texts[i] for i in chunk]
            summary = db.fetch_one_prepared(alias, sql_submit.SUBMIT_UNIFORM, chunk_params)
            if summary is None or summary[0] != len(chunk):
                raise errors.Internal(f"submit inserted {summary and summary[0]} of {len(chunk)} activities")
            for i in chunk:
                results[i] = SubmitResult(ids[i], True)
    if unresolved:
        with db.atomic(alias):
            for i in sorted(unresolved, key=lambda i: (stored[i] or "", i)):
                activity = replace(template, id=ids[i], payload=checked[i], idempotency_key=keys[i])
                row = _row(activity, i, limit, "")
                results[i] = _submit_keyed(alias, queue, activity, row, None)
    return results  # type: ignore[return-value]


def _uuid4s(count: int) -> list[uuid.UUID]:
    """``count`` random (version 4) UUIDs from one read of the system's random source:
    ``uuid.uuid4()`` reads it once per id, a system call each (a third of the Python time of an
    enqueue_many of 1,000 on a busy machine)."""
    random = os.urandom(16 * count)
    return [uuid.UUID(bytes=random[i : i + 16], version=4) for i in range(0, 16 * count, 16)]


def _copy_uniform(alias: str, params: dict[str, Any], ids: list[uuid.UUID], texts: list[str]) -> None:
    """``submit_uniform``'s plain batch due at once, by COPY into the activities and the inputs
    and one NOTIFY, in one transaction (the caller's when there is one). A reused id fails the
    batch (Conflict), as SUBMIT_UNIFORM does."""
    queue, metadata = params["queue"], params["metadata"]
    constant = (
        params["activity_type"],
        params["priority"],
        "pending",
        params["max_retries"],
        params["timeout_seconds"],
        params["retry_delay_seconds"],
        params["max_retry_delay_seconds"],
        metadata,
    )
    connection = connections[alias]
    with db.atomic(alias), connection.cursor() as cursor, connection.wrap_database_errors:
        raw = cursor.cursor  # psycopg's cursor: Django's wrapper has no COPY
        with raw.copy(sql_submit.COPY_UNIFORM_ACTIVITIES) as copy:
            for id_ in ids:
                copy.write_row((id_, queue, *constant, id_, 0))
        if raw.rowcount != len(ids):
            raise errors.Internal(f"submit inserted {raw.rowcount} of {len(ids)} activities")
        with raw.copy(sql_submit.COPY_UNIFORM_INPUTS) as copy:
            for id_, text in zip(ids, texts, strict=True):
                copy.write_row((id_, queue, text, "json-v1"))
        raw.execute(sql_submit.NOTIFY_WORK, {"work_channel": params["work_channel"]})


def _uniform_keyed_chunk(
    alias: str,
    params: dict[str, Any],
    chunk: list[int],
    ids: list[uuid.UUID],
    texts: list[str],
    stored: list[str | None],
    results: list[SubmitResult | None],
) -> list[int]:
    """One ``SUBMIT_UNIFORM_RETURNING_EXISTING``: fills ``results`` for ``chunk``; returns the
    indexes left to the per-key statements. A key repeated in the batch is sent once; its repeats
    get the first one's activity, as in ``_take_keys_and_submit``."""
    first_with_key: dict[str, int] = {}
    sent: list[int] = []
    repeats: list[int] = []
    for i in chunk:
        key = stored[i]
        if key is not None:
            if key in first_with_key:
                repeats.append(i)
                continue
            first_with_key[key] = i
        sent.append(i)
    rows = db.fetch_all_prepared(
        alias,
        sql_submit.SUBMIT_UNIFORM_RETURNING_EXISTING,
        {
            **params,
            "ords": sent,
            "ids": [ids[i] for i in sent],
            "keys": [stored[i] for i in sent],
            "payloads": [texts[i] for i in sent],
        },
    )
    unresolved: list[int] = []
    for i in sent:
        results[i] = SubmitResult(ids[i], True)
    for ord_, holder_id, holder_status, _ in rows:
        if ord_ is None:  # the first row: the notification's
            continue
        if holder_id is not None and holder_status is not None:
            results[ord_] = SubmitResult(holder_id, False)
        else:
            results[ord_] = None
            unresolved.append(ord_)
    for i in repeats:
        first = results[first_with_key[stored[i] or ""]]
        if first is not None:
            results[i] = SubmitResult(first.id, False)
        else:
            unresolved.append(i)
    return unresolved


def _returns_existing(activity: NewActivity) -> bool:
    return OnDuplicate(activity.on_duplicate) is OnDuplicate.RETURN_EXISTING


def _in_key_order(indexes: Iterable[int], rows: list[dict[str, Any]]) -> list[int]:
    """Every transaction takes (and locks) shared keys in one order, so two of them never wait
    for each other in a cycle. (Python sorts strings as the statement's COLLATE "C" does.)"""
    return sorted(indexes, key=lambda i: (rows[i]["idempotency_key"] or "", i))


def _submit_returning_existing(
    alias: str, queue: str, items: list[NewActivity], rows: list[dict[str, Any]], *, plain_too: bool
) -> list[SubmitResult]:
    """Root activities whose keys all follow ``return_existing``: one ``SUBMIT_RETURNING_EXISTING``
    per ``SUBMIT_CHUNK`` (keys in key order), then the per-key statements for the few keys it
    could not resolve (taken by a transaction that committed while it ran, or held by a gone
    activity).

    A batch of one statement needs no transaction of its own: the statement is atomic, and what
    is left to resolve after it is keyed, which a retry of the whole call would find as it is.
    Several statements, or plain activities in the batch outside the caller's transaction, run
    in one."""
    results: dict[int, SubmitResult] = {}
    unresolved: list[int] = []
    ordered = _in_key_order(range(len(items)), rows)
    chunks = [ordered[start : start + SUBMIT_CHUNK] for start in range(0, len(ordered), SUBMIT_CHUNK)]
    own_transaction = len(chunks) > 1 or (plain_too and not db.in_transaction(alias))
    with db.atomic(alias) if own_transaction else nullcontext():
        for chunk in chunks:
            done, left = _take_keys_and_submit(alias, queue, items, rows, chunk)
            results.update(done)
            unresolved += left
    if unresolved:
        with db.atomic(alias):
            for i in _in_key_order(unresolved, rows):
                results[i] = _submit_keyed(alias, queue, items[i], rows[i], None)
    return [results[i] for i in range(len(items))]


def _take_keys_and_submit(
    alias: str, queue: str, items: list[NewActivity], rows: list[dict[str, Any]], indexes: list[int]
) -> tuple[dict[int, SubmitResult], list[int]]:
    """One ``SUBMIT_RETURNING_EXISTING`` for ``items[indexes]``: their results, and the indexes it
    left unresolved. A key repeated in the batch is sent once; the repeats get the first one's
    activity, as the per-key path gives them."""
    first_with_key: dict[str, int] = {}
    sent: list[int] = []
    repeats: list[int] = []
    for i in indexes:
        key = rows[i]["idempotency_key"]
        if key is not None and key in first_with_key:
            repeats.append(i)
            continue
        if key is not None:
            first_with_key[key] = i
        sent.append(i)
    params = {
        "queue": queue,
        "activities": json.dumps([rows[i] for i in sent], separators=(",", ":")),
        "work_channel": work_channel(queue),
    }
    outcome = {row[0]: row[1:4] for row in db.fetch_all(alias, sql_submit.SUBMIT_RETURNING_EXISTING, params)}
    results: dict[int, SubmitResult] = {}
    unresolved: list[int] = []
    for i in sent:
        created, holder_id, holder_status = outcome[rows[i]["ord"]]
        if created:
            results[i] = SubmitResult(items[i].id, True)
        elif holder_id is not None and holder_status is not None:
            results[i] = SubmitResult(holder_id, False)
        else:
            unresolved.append(i)
    for i in repeats:
        first = first_with_key[rows[i]["idempotency_key"]]
        if first in results:
            results[i] = SubmitResult(results[first].id, False)
        else:
            unresolved.append(i)
    return results, unresolved


def _submit_keyed(
    alias: str, queue: str, activity: NewActivity, row: dict[str, Any], fence: Claim | None
) -> SubmitResult:
    key = row["idempotency_key"]
    params = {"queue": queue, "key": key, "id": activity.id}
    if db.fetch_one(alias, sql_keys.TAKE_KEY, params) is not None:
        _insert(alias, queue, [row], fence)
        return SubmitResult(activity.id, True)
    holder = db.fetch_one(alias, sql_keys.KEY_HOLDER, params)
    if holder is None:  # the key row vanished (a retention sweep) since TAKE_KEY: take it now
        if db.fetch_one(alias, sql_keys.TAKE_KEY, params) is None:
            raise errors.Conflict(f"idempotency key {key!r} is changing hands concurrently; retry")
        _insert(alias, queue, [row], fence)
        return SubmitResult(activity.id, True)
    holder_id, holder_status, holder_parent = holder
    if holder_id == activity.id and holder_status is not None:
        return SubmitResult(holder_id, False)  # the same submission again (a lost reply)
    holder_alive = holder_status is not None
    policy = OnDuplicate(activity.on_duplicate)
    if policy is OnDuplicate.NO_REUSE:
        raise errors.DuplicateActivity(f"idempotency key {key!r} is taken by activity {holder_id} (no_reuse)")
    if policy is OnDuplicate.RETURN_EXISTING and holder_alive:
        if activity.parent_id is not None and holder_parent != activity.parent_id:
            # A spawn that finds another tree's activity links to it. The same parent finding
            # its own child again (a replayed step) is no news and records nothing.
            db.fetch_one(
                alias,
                sql_submit.INSERT_EVENT,
                {
                    "id": holder_id,
                    "queue": queue,
                    "event_type": spec_events.SPAWN_LINKED,
                    "worker_id": None if fence is None else fence.token,
                    "detail": json.dumps(spec_events.spawn_linked_detail(activity.parent_id)),
                },
            )
        return SubmitResult(holder_id, False)
    if policy is OnDuplicate.ALLOW_REUSE_ON_FAILURE and holder_alive and holder_status not in FAILED_STATUSES:
        raise errors.IdempotencyConflict(
            f"idempotency key {key!r} is held by activity {holder_id} ({holder_status}), which can still succeed"
        )
    # allow_reuse, allow_reuse_on_failure after a failure, or a key whose holder is gone.
    db.fetch_one(alias, sql_keys.REPOINT_KEY, params)
    _insert(alias, queue, [row], fence)
    return SubmitResult(activity.id, True)


@db.operation
def lookup_key(queue: str, business_key: str, *, using: str | None = None) -> uuid.UUID:
    """The activity holding a stored idempotency key (already encoded); ``NotFound`` if none."""
    queue = check.queue_name(queue)
    check.text("business_key", business_key, check.MAX_STORED_KEY_BYTES)
    row = db.fetch_one(db.alias_for(using), sql_keys.LOOKUP_KEY, {"queue": queue, "key": business_key})
    if row is None:
        raise errors.NotFound(f"no activity holds idempotency key {business_key!r} in queue {queue!r}")
    found: uuid.UUID = row[0]
    return found


def schedule_overdue(alias: str, activity_id: uuid.UUID, due: datetime) -> datetime | None:
    """A pending activity whose due time had passed by its enqueue (a django task's ``run_after``)
    becomes scheduled at ``due``, so the claim orders it by that time rather than by its enqueue.
    Returns its ``created_at``; None when it is not pending."""
    row = db.fetch_one(alias, sql_submit.TASK_DUE_AT, {"id": activity_id, "due": due})
    return None if row is None else row[0]
