"""One worker process: the pieces of ``worker/`` put together, started and stopped in order.

Threads (each with its own database connection): the dispatcher claims (and between claims waits
on a ``LISTEN`` connection of its own), ``concurrency`` executor threads run handlers, the ack
buffer records completions in batches, the lease keeper renews claims and times out attempts,
maintenance reaps and sweeps (one worker at a time across the fleet). The main thread waits for a
stop signal and then drains: stop claiming, let handlers finish within the grace, release the
rest, deregister.
"""

from __future__ import annotations

import functools
import logging
import os
import threading
import time

from runnerq_django import conf, metrics, routing, signals
from runnerq_django.activities.registry import ActivityRegistry
from runnerq_django.activities.registry import registry as default_registry
from runnerq_django.exceptions import AttemptLost, RunnerQError
from runnerq_django.logs import log_event
from runnerq_django.observability import tracing
from runnerq_django.worker import isolation
from runnerq_django.worker.attempts import CLAIMED, RUNNING, Attempt, Attempts
from runnerq_django.worker.db import is_transient, retrying, warn_when_jit_is_on
from runnerq_django.worker.dispatcher import Dispatcher
from runnerq_django.worker.executor import executor_pool
from runnerq_django.worker.exit_status import EX_TEMPFAIL
from runnerq_django.worker.gauges import InFlight
from runnerq_django.worker.idle import UnhandledWatch
from runnerq_django.worker.leases import LeaseKeeper
from runnerq_django.worker.listener import Poller, WorkListener
from runnerq_django.worker.maintenance import Maintenance
from runnerq_django.worker.options import WorkerOptions
from runnerq_django.worker.recycle import Recycler
from runnerq_django.worker.registration import PoolRegistration
from runnerq_django.worker.runner import build_runner
from runnerq_django.worker.shutdown import ShutdownSignals

logger = logging.getLogger("runnerq_django.worker")

FLUSH_TIMEOUT = 10.0
IDLE_CHECK_SECONDS = 0.5  # how often --until-idle looks at the queues
RECYCLE_CHECK_SECONDS = 0.5  # how often a process with recycling limits looks at them


class WorkerConfigurationError(RunnerQError):
    """The worker can't start as configured (no handlers, unknown types ...)."""


def resolve_types(registry: ActivityRegistry, wanted: list[str] | None) -> list[str]:
    """The activity types a worker claims: ``wanted`` (each must have a handler here), or every
    type with a handler in this process."""
    registered = registry.handled_names()
    if wanted:
        unknown = sorted(name for name in set(wanted) if registry.resolve(name) is None)
        if unknown:
            raise WorkerConfigurationError(
                f"--activity-type names types with no handler in this process: {', '.join(unknown)} "
                f"(registered: {', '.join(registered) or 'none'})"
            )
        return list(dict.fromkeys(wanted))
    if not registered:
        raise WorkerConfigurationError(
            "no activity handlers are registered: define them with @activity in an 'activities' module "
            "of an installed app (RUNNERQ['AUTODISCOVER_MODULES']), or import them with --import"
        )
    return registered


def concurrency_limits(registry: ActivityRegistry, types: list[str]) -> dict[str, int]:
    """Type -> its ``@activity(concurrency=N)`` limit, for the types that have one."""
    limits: dict[str, int] = {}
    for name in types:
        definition = registry.resolve(name)
        if definition is not None and definition.concurrency is not None:
            limits[name] = definition.concurrency.limit
    return limits


def rate_limits(registry: ActivityRegistry, types: list[str]) -> dict[str, tuple[int, float]]:
    """Type -> (starts, period seconds) of its ``@activity(rate_limit=...)``, for those with one."""
    rates = {}
    for name in types:
        definition = registry.resolve(name)
        rate = getattr(definition, "rate_limit", None) if definition is not None else None
        if rate is not None:
            rates[name] = (rate.limit, rate.period_seconds)
    return rates


