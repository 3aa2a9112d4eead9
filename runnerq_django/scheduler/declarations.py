"""Declaring periodic jobs in code: the ``@periodic`` decorator, the settings form, and discovery.

What a job enqueues is a RunnerQ **activity**: one activity per due occurrence, of an activity
type. The type comes from

- the decorated object: ``@periodic(...)`` stacked on an ``@activity`` handler (in either order);
- ``activity="billing.CloseDay"``: a type name, which may be handled by a Python, Go or
  TypeScript worker;
- in settings, ``"task": "billing.tasks.close_day"``: the dotted path of an ``@activity``
  handler, imported lazily (at check or tick time, never at declaration).

The activity's defaults (queue, priority, attempts, timeout) are the handler's, and the job may
override ``queue`` and ``priority``. ``payload`` is the JSON payload of every occurrence; the
occurrence itself travels in the activity's metadata (``periodic_occurrence``).

The decorator only records the declaration (no I/O, no validation that could fail an import);
``django.core.checks`` reports every problem at ``check``/``migrate`` time. The registry is
filled by importing each installed app's ``periodic`` module (and the ``activities`` modules the
worker discovers) the first time it is read, and is frozen after that.
"""

from __future__ import annotations

import hashlib
import json
import re
import threading
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from datetime import datetime, timedelta
from importlib import import_module
from typing import TYPE_CHECKING, Any, TypeVar

from runnerq_django import conf
from runnerq_django.exceptions import RunnerQError
from runnerq_django.scheduler.schedules import (
    EPOCH,
    Bounded,
    CronSchedule,
    IntervalSchedule,
    Schedule,
    ScheduleError,
    format_instant,
    parse_instant,
)

if TYPE_CHECKING:
    from runnerq_django.activities.registry import AnyActivity

    # A registered handler, whatever it takes and returns.
    Handler = AnyActivity

T = TypeVar("T")
JOB_ID = re.compile(r"[A-Za-z0-9_.:-]+")
MAX_JOB_ID = 150  # leaves room for the key prefix inside memcached's 250 bytes
DEFAULT_GRACE = timedelta(hours=1)
_UNSET: Any = object()


class DeclarationError(RunnerQError, ValueError):
    """A declaration the scheduler cannot run; the system checks report the message."""


