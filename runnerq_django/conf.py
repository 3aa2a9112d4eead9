"""The ``RUNNERQ`` settings: one table of rules (name, type, bounds, default, one-line help) read
by the system checks (``validate()``), by ``runworker``/``runscheduler``'s options (their bounds)
and by the typed view (``runnerq_settings()``), so the three can never disagree.

``runnerq_settings()`` is built once from ``settings.RUNNERQ`` over the defaults and rebuilt when
a test changes ``RUNNERQ`` (Django's ``setting_changed``). A value that breaks its rule reads as
its default there; the system checks report it (``runworker`` and ``runscheduler`` refuse to
start on them). ``get()`` returns a raw value, as given, for the checks and older callers.

Internal: not part of the public API.
"""

from __future__ import annotations

import difflib
import math
import re
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass
from typing import Any

from django.core.signals import setting_changed

from runnerq_django.storage import config as storage_config

MAX_SECONDS = 24 * 3600  # the storage protocol's bound on durations
MAX_CONCURRENCY = 1000  # threads per worker process
MAX_JSON_DEPTH_LIMIT = 500  # well under Python's recursion limit, which every JSON codec here uses
MAX_PAYLOAD_LIMIT = 4 * 1024 * 1024  # the storage protocol's body limit
MAX_RECYCLE_ACTIVITIES = 1_000_000_000  # activities a worker process claims before it recycles
MIN_RECYCLE_MEMORY_MB = 32  # less than an idle worker's own memory would recycle it in a loop
MAX_RECYCLE_MEMORY_MB = 1024 * 1024  # 1 TiB


@dataclass(frozen=True)
class Rule:
    """One setting. ``kind`` says what a value must be: ``seconds`` (a positive number; with
    ``high``, at most that; with ``low``, at least that), ``seconds_or_zero``, ``seconds_or_none``
    (``None`` for no limit), ``whole`` (an int
    ``low..high``, or ``>= low`` without ``high``), ``flag`` (a bool), ``modules`` (a list of
    module names), ``text`` (a string; ``pattern``, when given, it must match), ``jobs``,
    ``table`` (a dict of the settings in ``rules``), ``types`` (activity type -> dict of its
    ``@activity`` options, judged by runnerq_django.activities.type_settings); ``database``, ``replica``
    (a ``database``, or ``None`` for none), ``queue``, ``queues`` and ``queue_databases`` (queue ->
    database alias) are judged by ``validate()`` and the system checks (they need DATABASES and
    the storage layer)."""

    key: str
    kind: str
    default: Any
    help: str
    low: float | None = None
    high: float | None = None
    must: str | None = None  # the requirement in words, where the kind's wording is not enough
    pattern: str | None = None
    rules: tuple[Rule, ...] = ()
    choices: tuple[str, ...] = ()  # kind "choice": the values allowed

    def problem(self, value: Any, name: str) -> str | None:
        """What is wrong with ``value`` for this setting, naming it ``name`` (a settings key or a
        command-line flag); None when it is fine."""
        if self.kind in ("seconds_or_none", "whole_or_none") and value is None:
            return None
        if self.kind in ("seconds", "seconds_or_zero", "seconds_or_none"):
            if not _is_number(value) or value < 0 or (value == 0 and self.kind != "seconds_or_zero"):
                what = {
                    "seconds": "a positive number of seconds",
                    "seconds_or_zero": "a number of seconds >= 0",
                    "seconds_or_none": "None (no limit) or a positive number of seconds",
                }[self.kind]
                return f"{name} must be {what}, got {value!r}"
            if (self.high is not None and value > self.high) or (self.low is not None and value < self.low):
                limits = (
                    f"more than 0 and at most {self.high:g}"
                    if self.low is None
                    else f"{self.low:g}..{self.high:g}"
                )
                return f"{name} must be {limits} seconds, got {value!r}"
        elif self.kind in ("whole", "whole_or_none"):
            if not _is_whole(value) or value < self.low or (self.high is not None and value > self.high):
                limits = f">= {self.low}" if self.high is None else f"{self.low}..{self.high}"
                what = self.must or f"a whole number {limits}"
                if self.kind == "whole_or_none":
                    what = f"None (no limit) or {what}"
                return f"{name} must be {what}, got {value!r}"
        elif self.kind == "flag":
            if not isinstance(value, bool):  # "no" or "false" would read as true
                return f"{name} must be True or False, got {value!r}"
        elif self.kind == "modules":
            # A bare string is no list of modules: the worker would look for none, without a word.
            if (
                isinstance(value, str)
                or not isinstance(value, (list, tuple))
                or not all(isinstance(m, str) and m for m in value)
            ):
                return f"{name} must be a list of module names such as {self.default!r}, got {value!r}"
        elif self.kind == "text":
            if not isinstance(value, str) or (self.pattern and not re.fullmatch(self.pattern, value)):
                return (
                    f"{name} must be {self.must}; got {value!r}"
                    if self.pattern
                    else f"{name} must be {self.must}, got {value!r}"
                )
        elif self.kind == "choice":
            if value not in self.choices:
                allowed = " or ".join(repr(choice) for choice in self.choices)
                return f"{name} must be {allowed}, got {value!r}"
        elif self.kind in _judges:
            found = _judges[self.kind](value, name)
            return "; ".join(found) if found else None
        elif self.kind == "jobs" and (
            not isinstance(value, dict) or not all(isinstance(v, dict) for v in value.values())
        ):
            return f"{name} must be a dict of job id -> dict of options"
        return None

    @property
    def defaults(self) -> Any:
        return {rule.key: rule.defaults for rule in self.rules} if self.kind == "table" else self.default


