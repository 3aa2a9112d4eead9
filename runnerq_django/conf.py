"""The ``RUNNERQ`` settings dict, read in one place, with defaults and validation.

Each value has a default here; ``validate()`` returns clear messages naming the setting and the
limit, and the system checks in ``checks.py`` report them at ``check``/``migrate`` time.
"""

from __future__ import annotations

import difflib
import math
from typing import Any

# Bounds of the settings (and of runworker's matching options).
MAX_CONCURRENCY = 1000  # threads per worker process
MAX_JSON_DEPTH_LIMIT = 500  # well under Python's recursion limit, which every JSON codec here uses
MAX_PAYLOAD_LIMIT = 4 * 1024 * 1024  # the storage protocol's body limit

DEFAULTS: dict[str, Any] = {
    # Django database alias whose connection the storage layer uses.
    "DATABASE": "default",
    # Queue an activity goes to when neither the decorator nor enqueue() names one.
    "DEFAULT_QUEUE": "default",
    # Queues `runworker` serves when --queue is not given.
    "QUEUES": ["default"],
    # Worker: claim lease, heartbeat (renewal) interval, threads per process, idle poll interval.
    "LEASE_SECONDS": 30,
    "HEARTBEAT_SECONDS": 10,
    "CONCURRENCY": 8,
    "POLL_INTERVAL_SECONDS": 1.0,
    # LISTEN/NOTIFY for new work and results; turn off behind PgBouncer transaction pooling.
    "LISTEN": True,
    "SHUTDOWN_GRACE_SECONDS": 30,
    # Fleet-wide maintenance, one worker at a time (advisory lock).
    "REAPER_INTERVAL_SECONDS": 5,
    "REAPER_BATCH": 500,
    "RETENTION": {
        "COMPLETED_SECONDS": 7 * 86400,
        "FAILED_SECONDS": 30 * 86400,
        "EVENTS_SECONDS": 0,  # 0 = events live as long as their tree
        "INTERVAL_SECONDS": 60,
        "BATCH": 500,
    },
    # Enqueue-time limit on the JSON text of a payload, and of metadata (the storage protocol
    # allows 4 MiB bodies).
    "MAX_PAYLOAD_BYTES": 1024 * 1024,
    # How deeply payloads, results, signal payloads and checkpoints may nest arrays/objects.
    "MAX_JSON_DEPTH": 64,
    # How a handler, a signal wait and an awaited result read values the TypeScript SDK wrote as
    # superjson-v1: "plain" gives SuperJSON's JSON part (the spec's plain JSON view: a Date is
    # its ISO string), "typed" decodes Date, bigint, Set, Map and undefined to Python's types.
    "SUPERJSON": "plain",
    # json-v1 integers outside +-(2**53 - 1) (and floats jsonb stores as such integers, 1e16 and
    # up) are refused where Python writes them: the TypeScript SDK can't read them. True allows
    # them, for queues only Python reads.
    "ALLOW_UNSAFE_INTEGERS": False,
    # Enqueueing a type no handler of this process registers: False logs a warning once per type
    # (a Go or TypeScript worker may handle it); True refuses it (InvalidArgument).
    "REQUIRE_REGISTERED_TYPES": False,
    # Server-side prepared statements for the hottest single-row statements (enqueue). Turn off
    # behind PgBouncer older than 1.21 in transaction pooling, which can't route them.
    "PREPARED_STATEMENTS": True,
    # Modules the worker imports in each installed app to find @activity handlers.
    "AUTODISCOVER_MODULES": ["activities"],
    # Durable waits (ctx.sleep, awaiting a child) up to this long happen in the handler's thread;
    # longer ones park the activity and free the worker. 0 = always park.
    "INLINE_WAIT_SECONDS": 2.0,
    # Seconds an admin page's read queries may run before Postgres cancels them (the page then
    # says so instead of holding a backend busy on a huge table).
    "ADMIN_STATEMENT_TIMEOUT": 5,
    # The periodic scheduler (runnerq_django.scheduler; see README "Periodic jobs").
    "SCHEDULER": {
        # Cache alias holding one record per declared job (django-redis in production, with
        # IGNORE_EXCEPTIONS off so an outage is an error, not a flood of misses).
        "CACHE": "runnerq_scheduler",
        # Isolates the records, the lease and the occurrence keys of one deployment.
        "NAMESPACE": "default",
        # Deploy precedence for the lease: a process of a higher release takes ownership.
        "RELEASE": 0,
        # Lease fencing: only the owner enqueues and writes records. Off: every scheduler
        # enqueues (deduplicated by Postgres) and writes (convergent) records.
        "FENCING": True,
        "LEASE_SECONDS": 30,
        # Longest sleep between ticks (a tick also wakes for the next due occurrence).
        "MAX_INTERVAL_SECONDS": 5,
        # Declarations in settings: {"job.id": {"task": "app.activities.fn" | "activity": "Type",
        #                                       "cron": "0 4 * * *", "tz": "UTC" | "every": 300, ...}}
        "JOBS": {},
        # Modules imported in each installed app to find @periodic declarations.
        "AUTODISCOVER_MODULES": ["periodic"],
        # How often an unchanged record's TTL is refreshed (cache.touch).
        "TOUCH_SECONDS": 3600,
        # Longest back-off between attempts to reach the cache during an outage.
        "OUTAGE_BACKOFF_MAX_SECONDS": 60,
        # A wall-clock step larger than this between ticks (beyond the monotonic one) is logged.
        "CLOCK_JUMP_SECONDS": 5,
        # Occurrence rows are kept at least this long (and longer than twice the largest grace).
        "OCCURRENCE_RETENTION_SECONDS": 7 * 86400,
    },
}


