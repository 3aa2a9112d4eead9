"""Operator commands (SPEC.md (b) "conductor commands"): cancel, retry / redrive, run now,
reschedule, set priority and delete a finished tree, as named SQL.

Each command is one transaction on the Django connection of ``RUNNERQ['DATABASE']`` (or
``using``), joining the caller's ``transaction.atomic()`` when there is one. Every command

- locks its targets in id order (a stable order keeps concurrent commands from deadlocking),
- acts on the ones whose status allows it and reports every other one as *skipped* with the
  reason (``not_found``, or ``failed_precondition`` with the current status),
- writes the spec's event for each activity it changed (``Cancelled``, ``Retried``,
  ``Redriven``, ``RunNow``, ``Rescheduled``, ``PriorityChanged``; details from
  ``spec.events``), and
- with a ``command_id``, records its outcome in the ``runnerq_commands`` ledger so the same
  ``command_id`` replays the stored outcome (``replayed=True``) instead of acting twice; the
  same ``command_id`` with different input is a ``Conflict``. Without a ``command_id`` nothing
  is recorded or replayed (conductor protocol), and a dry run (``dry_run=True``) changes and
  records nothing: its items say ``would_apply``.

The ledger's ``result`` column holds the layout the Go SDK writes (``items`` with ``err_kind``
numbers, ``constants.json`` ``storage_error_kind``), so a command recorded by either SDK on a
shared queue replays in the other. ``CommandResult.to_dict()`` gives the conductor's
``CommandResult`` JSON (``results`` with ``error: {code, message, details}``).

Why these transitions (the spec's table leaves some row effects open; these match runnerq-go):

- cancel: non-terminal -> ``cancelled`` with ``completed_at``; a running claim is fenced out by
  clearing ``current_worker_id`` (its acks then get ``claim_lost``; the token moves to
  ``last_worker_id``); an ``Err`` result ``{"error", "type": "cancelled"}`` is stored, which
  wakes every activity parked on it and is announced on ``rq_r_<queue>``. ``cascade`` (the
  default) cancels the non-terminal descendants of each cancelled target as well.
- retry: ``failed`` / ``cancelled`` (-> ``Retried``) and ``dead_letter`` (-> ``Redriven``)
  become ``pending``; the activity's own result row goes (so awaiters wait for the new run),
  its checkpoints stay (completed steps replay instead of running again); ``reset_attempts``
  gives back the whole attempt budget, otherwise it gets one more attempt.
- run_now: ``scheduled`` / ``retrying`` get ``scheduled_at = now()`` (the database clock, the
  one claims compare against); ``waiting`` becomes ``pending``.
- reschedule: ``scheduled`` / ``retrying`` get ``scheduled_at = at``.
- set_priority: any non-terminal activity, priority 1..4.
- delete_tree: a finished root whose whole tree is finished and not pinned (no live activity
  elsewhere waits on a result in it) is deleted with its inputs, results (checkpoints and
  signals included), events, dependencies and idempotency keys. Nothing is left to hold an
  event, so the ledger row is the record.
"""

from __future__ import annotations

import hashlib
import json
import time
import uuid
from collections.abc import Callable, Collection, Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol, TypedDict, Unpack

from runnerq_django.spec import events as ev
from runnerq_django.spec.constants import STORAGE_ERROR_KINDS, result_channel, work_channel
from runnerq_django.spec.statuses import TERMINAL, canonical_status
from runnerq_django.storage import db, validation
from runnerq_django.storage.errors import Conflict, InvalidArgument
from runnerq_django.storage.sql import commands as q
from runnerq_django.storage.sql import completions as sql_completions

if TYPE_CHECKING:
    from django.db.backends.utils import CursorWrapper as Cursor

__all__ = [
    "APPLIED",
    "MAX_IDS",
    "SKIPPED",
    "WOULD_APPLY",
    "CommandItem",
    "CommandOptions",
    "CommandResult",
    "ItemError",
    "cancel",
    "delete_tree",
    "prune_ledger",
    "redrive",
    "reschedule",
    "retry",
    "run_now",
    "set_priority",
]

MAX_IDS = 1000
# Postgres refuses NOTIFY payloads of 8000 bytes or more; ids are 36 bytes plus a comma.
_NOTIFY_PAYLOAD_BYTES = 7900

