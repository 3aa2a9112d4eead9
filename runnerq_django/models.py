"""The RunnerQ lean schema (spec 0.8, ``catalog.json``) as Django models.

These models describe tables that Go and TypeScript RunnerQ workers share, so every name, type,
nullability and database default follows the catalog. The migrations create them with the spec's
own idempotent DDL (``runnerq_django/schema/ddl.py``); the indexes are declared here and built from
these declarations. State transitions never go through the ORM: they are the storage layer's SQL.
The ORM is for reading (admin, queries).
"""

from __future__ import annotations

import uuid
from typing import TYPE_CHECKING, Any

from django.db import models
from django.db.models import F, Q
from django.db.models.functions import Coalesce, Now

from runnerq_django.spec import statuses

if TYPE_CHECKING:
    from django.db.backends.base.base import BaseDatabaseWrapper
    from django.db.models.sql.compiler import SQLCompiler, _AsSqlType

    # django-stubs types fields by (set type, get type); Django's classes are not subscriptable.
    _TextArrayBase = models.Field[list[str] | None, list[str] | None]
    _UUIDArrayBase = models.Field[list[uuid.UUID], list[uuid.UUID]]
    _IntArrayBase = models.Field[list[int], list[int]]
    _StatusBase = models.TextField[str, str]
else:
    _TextArrayBase = models.Field
    _UUIDArrayBase = models.Field
    _IntArrayBase = models.Field
    _StatusBase = models.TextField

__all__ = [
    "RUNNABLE_STATUSES",
    "TERMINAL_STATUSES",
    "Activity",
    "BatchRun",
    "Command",
    "Dependency",
    "Event",
    "Idempotency",
    "Input",
    "PeriodicLease",
    "PeriodicOccurrence",
    "PeriodicRepairCount",
    "Result",
    "RuntimeSchedule",
    "ScheduleChange",
    "Status",
    "WorkerPool",
]

RUNNABLE_STATUSES = list(statuses.RUNNABLE)
TERMINAL_STATUSES = list(statuses.TERMINAL)


class DbNow(models.Func):
    """``now()`` as a database default: the catalog's rendering (``Now()`` renders
    ``STATEMENT_TIMESTAMP()``, which would not compare equal)."""

    template = "now()"
    output_field = models.DateTimeField()


class PgIndex(models.Index):
    """An index whose name may use Postgres's 63 bytes: the spec's names are longer than the
    30 characters Django allows by default (an Oracle limit)."""

    max_name_length = 63


class TextArrayField(_TextArrayBase):
    """A ``text[]`` column (``runnerq_worker_pools.activity_types``). psycopg adapts lists both ways,
    so this needs neither ``django.contrib.postgres`` in INSTALLED_APPS nor its ArrayField."""

    description = "Array of text"

    def db_type(self, connection: BaseDatabaseWrapper) -> str:
        return "text[]"

    def get_db_prep_value(
        self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False
    ) -> list[str] | None:
        return None if value is None else [str(item) for item in value]


class UUIDArrayField(_UUIDArrayBase):
    """A ``uuid[]`` column (``runnerq_batch_runs.member_ids``), adapted by psycopg as text[] is."""

    description = "Array of UUIDs"

    def db_type(self, connection: BaseDatabaseWrapper) -> str:
        return "uuid[]"

    def get_db_prep_value(
        self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False
    ) -> list[uuid.UUID] | None:
        return None if value is None else [uuid.UUID(str(item)) for item in value]


class IntArrayField(_IntArrayBase):
    """An ``integer[]`` column (``runnerq_batch_runs.member_attempts``)."""

    description = "Array of integers"

    def db_type(self, connection: BaseDatabaseWrapper) -> str:
        return "integer[]"

    def get_db_prep_value(
        self, value: Any, connection: BaseDatabaseWrapper, prepared: bool = False
    ) -> list[int] | None:
        return None if value is None else [int(item) for item in value]