# Kinds judged by a module above this one, which installs its judge when it loads: "types" by the
# registry (an entry is judged against the decorator of its type). (value, name) -> problems.
_judges: dict[str, Callable[[Any, str], list[str]]] = {}


def install_judge(kind: str, judge: Callable[[Any, str], list[str]]) -> None:
    _judges[kind] = judge


def _table(key: str, help: str, *rules: Rule) -> Rule:
    return Rule(key, "table", None, help, rules=rules)


RETENTION_RULES = _table(
    "RETENTION",
    "How long finished work is kept, and how retention sweeps it.",
    Rule("COMPLETED_SECONDS", "whole", 7 * 86400, "Seconds a completed workflow tree is kept.", low=0),
    Rule(
        "FAILED_SECONDS",
        "whole",
        30 * 86400,
        "Seconds a failed or dead-lettered workflow tree is kept.",
        low=0,
    ),
    Rule("EVENTS_SECONDS", "whole", 0, "Seconds events are kept; 0 = as long as their tree.", low=0),
    Rule("INTERVAL_SECONDS", "whole", 60, "Seconds between two retention sweeps.", low=0),
    Rule("BATCH", "whole", 500, "Trees deleted per retention statement.", low=1, high=1000),
    Rule(
        "FLOW_SLOT_IDLE_SECONDS",
        "whole",
        300,
        "Seconds a free concurrency slot row is kept after it was last taken, for a claim to take"
        " over in place; retention's sweep then deletes it (a slot in use is never deleted).",
        low=0,
    ),
    Rule(
        "CONSOLE_SECONDS",
        "whole",
        2 * 86400,
        "Seconds the live console's per-minute rollups are kept (its charts show the last day).",
        low=0,
    ),
)