KIND_CANCEL = "cancel"
KIND_RETRY = "retry"
KIND_RUN_NOW = "run_now"
KIND_RESCHEDULE = "reschedule"
KIND_SET_PRIORITY = "set_priority"
KIND_DELETE = "delete"

APPLIED = "applied"
SKIPPED = "skipped"
WOULD_APPLY = "would_apply"

# Conductor error codes of a skipped item <-> the storage error kinds the ledger stores.
_CODE_TO_KIND = {
    "not_found": "not_found",
    "failed_precondition": "conflict",
    "conflict": "conflict",
    "invalid_argument": "invalid_argument",
    "internal": "internal",
}
_KIND_TO_CODE = {
    "not_found": "not_found",
    "conflict": "failed_precondition",
    "invalid_argument": "invalid_argument",
    "internal": "internal",
}
_KIND_NAMES = {number: name for name, number in STORAGE_ERROR_KINDS.items()}

# -- results -------------------------------------------------------------------------------------


@dataclass(frozen=True)
class ItemError:
    """Why one target was skipped: a conductor error ``code`` (``not_found``,
    ``failed_precondition`` ...), a message for people, and ``details`` (``status``)."""

    code: str
    message: str
    details: dict[str, Any] | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"code": self.code, "message": self.message}
        if self.details:
            out["details"] = dict(self.details)
        return out


@dataclass(frozen=True)
class CommandItem:
    """The outcome for one target: ``applied``, ``skipped`` or (dry run) ``would_apply``.
    ``status`` is the canonical status after the command (the current one when skipped)."""

    id: str
    outcome: str
    status: str | None = None
    error: ItemError | None = None

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {"id": self.id, "outcome": self.outcome}
        if self.status:
            out["status"] = self.status
        if self.error:
            out["error"] = self.error.to_dict()
        return out


@dataclass(frozen=True)
class CommandResult:
    """A command's outcome, mirroring the conductor's ``CommandResult``."""

    matched: int
    applied: int
    more: bool = False
    results: tuple[CommandItem, ...] = ()
    cascaded: int | None = None
    replayed: bool | None = None

    @property
    def skipped(self) -> tuple[CommandItem, ...]:
        return tuple(item for item in self.results if item.outcome == SKIPPED)

    def to_dict(self) -> dict[str, Any]:
        """The conductor protocol's JSON (optional members left out when unset)."""
        out: dict[str, Any] = {"matched": self.matched, "applied": self.applied}
        if self.cascaded is not None:
            out["cascaded"] = self.cascaded
        out["more"] = self.more
        if self.replayed:
            out["replayed"] = True
        out["results"] = [item.to_dict() for item in self.results]
        return out

    def to_ledger(self) -> dict[str, Any]:
        """The ``runnerq_commands.result`` layout shared with runnerq-go."""
        items = []
        for item in self.results:
            row: dict[str, Any] = {"id": item.id, "outcome": item.outcome}
            if item.status:
                row["status"] = item.status
            if item.error:
                row["err_kind"] = STORAGE_ERROR_KINDS[_CODE_TO_KIND.get(item.error.code, "internal")]
                row["err_message"] = item.error.message
            items.append(row)
        return {
            "matched": self.matched,
            "applied": self.applied,
            "cascaded": self.cascaded or 0,
            "more": self.more,
            "items": items,
        }

    @classmethod
    def from_ledger(cls, kind: str, data: dict[str, Any]) -> CommandResult:
        """A stored outcome, replayed. Reads the shared layout and the conductor one."""
        items = []
        for row in data.get("items", data.get("results")) or []:
            error = None
            if isinstance(row.get("error"), dict):
                error = ItemError(
                    row["error"].get("code", "internal"),
                    row["error"].get("message", ""),
                    row["error"].get("details"),
                )
            elif row.get("err_kind") or row.get("err_message"):
                code = _KIND_TO_CODE.get(_KIND_NAMES.get(row.get("err_kind"), "internal"), "internal")
                details = (
                    {"status": row["status"]} if code == "failed_precondition" and row.get("status") else None
                )
                error = ItemError(code, row.get("err_message", ""), details)
            items.append(CommandItem(str(row["id"]), row["outcome"], row.get("status") or None, error))
        cascaded = data.get("cascaded")
        if kind != KIND_CANCEL and not cascaded:
            cascaded = None
        return cls(
            matched=data.get("matched", 0),
            applied=data.get("applied", 0),
            more=bool(data.get("more")),
            results=tuple(items),
            cascaded=cascaded,
            replayed=True,
        )