class StatusField(_StatusBase):
    """The status column; a field of its own so that ``status__ne`` renders ``status <> 'x'``,
    the catalog's spelling of ``idx_runnerq_query_status`` (``~Q`` renders ``NOT (status = 'x')``)."""


@StatusField.register_lookup
class NotEqual(models.Lookup):
    lookup_name = "ne"

    def as_sql(self, compiler: SQLCompiler, connection: BaseDatabaseWrapper) -> _AsSqlType:
        lhs, lhs_params = self.process_lhs(compiler, connection)
        rhs, rhs_params = self.process_rhs(compiler, connection)
        # A list, as Django's own lookups return (the stubs say a tuple).
        return f"{lhs} <> {rhs}", [*lhs_params, *rhs_params]  # type: ignore[return-value]


# django-stubs types only the class form of TextChoices, not this functional one.
_STATUS_CHOICES = [(status.upper(), status) for status in statuses.STORED_STATUSES]
Status = models.TextChoices("Status", _STATUS_CHOICES)  # type: ignore[call-overload]


class Activity(models.Model):
    id = models.UUIDField(primary_key=True)
    queue_name = models.TextField()
    activity_type = models.TextField()
    priority = models.IntegerField(db_default=1)
    status = StatusField(db_default="pending", choices=Status.choices)
    created_at = models.DateTimeField(db_default=DbNow())
    scheduled_at = models.DateTimeField(null=True, blank=True)
    started_at = models.DateTimeField(null=True, blank=True)
    completed_at = models.DateTimeField(null=True, blank=True)
    lease_deadline_ms = models.BigIntegerField(null=True, blank=True, help_text="Epoch milliseconds.")
    current_worker_id = models.TextField(null=True, blank=True, help_text="The live claim token.")
    last_worker_id = models.TextField(null=True, blank=True, help_text="The last claim token.")
    retry_count = models.IntegerField(db_default=0)
    max_retries = models.IntegerField(db_default=0, help_text="Attempt limit; 0 means unlimited.")
    timeout_seconds = models.BigIntegerField(db_default=300)
    retry_delay_seconds = models.BigIntegerField(db_default=60)
    max_retry_delay_seconds = models.BigIntegerField(db_default=0, help_text="0 means the 3600 s cap.")
    last_error = models.TextField(null=True, blank=True)
    last_error_at = models.DateTimeField(null=True, blank=True)
    metadata = models.JSONField(null=True, blank=True)
    idempotency_key = models.TextField(null=True, blank=True)
    parent_activity_id = models.UUIDField(null=True, blank=True)
    root_activity_id = models.UUIDField(null=True, blank=True)
    depth = models.SmallIntegerField(db_default=0)
    waiting_result_id = models.UUIDField(null=True, blank=True)

    class Meta:
        db_table = "runnerq_activities"
        verbose_name_plural = "activities"
        permissions = [("operate_activity", "Can retry, cancel, redrive and reschedule activities")]
        indexes = [
            PgIndex(
                F("queue_name"),
                F("activity_type"),
                F("priority").desc(),
                F("retry_count").desc(),
                Coalesce("scheduled_at", "created_at"),
                name="idx_runnerq_dequeue_effective_v2",
                condition=Q(status__in=RUNNABLE_STATUSES),
            ),
            PgIndex(
                F("queue_name"),
                F("priority").desc(),
                F("retry_count").desc(),
                Coalesce("scheduled_at", "created_at"),
                name="idx_runnerq_dequeue_order_v2",
                condition=Q(status__in=RUNNABLE_STATUSES),
            ),
            PgIndex(F("created_at").desc(), F("id").desc(), name="idx_runnerq_query_created"),
            PgIndex(
                F("status"),
                F("created_at").desc(),
                F("id").desc(),
                name="idx_runnerq_query_status",
                condition=Q(status__ne="completed"),
            ),
            PgIndex(fields=["queue_name"], name="idx_runnerq_processing", condition=Q(status="processing")),
            PgIndex(
                fields=["root_activity_id"],
                name="idx_runnerq_root_children",
                condition=Q(parent_activity_id__isnull=False),
            ),
            PgIndex(
                fields=["queue_name", "status", "completed_at"],
                name="idx_runnerq_root_terminal",
                condition=Q(parent_activity_id__isnull=True, status__in=TERMINAL_STATUSES),
            ),
            PgIndex(
                fields=["parent_activity_id"],
                name="idx_runnerq_parent_id",
                condition=Q(parent_activity_id__isnull=False),
            ),
        ]

    def __str__(self) -> str:
        return f"{self.activity_type} {self.id}"