@dataclass(frozen=True)
class PeriodicJob:
    """One declared job. Build it with :func:`periodic` or ``RUNNERQ['SCHEDULER']['JOBS']``."""

    id: str
    cron: str | None = None
    tz: str = "UTC"
    every: timedelta | None = None
    anchor: datetime | str | None = None
    activity: str | None = None  # an activity type name
    task: str | None = None  # dotted path of an @activity handler
    target: Any = field(default=None, compare=False)  # the decorated object
    payload: Any = None
    queue: str | None = None
    priority: int | None = None
    misfire_grace: timedelta = DEFAULT_GRACE
    coalesce: bool = True
    max_catch_up: int = 10
    catch_up_after_repair: bool = True
    start: datetime | str | None = None
    end: datetime | str | None = None
    enabled: bool = True
    origin: str = "decorator"

    # --- the schedule ---------------------------------------------------------------------
    @property
    def schedule(self) -> Schedule:
        """The evaluated schedule; raises :class:`ScheduleError` for a bad declaration."""
        cached = self.__dict__.get("_schedule")
        if cached is None:
            cached = self._build_schedule()
            object.__setattr__(self, "_schedule", cached)
        return cached

    def _build_schedule(self) -> Schedule:
        inner: Schedule
        if self.cron is not None and self.every is None:
            inner = CronSchedule(self.cron, self.tz)
        elif self.every is not None and self.cron is None:
            if self.tz not in ("UTC", None):
                raise ScheduleError(
                    "tz: an interval is anchored in absolute time; put the offset in anchor= instead"
                )
            anchor = EPOCH if self.anchor is None else parse_instant(self.anchor, "anchor")
            inner = IntervalSchedule(self.every, anchor)
        else:
            raise ScheduleError("declare exactly one of cron=... or every=...")
        start = None if self.start is None else parse_instant(self.start, "start")
        end = None if self.end is None else parse_instant(self.end, "end")
        if start and end and end <= start:
            raise ScheduleError("end: must be after start")
        return Bounded(inner, start, end) if (start or end) else inner

    # --- the target -------------------------------------------------------------------------
    def handler(self) -> Handler | None:
        """The local ``@activity`` handler, if there is one (None for a bare type name that no
        Python handler serves). Raises :class:`DeclarationError` for a target that can't be used."""
        from runnerq_django.activities.registry import registry

        if self.activity is not None:
            return registry.get(self.activity)
        return self._target_handler()

    def _target_handler(self) -> Handler:
        """The ``@activity`` handler of ``task=`` or of the decorated object."""
        from runnerq_django.activities.registry import ActivityDefinition, registry

        obj = self.target
        if obj is None and self.task is not None:
            module, _, attr = self.task.rpartition(".")
            if not module:
                raise DeclarationError(f"task: {self.task!r} is not a dotted path (module.name)")
            try:
                obj = getattr(import_module(module), attr)
            except (ImportError, AttributeError) as exc:
                raise DeclarationError(f"task: cannot import {self.task!r}: {exc}") from exc
        if obj is None:
            raise DeclarationError(
                "declare activity='TypeName', task='dotted.path', or decorate an @activity handler"
            )
        if isinstance(obj, ActivityDefinition):
            return obj
        for name in registry.names():  # @periodic below @activity: find the wrapping ActivityDefinition
            candidate = registry.get(name)
            if candidate is not None and candidate.func is obj:
                return candidate
        where = self.task or getattr(obj, "__qualname__", repr(obj))
        raise DeclarationError(
            f"{where} is not an @activity handler (stack @periodic on an @activity function)"
        )

    def target_queue(self) -> str:
        """The queue its occurrences go to: ``queue=``, else the handler's, else DEFAULT_QUEUE."""
        from runnerq_django import conf

        if self.queue is not None:
            return self.queue
        handler = self.handler()
        queue = handler.options.queue if handler is not None else None
        return queue if queue is not None else conf.runnerq_settings().default_queue

    def database(self) -> str:
        """The database its occurrences are guarded and enqueued on: its queue's
        (``runnerq_django.routing``). The scheduler's lease stays on ``RUNNERQ['DATABASE']``."""
        from runnerq_django import routing

        return routing.database_for(self.target_queue())

    def activity_type(self) -> str:
        if self.activity is not None:
            return self.activity
        return self._target_handler().name

    def target_path(self) -> str:
        if self.task is not None:
            return self.task
        if self.target is not None:
            func = getattr(self.target, "func", self.target)
            return f"{getattr(func, '__module__', '?')}.{getattr(func, '__qualname__', '?')}"
        return f"activity:{self.activity}"

    # --- fingerprints -------------------------------------------------------------------------
    def schedule_fingerprint(self) -> str:
        return fingerprint(self.schedule.fingerprint_data())

    def definition_fingerprint(self) -> str:
        """Everything else the declaration controls. A change keeps the progress (the definition
        is read from code at every enqueue); the record's ``dfp`` is rewritten for visibility."""
        try:
            activity_type = self.activity_type()
        except DeclarationError:
            activity_type = None
        return fingerprint(
            {
                "target": self.target_path(),
                "activity_type": activity_type,
                "payload": self.payload,
                "queue": self.queue,
                "priority": self.priority,
                "misfire_grace": self.misfire_grace.total_seconds(),
                "coalesce": self.coalesce,
                "max_catch_up": self.max_catch_up,
                "catch_up_after_repair": self.catch_up_after_repair,
            }
        )

    def validate(self) -> list[str]:
        """Every problem of this declaration (empty when it can run)."""
        problems: list[str] = []
        if not isinstance(self.id, str) or not JOB_ID.fullmatch(self.id):
            problems.append(f"id {self.id!r} must be made of letters, digits and _ . : -")
        elif len(self.id.encode()) > MAX_JOB_ID:
            problems.append(
                f"id {self.id!r} is longer than {MAX_JOB_ID} bytes (cache keys must fit memcached's 250)"
            )
        try:
            _ = self.schedule  # built for its ScheduleError
        except ScheduleError as exc:
            problems.append(str(exc))
        if not isinstance(self.misfire_grace, timedelta) or self.misfire_grace <= timedelta(0):
            problems.append(f"misfire_grace must be a positive timedelta, got {self.misfire_grace!r}")
        if (
            isinstance(self.max_catch_up, bool)
            or not isinstance(self.max_catch_up, int)
            or self.max_catch_up < 1
        ):
            problems.append(f"max_catch_up must be a whole number >= 1, got {self.max_catch_up!r}")
        for name in ("coalesce", "catch_up_after_repair", "enabled"):
            if not isinstance(getattr(self, name), bool):
                problems.append(f"{name} must be True or False, got {getattr(self, name)!r}")
        from runnerq_django.activities import arguments

        argument_checks: list[Callable[[], object]] = [
            lambda: self.queue is None or arguments.queue_name(self.queue),
            lambda: self.priority is None or arguments.priority(self.priority),
            # The same test the enqueue applies, so a payload the queue would refuse on every
            # tick is a check error instead (JSON-able as json-v1, at most MAX_PAYLOAD_BYTES).
            lambda: arguments.json_value(
                self.payload, "payload", max_bytes=conf.runnerq_settings().max_payload_bytes
            ),
            lambda: self.activity is None or arguments.activity_type(self.activity, "activity"),
        ]
        for check in argument_checks:
            try:
                check()
            except (ValueError, arguments.InvalidArgument) as exc:
                problems.append(str(exc))
        if sum(x is not None for x in (self.activity, self.task, self.target)) > 1:
            problems.append("declare only one of activity=, task= or a decorated handler")
        try:
            self.activity_type()
        except DeclarationError as exc:
            problems.append(str(exc))
        return problems