# -- public commands -----------------------------------------------------------------------------


class CommandOptions(TypedDict, total=False):
    """The keyword arguments every command takes (all optional)."""

    command_id: str  # "": no replay; else the ledger's key (the same call within 24 h replays)
    reason: str | None  # recorded in the events' details
    dry_run: bool  # False: report what would change, change nothing
    using: str | None  # the database alias; None: the storage's


def cancel(
    queue: str, ids: Iterable[uuid.UUID | str], *, cascade: bool = True, **common: Unpack[CommandOptions]
) -> CommandResult:
    """Cancel non-terminal activities (and, with ``cascade``, their non-terminal descendants)."""
    return _execute(KIND_CANCEL, queue, ids, {"cascade": bool(cascade)}, common)


def retry(
    queue: str,
    ids: Iterable[uuid.UUID | str],
    *,
    reset_attempts: bool = False,
    only: Collection[str] | None = None,
    **common: Unpack[CommandOptions],
) -> CommandResult:
    """Run failed, cancelled (``Retried``) and dead-lettered (``Redriven``) activities again.

    ``only`` narrows the statuses acted on (``redrive()`` passes ``["dead_letter"]``); the others
    are reported as skipped.
    """
    allowed = ("failed", "dead_letter", "cancelled")
    only_list = sorted(set(only)) if only else list(allowed)
    bad = [s for s in only_list if s not in allowed]
    if bad:
        raise InvalidArgument(
            f"retry acts on failed, dead_letter and cancelled activities, not {', '.join(bad)}", field="only"
        )
    options: dict[str, Any] = {"reset_attempts": bool(reset_attempts)}
    if only:
        options["only"] = only_list
    return _execute(KIND_RETRY, queue, ids, options, common)


def redrive(
    queue: str,
    ids: Iterable[uuid.UUID | str],
    *,
    reset_attempts: bool = False,
    **common: Unpack[CommandOptions],
) -> CommandResult:
    """Retry dead letters only (``Redriven``); any other target is skipped."""
    return retry(queue, ids, reset_attempts=reset_attempts, only=["dead_letter"], **common)


def run_now(queue: str, ids: Iterable[uuid.UUID | str], **common: Unpack[CommandOptions]) -> CommandResult:
    """Make scheduled, retry-backoff and waiting activities runnable now."""
    return _execute(KIND_RUN_NOW, queue, ids, {}, common)


def reschedule(
    queue: str, ids: Iterable[uuid.UUID | str], at: datetime | str, **common: Unpack[CommandOptions]
) -> CommandResult:
    """Move scheduled (and retry-backoff) activities to ``at`` (an aware datetime or RFC 3339)."""
    at_text = ev.rfc3339(validation.timestamp("at", at))  # aware, and inside 0001..9999 in UTC
    return _execute(KIND_RESCHEDULE, queue, ids, {"at": at_text}, common)


def set_priority(
    queue: str, ids: Iterable[uuid.UUID | str], priority: int, **common: Unpack[CommandOptions]
) -> CommandResult:
    """Change the priority (1 low .. 4 critical) of non-terminal activities."""
    if isinstance(priority, bool) or not isinstance(priority, int) or not 1 <= priority <= 4:
        raise InvalidArgument(f"priority must be 1 (low) to 4 (critical), got {priority!r}", field="priority")
    return _execute(KIND_SET_PRIORITY, queue, ids, {"priority": priority}, common)


def delete_tree(
    queue: str, ids: Iterable[uuid.UUID | str], **common: Unpack[CommandOptions]
) -> CommandResult:
    """Delete finished roots with their whole trees and history. Skips non-roots, trees with
    unfinished work, and trees pinned by a live waiter in another tree."""
    return _execute(KIND_DELETE, queue, ids, {"cascade": "tree"}, common)


