"""Celery beat backed by the same per-entry cache records and a Postgres occurrence guard.

Usage (inside a Django project with ``runnerq_django`` installed)::

    celery -A proj beat -S runnerq_django.scheduler.celery_beat:RunnerQScheduler

The entries are the project's ``beat_schedule`` (no schedule file, nothing to lose). Run as many
beat processes as you like: they share a lease row (namespace ``<NAMESPACE>:beat``), only the
owner sends, and every occurrence passes a Postgres guard (``INSERT ... ON CONFLICT DO NOTHING``
of ``periodic:<ns>:beat:<name>:<nominal instant>``) *before* it is sent, so no occurrence is
ever sent twice -- not by two beats, not after a restart, not after a cache flush.

Ordering, and what a crash costs. Stock beat advances ``last_run_at`` and then sends. Here the
order is guard (commit) -> send -> mark sent -> advance the record, and the record holds the
*nominal* occurrence, not the send time. The send and its "mark sent" are one transaction that
holds the guard row's lock while the broker is being talked to, so a row that is unsent *and*
unlocked is one no live process is sending. The promise is **at most once**, never twice:

- crash before the guard commits: nothing happened; the next owner sends the occurrence (inside
  the misfire grace);
- crash **between the guard's commit and the send**: that occurrence is not sent (the guard says
  "taken" and nobody sends it again). The owner scans every few seconds for guards without a
  confirmed send, older than a few seconds, that no live send holds, and logs one
  ``periodic.beat_unsent`` WARNING per occurrence (with its task id ``uuid5(key)``, the same in
  every process, should you choose to re-send by hand);
- crash **after the broker took the message but before the mark committed**: the message went
  out once, but Postgres cannot tell this from the case above, so it is reported the same way
  (the WARNING says "unconfirmed": check the task id before re-sending);
- the send raises and the message certainly never left (connection refused, a host name that
  doesn't resolve, a message that can't be encoded): the guard is released and the entry is
  retried with back-off, so a broker outage loses nothing inside the grace;
- the send raises any other error (a timeout, a connection reset: the broker may have taken the
  message): the guard is kept, the occurrence is **not** re-sent, and a
  ``periodic.beat_send_uncertain`` ERROR names it; the entry backs off before its next send.
  Sends go out without kombu's own publish retry for the same reason (a retried publish after a
  lost reply is a second message);
- crash after the mark: the record catches up from the guard rows (Postgres evidence).

Schedules: ``crontab`` (evaluated with croniter in ``app.conf.timezone``, the same DST policy as
``@periodic`` jobs), plain intervals (``timedelta``/seconds/``schedule``, anchored at the Unix
epoch so every process agrees on the instants), and :class:`anchored` for an explicit anchor.
``solar``, and schedule classes with their own ``is_due``/``remaining_estimate``, are refused at
start-up naming the entry. Per-entry options go in ``options={"runnerq": {...}}``:
``misfire_grace`` (seconds; default ``beat_cron_starting_deadline`` or 1 h), ``coalesce``
(default True), ``max_catch_up``, ``catch_up_after_repair`` (default False: like stock beat, a
new entry sends nothing at once). Entries added or changed with ``add()``,
``update_from_dict()`` or ``merge_inplace()`` after set-up are sent from the next tick.
"""

from __future__ import annotations

import contextlib
import logging
import os
import socket
import time
import uuid
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn

try:
    from celery import schedules as celery_schedules
    from celery.beat import (  # type: ignore[attr-defined]  # celery-types leaves out these two
        ScheduleEntry,
        Scheduler,
        _evaluate_entry_args,
        _evaluate_entry_kwargs,
    )
except ImportError as exc:  # celery is an extra, not a dependency of the worker, client or admin
    raise ImportError(
        f'The Celery beat scheduler needs Celery ({exc}): pip install "runnerq-django[celery]"', name=exc.name
    ) from exc

from runnerq_django.logs import log_event
from runnerq_django.scheduler import records
from runnerq_django.scheduler.declarations import DEFAULT_GRACE, fingerprint
from runnerq_django.scheduler.enqueue import Core, EmitOutcome, idempotency_key
from runnerq_django.scheduler.repair import JobSpec
from runnerq_django.scheduler.schedules import (
    EPOCH,
    CronSchedule,
    IntervalSchedule,
    Schedule,
    format_instant,
    parse_instant,
)
from runnerq_django.scheduler.tick import SchedulerCore, is_database_error

