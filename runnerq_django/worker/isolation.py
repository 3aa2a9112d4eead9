"""Process isolation: a sync handler run in a child process that its hard limit kills.

``@activity(isolation="process")`` runs each attempt in a fresh child forked from a
``multiprocessing`` forkserver, where Django is set up and the process-mode handlers' modules are
imported once (a child starts in milliseconds, not the second a new interpreter takes). The
executor thread that claimed the attempt waits for the child's outcome and enforces the limits:

- the soft limit (the type's ``soft_timeout``): ``SIGUSR1`` to the child, whose handler raises
  :class:`~runnerq_django.exceptions.SoftTimeLimitExceeded` in the handler's (main) thread. A
  signal also ends ``time.sleep`` and waits on sockets (PEP 475 retries them only when the signal
  handler returns), so this reaches further than the thread mode's soft limit;
- the hard limit (the activity's timeout), a lost claim, or a release at shutdown: ``SIGKILL``.
  Nothing in the child can delay that; the thread is free at once and the attempt ends as a
  thread's timeout does (``ActivityTimedOut``, retryable, the same events).

The limits a worker process recycles at (``worker/recycle.py``) hold for the children too: a child
runs one attempt and is gone, so ``--max-activities-per-process`` holds for any limit, and each
child's peak resident memory is measured on its own (never the worker's): one that passed
``--max-memory-per-process`` is logged (``worker.child_over_memory``) when its attempt ends, and
no later attempt runs in it.

The child has its own database connection and :class:`~runnerq_django.worker.context.Context`: steps,
checkpoints and ``spawn`` write with the attempt's claim (fenced, like the worker's writes), and a
durable wait that parks is sent back to the worker, which parks the activity. Its value comes back
through a pipe (pickled) and is recorded by the worker as a thread's is.

Internal: not part of the public API.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import multiprocessing
import os
import signal
import sys
import threading
import time
from dataclasses import dataclass
from datetime import timedelta
from multiprocessing.connection import Connection
from multiprocessing.context import ForkServerContext
from multiprocessing.process import BaseProcess
from types import FrameType
from typing import TYPE_CHECKING, Any

from runnerq_django.exceptions import (
    ActivityTimedOut,
    AttemptLost,
    NonRetryableError,
    Park,
    SoftTimeLimitExceeded,
)
from runnerq_django.logs import log_event
from runnerq_django.spec import failures
from runnerq_django.worker.recycle import peak_resident_mb

if TYPE_CHECKING:
    from runnerq_django.activities.nouns import ParkRequest
    from runnerq_django.activities.registry import ActivityRegistry, AnyActivity
    from runnerq_django.storage.types import ClaimedActivity
    from runnerq_django.worker.attempts import Attempt
    from runnerq_django.worker.context import Context

logger = logging.getLogger("runnerq_django.worker")

SETUP_MODULE = "runnerq_django.worker.isolation_setup"
POLL_SECONDS = 0.1  # how often the waiting thread looks at the claim (lost, released) and the clock
SOFT_SIGNAL = signal.SIGUSR1
READY = ("ready",)  # the child's first message
STARTUP_TIMEOUT = 60.0  # for the forkserver to set Django up, at worker start

_lock = threading.Lock()
_forkserver: ForkServerContext | None = None
# The process's --max-memory-per-process, which each child reports its peak against (prepare()).
_memory_limit_mb: int | None = None


class ChildError(Exception):
    """The outcome of an attempt whose handler raised in its child process (or whose child died):
    the child's exception as the runner records it, since the exception object itself stays there."""

    def __init__(self, reason: str, *, retryable: bool, soft: bool = False, failure: Any = None):
        super().__init__(reason)
        self.reason = reason
        self.retryable = retryable
        self.soft = soft  # SoftTimeLimitExceeded: recorded as a timeout
        self.failure = failure