def prune_ledger(*, older_than_seconds: int = 7 * 86400, batch: int = 1000, using: str | None = None) -> int:
    """Delete ledger rows older than the window (replays are promised for >= 24 h); returns how
    many. Walks ``idx_runnerq_commands_created``."""
    if older_than_seconds < 86400:
        raise InvalidArgument(
            "the command ledger must keep rows for at least 24 hours (86400 s)", field="older_than_seconds"
        )
    from django.db import connections, transaction

    alias = db.alias_for(using)
    with transaction.atomic(using=alias), connections[alias].cursor() as cur:
        cur.execute(q.PRUNE_LEDGER, [older_than_seconds, batch])
        return int(cur.rowcount)


# -- the engine ----------------------------------------------------------------------------------


@dataclass
class _Row:
    id: uuid.UUID
    status: str
    parent_activity_id: uuid.UUID | None
    current_worker_id: str | None


@dataclass
class _Effects:
    """What a command owes after its writes: results to announce, whether work became runnable."""

    results: list[uuid.UUID] = field(default_factory=list)
    work: bool = False


@dataclass
class _Run:
    """What a command's ``apply`` is given besides its targets: the call's options and what it
    owes afterwards (``effects``)."""

    options: dict[str, Any]
    command_id: str
    reason: str | None
    effects: _Effects


def _check_queue(queue: str) -> None:
    # The storage layer's rule (validation.queue_name: ASCII letters, digits and underscores,
    # 1-48, not starting with a digit), which keeps the NOTIFY channel names under Postgres's
    # 63-byte identifier limit.
    validation.queue_name(queue)


def _check_ids(ids: Iterable[uuid.UUID | str]) -> list[uuid.UUID]:
    if isinstance(ids, (str, uuid.UUID)):
        ids = [ids]
    seen: dict[uuid.UUID, None] = {}
    for raw in ids:
        try:
            value = raw if isinstance(raw, uuid.UUID) else uuid.UUID(str(raw).strip())
        except (ValueError, AttributeError, TypeError):
            raise InvalidArgument(f"not an activity id (a UUID): {raw!r}", field="ids") from None
        seen.setdefault(value, None)
    if not seen:
        raise InvalidArgument("ids must name at least one activity", field="ids")
    if len(seen) > MAX_IDS:
        raise InvalidArgument(f"at most {MAX_IDS} ids per command, got {len(seen)}", field="ids")
    return list(seen)


def _fingerprint(kind: str, ids: list[uuid.UUID], options: dict[str, Any], reason: str | None) -> str:
    material = {"kind": kind, "ids": sorted(str(i) for i in ids), "options": options, "reason": reason or ""}
    return hashlib.sha256(json.dumps(material, sort_keys=True, separators=(",", ":")).encode()).hexdigest()


def _execute(
    kind: str, queue: str, ids: Iterable[uuid.UUID | str], options: dict[str, Any], common: CommandOptions
) -> CommandResult:
    from django.db import OperationalError, connections, transaction

    unknown = sorted(set(common) - set(CommandOptions.__annotations__))
    if unknown:  # **common takes any keyword at run time; a misspelt one must not pass unseen
        raise TypeError(f"{kind}() got unexpected keyword arguments: {', '.join(unknown)}")
    command_id = common.get("command_id", "")
    reason = common.get("reason")
    dry_run = common.get("dry_run", False)
    using = common.get("using")
    _check_queue(queue)
    targets = _check_ids(ids)
    # Both are stored (the ledger's key, events' details): no NUL, no lone surrogate, bounded.
    validation.text("command_id", command_id, validation.MAX_COMMAND_ID_BYTES, allow_empty=True)
    if reason is not None:
        validation.text("reason", reason, validation.MAX_REASON_BYTES, allow_empty=True)
    reason = reason or None
    alias = db.alias_for(using)
    connection = connections[alias]
    # A deadlock victim rolled back whole, so running it again is safe -- unless we are inside
    # the caller's transaction, whose earlier work went with it.
    attempts = 1 if connection.in_atomic_block else 4
    with db.database_errors():  # database errors become the spec's kinds (Unavailable, Timeout ...)
        for attempt in range(attempts):
            try:
                with transaction.atomic(using=alias), connection.cursor() as cur:
                    return _apply(cur, kind, queue, targets, options, command_id, reason, dry_run)
            except OperationalError as exc:
                code = getattr(getattr(exc, "__cause__", None), "sqlstate", None)
                if code not in ("40P01", "40001") or attempt == attempts - 1:
                    raise
                time.sleep(0.02 * 2**attempt)
    raise AssertionError("unreachable")