if TYPE_CHECKING:
    from celery import Celery

logger = logging.getLogger("runnerq_django.scheduler")

TASK_ID_NAMESPACE = uuid.uuid5(uuid.NAMESPACE_URL, "runnerq-django/periodic/celery-beat")
OPTION_KEY = "runnerq"
# A guard without a confirmed send is reported once it is this old and no live send holds it
# (the lock is taken right after the guard commits, so a few seconds is plenty) ...
UNSENT_AFTER_SECONDS = 3
# ... by a scan of the owner at most this often.
UNSENT_SCAN_SECONDS = 2
# Test hook: a beat process with this variable set exits (os._exit) right after committing its
# first guard, before sending -- the crash the unsent scan exists for.
EXIT_AFTER_GUARD_ENV = "RUNNERQ_TEST_EXIT_AFTER_BEAT_GUARD"


def task_id_for(key: str) -> str:
    """The Celery task id of an occurrence: the same in every process."""
    return str(uuid.uuid5(TASK_ID_NAMESPACE, key))


class anchored(celery_schedules.schedule):
    """An interval on a fixed lattice ``anchor + k * every`` (Celery's own ``schedule`` counts
    from the last run, so it drifts and differs between processes)."""

    def __init__(self, run_every: float | timedelta, anchor: datetime | str = EPOCH, **kwargs: Any) -> None:
        if isinstance(run_every, (int, float)):
            run_every = timedelta(seconds=run_every)
        super().__init__(run_every=run_every, **kwargs)
        self.lattice = IntervalSchedule(run_every, parse_instant(anchor, "anchor"))

    def is_due(self, last_run_at: datetime | None) -> celery_schedules.schedstate:
        now = self.now()
        if now.tzinfo is None:
            now = self.maybe_make_aware(now)
        last = self.maybe_make_aware(last_run_at) if last_run_at is not None else now
        upcoming = self.lattice.next_after(last)
        if upcoming <= now:
            return celery_schedules.schedstate(True, (self.lattice.next_after(now) - now).total_seconds())
        return celery_schedules.schedstate(False, (upcoming - now).total_seconds())

    def __reduce__(self) -> tuple[type[anchored], tuple[Any, ...]]:
        nowfun = self.nowfun  # type: ignore[attr-defined]  # celery-types misnames it nowfunc
        return self.__class__, (self.lattice.every, self.lattice.anchor, self.relative, nowfun)

    def __repr__(self) -> str:
        return f"<anchored: every {self.lattice.every} from {self.lattice.anchor.isoformat()}>"


# The fields of a crontab as written, in cron's order (celery keeps them as ``_orig_<field>``).
CRON_FIELDS = ("minute", "hour", "day_of_month", "month_of_year", "day_of_week")


def schedule_of(entry: ScheduleEntry, app: Celery) -> Schedule:
    """Our evaluator for a Celery schedule (the nominal occurrences of the entry). A schedule
    class that decides for itself when it is due (its own ``is_due`` or ``remaining_estimate``)
    is refused: its occurrences can't be known ahead, so the guard could not key them."""
    schedule = entry.schedule
    if isinstance(schedule, anchored):
        return schedule.lattice
    _refuse_custom(entry)
    if isinstance(schedule, celery_schedules.crontab):
        expression = " ".join(str(getattr(schedule, f"_orig_{name}")) for name in CRON_FIELDS)
        tz = getattr(schedule.tz, "key", None) or str(app.conf.timezone or "UTC")
        return CronSchedule(expression, tz)
    if isinstance(schedule, celery_schedules.solar):
        raise ValueError(f"beat entry {entry.name!r}: solar schedules are not supported by RunnerQScheduler")
    if isinstance(schedule, celery_schedules.schedule):
        every = schedule.run_every  # type: ignore[attr-defined]  # celery-types leaves it out
        return IntervalSchedule(every, EPOCH)
    raise ValueError(f"beat entry {entry.name!r}: unsupported schedule {schedule!r}")