def get(name: str) -> Any:
    """One ``RUNNERQ`` setting, with nested dicts merged over their defaults."""
    from django.conf import settings

    user = getattr(settings, "RUNNERQ", {}) or {}
    default = DEFAULTS.get(name)
    value = user.get(name, default)
    if isinstance(default, dict) and isinstance(value, dict):
        return {**default, **value}
    return value


def database_alias() -> str:
    return get("DATABASE")


def validate() -> list[str]:
    """Every problem with the ``RUNNERQ`` setting, one message each (empty when all is well)."""
    from django.conf import settings

    user = getattr(settings, "RUNNERQ", {})
    if not isinstance(user, dict):
        return [f"RUNNERQ must be a dict, got {type(user).__name__}"]
    problems = unknown_keys("RUNNERQ", user, DEFAULTS)
    for key in ("LEASE_SECONDS", "HEARTBEAT_SECONDS", "POLL_INTERVAL_SECONDS", "SHUTDOWN_GRACE_SECONDS",
                "REAPER_INTERVAL_SECONDS", "ADMIN_STATEMENT_TIMEOUT"):
        if not _is_number(get(key)) or get(key) <= 0:
            problems.append(f"RUNNERQ[{key!r}] must be a positive number of seconds, got {get(key)!r}")
    for key, low, high in (("CONCURRENCY", 1, MAX_CONCURRENCY), ("REAPER_BATCH", 1, 1000),
                           ("MAX_PAYLOAD_BYTES", 1, MAX_PAYLOAD_LIMIT), ("MAX_JSON_DEPTH", 1, MAX_JSON_DEPTH_LIMIT)):
        if not _is_whole(get(key)) or not low <= get(key) <= high:
            problems.append(f"RUNNERQ[{key!r}] must be a whole number {low}..{high}, got {get(key)!r}")
    if not problems and get("HEARTBEAT_SECONDS") * 2 > get("LEASE_SECONDS"):
        problems.append("RUNNERQ['HEARTBEAT_SECONDS'] must be at most half of RUNNERQ['LEASE_SECONDS'] so a lease is renewed before it expires")
    timeout = get("ADMIN_STATEMENT_TIMEOUT")
    if isinstance(timeout, (int, float)) and not isinstance(timeout, bool) and not timeout <= 0 and not timeout <= 3600:
        problems.append(f"RUNNERQ['ADMIN_STATEMENT_TIMEOUT'] must be more than 0 and at most 3600 seconds, got {timeout!r}")
    inline = get("INLINE_WAIT_SECONDS")
    if not _is_number(inline) or inline < 0:
        problems.append(f"RUNNERQ['INLINE_WAIT_SECONDS'] must be a number of seconds >= 0, got {inline!r}")
    if get("SUPERJSON") not in ("plain", "typed"):
        problems.append(f"RUNNERQ['SUPERJSON'] must be 'plain' or 'typed', got {get('SUPERJSON')!r}")
    for key in ("LISTEN", "PREPARED_STATEMENTS", "REQUIRE_REGISTERED_TYPES", "ALLOW_UNSAFE_INTEGERS"):
        if not isinstance(get(key), bool):  # "no" or "false" would read as true
            problems.append(f"RUNNERQ[{key!r}] must be True or False, got {get(key)!r}")
    problems += _module_names("RUNNERQ['AUTODISCOVER_MODULES']", get("AUTODISCOVER_MODULES"),
                              DEFAULTS["AUTODISCOVER_MODULES"])
    problems += _validate_retention(user.get("RETENTION", {}))
    alias = get("DATABASE")
    if not isinstance(alias, str) or alias not in settings.DATABASES:
        problems.append(f"RUNNERQ['DATABASE'] names {alias!r}, which is not in DATABASES")
    elif "postgresql" not in settings.DATABASES[alias]["ENGINE"]:
        problems.append(f"RUNNERQ['DATABASE'] {alias!r} must be a PostgreSQL database (the schema needs partial indexes, SKIP LOCKED and LISTEN/NOTIFY)")
    problems += _validate_scheduler(user.get("SCHEDULER", {}))
    problems += _validate_queues()
    return problems