def _apply(
    cur: Cursor,
    kind: str,
    queue: str,
    targets: list[uuid.UUID],
    options: dict[str, Any],
    command_id: str,
    reason: str | None,
    dry_run: bool,
) -> CommandResult:
    ledger = bool(command_id) and not dry_run
    fingerprint = _fingerprint(kind, targets, options, reason)
    if ledger:
        # Claim the ledger slot first: a concurrent delivery of the same command id blocks on
        # the primary key until this transaction ends, then finds the row and replays it.
        cur.execute(q.CLAIM_LEDGER, [queue, command_id, fingerprint, kind])
        if cur.fetchone() is None:
            cur.execute(q.READ_LEDGER, [queue, command_id])
            stored_fp, stored_kind, stored = cur.fetchone()
            if stored_fp != fingerprint or stored_kind != kind:
                raise Conflict(
                    f"command {command_id!r} was already applied on queue {queue!r} with different input",
                    field="command_id",
                )
            if isinstance(stored, str):
                stored = json.loads(stored)
            return CommandResult.from_ledger(kind, stored)

    rows = _lock(cur, queue, targets, lock=not dry_run)
    effects = _Effects()
    items: list[CommandItem] = []
    matched = applied = 0
    acted: list[_Row] = []
    handler = _HANDLERS[kind]
    check_options = {**options, "_lock": not dry_run}  # a dry run takes no row locks
    for target in targets:
        row = rows.get(target)
        if row is None:
            items.append(
                CommandItem(
                    str(target),
                    SKIPPED,
                    None,
                    ItemError("not_found", f"no activity {target} in queue {queue!r}"),
                )
            )
            continue
        matched += 1
        verdict = handler.check(cur, queue, row, check_options)
        if verdict is not None:
            items.append(
                CommandItem(
                    str(row.id),
                    SKIPPED,
                    canonical_status(row.status),
                    ItemError("failed_precondition", verdict, {"status": canonical_status(row.status)}),
                )
            )
            continue
        acted.append(row)
        items.append(
            CommandItem(str(row.id), WOULD_APPLY if dry_run else APPLIED, _status_after(kind, row.status))
        )
        applied += 0 if dry_run else 1

    cascaded = None
    if kind == KIND_CANCEL:
        cascaded = 0
        if options["cascade"] and acted:
            descendants = _descendants(
                cur, queue, [row.id for row in acted], {row.id for row in acted}, lock=not dry_run
            )
            cascaded = len(descendants)
            acted.extend(descendants)
    if acted and not dry_run:
        handler.apply(cur, queue, acted, _Run(options, command_id, reason, effects))
        _announce(cur, queue, effects)

    result = CommandResult(
        matched=matched, applied=applied, more=False, results=tuple(items), cascaded=cascaded
    )
    if ledger:
        cur.execute(q.STORE_LEDGER, [json.dumps(result.to_ledger()), queue, command_id])
    return result


def _lock(cur: Cursor, queue: str, ids: list[uuid.UUID], *, lock: bool) -> dict[uuid.UUID, _Row]:
    cur.execute(q.LOCK_TARGETS if lock else q.READ_TARGETS, [queue, ids])
    return {row[0]: _Row(*row) for row in cur.fetchall()}


def _descendants(
    cur: Cursor, queue: str, parents: list[uuid.UUID], exclude: set[uuid.UUID], *, lock: bool
) -> list[_Row]:
    """The non-terminal descendants of ``parents`` (via ``idx_runnerq_parent_id``), locked."""
    cur.execute(q.DESCENDANTS, [queue, parents, queue])
    ids = [row[0] for row in cur.fetchall() if row[0] not in exclude]
    if not ids:
        return []
    rows = _lock(cur, queue, ids, lock=lock)
    return [row for row in rows.values() if row.status not in TERMINAL]


def _status_after(kind: str, status: str) -> str | None:
    after = {
        KIND_CANCEL: "cancelled",
        KIND_RETRY: "pending",
        KIND_RUN_NOW: "pending" if status == "waiting" else status,
        KIND_RESCHEDULE: status,
        KIND_SET_PRIORITY: status,
        KIND_DELETE: None,
    }[kind]
    return canonical_status(after) if after else None