class Input(models.Model):
    activity_id = models.UUIDField(primary_key=True)
    queue_name = models.TextField()
    payload = models.JSONField()
    serialization = models.TextField(db_default="json-v1")

    class Meta:
        db_table = "runnerq_inputs"


class Result(models.Model):
    activity_id = models.UUIDField(
        primary_key=True, help_text="An activity id, or a checkpoint/signal UUIDv5."
    )
    queue_name = models.TextField()
    state = models.TextField(help_text='"Ok" or "Err".')
    data = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=DbNow())
    owner_activity_id = models.UUIDField(null=True, blank=True)
    step = models.TextField(
        null=True, blank=True, help_text='"kind:name"; NULL for an activity\'s own result.'
    )
    serialization = models.TextField(db_default="json-v1")

    class Meta:
        db_table = "runnerq_results"
        indexes = [
            PgIndex(
                fields=["owner_activity_id"],
                name="idx_runnerq_results_by_owner",
                condition=Q(owner_activity_id__isnull=False),
            ),
        ]


class Event(models.Model):
    # BIGSERIAL in the database (the catalog's nextval default), not an identity column.
    id = models.BigAutoField(primary_key=True)
    activity_id = models.UUIDField()
    queue_name = models.TextField()
    event_type = models.TextField()
    worker_id = models.TextField(null=True, blank=True)
    detail = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=DbNow())

    class Meta:
        db_table = "runnerq_events"
        indexes = [
            PgIndex(F("activity_id"), F("created_at").desc(), name="idx_runnerq_events_activity"),
            PgIndex(fields=["queue_name", "id"], name="idx_runnerq_events_queue_seq"),
        ]


class Idempotency(models.Model):
    pk = models.CompositePrimaryKey("queue_name", "idempotency_key")
    queue_name = models.TextField()
    idempotency_key = models.TextField()
    activity_id = models.UUIDField()
    created_at = models.DateTimeField(db_default=DbNow())
    updated_at = models.DateTimeField(db_default=DbNow())

    class Meta:
        db_table = "runnerq_idempotency"
        verbose_name_plural = "idempotency keys"


class Dependency(models.Model):
    pk = models.CompositePrimaryKey("queue_name", "waiter_activity_id", "result_id")
    queue_name = models.TextField()
    waiter_activity_id = models.UUIDField()
    result_id = models.UUIDField()
    producer_activity_id = models.UUIDField(null=True, blank=True)
    created_at = models.DateTimeField(db_default=DbNow())

    class Meta:
        db_table = "runnerq_dependencies"
        verbose_name_plural = "dependencies"
        indexes = [PgIndex(fields=["queue_name", "result_id"], name="idx_runnerq_dependencies_result")]


class WorkerPool(models.Model):
    pool_id = models.UUIDField(primary_key=True)
    queue_name = models.TextField()
    max_workers = models.IntegerField()
    activity_types = TextArrayField(null=True, blank=True)
    started_at = models.DateTimeField(db_default=DbNow())
    last_seen_at = models.DateTimeField(db_default=DbNow())

    class Meta:
        db_table = "runnerq_worker_pools"
        indexes = [
            PgIndex(fields=["queue_name", "last_seen_at"], name="idx_runnerq_worker_pools_queue_alive")
        ]