SCHEDULER_RULES = _table(
    "SCHEDULER",
    'The periodic scheduler (runnerq_django.scheduler; see README "Periodic jobs").',
    Rule(
        "CACHE",
        "text",
        "runnerq_scheduler",
        "Cache alias holding one record per declared job (django-redis in production, with IGNORE_EXCEPTIONS "
        "off so an outage is an error, not a flood of misses).",
        must="a cache alias",
    ),
    Rule(
        "NAMESPACE",
        "text",
        "default",
        "Isolates the records, the lease and the occurrence keys of one deployment.",
        must="1-40 letters, digits, _ . or -",
        pattern=r"[A-Za-z0-9_.-]{1,40}",
    ),
    Rule(
        "RELEASE",
        "whole",
        0,
        "Deploy precedence for the lease: a process of a higher release takes ownership.",
        low=0,
        must="a whole number >= 0 (higher deploys win)",
    ),
    Rule(
        "FENCING",
        "flag",
        True,
        "Lease fencing: only the owner enqueues and writes records. Off: every scheduler "
        "enqueues (deduplicated by Postgres) and writes (convergent) records.",
    ),
    Rule(
        "LEASE_SECONDS",
        "seconds",
        30,
        "Length of the scheduler's lease; at least three times MAX_INTERVAL_SECONDS.",
        high=MAX_SECONDS,
    ),
    Rule(
        "MAX_INTERVAL_SECONDS",
        "seconds",
        5,
        "Longest sleep between ticks (a tick also wakes for the next due occurrence).",
        high=MAX_SECONDS,
    ),
    Rule(
        "JOBS",
        "jobs",
        {},
        'Declarations in settings: {"job.id": {"task": "app.activities.fn" | "activity": "Type", '
        '"cron": "0 4 * * *", "tz": "UTC" | "every": 300, ...}}.',
    ),
    Rule(
        "AUTODISCOVER_MODULES",
        "modules",
        ["periodic"],
        "Modules imported in each installed app to find @periodic declarations.",
    ),
    Rule("TOUCH_SECONDS", "seconds", 3600, "How often an unchanged record's TTL is refreshed (cache.touch)."),
    Rule(
        "OUTAGE_BACKOFF_MAX_SECONDS",
        "seconds",
        60,
        "Longest back-off between attempts to reach the cache during an outage.",
    ),
    Rule(
        "CLOCK_JUMP_SECONDS",
        "seconds",
        5,
        "A wall-clock step larger than this between ticks (beyond the monotonic one) is logged.",
    ),
    Rule(
        "OCCURRENCE_RETENTION_SECONDS",
        "seconds",
        7 * 86400,
        "Occurrence rows are kept at least this long (and longer than twice the largest grace).",
    ),
)