def _insert_events(
    cur: Cursor,
    queue: str,
    event_type: str | Callable[[_Row], str],
    rows: list[_Row],
    detail: Callable[[_Row], dict[str, Any]],
) -> None:
    types = [event_type(row) if callable(event_type) else event_type for row in rows]
    cur.execute(
        q.INSERT_EVENTS,
        [queue, [row.id for row in rows], types, [json.dumps(detail(row)) for row in rows]],
    )


def _wake_waiters(cur: Cursor, queue: str, result_ids: list[uuid.UUID], effects: _Effects) -> None:
    """Every activity parked on one of these results becomes runnable (SPEC.md (e) waking rule);
    the claim clears ``waiting_result_id`` later.

    The storage layer's ``sql_completions.WAKE``, as after a completion: waiters found through
    ``runnerq_dependencies`` and parents parked on a cancelled child without a dependency row,
    locked in id order before their status is read. The targets were locked by an earlier
    statement of this transaction, so this statement's snapshot sees any park that held one of
    them -- no wake-up is lost (see ``storage.sql.common.wake_waiters``). ``WAKE`` announces the woken work."""
    cur.execute(
        sql_completions.WAKE, {"queue": queue, "ids": result_ids, "work_channel": work_channel(queue)}
    )
    woken, _ = cur.fetchone()
    if woken:
        effects.work = True


def _announce(cur: Cursor, queue: str, effects: _Effects) -> None:
    """NOTIFY inside the transaction, so listeners only hear committed changes."""
    if effects.results:
        channel = result_channel(queue)
        chunk: list[str] = []
        size = 0
        for rid in effects.results:
            text = str(rid)
            if chunk and size + len(text) + 1 > _NOTIFY_PAYLOAD_BYTES:
                cur.execute(q.NOTIFY, [channel, ",".join(chunk)])
                chunk, size = [], 0
            chunk.append(text)
            size += len(text) + 1
        cur.execute(q.NOTIFY, [channel, ",".join(chunk)])
    if effects.work:
        cur.execute(q.NOTIFY_WORK, [work_channel(queue)])


# -- per command: which statuses it acts on, and the writes --------------------------------------


def _unless_finished(cur: Cursor, queue: str, row: _Row, options: dict[str, Any]) -> str | None:
    """Why a finished activity is skipped (cancel and set-priority act on unfinished ones only)."""
    if row.status in TERMINAL:
        return f"already finished ({row.status})"
    return None


class _Cancel:
    check = staticmethod(_unless_finished)

    @staticmethod
    def apply(cur: Cursor, queue: str, rows: list[_Row], run: _Run) -> None:
        message = "activity cancelled" + (f": {run.reason}" if run.reason else "")
        ids = [row.id for row in rows]
        cur.execute(q.CANCEL, [message, queue, ids])
        data = json.dumps({"error": message, "type": "cancelled"})
        cur.execute(q.CANCEL_RESULTS, [queue, data, ids])
        _insert_events(
            cur,
            queue,
            ev.CANCELLED,
            rows,
            lambda row: ev.cancelled_detail(run.command_id, row.status, run.reason),
        )
        _wake_waiters(cur, queue, ids, run.effects)
        run.effects.results.extend(ids)


class _Retry:
    @staticmethod
    def check(cur: Cursor, queue: str, row: _Row, options: dict[str, Any]) -> str | None:
        allowed = options.get("only") or ("failed", "dead_letter", "cancelled")
        if row.status not in allowed:
            if row.status in ("failed", "dead_letter", "cancelled"):
                return f"status is {row.status}; this command only acts on {', '.join(allowed)}"
            if row.status == "completed":
                return "completed activities are not retried"
            return f"not finished ({canonical_status(row.status)}); only failed, dead-lettered or cancelled activities are retried"
        return None

    @staticmethod
    def apply(cur: Cursor, queue: str, rows: list[_Row], run: _Run) -> None:
        reset = run.options["reset_attempts"]
        ids = [row.id for row in rows]
        cur.execute(q.RETRY, [reset, queue, ids])
        # The terminal result goes so awaiters wait for the new run; checkpoints (other ids) stay.
        cur.execute(q.DELETE_RESULTS, [queue, ids])

        def event_type(row: _Row) -> str:
            return ev.REDRIVEN if row.status == "dead_letter" else ev.RETRIED

        def detail(row: _Row) -> dict[str, Any]:
            build = ev.redriven_detail if row.status == "dead_letter" else ev.retried_detail
            return build(run.command_id, row.status, reset, run.reason)

        _insert_events(cur, queue, event_type, rows, detail)
        run.effects.work = True