def fingerprint(data: Any) -> str:
    canonical = json.dumps(data, sort_keys=True, separators=(",", ":"), default=str)
    return hashlib.sha256(canonical.encode()).hexdigest()[:16]


def _seconds_or_timedelta(value: Any, name: str) -> Any:
    if isinstance(value, (int, float)) and not isinstance(value, bool):
        return timedelta(seconds=value)
    return value


def make_job(id: str, *, origin: str = "decorator", **options: Any) -> PeriodicJob:
    unknown = set(options) - {f for f in PeriodicJob.__dataclass_fields__ if f not in ("id", "origin")}
    if unknown:
        raise TypeError(f"periodic job {id!r}: unknown option(s) {', '.join(sorted(unknown))}")
    for name in ("every", "misfire_grace"):
        if name in options:
            options[name] = _seconds_or_timedelta(options[name], name)
    if options.get("misfire_grace", _UNSET) is None:
        raise TypeError(
            f"periodic job {id!r}: misfire_grace must be a duration; for 'however late', use a long one"
        )
    return PeriodicJob(id=id, origin=origin, **options)


class JobRegistry:
    """Declared jobs of the process, filled at import time and frozen at first read."""

    def __init__(self) -> None:
        self._jobs: list[PeriodicJob] = []
        self._lock = threading.RLock()
        self._frozen = False

    def add(self, job: PeriodicJob) -> PeriodicJob:
        with self._lock:
            if self._frozen:
                raise RuntimeError(
                    f"periodic job {job.id!r} declared after the scheduler read its declarations; "
                    "declare jobs in an installed app's periodic.py (or activities.py)"
                )
            self._jobs.append(job)
        return job

    def periodic(self, *, id: str, **options: Any) -> Callable[[T], T]:
        """``@periodic(id="billing.close_day", cron="0 4 * * *", tz="UTC")`` on an ``@activity``
        handler, or ``every=timedelta(minutes=5), anchor="1970-01-01T00:00Z"`` for an interval."""

        def decorate(obj: T) -> T:
            self.add(make_job(id, target=obj, **options))
            return obj

        return decorate

    def declared(self) -> list[PeriodicJob]:
        """Every declaration, duplicates included (the checks report those)."""
        with self._lock:
            return list(self._jobs)

    def freeze(self) -> None:
        with self._lock:
            self._frozen = True

    @property
    def frozen(self) -> bool:
        return self._frozen