RULES = _table(
    "RUNNERQ",
    "The settings of runnerq_django.",
    Rule(
        "DATABASE",
        "database",
        "default",
        "Django database alias whose connection the storage layer uses: every queue's not in QUEUE_DATABASES, "
        "and the scheduler's lease.",
    ),
    Rule(
        "QUEUE_DATABASES",
        "queue_databases",
        {},
        'Queues that live on another database than DATABASE: {"billing": "billing_db"} (queue -> Django database '
        "alias, a PostgreSQL one with the RunnerQ schema). enqueue(), runworker, the scheduler, the admin and the "
        "operator commands route each queue to its alias; a queue not listed lives on DATABASE "
        "(docs/how-to/several-databases.md).",
    ),
    Rule(
        "READ_REPLICA",
        "replica",
        None,
        "Django database alias of a streaming replica of DATABASE that the admin's read-only pages and "
        "runnerq_status read (stale by its replay lag, which they show); every action, operator command and "
        "write stays on DATABASE. None: everything reads DATABASE (docs/how-to/read-replica.md).",
    ),
    Rule(
        "DEFAULT_QUEUE",
        "queue",
        "default",
        "Queue an activity goes to when neither the decorator nor enqueue() names one.",
    ),
    Rule("QUEUES", "queues", ["default"], "Queues `runworker` serves when --queue is not given."),
    Rule(
        "LEASE_SECONDS",
        "seconds",
        30,
        "Claim lease: a worker that dies loses its activities to the reaper after this long.",
        low=0.1,
        high=MAX_SECONDS,
    ),
    Rule("HEARTBEAT_SECONDS", "seconds", 10, "Lease renewal interval; at most half of LEASE_SECONDS."),
    Rule("CONCURRENCY", "whole", 8, "Handler threads per worker process.", low=1, high=MAX_CONCURRENCY),
    Rule(
        "POLL_INTERVAL_SECONDS",
        "seconds",
        1.0,
        "Longest idle wait between two claims.",
        low=0.01,
        high=MAX_SECONDS,
    ),
    Rule(
        "LISTEN",
        "flag",
        True,
        "LISTEN/NOTIFY for new work and results; turn off behind PgBouncer transaction pooling.",
    ),
    Rule(
        "SHUTDOWN_GRACE_SECONDS",
        "seconds",
        30,
        "On SIGTERM, how long running handlers may finish before their activities are released.",
        high=MAX_SECONDS,
    ),
    Rule(
        "MAX_ACTIVITIES_PER_PROCESS",
        "whole_or_none",
        None,
        "A worker process that has claimed this many activities recycles: it stops claiming, finishes what it "
        "holds and exits with status 75, and runworker --processes starts a fresh one at once (for handlers "
        "that leak). None: no limit (docs/how-to/production.md).",
        low=1,
        high=MAX_RECYCLE_ACTIVITIES,
    ),
    Rule(
        "MAX_MEMORY_PER_PROCESS_MB",
        "whole_or_none",
        None,
        "A worker process whose resident memory passes this many MiB recycles, as with "
        "MAX_ACTIVITIES_PER_PROCESS (checked every second; a process-mode handler's child is measured on its "
        "own). None: no limit.",
        low=MIN_RECYCLE_MEMORY_MB,
        high=MAX_RECYCLE_MEMORY_MB,
    ),
    Rule(
        "STARTUP_WAIT_SECONDS",
        "seconds_or_none",
        None,
        "How long runworker and runscheduler wait at start for a database server that does not answer "
        "(connection refused, a timeout, starting up, too many clients), trying again 1 s, 2 s, 4 s ... up to "
        "10 s apart, before they exit with status 69; None waits as long as it takes (a service under "
        "systemd or Kubernetes).",
        high=MAX_SECONDS,
    ),
    Rule(
        "REAPER_INTERVAL_SECONDS",
        "seconds",
        5,
        "Seconds between two reaps of expired leases (fleet-wide, one worker at a time).",
    ),
    Rule("REAPER_BATCH", "whole", 500, "Expired leases requeued per reaper statement.", low=1, high=1000),
    RETENTION_RULES,
    Rule(
        "MAX_PAYLOAD_BYTES",
        "whole",
        1024 * 1024,
        "Enqueue-time limit on the JSON text of a payload, and of metadata.",
        low=1,
        high=MAX_PAYLOAD_LIMIT,
    ),
    Rule(
        "MAX_RESULT_BYTES",
        "whole",
        1024 * 1024,
        "Limit on the JSON text of an activity's result: a handler returning more fails, not retried.",
        low=1,
        high=MAX_PAYLOAD_LIMIT,
    ),
    Rule(
        "MAX_CANVAS_MEMBERS",
        "whole",
        10_000,
        "Members one canvas may have in all, map items and nested canvases' members included (a group is "
        "spawned in one transaction).",
        low=1,
        high=100_000,
    ),
    Rule(
        "MAX_JSON_DEPTH",
        "whole",
        64,
        "How deeply payloads, results, signal payloads and checkpoints may nest arrays/objects.",
        low=1,
        high=MAX_JSON_DEPTH_LIMIT,
    ),
    Rule(
        "SUPERJSON",
        "choice",
        "plain",
        "How handlers, signal waits and awaited results read superjson-v1 values (the TypeScript SDK's default): "
        "'plain' gives the spec's plain JSON view (a Date is its ISO string), 'typed' decodes Date, bigint, Set, "
        "Map and undefined to Python's types.",
        choices=("plain", "typed"),
    ),
    Rule(
        "ALLOW_UNSAFE_INTEGERS",
        "flag",
        False,
        "Allow json-v1 integers outside +-(2**53 - 1) (and floats beyond that range) where Python "
        "writes them; the TypeScript SDK can't read them, so only for queues that only Python reads.",
    ),
    Rule(
        "REQUIRE_REGISTERED_TYPES",
        "flag",
        False,
        "Enqueueing a type no handler of this process registers: False logs a warning once per type (a Go or "
        "TypeScript worker may handle it); True refuses it (InvalidArgument).",
    ),
    Rule(
        "PREPARED_STATEMENTS",
        "flag",
        True,
        "Server-side prepared statements for enqueue; turn off behind PgBouncer older than 1.21 in transaction "
        "pooling.",
    ),
    Rule(
        "AUTODISCOVER_MODULES",
        "modules",
        ["activities"],
        "Modules the worker imports in each installed app to find @activity handlers.",
    ),
    Rule(
        "INLINE_WAIT_SECONDS",
        "seconds_or_zero",
        2.0,
        "Durable waits up to this long happen in the handler's thread; longer ones park the activity. 0 = always park.",
    ),
    Rule(
        "IMMEDIATE",
        "flag",
        False,
        "Tests: enqueue() runs the activity at once in the calling process, once its transaction commits "
        "(runnerq_django.testing.immediate()). Never in production.",
    ),
    Rule(
        "ADMIN_STATEMENT_TIMEOUT",
        "seconds",
        5,
        "Seconds an admin page's read queries may run before Postgres cancels them.",
        high=3600,
    ),
    Rule(
        "TRACING",
        "flag",
        True,
        "OpenTelemetry spans for enqueues and attempts, the trace context carried in the activity's metadata "
        "(traceparent/tracestate); takes effect only where opentelemetry-api is installed (the otel extra).",
    ),
    Rule(
        "CONSOLE_ROLLUP_SECONDS",
        "seconds_or_zero",
        10,
        "Seconds between two rollups of the last minutes for the admin's live charts; 0 = no rollups.",
        low=0,
        high=3600,
    ),
    Rule(
        "HORIZON_HELD_SECONDS",
        "seconds",
        300,
        "Seconds a transaction (or prepared transaction) may hold the database's xmin horizon before"
        " runnerq_status and the admin's overview warn that it holds back vacuum (an inactive"
        " replication slot holding one is reported at once).",
        low=1,
        high=86400 * 7,
    ),
    SCHEDULER_RULES,
    Rule(
        "TYPES",
        "types",
        {},
        'Per activity type overrides of its @activity options: {"shop.sync": {"concurrency": 4, '
        '"rate_limit": "20/s", "max_attempts": 5, "backoff": {"base": 0.5, "cap": 60, '
        '"jitter": "full"}, "retry_on": ["dotted.ExceptionPath"]}}; enqueue options still win '
        "(docs/how-to/flow-control.md; every option and the places that take it: docs/reference/options.md).",
    ),
)