class Command(models.Model):
    pk = models.CompositePrimaryKey("queue_name", "command_id")
    queue_name = models.TextField()
    command_id = models.TextField()
    fingerprint = models.TextField()
    kind = models.TextField()
    result = models.JSONField()
    created_at = models.DateTimeField(db_default=DbNow())

    class Meta:
        db_table = "runnerq_commands"
        indexes = [PgIndex(fields=["created_at"], name="idx_runnerq_commands_created")]


# --- The periodic scheduler's own tables (runnerq_django.scheduler) -------------------------------
# Not part of the RunnerQ catalog: other SDKs neither read nor need them. They are the scheduler's
# durable side: who may write cache records (the lease with its fencing token), which occurrences
# were enqueued (the dedupe guard and the evidence a repair rebuilds progress from), and how often
# records had to be repaired.


class PeriodicLease(models.Model):
    """Ownership of one scheduler namespace: only the owner enqueues and writes cache records."""

    namespace = models.TextField(primary_key=True)
    owner = models.TextField(help_text="Node id of the owner (host:pid:random).")
    release = models.BigIntegerField(default=0, help_text="Deploy precedence: a higher release takes over.")
    token = models.BigIntegerField(help_text="Fencing token, bumped on every change of owner.")
    acquired_at = models.DateTimeField(db_default=DbNow())
    renewed_at = models.DateTimeField(db_default=DbNow())
    expires_at = models.DateTimeField()

    class Meta:
        db_table = "runnerq_periodic_lease"

    def __str__(self) -> str:
        return f"{self.namespace} → {self.owner}"


class PeriodicOccurrence(models.Model):
    """One row per enqueued (job, nominal occurrence): the once-only guard and the evidence."""

    idempotency_key = models.TextField(primary_key=True)
    namespace = models.TextField()
    job_id = models.TextField()
    occurrence = models.DateTimeField(help_text="The nominal occurrence instant (UTC).")
    activity_id = models.UUIDField(null=True, blank=True)
    task_id = models.TextField(null=True, blank=True, help_text="Celery task id (beat entries).")
    node = models.TextField()
    token = models.BigIntegerField(null=True, blank=True, help_text="Fencing token of the enqueuer.")
    enqueued_at = models.DateTimeField(db_default=DbNow())
    sent_at = models.DateTimeField(null=True, blank=True, help_text="Celery beat: when the broker took it.")

    class Meta:
        db_table = "runnerq_periodic_occurrences"
        indexes = [PgIndex(fields=["namespace", "job_id", "-occurrence"], name="runnerq_periodic_occ_job")]

    def __str__(self) -> str:
        return self.idempotency_key


class PeriodicRepairCount(models.Model):
    """Durable repair counters per (namespace, job, reason, day); the cache's own are evictable."""

    pk = models.CompositePrimaryKey("namespace", "job_id", "reason", "day")
    namespace = models.TextField()
    job_id = models.TextField()
    reason = models.TextField()
    day = models.DateField()
    count = models.BigIntegerField(default=0)
    last_at = models.DateTimeField(db_default=DbNow())

    class Meta:
        db_table = "runnerq_periodic_repairs"


# --- Flow control's own tables (docs/how-to/flow-control.md) --------------------------------------
# Not part of the RunnerQ catalog: Go and TypeScript workers neither read them nor honour them.
# They change only through runnerq_django.storage.flow.


class FlowPause(models.Model):
    """A paused queue (``activity_type`` empty) or a paused type in a queue: claims skip it."""

    pk = models.CompositePrimaryKey("queue_name", "activity_type")
    queue_name = models.TextField()
    activity_type = models.TextField(blank=True, help_text="Empty: the whole queue is paused.")
    paused_by = models.TextField(help_text="Who paused it (an admin user, a command, the API's caller).")
    reason = models.TextField(blank=True)
    paused_at = models.DateTimeField(db_default=DbNow())

    class Meta:
        db_table = "runnerq_flow_pauses"

    def __str__(self) -> str:
        return f"{self.queue_name}/{self.activity_type}" if self.activity_type else self.queue_name