class Worker:
    def __init__(
        self,
        options: WorkerOptions | None = None,
        *,
        registry: ActivityRegistry | None = None,
        recycler: Recycler | None = None,
    ):
        self.options = options or WorkerOptions()
        # The process's recycling limits (shared by the Workers of a MultiDatabaseWorker).
        self.recycler = recycler or Recycler(self.options.max_activities, self.options.max_memory_mb)
        # Set by request_stop (a signal, a test), not by a recycle: a recycle's drain then
        # stops waiting for handlers and gives them the shutdown grace instead.
        self.told_to_stop = threading.Event()
        self.registry = registry or default_registry
        self.types = self._types()
        self.alias = _one_alias(self.options)
        # Two phases of stopping: stop taking work (claims, scheduler), then stop everything.
        self.draining = threading.Event()
        self.stopped = threading.Event()
        self.stop_reason: str | None = None
        self._named_unclaimable = False  # --until-idle warned of due work it can't claim
        self.attempts = Attempts()
        # Flow control: the fleet-wide concurrency limits of this worker's types.
        self.limits = concurrency_limits(self.registry, self.types)
        self.rates = rate_limits(self.registry, self.types)
        if self.limits:
            self.attempts.on_removed = self._slots_freed
        self.runner = build_runner(
            registry=self.registry,
            attempts=self.attempts,
            alias=self.alias,
            inline_wait=float(conf.get("INLINE_WAIT_SECONDS")),
        )
        self.acks = self.runner.acks
        self.runner.batches.capacity = self.options.concurrency  # a batch can't hold more
        self.pool = executor_pool(
            self.options.concurrency,
            self.runner,
            on_crash=self.runner.crashed,
            on_thread_exit=_close_connections,
        )
        self.in_flight = InFlight(self.attempts)
        heartbeat = self.options.heartbeat_seconds
        self.unhandled = UnhandledWatch(
            self.options.queues, self.alias, alive_seconds=3 * heartbeat, first_after=heartbeat
        )
        self.registration = PoolRegistration(
            self.options.queues,
            max_workers=self.options.concurrency,
            activity_types=self.types,
            alias=self.alias,
        )
        self.dispatcher = Dispatcher(
            queues=self.options.queues,
            types=self.types,
            limits=self.limits,
            rates=self.rates,
            pool=self.pool,
            attempts=self.attempts,
            alias=self.alias,
            worker_id=self.options.worker_id,
            lease_ms=self.options.lease_ms,
            poll_interval=self.options.poll_interval_seconds,
            wakeups=(
                WorkListener(self.options.queues, self.alias, stop=self.draining)
                if self.options.listen
                else Poller(self.draining)
            ),
            stop=self.draining,
            relaxed_commit=self.options.listen,
            budget=self.recycler if self.recycler.enabled else None,
        )
        self.leases = LeaseKeeper(
            self.attempts,
            self.alias,
            lease_ms=self.options.lease_ms,
            heartbeat=self.options.effective_heartbeat,
            on_timeout=self.runner.time_out,
            on_beat=self._beat,
            stop=self.stopped,
            relaxed_commit=self.options.listen,
        )
        retention = conf.get("RETENTION")
        self.maintenance = (
            Maintenance(
                self.options.queues,
                self.alias,
                reaper_interval=float(conf.get("REAPER_INTERVAL_SECONDS")),
                reaper_batch=int(conf.get("REAPER_BATCH")),
                retention=retention,
                pool_stale_seconds=max(60.0, 6 * float(conf.get("HEARTBEAT_SECONDS"))),
                stop=self.stopped,
            )
            if self.options.maintenance
            else None
        )
        self.scheduler_thread: threading.Thread | None = None

    def _types(self) -> list[str]:
        return resolve_types(self.registry, self.options.activity_types)

    # life cycle -------------------------------------------------------------------------------------

    def _beat(self) -> None:
        """After each lease renewal round: the pool row's heartbeat, and the in-flight gauges."""
        self.registration.beat()
        self.in_flight.report()

    def request_stop(self, reason: str = "requested") -> None:
        """Begin a graceful stop (thread-safe; also what SIGTERM/SIGINT do)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self.told_to_stop.set()
        self.draining.set()

    def request_recycle(self, reason: str) -> None:
        """Begin a recycle: drain as for a stop, but let running handlers finish (their own time
        limits bound them; a stop signal meanwhile gives them the shutdown grace from then)."""
        if self.stop_reason is None:
            self.stop_reason = reason
        self.draining.set()

    def run(self) -> int:
        return run_until_stopped(self)

    def idle(self) -> bool:
        """Nothing due or running in this worker's queues (for ``--until-idle``). A database
        error means "not known to be idle": the worker keeps going, as it would without the flag."""
        from runnerq_django.worker.idle import queues_idle, unclaimable

        try:
            if not queues_idle(self.options.queues, self.types, self.alias):
                return False
            # Due work the claim leaves for another SDK does not keep the worker up; it is named,
            # so that a row nothing will ever claim does not go unnoticed.
            left = unclaimable(self.options.queues, self.types, self.alias)
        except Exception as exc:
            if not is_transient(exc):
                raise
            _close_connections()
            return False
        if left["serializations"] and not self._named_unclaimable:
            # Once: a worker of several databases asks each until all of them are idle.
            self._named_unclaimable = True
            log_event(
                logger,
                logging.WARNING,
                "worker.idle_left_unclaimable",
                "Nothing is left that this worker can claim on database %(alias)r, but due activities"
                " wait with inputs in serializations it does not read (%(serializations)s; the first:"
                " %(activity_ids)s): a worker of another SDK claims them",
                alias=self.alias,
                **left,
            )
        return True

    def watch_unhandled(self, *, now: bool = False) -> None:
        """Log the due work of this worker's queues that no live worker handles, when it is time
        (``now``: at once). A database error: looked at again next time."""
        try:
            self.unhandled.check(now=now)
        except Exception as exc:
            if not is_transient(exc):
                raise
            _close_connections()

    def _slots_freed(self, attempts: list[Attempt]) -> None:
        """Attempts of limited types left: their slots are free, so wake the workers waiting for
        one (a NOTIFY on each queue's work channel; this process's own dispatcher hears it too)."""
        from runnerq_django.storage import limits

        for queue in {a.queue for a in attempts if a.activity.activity_type in self.limits}:
            try:
                limits.notify_work(queue, using=self.alias)
            except Exception as exc:  # a missed wake costs a poll interval, never a slot
                log_event(
                    logger,
                    logging.WARNING,
                    "runnerq.flow.wake_failed",
                    "Could not wake the workers waiting for a free slot on queue %(queue)r (they poll): %(error)s",
                    queue=queue,
                    error=str(exc),
                )

    def start(self) -> None:
        retrying(self.alias, "register pools", self.registration.register, attempts=10, first_pause=0.5)
        # The process-mode handlers' forkserver, if any; its children are held to the memory limit.
        isolation.prepare(self.registry, self.types, max_memory_mb=self.recycler.max_memory_mb)
        self.acks.start()
        self.pool.start()
        self.leases.start()
        if self.maintenance is not None:
            self.maintenance.start()
        if not self.options.listen:
            warn_when_jit_is_on(self.alias)
        # What the first attempt would import otherwise (OpenTelemetry's API when tracing is on,
        # the metrics sink's library), on the way to its handler.
        tracing.active()
        metrics.get_sink()
        self.dispatcher.start()
        if self.options.scheduler:
            self.scheduler_thread = start_scheduler(self.draining)
        log_event(
            logger,
            logging.INFO,
            "worker.started",
            "Worker %(worker_id)s (pid %(pid)s) started on queues %(queues)s with %(concurrency)s"
            " threads, handling %(activity_types)s.",
            worker_id=self.options.worker_id,
            pid=os.getpid(),
            queues=",".join(self.options.queues),
            activity_types=",".join(self.types),
            concurrency=self.options.concurrency,
            lease_s=self.options.lease_seconds,
            listen=self.options.listen,
            maintenance=self.options.maintenance,
            scheduler=self.options.scheduler,
        )
        for receiver, response in signals.worker_started.send_robust(sender=Worker, worker=self):
            if isinstance(response, Exception):
                log_event(
                    logger,
                    logging.ERROR,
                    "worker.started_receiver_failed",
                    "The worker_started receiver %(receiver)s raised: %(error)s",
                    exc_info=response,
                    receiver=repr(receiver),
                    error=str(response),
                )

    def drain(self) -> None:
        """Stop claiming, give running handlers the grace, release the rest, deregister."""
        if self.stopped.is_set():
            return
        began = time.monotonic()
        grace = self.options.shutdown_grace_seconds
        self.draining.set()
        log_event(
            logger,
            logging.INFO,
            "worker.stopping",
            "Worker stopping (%(reason)s): no new claims; %(in_flight)s running handlers get"
            " %(grace_s)s s to finish, then what is left returns to the queue.",
            reason=self.stop_reason or "requested",
            in_flight=self.pool.busy(),
            grace_s=grace,
        )
        signals.worker_stopping.send_robust(sender=Worker, worker=self, reason=self.stop_reason)
        self.dispatcher.join(5.0)
        drained = self._wait_for_handlers(grace)
        self.acks.flushed(FLUSH_TIMEOUT)
        released = 0 if drained else self.release_held()
        self.acks.close(FLUSH_TIMEOUT)
        self.pool.stop()
        self.stopped.set()
        for part in (self.leases, self.maintenance):
            if part is not None:
                part.join(5.0)
        if self.scheduler_thread is not None:
            self.scheduler_thread.join(5.0)
        try:
            retrying(self.alias, "deregister pools", self.registration.deregister, attempts=3)
        except Exception as exc:  # the rows go stale and are pruned; not worth failing the exit
            log_event(
                logger,
                logging.WARNING,
                "worker.deregister_failed",
                "Could not delete this worker's pool rows (they go stale and are pruned): %(error)s",
                error=str(exc),
            )
        signals.worker_stopped.send_robust(sender=Worker, worker=self)
        log_event(
            logger,
            logging.INFO,
            "worker.stopped",
            "Worker stopped (%(reason)s) after %(seconds)s s of draining: %(claimed)s claimed in all,"
            " %(released)s released to the queue.",
            reason=self.stop_reason or "requested",
            drained=drained,
            released=released,
            claimed=self.dispatcher.claimed_total,
            seconds=round(time.monotonic() - began, 3),
            **{name: int(value) for name, value in metrics.totals().items() if name.startswith("activity_")},
        )
        _close_connections()

    def _wait_for_handlers(self, grace: float) -> bool:
        """Until the running handlers are done: within ``grace`` for a stop; for a recycle, as
        long as they run, unless a stop comes meanwhile (then ``grace`` from that moment)."""
        if self.recycler.reason is None or self.told_to_stop.is_set():
            return self.pool.wait_idle(grace)
        while not self.pool.wait_idle(0.2):
            if self.told_to_stop.is_set():
                return self.pool.wait_idle(grace)
        return True

    def release_held(self) -> int:
        """Hand back the claims still held after the grace: their handlers are stopped (their
        writes refused), the activities become runnable at once for another worker, and no
        attempt is counted."""
        from runnerq_django import storage

        held = [
            a
            for a in self.attempts.snapshot()
            if a.state in (CLAIMED, RUNNING) and self.attempts.take_outcome(a)
        ]
        if not held:
            return 0
        for attempt in held:
            self.attempts.interrupt(attempt, "released at shutdown", AttemptLost)
        released = 0
        for queue in {a.queue for a in held}:
            claims = [a.claim for a in held if a.queue == queue]
            try:
                released += retrying(
                    self.alias,
                    "release",
                    functools.partial(storage.release, queue, claims, using=self.alias),
                    attempts=3,
                )
            except Exception as exc:
                log_event(
                    logger,
                    logging.WARNING,
                    "worker.release_failed",
                    "Could not release %(count)s activities of queue %(queue)r (they run again once"
                    " their leases run out): %(error)s",
                    queue=queue,
                    count=len(claims),
                    error=str(exc),
                )
        self.attempts.remove(held)
        metrics.inc("activity_released", released)
        log_event(
            logger,
            logging.INFO,
            "worker.released",
            "Released %(count)s unfinished activities to the queue: the next worker takes them at once.",
            count=released,
            activity_ids=",".join(str(a.activity.id) for a in held[:20]),
        )
        return released


def _one_alias(options: WorkerOptions) -> str:
    """The database a :class:`Worker` serves: ``options.database``, else its queues' one."""
    grouped = routing.by_database(options.queues, options.database)
    if len(grouped) > 1:
        raise WorkerConfigurationError(
            "a Worker serves one database, and these queues live on several ("
            + "; ".join(f"{alias}: {', '.join(queues)}" for alias, queues in grouped.items())
            + "): build it with runtime.build_worker(), which runs one per database"
        )
    return next(iter(grouped), routing.database_for("", options.database))