def unknown_keys(prefix: str, given: dict, known: dict) -> list[str]:
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


def _module_names(name: str, value: Any, example: list[str]) -> list[str]:
    # A bare string is no list of modules: the worker would look for none, without a word.
    if isinstance(value, str) or not isinstance(value, (list, tuple)) or not all(isinstance(m, str) and m for m in value):
        return [f"{name} must be a list of module names such as {example!r}, got {value!r}"]
    return []


def _validate_retention(user_retention: Any) -> list[str]:
    if not isinstance(user_retention, dict):
        return [f"RUNNERQ['RETENTION'] must be a dict, got {type(user_retention).__name__}"]
    problems = unknown_keys("RUNNERQ['RETENTION']", user_retention, DEFAULTS["RETENTION"])
    retention = get("RETENTION")
    for key in ("COMPLETED_SECONDS", "FAILED_SECONDS", "EVENTS_SECONDS", "INTERVAL_SECONDS"):
        value = retention.get(key)
        if not _is_whole(value) or value < 0:
            problems.append(f"RUNNERQ['RETENTION'][{key!r}] must be a whole number >= 0, got {value!r}")
    if not _is_whole(retention.get("BATCH")) or not 1 <= retention["BATCH"] <= 1000:
        problems.append(f"RUNNERQ['RETENTION']['BATCH'] must be a whole number 1..1000, got {retention.get('BATCH')!r}")
    return problems


def _validate_queues() -> list[str]:
    """``QUEUES`` and ``DEFAULT_QUEUE`` by the storage layer's queue-name rule: a bad name would
    otherwise surface as a claim or reap failing every few seconds in every worker."""
    from runnerq_django.storage.errors import InvalidArgument
    from runnerq_django.storage.validation import queue_name

    def problem(setting: str, name: Any) -> str | None:
        try:
            queue_name(name)
        except InvalidArgument as exc:
            return f"{setting} {exc.message.removeprefix('queue: ')}"
        return None

    problems = []
    queues = get("QUEUES")
    if isinstance(queues, str) or not isinstance(queues, (list, tuple)) or not queues:
        problems.append(f"RUNNERQ['QUEUES'] must be a non-empty list of queue names, got {queues!r}")
    else:
        problems += [p for index, name in enumerate(queues) if (p := problem(f"RUNNERQ['QUEUES'][{index}]", name))]
    if (p := problem("RUNNERQ['DEFAULT_QUEUE']", get("DEFAULT_QUEUE"))) is not None:
        problems.append(p)
    return problems


def _validate_scheduler(user_scheduler: Any) -> list[str]:
    if not isinstance(user_scheduler, dict):
        return [f"RUNNERQ['SCHEDULER'] must be a dict, got {type(user_scheduler).__name__}"]
    from runnerq_django.scheduler import options  # the rules runscheduler's options share

    problems = unknown_keys("RUNNERQ['SCHEDULER']", user_scheduler, DEFAULTS["SCHEDULER"])
    scheduler = get("SCHEDULER")
    problems += [message for _, message in options.problems(scheduler)]
    for key in ("TOUCH_SECONDS", "OUTAGE_BACKOFF_MAX_SECONDS", "CLOCK_JUMP_SECONDS", "OCCURRENCE_RETENTION_SECONDS"):
        if not _is_number(scheduler.get(key)) or scheduler[key] <= 0:
            problems.append(f"RUNNERQ['SCHEDULER'][{key!r}] must be a positive number of seconds, got {scheduler.get(key)!r}")
    if not isinstance(scheduler.get("FENCING"), bool):
        problems.append(f"RUNNERQ['SCHEDULER']['FENCING'] must be True or False, got {scheduler.get('FENCING')!r}")
    if not isinstance(scheduler.get("CACHE"), str):
        problems.append(f"RUNNERQ['SCHEDULER']['CACHE'] must be a cache alias, got {scheduler.get('CACHE')!r}")
    jobs = scheduler.get("JOBS")
    if not isinstance(jobs, dict) or not all(isinstance(v, dict) for v in jobs.values()):
        problems.append("RUNNERQ['SCHEDULER']['JOBS'] must be a dict of job id -> dict of options")
    problems += _module_names("RUNNERQ['SCHEDULER']['AUTODISCOVER_MODULES']", scheduler.get("AUTODISCOVER_MODULES"),
                              DEFAULTS["SCHEDULER"]["AUTODISCOVER_MODULES"])
    return problems