def _refuse_custom(entry: ScheduleEntry) -> None:
    """``ValueError`` naming the entry for a subclass of ``crontab`` or ``schedule`` that
    overrides when it is due: treating it as the plain schedule would silently ignore that."""
    kind = type(entry.schedule)
    for base in (celery_schedules.crontab, celery_schedules.schedule):
        if not issubclass(kind, base):
            continue
        overridden = [m for m in ("is_due", "remaining_estimate") if getattr(kind, m) is not getattr(base, m)]
        if overridden:
            raise ValueError(
                f"beat entry {entry.name!r}: its schedule {kind.__module__}.{kind.__qualname__} "
                f"overrides {' and '.join(f'{m}()' for m in overridden)}, which RunnerQScheduler can't "
                f"honour (it computes every occurrence ahead, to guard each one in Postgres): use a "
                f"crontab, an interval (timedelta, seconds, schedule) or anchored(), or run this entry "
                f"on another scheduler"
            )
        return


class RunnerQScheduler(Scheduler):
    """A ``celery.beat.Scheduler`` whose progress is one cache record per entry, whose sends are
    guarded per occurrence in Postgres, and that only sends while it owns the lease."""

    Entry = ScheduleEntry
    # Seconds, set by beat (and capped by us) before the first tick; celery-types says int | None.
    max_interval: float  # type: ignore[assignment]

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        self._core: SchedulerCore | None = None
        self._ticking = False
        self._last_unsent_scan: float | None = None
        self._reported: dict[str, datetime] = {}  # key -> occurrence, reported unsent or uncertain
        self._unconfirmed: dict[str, str] = {}  # key -> task id: sent, but the mark failed (retried)
        super().__init__(*args, **kwargs)

    # --- setup ------------------------------------------------------------------------------------
    def setup_schedule(self) -> None:
        self.install_default_entries(self.schedule)  # Scheduler.schedule is its data
        self.merge_inplace(self.app.conf.beat_schedule)
        self._core = self._build_core()

    # Entries changed after set-up (django-celery-beat and other tools call these): the core's
    # jobs follow, from the next tick. A bad entry raises naming it and changes nothing.
    def add(self, **kwargs: Any) -> ScheduleEntry:
        entry: ScheduleEntry = self._changing(lambda: super(RunnerQScheduler, self).add(**kwargs))
        return entry

    def update_from_dict(self, dict_: dict[str, Any]) -> None:
        self._changing(lambda: super(RunnerQScheduler, self).update_from_dict(dict_))

    def merge_inplace(self, b: dict[str, Any]) -> None:
        self._changing(lambda: super(RunnerQScheduler, self).merge_inplace(b))

    def _changing(self, change: Callable[[], Any]) -> Any:
        core = self._core
        if core is None:  # during set-up: _build_core reads the entries once they are all in
            return change()
        before = dict(self.schedule)
        fields = {name: dict(vars(entry)) for name, entry in before.items()}  # merge_inplace edits them
        try:
            outcome = change()
            specs = self._specs(core.namespace)
        except Exception:
            self.schedule.clear()
            self.schedule.update(before)
            for name, entry in before.items():
                vars(entry).clear()
                vars(entry).update(fields[name])
            raise
        core.specs = specs
        return outcome

    def _specs(self, namespace: str) -> list[JobSpec]:
        specs = [self._spec(entry, namespace) for entry in self.schedule.values()]
        ids = [spec.job_id for spec in specs]
        if len(ids) != len(set(ids)):
            raise ValueError(f"duplicate beat entries: {sorted({i for i in ids if ids.count(i) > 1})}")
        return specs

    def _build_core(self) -> SchedulerCore:
        from runnerq_django import conf
        from runnerq_django.scheduler.cacheio import alias_cache

        options = conf.get("SCHEDULER")
        namespace = options["NAMESPACE"]
        specs = self._specs(namespace)
        lease_seconds = options["LEASE_SECONDS"]
        # Renew the lease and refresh records in time whatever beat_max_loop_interval says.
        self.max_interval = min(self.max_interval, lease_seconds / 3)
        return SchedulerCore(
            specs,
            CeleryEmitter(self),
            namespace=namespace,
            lease_name=f"{namespace}:beat",
            cache=alias_cache(),
            using=conf.database_alias(),
            release=options["RELEASE"],
            fencing=options["FENCING"],
            lease_seconds=lease_seconds,
            max_interval=self.max_interval,
            touch_seconds=options["TOUCH_SECONDS"],
            outage_backoff_max=options["OUTAGE_BACKOFF_MAX_SECONDS"],
            clock_jump_seconds=options["CLOCK_JUMP_SECONDS"],
            retention_seconds=options["OCCURRENCE_RETENTION_SECONDS"],
        )

    def _spec(self, entry: ScheduleEntry, namespace: str) -> JobSpec:
        if entry.name is None:
            raise ValueError(f"beat entry {entry!r} has no name")
        ours = dict((entry.options or {}).get(OPTION_KEY) or {})
        deadline = self.app.conf.get("beat_cron_starting_deadline")
        grace = ours.get("misfire_grace", deadline)
        grace = (
            DEFAULT_GRACE
            if grace is None
            else (grace if isinstance(grace, timedelta) else timedelta(seconds=grace))
        )
        schedule = schedule_of(entry, self.app)
        job_id = f"beat:{entry.name}"
        options = {k: v for k, v in (entry.options or {}).items() if k != OPTION_KEY}
        definition = {
            "task": entry.task,
            "args": repr(entry.args),
            "kwargs": repr(entry.kwargs),
            "options": repr(sorted(options.items())),
            "grace": grace.total_seconds(),
            "coalesce": ours.get("coalesce", True),
        }
        return JobSpec(
            job_id=job_id,
            key=records.key_for(namespace, f"beat:{_key_safe(entry.name)}"),
            schedule=schedule,
            sfp=fingerprint(schedule.fingerprint_data()),
            dfp=fingerprint(definition),
            misfire_grace=grace,
            coalesce=bool(ours.get("coalesce", True)),
            max_catch_up=int(ours.get("max_catch_up", 10)),
            # Like stock beat, an entry met for the first time sends nothing at once: its first
            # occurrence is the first one after now (True: the latest one inside the grace).
            catch_up_after_repair=bool(ours.get("catch_up_after_repair", False)),
            ttl=records.ttl_for(schedule.longest_period()),
            source=entry.name,
        )

    @property
    def core(self) -> SchedulerCore:
        if self._core is None:
            raise RuntimeError("RunnerQScheduler is not set up: setup_schedule() has not run")
        return self._core

    # --- the loop ---------------------------------------------------------------------------------
    def tick(self, *args: Any, now: datetime | None = None, **kwargs: Any) -> float:
        self._ticking = True
        try:
            return self._tick(now)
        finally:
            self._ticking = False

    def _tick(self, now: datetime | None) -> float:
        core = self.core
        report = core.tick(now)
        if report.owner and report.db_error is None:
            mono = time.monotonic()
            if self._last_unsent_scan is None or mono - self._last_unsent_scan >= UNSENT_SCAN_SECONDS:
                self._last_unsent_scan = mono
                self._warn_unsent(report.now)
        for spec in core.specs:
            view = report.views.get(spec.job_id)
            entry = self.schedule.get(_entry_name(spec))
            if view is not None and entry is not None and view.last is not None:
                entry.last_run_at = view.last  # the nominal occurrence, never the send time
        self.last_report = report
        return max(0.0, min(report.sleep, self.max_interval))

    def _warn_unsent(self, now: datetime | None) -> None:
        """Report guarded occurrences whose send was never confirmed and that no live process is
        sending (a beat died between its guard and its send, or before its mark): one WARNING per
        occurrence and process, never a re-send (at most once)."""
        from runnerq_django.storage import periodic as store

        if now is None:
            return
        core = self.core
        try:
            for key, task_id in list(self._unconfirmed.items()):  # sent, but the mark failed
                store.mark_sent(key, task_id, using=core.using)
                del self._unconfirmed[key]
            grace = max([spec.misfire_grace for spec in core.specs], default=DEFAULT_GRACE)
            since = now - grace
            rows = store.unsent_occurrences(
                core.namespace,
                [spec.job_id for spec in core.specs],
                since=since,
                older_than_seconds=UNSENT_AFTER_SECONDS,
                using=core.using,
            )
        except Exception as exc:
            if not is_database_error(exc):
                raise
            return
        self._reported = {k: v for k, v in self._reported.items() if v >= since}
        for row in rows:
            if row.key in self._reported:
                continue
            self._reported[row.key] = row.occurrence
            log_event(
                logger,
                logging.WARNING,
                "periodic.beat_unsent",
                "The beat send of job %(job_id)r for %(occurrence)s is unconfirmed: the beat that"
                " guarded it stopped before its send was confirmed (not sent, or sent just before it"
                " died). Not re-sent (at most once).",
                job_id=row.job_id,
                occurrence=row.occurrence,
                key=row.key,
                task_id=task_id_for(row.key),
                guarded_by=row.node,
                guarded_at=row.guarded_at,
                node=core.node,
                detail=(
                    "unconfirmed: the beat that guarded it stopped before its send was confirmed -- not "
                    "sent, or sent just before it died; not re-sent (at most once)"
                ),
            )

    def prepare_send(self, name: str, task_id: str, occurrence: datetime) -> Callable[[], object]:
        """Everything a send needs that can fail without touching the broker (the entry's args,
        options, headers); returns the call that publishes."""
        entry = self.schedule[name]
        options = {k: v for k, v in (entry.options or {}).items() if k != OPTION_KEY}
        headers = dict(options.pop("headers", None) or {})
        headers.update({"celery_beat_task": True, "periodic_occurrence": format_instant(occurrence)})
        # No kombu publish retry: a publish retried after a lost reply is a second message. The
        # scheduler decides about retrying (CeleryEmitter: only when nothing can have been sent).
        options.update(task_id=task_id, headers=headers, retry=False)
        args = _evaluate_entry_args(entry.args)
        kwargs = _evaluate_entry_kwargs(entry.kwargs)
        task_name = entry.task
        if task_name is None:
            raise ValueError(f"beat entry {name!r} names no task")
        task = self.app.tasks.get(task_name)

        def publish() -> object:
            if task is not None:
                return task.apply_async(args, kwargs, producer=self.producer, **options)
            return self.send_task(task_name, args, kwargs, producer=self.producer, **options)

        return publish

    def send_occurrence(self, name: str, task_id: str, occurrence: datetime) -> object:
        return self.prepare_send(name, task_id, occurrence)()

    def apply_async(
        self, entry: ScheduleEntry, producer: Any = None, advance: bool = True, **kwargs: Any
    ) -> NoReturn:
        # Stock beat would advance-then-send without the guard; every send goes through tick().
        raise NotImplementedError(
            f"RunnerQScheduler sends only from tick(), behind the occurrence guard; to send "
            f"{entry.name!r} now, outside its schedule, call app.send_task(entry.task, entry.args, "
            f"entry.kwargs, **entry.options) yourself (unguarded)"
        )

    def close(self) -> None:
        if self._ticking:
            # Celery beat's SIGTERM/SIGINT handler calls close() and then raises SystemExit. If
            # the signal interrupted a tick in the middle of a database call, this connection is
            # busy (its lock held by the interrupted call): talking to the database here would
            # wait for ever. Beat's shutdown closes again once the SystemExit has unwound the
            # tick; without that, the lease simply expires.
            return
        if self._core is not None:
            self._core.close()
        super().close()

    @property
    def info(self) -> str:
        core = self._core
        if core is None:
            return "RunnerQScheduler (not set up)"
        return (
            f"RunnerQScheduler namespace={core.namespace} lease={core.lease.namespace} node={core.node} "
            f"release={core.release} entries={len(core.specs)}"
        )