class FlowLedger(models.Model):
    """Every flow-control change (pause, resume), who made it and why: the operator's record."""

    id = models.BigAutoField(primary_key=True)
    action = models.TextField()
    queue_name = models.TextField()
    activity_type = models.TextField(blank=True)
    actor = models.TextField()
    reason = models.TextField(blank=True)
    detail = models.JSONField(default=dict)
    at = models.DateTimeField(db_default=DbNow())

    class Meta:
        db_table = "runnerq_flow_ledger"
        indexes = [PgIndex(fields=["-at"], name="runnerq_flow_ledger_at")]

    def __str__(self) -> str:
        return f"{self.action} {self.queue_name}/{self.activity_type} by {self.actor}"


class FlowPartition(models.Model):
    """The partition key of a concurrency-limited activity, taken from its payload at enqueue."""

    activity_id = models.UUIDField(primary_key=True)
    queue_name = models.TextField()
    activity_type = models.TextField()
    partition_key = models.TextField()

    class Meta:
        db_table = "runnerq_flow_partitions"

    def __str__(self) -> str:
        return f"{self.activity_type}[{self.partition_key}]"


class FlowSlot(models.Model):
    """One concurrency slot: the activity that last took it and its claim token. A slot whose
    activity no longer runs under that token is free; the next claim that needs it takes the row
    over in place (rows are kept; migration 0007 leaves room on each page for the update)."""

    pk = models.CompositePrimaryKey("queue_name", "activity_type", "partition_key", "slot")
    queue_name = models.TextField()
    activity_type = models.TextField()
    partition_key = models.TextField(blank=True)
    slot = models.IntegerField()
    activity_id = models.UUIDField()
    token = models.TextField()
    taken_at = models.DateTimeField(db_default=DbNow())

    class Meta:
        db_table = "runnerq_flow_slots"

    def __str__(self) -> str:
        return f"{self.activity_type}[{self.partition_key}]#{self.slot}"


class FlowRateSlot(models.Model):
    """One start in a rate limit's window: at most N per (type, partition, window)."""

    pk = models.CompositePrimaryKey("queue_name", "activity_type", "partition_key", "window_id", "slot")
    queue_name = models.TextField()
    activity_type = models.TextField()
    partition_key = models.TextField(blank=True)
    window_id = models.BigIntegerField(help_text="floor(epoch seconds / period) on the database clock.")
    slot = models.IntegerField()
    activity_id = models.UUIDField()

    class Meta:
        db_table = "runnerq_flow_rate_slots"

    def __str__(self) -> str:
        return f"{self.activity_type}[{self.partition_key}]@{self.window_id}#{self.slot}"


class DebounceWindow(models.Model):
    """The window of one debounce or throttle key (``enqueue(..., debounce=...)`` or
    ``throttle=...``; runnerq_django.activities.debounce): the activity its enqueues collapse into. The app's
    own table; other SDKs neither read nor need it."""

    pk = models.CompositePrimaryKey("queue_name", "activity_type", "kind", "key")
    queue_name = models.TextField()
    activity_type = models.TextField()
    kind = models.TextField(help_text="'debounce' or 'throttle'.")
    key = models.TextField()
    activity_id = models.UUIDField(help_text="The activity that runs for the key's current window.")
    first_at = models.DateTimeField(help_text="The first enqueue of the current group or window.")
    last_at = models.DateTimeField(help_text="The last enqueue.")
    run_at = models.DateTimeField(help_text="When the activity runs (a throttle's window starts).")
    wait_ms = models.BigIntegerField(help_text="A debounce's wait, a throttle's window (ms).")
    max_wait_ms = models.BigIntegerField(null=True, blank=True, help_text="A debounce's max_wait (ms).")
    collapsed = models.BigIntegerField(
        db_default=0, help_text="Enqueues that returned this activity instead of creating one."
    )

    class Meta:
        db_table = "runnerq_debounce"
        indexes = [
            # The admin: an activity's window, and the list of the latest windows.
            models.Index(fields=["activity_id"], name="runnerq_debounce_activity"),
            models.Index(fields=["last_at"], name="runnerq_debounce_last"),
        ]

    def __str__(self) -> str:
        return f"{self.kind} {self.activity_type}[{self.key}]"