class _RunNow:
    @staticmethod
    def check(cur: Cursor, queue: str, row: _Row, options: dict[str, Any]) -> str | None:
        if row.status == "pending":
            return "already runnable"
        if row.status not in ("scheduled", "retrying", "waiting"):
            return (
                f"only scheduled or waiting activities can be run now (status {canonical_status(row.status)})"
            )
        return None

    @staticmethod
    def apply(cur: Cursor, queue: str, rows: list[_Row], run: _Run) -> None:
        # The database clock, not ours: claims compare scheduled_at with now().
        cur.execute(q.RUN_NOW, [queue, [row.id for row in rows]])
        _insert_events(
            cur, queue, ev.RUN_NOW, rows, lambda row: ev.run_now_detail(run.command_id, run.reason)
        )
        run.effects.work = True


class _Reschedule:
    @staticmethod
    def check(cur: Cursor, queue: str, row: _Row, options: dict[str, Any]) -> str | None:
        if row.status not in ("scheduled", "retrying"):
            return f"only scheduled activities can be rescheduled (status {canonical_status(row.status)})"
        return None

    @staticmethod
    def apply(cur: Cursor, queue: str, rows: list[_Row], run: _Run) -> None:
        cur.execute(q.RESCHEDULE, [run.options["at"], queue, [row.id for row in rows]])
        due = any(r[0] for r in cur.fetchall())
        _insert_events(
            cur,
            queue,
            ev.RESCHEDULED,
            rows,
            lambda row: ev.rescheduled_detail(run.command_id, run.options["at"], run.reason),
        )
        run.effects.work = run.effects.work or due


class _SetPriority:
    check = staticmethod(_unless_finished)

    @staticmethod
    def apply(cur: Cursor, queue: str, rows: list[_Row], run: _Run) -> None:
        cur.execute(q.SET_PRIORITY, [run.options["priority"], queue, [row.id for row in rows]])
        _insert_events(
            cur,
            queue,
            ev.PRIORITY_CHANGED,
            rows,
            lambda row: ev.priority_changed_detail(run.command_id, run.options["priority"], run.reason),
        )


class _Delete:
    @staticmethod
    def check(cur: Cursor, queue: str, row: _Row, options: dict[str, Any]) -> str | None:
        if row.parent_activity_id is not None:
            return f"not a root: delete its root ({row.parent_activity_id} or above) to remove the whole tree"
        if row.status not in TERMINAL:
            return f"still {canonical_status(row.status)}: cancel it first"
        args: dict[str, Any] = {"queue": queue, "root": row.id}
        cur.execute(q.TREE_UNFINISHED, args)
        if cur.fetchone()[0]:
            return "part of its tree is still running"
        # Lock the tree's idempotency keys first: a spawn that reuses a key (return_existing)
        # registers its dependency while holding the key row, so it either committed already (and
        # pins the tree below) or waits and then finds the key gone.
        if options.get("_lock", True):
            cur.execute(q.LOCK_TREE_KEYS, args)
        cur.execute(q.TREE_PINNED_BY, args)
        pinned = cur.fetchone()
        if pinned:
            return f"pinned: activity {pinned[0]} in an unfinished tree waits for a result in this tree"
        return None

    @staticmethod
    def apply(cur: Cursor, queue: str, rows: list[_Row], run: _Run) -> None:
        for row in rows:
            cur.execute(q.DELETE_TREE, {"queue": queue, "root": row.id})


class _Handler(Protocol):
    """A command kind: ``check`` says why one target is skipped (None: act on it), ``apply``
    writes the change for the targets acted on."""

    def check(self, cur: Cursor, queue: str, row: _Row, options: dict[str, Any]) -> str | None: ...

    def apply(self, cur: Cursor, queue: str, rows: list[_Row], run: _Run) -> None: ...


_HANDLERS: dict[str, _Handler] = {
    KIND_CANCEL: _Cancel,
    KIND_RETRY: _Retry,
    KIND_RUN_NOW: _RunNow,
    KIND_RESCHEDULE: _Reschedule,
    KIND_SET_PRIORITY: _SetPriority,
    KIND_DELETE: _Delete,
}