DEFAULTS: dict[str, Any] = RULES.defaults


def rule(key: str, table: Rule = RULES) -> Rule:
    """The rule of ``key`` in ``table`` (``rule("LEASE_SECONDS", SCHEDULER_RULES)``)."""
    return next(r for r in table.rules if r.key == key)


def get(name: str) -> Any:
    """One ``RUNNERQ`` setting as given (not checked), with nested dicts merged over their defaults."""
    from django.conf import settings

    user = getattr(settings, "RUNNERQ", {}) or {}
    default = DEFAULTS.get(name)
    value = user.get(name, default)
    if isinstance(default, dict) and isinstance(value, dict):
        return {**default, **value}
    return value


def database_alias() -> str:
    return runnerq_settings().database


def console_read_alias() -> str:
    """The alias the console's read-only views read: ``RUNNERQ['READ_REPLICA']`` when set, else
    ``RUNNERQ['DATABASE']``. Only for reads that decide nothing: an action, and any read that
    feeds one, uses ``database_alias()`` (the admin's seam is ``admin_views.guard.read_alias``)."""
    current = runnerq_settings()
    return current.read_replica or current.database


# --- The typed view ------------------------------------------------------------------------------


@dataclass(frozen=True)
class RetentionSettings:
    completed_seconds: int
    failed_seconds: int
    events_seconds: int
    interval_seconds: int
    batch: int
    console_seconds: int
    flow_slot_idle_seconds: int