class CeleryEmitter:
    """Guard (commit), send, mark sent -- per occurrence."""

    failure_event = "periodic.beat_send_failed"
    recovery_event = "periodic.beat_send_recovered"

    def __init__(self, scheduler: RunnerQScheduler):
        self.scheduler = scheduler

    def emit(self, core: Core, spec: JobSpec, occurrences: list[datetime]) -> EmitOutcome:
        from runnerq_django.storage import periodic as store

        outcome = EmitOutcome()
        for index, occurrence in enumerate(occurrences):
            key = idempotency_key(core.namespace, spec.job_id, occurrence)
            task_id = task_id_for(key)
            try:
                publish = self.scheduler.prepare_send(_entry_name(spec), task_id, occurrence)
            except Exception as exc:  # before any guard or broker: plainly retried with back-off
                outcome.error = f"{type(exc).__name__}: {exc}"
                outcome.failed_at = occurrence
                return outcome
            claimed = store.guard_occurrence(
                core.namespace,
                spec.job_id,
                key,
                occurrence,
                node=core.node,
                fence=core.lease.fence if core.fencing else None,
                using=core.using,
            )
            if not claimed:
                outcome.existing.append(occurrence)
                continue
            if os.environ.get(EXIT_AFTER_GUARD_ENV):
                os._exit(70)  # test hook: die between the guard's commit and the send
            send = _Send(publish)
            try:
                sent = store.send_guarded(key, task_id, send, using=core.using)
            except _SendFailed as failed:
                error = failed.error
                outcome.error = f"{type(error).__name__}: {error}"
                if certainly_not_sent(error):
                    # Nothing left this process: give the occurrence back; the core backs off.
                    store.release_guard(key, using=core.using)
                    outcome.failed_at = occurrence
                    return outcome
                # The broker may have it: keep the guard, never send it again, say so.
                self.scheduler._reported[key] = occurrence
                outcome.existing.append(occurrence)
                outcome.failed_at = occurrences[index + 1] if index + 1 < len(occurrences) else None
                log_event(
                    logger,
                    logging.ERROR,
                    "periodic.beat_send_uncertain",
                    "The send of job %(job_id)r for %(occurrence)s failed (%(error)s): the broker may"
                    " or may not have it. Not re-sent (at most once).",
                    job_id=spec.job_id,
                    occurrence=occurrence,
                    key=key,
                    task_id=task_id,
                    error=outcome.error,
                    node=core.node,
                    detail="the broker may or may not have taken it; not re-sent (at most once)",
                )
                return outcome
            except Exception:
                if send.sent:  # the broker took it; only the mark failed: confirm it later
                    self.scheduler._unconfirmed[key] = task_id
                elif not send.sending:  # the lock failed: nothing was sent
                    # A database that is down keeps the guard: the unsent scan will report it.
                    with contextlib.suppress(Exception):
                        store.release_guard(key, using=core.using)
                raise
            (outcome.inserted if sent else outcome.existing).append(occurrence)
        return outcome