registry = JobRegistry()
periodic = registry.periodic
_discovered = False
_discover_lock = threading.Lock()


def settings_jobs() -> list[PeriodicJob]:
    """The jobs of ``RUNNERQ['SCHEDULER']['JOBS']`` (``{id: {"task"|"activity": ..., "cron"|"every": ...}}``)."""
    jobs: list[PeriodicJob] = []
    for job_id, options in conf.scheduler_settings().jobs.items():
        options = dict(options)
        jobs.append(make_job(job_id, origin="settings", **options))
    return jobs


def autodiscover() -> None:
    """Import every installed app's ``periodic`` module (and the worker's ``activities``
    modules, where handlers often carry ``@periodic`` too), then freeze the registry."""
    global _discovered
    with _discover_lock:
        if _discovered:
            return
        from runnerq_django.activities.registry import autodiscover as import_app_modules

        typed = conf.runnerq_settings()
        modules = list(typed.scheduler.autodiscover_modules)
        modules += [m for m in typed.autodiscover_modules if m not in modules]
        import_app_modules(modules)
        registry.freeze()
        _discovered = True


def declared_jobs() -> list[PeriodicJob]:
    """All declarations of the project, decorator and settings forms, duplicates included."""
    autodiscover()
    return registry.declared() + settings_jobs()


@dataclass(frozen=True)
class Skipped:
    """A declaration the scheduler does not run, and why (the status view shows it as invalid)."""

    job: PeriodicJob
    reason: str


def partition(declared: list[PeriodicJob]) -> tuple[list[PeriodicJob], list[Skipped]]:
    """``(runnable, skipped)``: the valid, enabled declarations (the first of each id), and the
    invalid ones with their problems, in declaration order. Disabled jobs are in neither."""
    seen: set[str] = set()
    runnable: list[PeriodicJob] = []
    skipped: list[Skipped] = []
    for job in declared:
        if job.enabled is False:  # paused in code: not a problem
            continue
        problems = job.validate()
        if not problems and job.id in seen:
            problems = [f"id {job.id!r} is declared more than once; only the first declaration runs"]
        if problems:
            skipped.append(Skipped(job, "; ".join(problems)))
            continue
        seen.add(job.id)
        runnable.append(job)
    return runnable, skipped


def jobs(*, log_skipped: bool = False) -> list[PeriodicJob]:
    """The runnable declarations: valid, enabled, first of each id (duplicates are check errors).
    With ``log_skipped`` (the scheduler itself), each declaration left out is an ERROR line."""
    runnable, skipped = partition(declared_jobs())
    if log_skipped:
        import logging

        from runnerq_django.logs import log_event

        for item in skipped:
            log_event(
                logging.getLogger("runnerq_django.scheduler"),
                logging.ERROR,
                "periodic.job_skipped",
                "Periodic job %(job_id)r (%(origin)s) is not scheduled: %(reason)s. manage.py check"
                " reports it (runnerq.E101/E102).",
                job_id=item.job.id,
                origin=item.job.origin,
                reason=item.reason,
                action="not scheduled; manage.py check reports it (runnerq.E101/E102)",
            )
    return runnable


def with_changes(job: PeriodicJob, **changes: Any) -> PeriodicJob:
    """A copy of ``job`` with some fields changed (tests and deploy simulations)."""
    fresh = replace(job, **changes)
    fresh.__dict__.pop("_schedule", None)
    return fresh


__all__ = [
    "DeclarationError",
    "JobRegistry",
    "PeriodicJob",
    "Skipped",
    "autodiscover",
    "declared_jobs",
    "format_instant",
    "jobs",
    "make_job",
    "partition",
    "periodic",
    "registry",
    "settings_jobs",
]