@dataclass(frozen=True)
class SchedulerSettings:
    cache: str
    namespace: str
    release: int
    fencing: bool
    lease_seconds: float
    max_interval_seconds: float
    jobs: Mapping[str, Mapping[str, Any]]
    autodiscover_modules: tuple[str, ...]
    touch_seconds: float
    outage_backoff_max_seconds: float
    clock_jump_seconds: float
    occurrence_retention_seconds: float


@dataclass(frozen=True)
class RunnerQSettings:
    database: str
    queue_databases: Mapping[str, str]
    read_replica: str | None
    default_queue: str
    queues: tuple[str, ...]
    lease_seconds: float
    heartbeat_seconds: float
    concurrency: int
    poll_interval_seconds: float
    listen: bool
    shutdown_grace_seconds: float
    max_activities_per_process: int | None
    max_memory_per_process_mb: int | None
    startup_wait_seconds: float | None
    reaper_interval_seconds: float
    reaper_batch: int
    retention: RetentionSettings
    max_payload_bytes: int
    max_result_bytes: int
    max_canvas_members: int
    max_json_depth: int
    superjson: str
    allow_unsafe_integers: bool
    require_registered_types: bool
    prepared_statements: bool
    autodiscover_modules: tuple[str, ...]
    inline_wait_seconds: float
    immediate: bool
    admin_statement_timeout: float
    tracing: bool
    console_rollup_seconds: float
    horizon_held_seconds: float
    scheduler: SchedulerSettings
    types: Mapping[str, Mapping[str, Any]]


_TYPED = {"RUNNERQ": RunnerQSettings, "RETENTION": RetentionSettings, "SCHEDULER": SchedulerSettings}
_current: RunnerQSettings | None = None


def _typed(table: Rule, given: Any) -> Any:
    given = given if isinstance(given, dict) else {}
    values = {}
    for r in table.rules:
        value = given.get(r.key, r.default)
        if r.kind == "table":
            value = _typed(r, value)
        elif r.kind in ("database", "queue"):
            value = value if isinstance(value, str) else r.default
        elif r.kind == "queue_databases":
            # Kept only whole and well formed (the system checks report anything else): a queue
            # routed to the wrong database by a half-read mapping would be worse than none.
            value = (
                dict(value)
                if isinstance(value, dict)
                and all(isinstance(k, str) and isinstance(v, str) and v for k, v in value.items())
                else dict(r.default)
            )
        elif r.kind == "replica":
            value = value if isinstance(value, str) and value else None
        elif r.kind == "queues":
            value = (
                tuple(value)
                if isinstance(value, (list, tuple)) and value and not isinstance(value, str)
                else tuple(r.default)
            )
        elif r.kind == "types":
            # Kept when it is a dict of dicts: a bad value in an entry raises ImproperlyConfigured
            # naming it when the type is resolved (registry), rather than a limit silently dropped.
            if not (isinstance(value, dict) and all(isinstance(v, dict) for v in value.values())):
                value = r.default
        elif r.problem(value, r.key) is not None:
            value = r.default  # the system checks report it
        if isinstance(value, list):
            value = tuple(value)
        values[r.key.lower()] = value
    return _TYPED[table.key](**values)


def runnerq_settings() -> RunnerQSettings:
    """``settings.RUNNERQ`` over the defaults, typed (built once; rebuilt when RUNNERQ changes)."""
    global _current
    if _current is None:
        from django.conf import settings

        _current = _typed(RULES, getattr(settings, "RUNNERQ", {}))
    return _current


def scheduler_settings() -> SchedulerSettings:
    return runnerq_settings().scheduler


def storage_settings() -> storage_config.StorageConfig:
    """The storage layer's settings, from the typed view (storage reads no settings itself)."""
    current = runnerq_settings()
    return storage_config.StorageConfig(
        alias=current.database,
        max_payload_bytes=current.max_payload_bytes,
        max_result_bytes=current.max_result_bytes,
        max_json_depth=current.max_json_depth,
        allow_unsafe_integers=current.allow_unsafe_integers,
        superjson=current.superjson,
        prepared_statements=current.prepared_statements,
    )


def _reload(setting: str, **kwargs: Any) -> None:
    global _current
    if setting == "RUNNERQ":
        _current = None
    if setting in ("RUNNERQ", "DATABASES"):
        storage_config.reset()