class Stopper:
    """How ``Attempts.interrupt`` stops a process-mode handler (timeout, lost claim, release):
    it kills the child (the runner installs it as the attempt's ``cancel_async`` before the
    handler starts). Never an exception raised in the waiting thread, which could land in the
    cleanup of :func:`run_in_child` and leave the child running."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._process: BaseProcess | None = None
        self.stopped = False

    def __call__(self) -> None:
        with self._lock:
            self.stopped = True
            if self._process is not None:
                # os.kill, not Process.kill: that polls the exit status, which only the thread
                # that waits for the child may read (two readers can garble it).
                _signal(self._process.pid, signal.SIGKILL)

    def attach(self, process: BaseProcess) -> bool:
        """False if the attempt was stopped before its child started."""
        with self._lock:
            self._process = process
            return not self.stopped


@dataclass(frozen=True)
class Job:
    """What a child needs to run one attempt (pickled to it)."""

    module: str  # imported in the child: it registers the handler
    name: str  # the activity type, resolved in the child's registry
    activity: ClaimedActivity
    using: str | None
    inline_wait: float
    deadline: float  # time.monotonic(), the same clock in every process of the machine
    # Each alias's database name in the worker: the child's settings come from the settings
    # module, and a name changed at run time (a test database) must be the child's too.
    database_names: dict[str, str]
    clock_offset: timedelta  # the worker's Context's (the testing toolkit's fast-forward)
    max_memory_mb: int | None = None  # the child reports its peak memory when there is a limit


def forkserver(registry: ActivityRegistry) -> ForkServerContext:
    """The forkserver context, its preload set on first use: Django's setup and the modules of
    every process-mode handler registered by then (a later one is imported by each child)."""
    global _forkserver
    with _lock:
        if _forkserver is None:
            context = multiprocessing.get_context("forkserver")
            modules = sorted(
                {
                    definition.func.__module__
                    for definition in map(registry.get, registry.names())
                    if definition is not None and definition.options.isolation == "process"
                }
            )
            context.set_forkserver_preload([SETUP_MODULE, __name__, *modules])
            _forkserver = context
        return _forkserver


def prepare(registry: ActivityRegistry, types: list[str], *, max_memory_mb: int | None = None) -> None:
    """Start the forkserver at worker start when a type it claims runs in process mode, so the
    first attempt does not spend its time limits on Django's setup there. ``max_memory_mb``: the
    memory limit each child is held to (the worker process's own)."""
    global _memory_limit_mb
    _memory_limit_mb = max_memory_mb
    handlers = [registry.resolve(name) for name in types]
    if any(h is not None and h.options.isolation == "process" for h in handlers):
        # A first child waits for the forkserver's preload (Django's setup, the imports), which
        # would otherwise run while the first attempt's soft limit and timeout do.
        child = forkserver(registry).Process(target=_started, name="runnerq-child-warmup", daemon=True)
        child.start()
        child.join(STARTUP_TIMEOUT)
        if child.exitcode != 0:
            log_event(
                logger,
                logging.WARNING,
                "worker.forkserver_warmup_failed",
                "The warm-up child of the process-mode handlers' forkserver exited with %(exitcode)s.",
                exitcode=child.exitcode,
            )


def run_in_child(registry: ActivityRegistry, handler: AnyActivity, ctx: Context, attempt: Attempt) -> Any:
    """Run ``handler`` for ``attempt`` in a child process; its value, or raise what the runner
    records: :class:`ChildError`, ``Park`` (``ctx.park_request`` set), ``ActivityTimedOut`` or
    ``AttemptLost``. The child is dead when this returns or raises, whatever happens."""
    context = forkserver(registry)
    job = Job(
        module=handler.func.__module__,
        name=handler.name,
        activity=attempt.activity,
        using=ctx.using,
        inline_wait=ctx.inline_wait,
        deadline=attempt.deadline,
        database_names=_database_names(),
        clock_offset=ctx.clock_offset,
        max_memory_mb=_memory_limit_mb,
    )
    stopper = attempt.cancel_async if isinstance(attempt.cancel_async, Stopper) else Stopper()
    receiver, sender = context.Pipe(duplex=False)
    child = context.Process(
        target=child_main, args=(job, sender), name=f"runnerq-child-{attempt.activity.id}", daemon=True
    )
    soft = handler.options.soft_timeout_seconds
    soft_at = attempt.claimed_at + soft if soft is not None else float("inf")
    ready = warned = False  # ready: the child's soft-limit handler is installed (before: the
    # signal's default action would kill it)
    try:
        child.start()
        sender.close()  # the child's end: EOF here once the child is gone
        if not stopper.attach(child):
            child.kill()  # stopped while it started: the loop below raises the reason
        while True:
            if attempt.lost is not None:
                raise ActivityTimedOut(attempt.lost) if attempt.timed_out else AttemptLost(attempt.lost)
            now = time.monotonic()
            if now >= attempt.deadline:
                raise ActivityTimedOut(f"timed out after {attempt.activity.timeout_seconds}s")
            if ready and not warned and now >= soft_at:
                warned = True
                _signal(child.pid, SOFT_SIGNAL)
            until = min(attempt.deadline, soft_at if ready and not warned else float("inf"))
            if receiver.poll(max(0.0, min(POLL_SECONDS, until - now))):
                try:
                    message = receiver.recv()
                except EOFError:
                    child.join(1.0)
                    raise _died(child.exitcode) from None
                if message == READY:
                    ready = True
                    continue
                if message[0] == "memory":
                    _check_memory(message[1], job, child.pid)
                    continue
                return _outcome(message, ctx)
    finally:
        if child.is_alive():
            child.kill()
        if child.pid is not None:
            child.join(5.0)
        receiver.close()


def _database_names() -> dict[str, str]:
    from django.db import connections

    return {alias: str(connections[alias].settings_dict["NAME"]) for alias in connections}


def _signal(pid: int | None, signum: int) -> None:
    if pid is None:
        return
    with contextlib.suppress(ProcessLookupError):  # it just ended: its outcome is in the pipe
        os.kill(pid, signum)


def _check_memory(peak_mb: float, job: Job, pid: int | None) -> None:
    """The child's peak memory, reported before its outcome: past the limit, say so (the child
    ends with its attempt, as every child does; the worker process is not recycled for it)."""
    if job.max_memory_mb is not None and peak_mb > job.max_memory_mb:
        log_event(
            logger,
            logging.WARNING,
            "worker.child_over_memory",
            "The process-mode child (pid %(pid)s) of activity %(activity_id)s (%(activity_type)s) reached"
            " %(peak_mb)s MiB, over the limit of %(max_memory_mb)s MiB; it ends with this attempt, as"
            " every child does.",
            pid=pid,
            activity_id=str(job.activity.id),
            activity_type=job.name,
            peak_mb=round(peak_mb, 1),
            max_memory_mb=job.max_memory_mb,
        )


def _died(exitcode: int | None) -> ChildError:
    how = (
        f"killed by signal {-exitcode}" if exitcode is not None and exitcode < 0 else f"exit code {exitcode}"
    )
    return ChildError(
        f"ChildProcessDied: the handler's process ended without an outcome ({how})", retryable=True
    )


def _outcome(message: tuple[Any, ...], ctx: Context) -> Any:
    kind = message[0]
    if kind == "ok":
        return message[1]
    if kind == "park":
        request: ParkRequest = message[1]
        ctx.park_request = request
        raise Park(f"activity {ctx.id} parks: {request.kind} {request.step}")
    _, reason, failure, retryable, soft = message
    raise ChildError(reason, retryable=retryable, soft=soft, failure=failure)


# In the child -------------------------------------------------------------------------------------


def _started() -> None:
    """The warm-up child of :func:`prepare`: it exists once the forkserver is ready."""


def _soft_limit(signum: int, frame: FrameType | None) -> None:
    raise SoftTimeLimitExceeded()


def child_main(job: Job, sender: Connection) -> None:
    """The child's whole life: run the attempt, send its outcome, close its connections."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)  # Ctrl-C reaches the process group: the worker decides
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(SOFT_SIGNAL, _soft_limit)
    try:
        sender.send(READY)
        message = _run(job)
    except BaseException as exc:  # a soft limit landing after the handler, an import error ...
        message = _error(exc)
    signal.signal(SOFT_SIGNAL, signal.SIG_IGN)
    if job.max_memory_mb is not None:
        sender.send(("memory", peak_resident_mb()))
    try:
        sender.send(message)
    except Exception as exc:  # a value pickle refuses: the handler's, so fail the attempt for it
        sender.send(_error(exc, retryable=False))
    finally:
        sender.close()
        from django.db import connections

        connections.close_all()
    # Skip the interpreter's teardown (atexit, finalizers, freeing every module): nothing of it
    # matters to a child whose outcome is sent, and it was most of a no-op attempt's cost.
    for stream in (sys.stdout, sys.stderr):
        stream.flush()
    os._exit(0)


def _run(job: Job) -> tuple[Any, ...]:
    from django.conf import settings
    from django.db import connections

    from runnerq_django.activities.registry import registry
    from runnerq_django.worker.context import Context, _current

    for alias, name in job.database_names.items():  # before any connection is opened
        if alias in settings.DATABASES:  # not one the parent added at run time (a test's)
            settings.DATABASES[alias]["NAME"] = connections[alias].settings_dict["NAME"] = name
    importlib.import_module(job.module)
    handler = registry.resolve(job.name)
    if handler is None:
        return ("error", f"no handler for activity type {job.name!r} in {job.module}", None, False, False)
    ctx = Context(job.activity, using=job.using, inline_wait=job.inline_wait, deadline=job.deadline)
    ctx.clock_offset = job.clock_offset
    token = _current.set(ctx)
    try:
        value = handler.invoke(ctx, job.activity.payload)
    except BaseException as exc:
        if ctx.park_request is not None:  # asked to park, even if the handler swallowed the Park
            return ("park", ctx.park_request)
        return _error(exc)
    finally:
        _current.reset(token)
        ctx.close_reports()  # its progress and events, written before the outcome is sent
    if ctx.park_request is not None:
        return ("park", ctx.park_request)
    return ("ok", value)


def _error(exc: BaseException, *, retryable: bool | None = None) -> tuple[Any, ...]:
    from runnerq_django.storage import errors

    if retryable is None:
        # As the runner decides for a thread: see Runner._record.
        retryable = not isinstance(exc, (NonRetryableError, errors.SerializationError))
    soft = isinstance(exc, SoftTimeLimitExceeded)
    message = failures.message_of(exc)  # the reason as Runner's describe() words it
    reason = f"{type(exc).__name__}: {message}" if message else type(exc).__name__
    return ("error", reason, failures.recorded(exc), retryable, soft)