# --- The live console's rollups (runnerq_django.console) ---------------------------------------
# The app's own tables, not part of the RunnerQ catalog: the workers' maintenance loop writes
# them once a few seconds from the last minutes' finished work, and the admin's charts read only
# them, so a refresh costs the same at a million activities as at ten.


class ConsoleMinute(models.Model):
    """Outcomes and enqueue-to-start latency of one (span, minute, queue, activity type): a
    minute (span 1), or the ten minutes from ``minute`` (span 10, their sum, which the day's
    charts read: a tenth of the rows), or the hour from ``minute`` (span 60, which the day's types
    table reads). Spans -1 and -10 with the activity type ``''`` hold the queue's totals over all
    its types (``storage.sql.console.TOTAL_TYPE``), which the charts' series read."""

    pk = models.CompositePrimaryKey("span_minutes", "minute", "queue_name", "activity_type")
    span_minutes = models.SmallIntegerField(db_default=1)
    minute = models.DateTimeField()
    queue_name = models.TextField()
    activity_type = models.TextField()
    completed = models.BigIntegerField(db_default=0)
    failed = models.BigIntegerField(db_default=0)
    dead_lettered = models.BigIntegerField(db_default=0)
    latency_count = models.BigIntegerField(db_default=0)
    latency_sum_ms = models.FloatField(db_default=0)
    latency_max_ms = models.FloatField(db_default=0)
    # The latency histogram, a column per bucket (storage.sql.console.LATENCY_BOUNDS_MS): bucket
    # i counts latencies from bound i-1 to bound i, so merging minutes is a plain sum.
    latency_b0 = models.BigIntegerField(db_default=0)
    latency_b1 = models.BigIntegerField(db_default=0)
    latency_b2 = models.BigIntegerField(db_default=0)
    latency_b3 = models.BigIntegerField(db_default=0)
    latency_b4 = models.BigIntegerField(db_default=0)
    latency_b5 = models.BigIntegerField(db_default=0)
    latency_b6 = models.BigIntegerField(db_default=0)
    latency_b7 = models.BigIntegerField(db_default=0)
    latency_b8 = models.BigIntegerField(db_default=0)
    latency_b9 = models.BigIntegerField(db_default=0)
    latency_b10 = models.BigIntegerField(db_default=0)
    latency_b11 = models.BigIntegerField(db_default=0)
    latency_b12 = models.BigIntegerField(db_default=0)
    latency_b13 = models.BigIntegerField(db_default=0)
    latency_b14 = models.BigIntegerField(db_default=0)
    latency_b15 = models.BigIntegerField(db_default=0)

    class Meta:
        db_table = "runnerq_console_minutes"


class ConsoleDepth(models.Model):
    """The depth of one queue sampled in one minute (the minute's last sample)."""

    pk = models.CompositePrimaryKey("minute", "queue_name")
    minute = models.DateTimeField()
    queue_name = models.TextField()
    due = models.BigIntegerField(db_default=0)
    scheduled = models.BigIntegerField(db_default=0)
    processing = models.BigIntegerField(db_default=0)
    sampled_at = models.DateTimeField()

    class Meta:
        db_table = "runnerq_console_depth"


# --- Progress and published events (ctx.progress(), ctx.publish()) -----------------------------
# The app's own tables, not part of the RunnerQ catalog: a Go or TypeScript worker neither writes
# nor reads them. Written by storage.progress (fenced by the attempt's claim), deleted with their
# activity's tree by retention and delete_tree.


