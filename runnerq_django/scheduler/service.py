"""The scheduler loop: ``SchedulerService().run(stop_event)`` ticks until the event is set.

``runscheduler`` runs it on its own; ``runworker --scheduler`` runs it in a thread of the worker.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable
from datetime import datetime
from typing import TYPE_CHECKING, Any

from django.core.checks import CheckMessage
from django.core.exceptions import ImproperlyConfigured

from runnerq_django.logs import log_event
from runnerq_django.scheduler import declarations
from runnerq_django.scheduler.repair import spec_for
from runnerq_django.scheduler.tick import SchedulerCore, TickReport

if TYPE_CHECKING:
    from django.core.cache.backends.base import BaseCache

logger = logging.getLogger("runnerq_django.scheduler")


def scheduler_settings() -> dict[str, Any]:
    from runnerq_django import conf

    options: dict[str, Any] = conf.get("SCHEDULER")
    return options


def build_core(
    jobs: list[declarations.PeriodicJob] | None = None,
    *,
    namespace: str | None = None,
    cache: BaseCache | None = None,
    using: str | None = None,
    node: str | None = None,
    release: int | None = None,
    fencing: bool | None = None,
    lease_seconds: float | None = None,
    max_interval: float | None = None,
    clock: Callable[[], datetime] | None = None,
    monotonic: Callable[[], float] | None = None,
) -> SchedulerCore:
    """A :class:`SchedulerCore` for declared jobs, every option defaulting to the settings."""
    from runnerq_django import conf
    from runnerq_django.scheduler.cacheio import alias_cache

    options = scheduler_settings()
    namespace = namespace or options["NAMESPACE"]
    jobs = declarations.jobs(log_skipped=True) if jobs is None else jobs
    from runnerq_django.scheduler.runtime import RowEmitter, RuntimeCore

    # The declared jobs and the schedules kept in Postgres (runtime.py), in one core.
    return RuntimeCore(
        [spec_for(job, namespace) for job in jobs],
        RowEmitter(),
        namespace=namespace,
        cache=cache if cache is not None else alias_cache(),
        using=using or conf.database_alias(),
        node=node,
        release=options["RELEASE"] if release is None else release,
        fencing=options["FENCING"] if fencing is None else fencing,
        lease_seconds=lease_seconds or options["LEASE_SECONDS"],
        max_interval=max_interval or options["MAX_INTERVAL_SECONDS"],
        touch_seconds=options["TOUCH_SECONDS"],
        outage_backoff_max=options["OUTAGE_BACKOFF_MAX_SECONDS"],
        clock_jump_seconds=options["CLOCK_JUMP_SECONDS"],
        retention_seconds=options["OCCURRENCE_RETENTION_SECONDS"],
        clock=clock,
        monotonic=monotonic,
    )


class SchedulerMisconfigured(ImproperlyConfigured):
    """The scheduler refuses to start: the ``runnerq`` system checks report errors."""

    def __init__(self, errors: list[CheckMessage]):
        self.errors = errors
        super().__init__(
            "the periodic scheduler refuses to start:\n"
            + "\n".join(
                f"  {message.id}: {message.msg}" + (f" (hint: {message.hint})" if message.hint else "")
                for message in errors
            )
        )


def configuration_messages() -> list[CheckMessage]:
    """The messages of the ``runnerq`` system checks (settings, job declarations, the cache
    alias) that are not silenced: what ``manage.py check`` reports, plus the cache alias's
    problems even when no job is declared (a scheduler that starts needs its cache)."""
    from django.core import checks

    from runnerq_django.scheduler.cache_check import cache_problems

    messages = checks.run_checks(tags=["runnerq"])
    reported = {(message.id, message.msg) for message in messages}
    messages += [message for message in cache_problems() if (message.id, message.msg) not in reported]
    return [message for message in messages if not message.is_silenced()]


def check_configuration() -> None:
    """Raise :class:`SchedulerMisconfigured` (and log each error) when the checks report errors;
    log their warnings. ``SchedulerService.run`` calls it, so ``runscheduler`` and
    ``runworker --scheduler`` refuse the same configurations the same way."""
    messages = configuration_messages()
    errors = [message for message in messages if message.is_serious()]
    for message in messages:
        log_event(
            logger,
            logging.ERROR if message.is_serious() else logging.WARNING,
            "periodic.check_failed" if message.is_serious() else "periodic.check_warning",
            "%(check)s: %(problem)s"
            + (" The scheduler does not start." if message.is_serious() else "")
            + (" Hint: %(hint)s" if message.hint else ""),
            check=message.id,
            problem=message.msg,
            hint=message.hint or "-",
            **({"action": "the scheduler does not start"} if message.is_serious() else {}),
        )
    if errors:
        raise SchedulerMisconfigured(errors)


class SchedulerService:
    """Runs ticks until ``stop_event`` is set; releases the lease on the way out. Refuses to start
    (:class:`SchedulerMisconfigured`) when the ``runnerq`` system checks report errors."""

    def __init__(
        self,
        core: SchedulerCore | None = None,
        *,
        takeover: bool = False,
        on_tick: Callable[[TickReport], None] | None = None,
        checked: bool = False,
        **core_options: Any,
    ) -> None:
        self._core = core
        self._checked = checked  # the caller already ran check_configuration()
        self._core_options = core_options
        self.takeover = takeover
        self.on_tick = on_tick
        self.ticks = 0

    @property
    def core(self) -> SchedulerCore:
        if self._core is None:
            self._core = build_core(**self._core_options)
        return self._core

    def run(self, stop_event: threading.Event) -> None:
        from django.db import connections

        if not self._checked:
            check_configuration()
        core = self.core
        from runnerq_django.scheduler.cachetable import ensure_cache_table

        try:
            ensure_cache_table(core.using)
        except Exception as exc:  # the database may be down at start; ticks retry
            log_event(
                logger,
                logging.DEBUG,
                "periodic.cache_table_check_failed",
                "Could not check the scheduler's cache table (ticks retry): %(error)s",
                error=str(exc),
            )
        core.log(
            logging.INFO,
            "periodic.scheduler_started",
            "The periodic-job scheduler started with %(jobs)s jobs (node %(node)s, release %(release)s).",
            release=core.release,
            fencing=core.fencing,
            jobs=len(core.specs),
        )
        if self.takeover and core.fencing:
            core.lease.take_over()
        try:
            while not stop_event.is_set():
                try:
                    report = core.tick()
                    sleep = report.sleep
                    if self.on_tick is not None:
                        self.on_tick(report)
                except Exception:
                    log_event(
                        logger,
                        logging.ERROR,
                        "periodic.tick_failed",
                        "A scheduler tick failed; trying again in %(retry_in_s)s s.",
                        exc_info=True,
                        node=core.node,
                        retry_in_s=core.max_interval,
                    )
                    sleep = core.max_interval
                self.ticks += 1
                # Wake a hair after the due instant (the DB clock's "now" must have passed it).
                delay = sleep + 0.002 if sleep > 0 else 0.0
                waiter = getattr(core, "wait", None)  # RuntimeCore: woken by a schedule's change
                if waiter is not None:
                    waiter(stop_event, delay)
                else:
                    stop_event.wait(delay)
        finally:
            core.close()
            core.log(
                logging.INFO,
                "periodic.scheduler_stopped",
                "The periodic-job scheduler stopped after %(ticks)s ticks.",
                ticks=self.ticks,
            )
            connections[core.using].close()


__all__ = [
    "SchedulerMisconfigured",
    "SchedulerService",
    "build_core",
    "check_configuration",
    "configuration_messages",
    "spec_for",
]