setting_changed.connect(_reload, dispatch_uid="runnerq_django.conf")
# The module-level storage operations run with these settings from now on (and after each change).
storage_config.install(storage_settings)


# --- Validation ----------------------------------------------------------------------------------


def validate() -> list[str]:
    """Every problem with the ``RUNNERQ`` setting, one message each (empty when all is well).
    The queue names are the system checks' to judge (by the storage layer's rule)."""
    from django.conf import settings

    user = getattr(settings, "RUNNERQ", {})
    if not isinstance(user, dict):
        return [f"RUNNERQ must be a dict, got {type(user).__name__}"]
    problems = _table_problems("RUNNERQ", RULES, user)
    judged = {problem.split(" ", 1)[0] for problem in problems}
    if not judged & {"RUNNERQ['HEARTBEAT_SECONDS']", "RUNNERQ['LEASE_SECONDS']"} and get(
        "HEARTBEAT_SECONDS"
    ) * 2 > get("LEASE_SECONDS"):
        problems.append(
            "RUNNERQ['HEARTBEAT_SECONDS'] must be at most half of RUNNERQ['LEASE_SECONDS'] so a lease is renewed before it expires"
        )
    alias = get("DATABASE")
    if not isinstance(alias, str) or alias not in settings.DATABASES:
        problems.append(f"RUNNERQ['DATABASE'] names {alias!r}, which is not in DATABASES")
    elif "postgresql" not in settings.DATABASES[alias]["ENGINE"]:
        problems.append(
            f"RUNNERQ['DATABASE'] {alias!r} must be a PostgreSQL database (the schema needs partial indexes, SKIP LOCKED and LISTEN/NOTIFY)"
        )
    problems += queue_databases_problems(get("QUEUE_DATABASES"), settings.DATABASES)
    problems += _replica_problems(settings.DATABASES, alias)
    scheduler = get("SCHEDULER")
    if isinstance(scheduler, dict):
        problems += [message for keys, message in scheduler_run_problems(scheduler) if len(keys) > 1]
    return problems


def queue_databases_problems(value: Any, databases: Mapping[str, Any]) -> list[str]:
    """What is wrong with ``RUNNERQ['QUEUE_DATABASES']`` (the queue names themselves are the
    system checks' to judge, by the storage layer's rule)."""
    name = "RUNNERQ['QUEUE_DATABASES']"
    if not isinstance(value, dict):
        return [
            f'{name} must be a dict of queue name -> database alias, such as {{"billing": "billing_db"}}, got {value!r}'
        ]
    problems = []
    for queue, alias in value.items():
        if not isinstance(queue, str):
            problems.append(f"{name} has a key {queue!r} that is not a queue name")
        elif not isinstance(alias, str) or alias not in databases:
            known = ", ".join(sorted(databases))
            problems.append(
                f"{name}[{queue!r}] names {alias!r}, which is not in DATABASES (configured: {known})"
            )
        elif "postgresql" not in str(databases[alias].get("ENGINE", "")):
            problems.append(
                f"{name}[{queue!r}] names {alias!r}, which is not a PostgreSQL database (the RunnerQ schema needs one)"
            )
    return problems


def _replica_problems(databases: Mapping[str, Any], primary: Any) -> list[str]:
    """What is wrong with ``RUNNERQ['READ_REPLICA']``: it must be None or another PostgreSQL alias."""
    replica = get("READ_REPLICA")
    name = "RUNNERQ['READ_REPLICA']"
    if replica is None:
        return []
    if not isinstance(replica, str) or replica not in databases:
        known = ", ".join(repr(alias) for alias in databases)
        return [f"{name} names {replica!r}, which is not in DATABASES (it has {known}); None reads DATABASE"]
    if "postgresql" not in databases[replica]["ENGINE"]:
        return [
            f"{name} {replica!r} must be a PostgreSQL database (a streaming replica of RUNNERQ['DATABASE'])"
        ]
    if replica == primary:
        return [f"{name} {replica!r} is RUNNERQ['DATABASE'] itself; name the replica's alias, or None"]
    return []