def _entry_name(spec: JobSpec) -> str:
    """The beat entry a spec was made from (its ``source``)."""
    if not isinstance(spec.source, str):
        raise TypeError(f"job {spec.job_id!r} is not a beat entry (source {spec.source!r})")
    return spec.source


class _Send:
    """The publish of one occurrence, called inside the guard's transaction, and how far it got:
    ``sending`` once it talks to the broker, ``sent`` once the broker took the message."""

    def __init__(self, publish: Callable[[], object]) -> None:
        self.publish = publish
        self.sending = self.sent = False

    def __call__(self) -> None:
        self.sending = True
        try:
            self.publish()
        except Exception as exc:
            raise _SendFailed(exc) from exc
        self.sent = True


class _SendFailed(Exception):
    """The broker send raised (``error``, also the ``__cause__``), as opposed to the database."""

    def __init__(self, error: Exception) -> None:
        super().__init__(error)
        self.error = error


def certainly_not_sent(error: BaseException) -> bool:
    """Whether a send error proves the message never left this process: the connection was
    refused or the broker's host name did not resolve (nothing was written to any socket), or the
    message could not be encoded. Anything else -- a timeout, a reset connection -- may have
    happened after the broker took the message."""
    never_left: tuple[type[BaseException], ...] = (ConnectionRefusedError, socket.gaierror, *_encode_errors())
    seen: set[int] = set()
    cause: BaseException | None = error
    while cause is not None and id(cause) not in seen:
        seen.add(id(cause))
        if isinstance(cause, never_left):
            return True
        cause = cause.__cause__ or cause.__context__
    return False


def _encode_errors() -> tuple[type[BaseException], ...]:
    try:
        from kombu.exceptions import EncodeError
    except ImportError:  # pragma: no cover - celery depends on kombu
        return ()
    return (EncodeError,)


def _key_safe(name: str) -> str:
    """Entry names are free text ("add every 10 seconds"); keys must stay memcached-safe."""
    from urllib.parse import quote

    safe = quote(name, safe="._:-")
    return safe if len(safe) <= 150 else f"{safe[:100]}~{fingerprint(name)}"


__all__ = ["RunnerQScheduler", "anchored", "parse_instant", "task_id_for"]