class ActivityProgress(models.Model):
    """The latest progress of one activity, and the sequence number of its last published event."""

    activity_id = models.UUIDField(primary_key=True)
    queue_name = models.TextField()
    done = models.FloatField(null=True)
    total = models.FloatField(null=True)
    message = models.TextField(null=True)
    last_seq = models.BigIntegerField(db_default=0)
    updated_at = models.DateTimeField(db_default=DbNow())

    class Meta:
        db_table = "runnerq_progress"

    def __str__(self) -> str:
        return f"{self.activity_id}: {self.done}/{self.total}"


class PublishedEvent(models.Model):
    """One event an activity published (``ctx.publish(name, data)``), numbered 1, 2, ... per
    activity; an activity keeps its newest ``storage.progress.MAX_EVENTS_PER_ACTIVITY``."""

    pk = models.CompositePrimaryKey("activity_id", "seq")
    activity_id = models.UUIDField()
    seq = models.BigIntegerField()
    queue_name = models.TextField()
    name = models.TextField()
    data = models.JSONField(null=True)
    attempt = models.IntegerField()
    created_at = models.DateTimeField(db_default=DbNow())

    class Meta:
        db_table = "runnerq_published_events"

    def __str__(self) -> str:
        return f"{self.activity_id}#{self.seq} {self.name}"


class ActivityFork(models.Model):
    """A fork: a new run of ``origin_id`` from step ``from_step``, with the checkpoints recorded
    before it copied (``storage.fork``). The app's own ledger of who forked what, and why."""

    fork_id = models.UUIDField(primary_key=True)
    origin_id = models.UUIDField(db_index=True)
    queue_name = models.TextField()
    from_step = models.TextField()
    copied = models.IntegerField()
    reused_children = models.IntegerField()
    actor = models.TextField(blank=True)
    reason = models.TextField(null=True)
    created_at = models.DateTimeField(db_default=DbNow())

    class Meta:
        db_table = "runnerq_forks"

    def __str__(self) -> str:
        return f"{self.fork_id} <- {self.origin_id} from {self.from_step}"


# --- Batch runs (batch handlers, runnerq_django.activities.batch) ------------------------------
# The app's own table, not part of the RunnerQ catalog: one row per call of a batch handler,
# written by the member thread that calls it (storage.batches), so the admin links a batch's
# members to each other. Deleted with the trees of its members by retention and delete_tree.


class BatchRun(models.Model):
    """One call of a batch handler: its members (``member_ids``) and the attempt each ran
    (``member_attempts``, same order)."""

    batch_id = models.UUIDField(primary_key=True)
    activity_type = models.TextField()
    queue_name = models.TextField()
    started_at = models.DateTimeField(db_default=DbNow())
    member_ids = UUIDArrayField()
    member_attempts = IntArrayField()

    class Meta:
        db_table = "runnerq_batch_runs"

    def __str__(self) -> str:
        return f"{self.activity_type} batch {self.batch_id} ({len(self.member_ids)} members)"


# --- Runtime schedules ----------------------------------------------------------------------
# The tables of runtime schedules: periodic jobs kept in Postgres (and edited in the admin or
# through ``runnerq_django.scheduler.runtime_schedules``) beside the ones declared in code.
#
# The app's own tables, not part of the RunnerQ catalog: Go and TypeScript workers neither read nor
# need them (what a schedule enqueues is an ordinary activity). ``runnerq_schedules`` holds one row
# per schedule; ``runnerq_schedule_changes`` is its history (who changed what, when, and every
# "run now"), written in the transaction of the change.
#
# The database keeps three columns itself (migration ``0012_runtime_schedules``'s triggers), so a
# write through the ORM, the admin or plain SQL cannot forget them:
#
# - ``revision``: 1 on insert, bumped by every update that changes anything but the bookkeeping
#   columns;
# - ``change_seq``: a fresh value of ``runnerq_schedules_change_seq`` with every revision, so
#   ``(count(*), max(change_seq))`` changes with every insert, change and delete -- the scheduler's
#   cheap check, once per tick;
# - ``timing_changed_at``: ``now()`` on insert and whenever the timing (kind, cron, zone, interval,
#   anchor, instant, start, end) changes. No occurrence before it is enqueued: an edit never
#   reaches back into the past of the new timing.
#
# Read and write them through ``runnerq_django.scheduler.runtime_schedules``.