def _table_problems(prefix: str, table: Rule, given: dict[str, Any]) -> list[str]:
    problems = unknown_keys(prefix, given, {r.key for r in table.rules})
    for r in table.rules:
        name = f"{prefix}[{r.key!r}]"
        value = given.get(r.key, r.defaults)
        if r.kind in _judges:
            problems += _judges[r.kind](value, name)
        elif r.kind != "table":
            problems += [p for p in [r.problem(value, name)] if p]
        elif not isinstance(value, dict):
            problems.append(f"{name} must be a dict, got {type(value).__name__}")
        else:
            problems += _table_problems(name, r, value)
    return problems


def unknown_keys(prefix: str, given: dict[str, Any], known: Collection[str]) -> list[str]:
    """One message per key of ``given`` not in ``known``, with the closest known key when one is
    close (case aside): ``RUNNERQ['CONCURENCY'] is not a known setting; did you mean CONCURRENCY?``."""
    by_upper = {name.upper(): name for name in known}
    problems = []
    for key in given:
        if key in known:
            continue
        upper = str(key).upper()
        longer = [name for name in by_upper if name.startswith(upper)]  # "LEASE" -> LEASE_SECONDS
        close = longer[:1] if len(longer) == 1 else difflib.get_close_matches(upper, list(by_upper), n=1)
        hint = f"; did you mean {by_upper[close[0]]}?" if close else ""
        problems.append(f"{prefix}[{key!r}] is not a known setting{hint}")
    return problems


def _is_number(value: Any) -> bool:
    return isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)


def _is_whole(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool)


# --- The scheduler's run options: settings and runscheduler's flags alike ------------------------

SCHEDULER_FLAGS = {
    "NAMESPACE": "--namespace",
    "RELEASE": "--release",
    "LEASE_SECONDS": "--lease",
    "MAX_INTERVAL_SECONDS": "--max-interval",
}


def scheduler_run_problems(
    values: dict[str, Any], names: dict[str, str] | None = None
) -> list[tuple[set[str], str]]:
    """``(keys involved, message)`` for each rule the scheduler's run options (``SCHEDULER_FLAGS``'
    keys, effective values in ``values``) break; ``names`` says how to name a key in a message
    (default: the setting)."""

    def name(key: str) -> str:
        return (names or {}).get(key) or f"RUNNERQ['SCHEDULER'][{key!r}]"

    found = [
        ({key}, p)
        for key in SCHEDULER_FLAGS
        if (p := rule(key, SCHEDULER_RULES).problem(values.get(key), name(key)))
    ]
    interval, lease = values.get("MAX_INTERVAL_SECONDS"), values.get("LEASE_SECONDS")
    if (
        not any(keys & {"MAX_INTERVAL_SECONDS", "LEASE_SECONDS"} for keys, _ in found)
        # The rules above have passed, so both are numbers.
        and isinstance(interval, (int, float))
        and isinstance(lease, (int, float))
        and interval * 3 > lease
    ):
        found.append(
            (
                {"MAX_INTERVAL_SECONDS", "LEASE_SECONDS"},
                f"{name('MAX_INTERVAL_SECONDS')} ({interval:g} s) must be at most a third "
                f"of {name('LEASE_SECONDS')} ({lease:g} s), i.e. at most {lease / 3:g} s, so the owner "
                "renews its lease in time",
            )
        )
    return found


def scheduler_command_line_problems(given: dict[str, Any]) -> list[str]:
    """The problems that involve an option given on runscheduler's command line (``given``: key ->
    value, None when not given), judged together with the settings' values for the rest. Problems
    of the settings alone are the system checks' to report."""
    settings = get("SCHEDULER")
    values = {key: settings.get(key) if given.get(key) is None else given[key] for key in SCHEDULER_FLAGS}
    names = {key: SCHEDULER_FLAGS[key] for key in SCHEDULER_FLAGS if given.get(key) is not None}
    return [message for keys, message in scheduler_run_problems(values, names) if keys & set(names)]