class MultiDatabaseWorker:
    """One worker process serving queues on several databases (``RUNNERQ['QUEUE_DATABASES']``):
    a :class:`Worker` per database, each with its own connections, executor threads
    (``concurrency`` per database), listener, lease keeper, reaper and retention, and its own pool
    rows, all under one worker id, one signal handler and one drain. The scheduler, when asked
    for, runs once in the process."""

    def __init__(self, options: WorkerOptions, *, registry: ActivityRegistry | None = None):
        import dataclasses

        self.options = options
        grouped = routing.by_database(options.queues, options.database)
        recycler = Recycler(options.max_activities, options.max_memory_mb)  # one per process
        self.workers = [
            Worker(
                dataclasses.replace(options, queues=queues, database=alias, scheduler=False),
                registry=registry,
                recycler=recycler,
            )
            for alias, queues in grouped.items()
        ]
        self.types = self.workers[0].types
        self.recycler = recycler
        self.draining = threading.Event()
        self.stop_reason: str | None = None
        self.scheduler_thread: threading.Thread | None = None

    @property
    def aliases(self) -> list[str]:
        return [worker.alias for worker in self.workers]

    def request_stop(self, reason: str = "requested") -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self.draining.set()
        for worker in self.workers:
            worker.request_stop(reason)

    def request_recycle(self, reason: str) -> None:
        if self.stop_reason is None:
            self.stop_reason = reason
        self.draining.set()
        for worker in self.workers:
            worker.request_recycle(reason)

    def start(self) -> None:
        for worker in self.workers:
            worker.start()
        if self.options.scheduler:
            self.scheduler_thread = start_scheduler(self.draining)

    def idle(self) -> bool:
        return all(worker.idle() for worker in self.workers)

    def watch_unhandled(self, *, now: bool = False) -> None:
        for worker in self.workers:
            worker.watch_unhandled(now=now)

    def run(self) -> int:
        return run_until_stopped(self)

    def drain(self) -> None:
        """Drain every database's worker at once, so the grace is the same for all of them."""
        if self.recycler.reason is None:  # a recycle was passed on to each already
            self.request_stop(self.stop_reason or "requested")
        threads = [
            threading.Thread(target=worker.drain, name=f"runnerq-drain-{worker.alias}")
            for worker in self.workers
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        if self.scheduler_thread is not None:
            self.scheduler_thread.join(5.0)
        _close_connections()


def run_until_stopped(worker: Worker | MultiDatabaseWorker) -> int:
    """Start ``worker`` under SIGTERM/SIGINT handlers, wait until it is told to stop (or, with
    ``--until-idle``, has nothing left; or passes a recycling limit), then drain it. Returns the
    exit status: 0, or ``EX_TEMPFAIL`` after a recycle."""
    shutdown = ShutdownSignals(worker.request_stop)
    shutdown.install()
    recycler = worker.recycler
    try:
        worker.start()
        until_idle = worker.options.until_idle
        wait = IDLE_CHECK_SECONDS if until_idle else RECYCLE_CHECK_SECONDS if recycler.enabled else 1.0
        while not worker.draining.wait(wait):
            if recycler.enabled and recycler.due() is None and recycler.below_idle is not None:
                log_event(
                    logger,
                    logging.ERROR,
                    "worker.memory_limit_below_idle",
                    "The memory limit of %(max_memory_mb)s MiB is below this worker's own resident memory"
                    " (%(resident_mb)s MiB) before it ran any activity: a fresh process would pass it too,"
                    " so this process keeps running without it. Raise --max-memory-per-process"
                    " (RUNNERQ['MAX_MEMORY_PER_PROCESS_MB']).",
                    **recycler.below_idle,
                )
                recycler.below_idle = None
            elif recycler.enabled and recycler.due():
                log_event(
                    logger,
                    logging.INFO,
                    "worker.recycling",
                    "Worker %(worker_id)s (pid %(pid)s) is %(why)s. It stops claiming, finishes what it"
                    " holds and exits with status %(code)s for a fresh process to take its place.",
                    worker_id=worker.options.worker_id,
                    pid=os.getpid(),
                    why=recycler.sentence(),
                    code=EX_TEMPFAIL,
                    reason=recycler.reason,
                    **recycler.fields,
                )
                worker.request_recycle(recycler.sentence())
            elif until_idle and worker.idle():
                worker.watch_unhandled(now=True)  # what it leaves behind because nobody handles it
                worker.request_stop("idle")
            else:
                worker.watch_unhandled()
        worker.drain()
        return EX_TEMPFAIL if recycler.reason is not None else 0
    finally:
        shutdown.restore()


def build_worker(
    options: WorkerOptions | None = None, *, registry: ActivityRegistry | None = None
) -> Worker | MultiDatabaseWorker:
    """The worker of one process: a :class:`Worker` when its queues live on one database, a
    :class:`MultiDatabaseWorker` (one ``Worker`` per database) when they live on several."""
    options = options or WorkerOptions()
    if len(routing.by_database(options.queues, options.database)) > 1:
        return MultiDatabaseWorker(options, registry=registry)
    return Worker(options, registry=registry)


def start_scheduler(stop: threading.Event) -> threading.Thread:
    """Run the periodic-job scheduler in a thread of this process until ``stop`` is set."""
    from runnerq_django.scheduler.service import SchedulerService

    service = SchedulerService()

    def run() -> None:
        try:
            service.run(stop)
        except Exception:
            log_event(
                logger,
                logging.ERROR,
                "worker.scheduler_crashed",
                "The periodic-job scheduler thread of this worker crashed.",
                exc_info=True,
            )
        finally:
            _close_connections()

    thread = threading.Thread(target=run, name="runnerq-scheduler", daemon=True)
    thread.start()
    return thread


def _close_connections() -> None:
    from django.db import connections

    connections.close_all()