KINDS = [("cron", "cron"), ("interval", "interval"), ("once", "once")]


class RuntimeSchedule(models.Model):
    """One schedule kept in Postgres: what a declared ``@periodic`` job says, as a row."""

    id = models.TextField(primary_key=True, help_text="Stable id; shares the namespace of declared jobs.")
    activity = models.TextField(help_text="The activity type each occurrence enqueues.")
    payload = models.JSONField(null=True, blank=True, help_text="The JSON payload of every occurrence.")
    queue = models.TextField(null=True, blank=True, help_text="Empty: the handler's queue, else the default.")
    priority = models.SmallIntegerField(null=True, blank=True, help_text="1..4; empty: the handler's.")
    kind = models.TextField(choices=KINDS, default="cron")
    cron = models.TextField(blank=True, default="", help_text="croniter syntax (kind cron).")
    tz = models.TextField(default="UTC", help_text="IANA time zone of the cron expression.")
    every_seconds = models.BigIntegerField(null=True, blank=True, help_text="Period (kind interval).")
    anchor = models.DateTimeField(
        null=True,
        blank=True,
        help_text="Interval anchor: occurrences are anchor + k x every (default the epoch).",
    )
    at = models.DateTimeField(null=True, blank=True, help_text="The one instant (kind once).")
    start_at = models.DateTimeField(null=True, blank=True)
    end_at = models.DateTimeField(null=True, blank=True)
    enabled = models.BooleanField(default=True, help_text="Off: paused (occurrences are held).")
    misfire_grace_seconds = models.BigIntegerField(default=3600)
    coalesce = models.BooleanField(default=True)
    max_catch_up = models.IntegerField(default=10)
    catch_up_after_repair = models.BooleanField(default=True)
    jitter_seconds = models.IntegerField(
        default=0, help_text="Each occurrence runs up to this many seconds late (the same delay everywhere)."
    )
    max_occurrences = models.BigIntegerField(
        null=True, blank=True, help_text="Stop after this many enqueued occurrences (empty: no cap)."
    )
    occurrence_count = models.BigIntegerField(default=0, help_text="Occurrences enqueued so far.")
    description = models.TextField(blank=True, default="")
    revision = models.BigIntegerField(default=1, help_text="Bumped by every change (by the database).")
    change_seq = models.BigIntegerField(default=0)
    timing_changed_at = models.DateTimeField(db_default=Now())
    created_at = models.DateTimeField(db_default=Now())
    updated_at = models.DateTimeField(db_default=Now())
    created_by = models.TextField(blank=True, default="")
    updated_by = models.TextField(blank=True, default="")

    class Meta:
        db_table = "runnerq_schedules"
        verbose_name = "schedule"
        indexes = [models.Index(fields=["change_seq"], name="runnerq_schedules_seq")]

    def __str__(self) -> str:
        return self.id


class ScheduleChange(models.Model):
    """One change of a schedule (or one "run now"): who, what (field: [before, after]), when."""

    id = models.BigAutoField(primary_key=True)
    schedule_id = models.TextField()
    revision = models.BigIntegerField(null=True, blank=True)
    action = models.TextField()  # created / updated / paused / resumed / deleted / run_now / imported
    actor = models.TextField()
    reason = models.TextField(blank=True, default="")
    changes = models.JSONField(default=dict)
    activity_id = models.UUIDField(null=True, blank=True)
    at = models.DateTimeField(db_default=Now())

    class Meta:
        db_table = "runnerq_schedule_changes"
        indexes = [models.Index(fields=["schedule_id", "-at"], name="runnerq_schedule_changes_id")]

    def __str__(self) -> str:
        return f"{self.action} {self.schedule_id} by {self.actor}"


__all__ = ["KINDS", "RuntimeSchedule", "ScheduleChange"]
