"""A ``django.tasks`` backend: ``@task`` functions enqueued and run as RunnerQ activities.

``TASKS = {"default": {"BACKEND": "runnerq_django.tasks_backend.RunnerQTaskBackend"}}`` and a
project's ``@task`` functions become activities in ``runnerq_activities``:

- activity type = the task's module path (``myapp.tasks.send_email``), so ``runworker`` claims it
  and other SDKs and the admin see it like any activity;
- payload = json-v1 ``{"args": [...], "kwargs": {...}}``;
- queue = the task's ``queue_name`` (through ``OPTIONS["QUEUE_MAP"]``), a valid RunnerQ name;
- priority = Django's -100..100 folded onto RunnerQ's 1..4 (:func:`runnerq_priority`); the
  exact number is kept in the activity's metadata so :meth:`get_result` rebuilds the task;
- ``run_after`` = a delayed activity (status ``scheduled``, due at ``run_after`` even when that is
  already past, so tasks run in ``run_after`` order);
- attempts, timeout and backoff from ``OPTIONS`` (the ``@activity`` defaults otherwise).

The worker finds a task's function through a resolver this module adds to the registry (no
``@activity`` is needed): the tasks a worker process has imported are claimed, and a type named
with ``runworker -t`` is imported by its module path. Enqueue joins the caller's transaction, like
:func:`runnerq_django.enqueue`: a rollback leaves no activity and a worker hears of it only after
COMMIT, so ``transaction.on_commit`` is not needed.

Django 6.0+ ships the framework as ``django.tasks``; on Django 5.2 the ``django-tasks`` backport
package (``pip install "runnerq-django[tasks]"``) provides the same API as ``django_tasks``.
"""

from __future__ import annotations

import contextlib
import dataclasses
import logging
import threading
import uuid
from collections import defaultdict
from collections.abc import Callable
from datetime import datetime
from inspect import iscoroutinefunction
from typing import TYPE_CHECKING, Any, ParamSpec, TypeVar

from asgiref.sync import sync_to_async
from django.db import transaction
from django.utils import timezone
from django.utils.module_loading import autodiscover_modules, import_string

from runnerq_django import conf, routing
from runnerq_django.activities import arguments
from runnerq_django.activities import options as vocabulary
from runnerq_django.activities.registry import ActivityDefinition, ActivityOptions, AnyActivity, registry
from runnerq_django.exceptions import NonRetryableError
from runnerq_django.logs import log_event
from runnerq_django.retries import RetryPolicy
from runnerq_django.spec.failures import recorded
from runnerq_django.spec.serialization import plain_json
from runnerq_django.storage import db, reads
from runnerq_django.storage.errors import InvalidArgument
from runnerq_django.storage.submit import schedule_overdue
from runnerq_django.storage.types import Priority
from runnerq_django.tasks_backend import metadata as tasks_metadata

if TYPE_CHECKING:  # type-checked against Django 6's django.tasks (the backport has the same API)
    from django.tasks.backends.base import BaseTaskBackend
    from django.tasks.base import Task, TaskError, TaskResult, TaskResultStatus
    from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
    from django.tasks.signals import task_enqueued, task_finished, task_started
    from django.utils.json import normalize_json

    from runnerq_django.worker.context import Context
else:
    try:  # Django 6.0+
        from django.tasks.backends.base import BaseTaskBackend
        from django.tasks.base import Task, TaskError, TaskResult, TaskResultStatus
        from django.tasks.exceptions import InvalidTask, InvalidTaskBackend, TaskResultDoesNotExist
        from django.tasks.signals import task_enqueued, task_finished, task_started
    except ImportError:  # Django 5.2: the django-tasks backport (the "tasks" extra)
        from django_tasks.backends.base import BaseTaskBackend
        from django_tasks.base import Task, TaskError, TaskResult, TaskResultStatus
        from django_tasks.exceptions import InvalidTaskBackendError as InvalidTaskBackend
        from django_tasks.exceptions import InvalidTaskError as InvalidTask
        from django_tasks.exceptions import TaskResultDoesNotExist
        from django_tasks.signals import task_enqueued, task_finished, task_started

    try:
        from django.utils.json import normalize_json
    except ImportError:  # Django 5.2
        from django_tasks.utils import normalize_json

__all__ = ["InvalidTaskArgument", "RunnerQTaskBackend", "runnerq_priority", "task_status"]

logger = logging.getLogger("runnerq_django.tasks_backend")

_P = ParamSpec("_P")
_R = TypeVar("_R")

# The activity metadata that marks a django task and keeps what the activity row can't hold.
META_BACKEND = "django_task.backend"
META_PRIORITY = "django_task.priority"
META_QUEUE = "django_task.queue_name"
META_RUN_AFTER = "django_task.run_after"

# The activity options the backend's OPTIONS set, by their key there (runnerq_django.activities.options).
BACKEND_OPTIONS = {
    option.backend_key: option
    for option in vocabulary.OPTIONS.values()
    if vocabulary.TASKS_BACKEND in option.places and option.backend_key
}
OPTIONS = {
    "QUEUE_MAP": "Django queue_name -> RunnerQ queue name (names not in the map are used as they are)",
    **{key: option.help for key, option in BACKEND_OPTIONS.items()},
}

STATUSES = {
    "pending": TaskResultStatus.READY,
    "scheduled": TaskResultStatus.READY,
    "retrying": TaskResultStatus.READY,  # waiting out the backoff before the next attempt
    "processing": TaskResultStatus.RUNNING,
    "waiting": TaskResultStatus.RUNNING,  # parked by a durable wait (current_context().sleep ...)
    "completed": TaskResultStatus.SUCCESSFUL,
    "failed": TaskResultStatus.FAILED,
    "dead_letter": TaskResultStatus.FAILED,
    "cancelled": TaskResultStatus.FAILED,
}

# The exception class an error names when no Python exception was recorded (an expired lease,
# a cancellation, a failure written by another SDK).
FALLBACK_EXCEPTION = "runnerq_django.exceptions.ActivityFailed"


# The Django priorities each RunnerQ level holds (runnerq_priority).
LEVEL_RANGES: dict[int, str] = {
    Priority.LOW: "Django -100..-1",
    Priority.NORMAL: "Django 0",
    Priority.HIGH: "Django 1..49",
    Priority.CRITICAL: "Django 50..100",
}


def runnerq_priority(priority: int) -> int:
    """Django's priority (-100..100, default 0, higher first) on RunnerQ's four levels: below
    the default -> 1 low; the default 0 -> 2 normal; 1..49 -> 3 high; 50..100 -> 4 critical.
    Order against the default is kept both ways; within a level, work runs oldest due first."""
    if priority < 0:
        return Priority.LOW
    if priority == 0:
        return Priority.NORMAL
    return Priority.HIGH if priority < 50 else Priority.CRITICAL


def task_status(status: str) -> TaskResultStatus:
    """A RunnerQ status as Django's: pending/scheduled/retrying READY, processing/waiting
    RUNNING, completed SUCCESSFUL, failed/dead_letter/cancelled FAILED."""
    return STATUSES[status]


class RunnerQTaskBackend(BaseTaskBackend):
    """``django.tasks`` on RunnerQ: durable, retried, leased, shared with Go/TS workers."""

    supports_defer = True  # run_after -> a scheduled activity
    supports_async_task = True  # async def tasks run on the worker's event loop per attempt
    supports_get_result = True  # from any process: the activity row and its result row
    supports_priority = True  # folded onto RunnerQ's four levels (runnerq_priority)
    supports_metadata = True  # context.metadata, save_metadata(), TaskResult.metadata (tasks_metadata)

    def __init__(self, alias: str, params: dict[str, Any]) -> None:
        super().__init__(alias, params)
        where = f"TASKS[{alias!r}]['OPTIONS']"
        if not isinstance(self.options, dict):
            raise InvalidTaskBackend(f"{where} must be a dict, got {type(self.options).__name__}")
        unknown = sorted(set(self.options) - set(OPTIONS))
        if unknown:
            raise InvalidTaskBackend(f"{where} has unknown keys {unknown}; known: {sorted(OPTIONS)}")
        queue_map = self.options.get("QUEUE_MAP", {})
        if not isinstance(queue_map, dict):
            raise InvalidTaskBackend(
                f"{where}['QUEUE_MAP'] must be a dict of queue_name -> RunnerQ queue name"
            )
        try:
            self.queue_map = {name: arguments.queue_name(target) for name, target in queue_map.items()}
            given = {
                option.name: self.options.get(key, option.default) for key, option in BACKEND_OPTIONS.items()
            }
            self.activity_options = ActivityOptions.build(**given)
        except InvalidArgument as exc:
            keys = {option.name: key for key, option in BACKEND_OPTIONS.items()}
            field = {"queue": "QUEUE_MAP", **keys}.get(exc.field or "", exc.field)
            # The option's own message, named by its key here (as RUNNERQ['TYPES'] names it).
            text = exc.message.removeprefix(f"{exc.field}: ")
            raise InvalidTaskBackend(f"{where}[{field!r}]: {text}") from None
        for name in self.queues:
            try:
                self.runnerq_queue(name)
            except InvalidArgument as exc:
                raise InvalidTaskBackend(
                    f"TASKS[{alias!r}]['QUEUES'] names {name!r}: {exc.message} "
                    f"(map it in {where}['QUEUE_MAP'])"
                ) from None

    def runnerq_queue(self, queue_name: str) -> str:
        """The RunnerQ queue of a Django ``queue_name`` (``InvalidArgument`` naming ``queue_name``)."""
        target = self.queue_map.get(queue_name, queue_name)
        try:
            return arguments.queue_name(target)
        except InvalidArgument as exc:
            raise arguments.invalid("queue_name", exc.message.removeprefix("queue: ")) from None

    def validate_task(self, task: Task[..., Any]) -> None:
        super().validate_task(task)
        try:
            self.runnerq_queue(task.queue_name)
            arguments.activity_type(task.module_path, "module_path")
        except InvalidArgument as exc:
            raise InvalidTask(f"{task.module_path}: {exc.message}") from None
        _resolver.saw(task)

    # enqueue ----------------------------------------------------------------------------------------

    def enqueue(self, task: Task[_P, _R], args: list[Any], kwargs: dict[str, Any]) -> TaskResult[_P, _R]:
        """Write the activity in the caller's transaction (:class:`InvalidTaskArgument`, a
        ``TypeError`` naming the field, e.g. ``args[1]``, and nothing written, for arguments that
        aren't JSON). The result's ``enqueued_at`` is the row's ``created_at``, as ``get_result``
        reads it."""
        from runnerq_django.client import enqueue

        self.validate_task(task)
        args = [_json_argument(value, f"args[{i}]") for i, value in enumerate(args)]
        kwargs = {name: _json_argument(value, f"kwargs[{name!r}]") for name, value in kwargs.items()}
        metadata = {META_BACKEND: self.alias, META_PRIORITY: str(task.priority), META_QUEUE: task.queue_name}
        run_after = task.run_after
        if run_after is not None:
            metadata[META_RUN_AFTER] = run_after.isoformat()
        # A run_after already past is due at once, but at its own time, not at the enqueue's.
        overdue = run_after is not None and run_after <= timezone.now()
        options = self.activity_options
        queue = self.runnerq_queue(task.queue_name)
        alias = routing.database_for(queue)
        # An overdue task is written, then given its due time: both or neither (the common
        # enqueue needs no transaction of its own). Refused first as enqueue() would refuse it,
        # since that atomic() would hide a write that leaves another database's transaction.
        if overdue:
            routing.refuse_outside_transaction(alias, queue)
        with transaction.atomic(using=alias) if overdue else contextlib.nullcontext():
            handle = enqueue(
                task.module_path,
                {"args": args, "kwargs": kwargs},
                queue=queue,
                priority=runnerq_priority(task.priority),
                delay=None if overdue else run_after,
                metadata=metadata,
                max_attempts=options.max_attempts,
                timeout=options.timeout_seconds,
                retry_delay=options.retry_delay_seconds,
                max_retry_delay=options.max_retry_delay_seconds or None,
            )
            if run_after is not None and overdue:
                enqueued_at = schedule_overdue(alias, handle.id, run_after)
            else:
                enqueued_at = reads.enqueued_at(alias, handle.id)
        if enqueued_at is None:  # pragma: no cover - the row was written just above, in this transaction
            raise RuntimeError(f"activity {handle.id} vanished right after its enqueue")
        result: TaskResult[_P, _R] = TaskResult(
            task=task,
            id=str(handle.id),
            status=TaskResultStatus.READY,
            enqueued_at=enqueued_at,
            started_at=None,
            finished_at=None,
            last_attempted_at=None,
            args=args,
            kwargs=kwargs,
            backend=self.alias,
            errors=[],
            worker_ids=[],
        )
        result = tasks_metadata.result_with(result, {})  # what get_result returns: with metadata
        task_enqueued.send(type(self), task_result=result)
        return result

    # results ----------------------------------------------------------------------------------------

    def get_result(self, result_id: str) -> TaskResult[..., Any]:
        """The task's state from its activity row, its input, its result row and the events of
        its failed attempts (one query). ``TaskResultDoesNotExist`` for an unknown id, one that
        retention deleted, or an activity that is not a django task."""
        try:
            activity_id = uuid.UUID(str(result_id))
        except ValueError:
            raise TaskResultDoesNotExist(f"{result_id!r} is not a task result id (a UUID)") from None
        row = None
        # A result id carries no queue: look on every database that hosts one, the default first.
        for alias in routing.databases():
            row = reads.task_result(alias, activity_id)
            if row is not None:
                break
        if row is None:
            raise TaskResultDoesNotExist(f"no activity {result_id} (never enqueued, or deleted by retention)")
        (
            activity_type,
            status,
            created_at,
            started_at,
            completed_at,
            metadata,
            current_token,
            last_token,
            last_error,
            payload,
            payload_serialization,
            state,
            data,
            data_serialization,
            events,
        ) = row
        metadata = db.loads(metadata) or {}
        if META_BACKEND not in metadata:
            raise TaskResultDoesNotExist(
                f"activity {result_id} ({activity_type}) was not enqueued as a django task"
            )
        task = _stored_task(activity_type, metadata)
        if task is None:
            raise TaskResultDoesNotExist(
                f"activity {result_id}: {activity_type!r} is not a django task of this "
                f"project (none of its installed apps' tasks modules defines it)"
            )
        args, kwargs = _unpack(plain_json(db.loads(payload), payload_serialization or "json-v1"))
        errors: list[TaskError] = []
        worker_ids: list[str] = []
        for event_type, token, detail in db.loads(events):
            worker_ids.append(_worker_of(token))
            errors.append(_task_error(detail or {}, event_type))
        # The attempt under way (or parked), or the one that succeeded, has no failure event.
        if status == "processing" and current_token:
            worker_ids.append(_worker_of(current_token))
        elif status in ("completed", "waiting") and last_token:
            worker_ids.append(_worker_of(last_token))
        value = None if data is None else plain_json(db.loads(data), data_serialization or "json-v1")
        if status == "cancelled":
            reason = value.get("error") if isinstance(value, dict) else last_error
            errors.append(
                TaskError(exception_class_path=FALLBACK_EXCEPTION, traceback=f"cancelled: {reason}")
            )
        finished = status in ("completed", "failed", "dead_letter", "cancelled")
        result: TaskResult[..., Any] = TaskResult(
            task=task,
            id=str(activity_id),
            status=task_status(status),
            enqueued_at=created_at,
            started_at=started_at,
            finished_at=completed_at if finished else None,
            last_attempted_at=started_at,
            args=args,
            kwargs=kwargs,
            backend=metadata[META_BACKEND],
            errors=errors,
            worker_ids=worker_ids,
        )
        if status == "completed" and state == "Ok":
            object.__setattr__(result, "_return_value", value)
        queue = self.runnerq_queue(str(metadata.get(META_QUEUE) or "default"))
        saved = tasks_metadata.saved_metadata(queue, activity_id, alias)
        with_metadata: TaskResult[..., Any] = tasks_metadata.result_with(result, saved)
        return with_metadata

    # checks -----------------------------------------------------------------------------------------

    def check(self, **kwargs: Any) -> list[Any]:  # list[CheckMessage]; the stubs say list[Any]
        from django.apps import apps
        from django.core import checks

        if not apps.is_installed("runnerq_django"):
            return [
                checks.Error(
                    f"TASKS[{self.alias!r}] uses RunnerQTaskBackend, which needs 'runnerq_django' in "
                    f"INSTALLED_APPS (its tables and worker)",
                    id="runnerq.E020",
                )
            ]
        return self._folded_priorities(checks.Warning)

    def _folded_priorities(self, warning: Any) -> list[Any]:
        """runnerq.W020: tasks of this backend declared with different Django priorities that
        fold onto one RunnerQ level, where they run first-in-first-out, not by their number."""
        levels: dict[int, dict[int, list[str]]] = defaultdict(lambda: defaultdict(list))
        for task in _resolver.all_defined():
            if task.backend == self.alias:
                levels[runnerq_priority(task.priority)][task.priority].append(task.module_path)
        messages = []
        for level, by_priority in sorted(levels.items()):
            if len(by_priority) < 2:
                continue
            used = ", ".join(
                f"{priority} ({', '.join(sorted(paths))})" for priority, paths in sorted(by_priority.items())
            )
            messages.append(
                warning(
                    f"TASKS[{self.alias!r}]: Django priorities {used} all run at RunnerQ priority "
                    f"{level} ({LEVEL_RANGES[level]}), in the order they are due, not by their number",
                    hint="RunnerQ has four priority levels: -100..-1 -> 1, 0 -> 2, 1..49 -> 3, "
                    "50..100 -> 4; give tasks that must run first priorities in different levels",
                    id="runnerq.W020",
                )
            )
        return messages


class InvalidTaskArgument(InvalidArgument, TypeError):
    """A task argument that isn't JSON (or is over the payload limit): RunnerQ's
    ``InvalidArgument`` naming the field, and the ``TypeError`` Django's backends raise."""


def _json_argument(value: Any, field: str) -> Any:
    """Django's normalisation (tuples to lists, bytes to text), then json-v1's limits."""
    try:
        value = normalize_json(value)
        return arguments.json_value(value, field, max_bytes=conf.get("MAX_PAYLOAD_BYTES"))
    except InvalidArgument as exc:
        raise InvalidTaskArgument(exc.message, field=exc.field) from None
    except (TypeError, ValueError) as exc:
        raise InvalidTaskArgument(
            f"{field}: must be JSON-serializable (json-v1): {exc}", field=field
        ) from None


def _unpack(payload: Any) -> tuple[list[Any], dict[str, Any]]:
    if not (
        isinstance(payload, dict)
        and isinstance(payload.get("args", []), list)
        and isinstance(payload.get("kwargs", {}), dict)
    ):
        raise NonRetryableError(
            f'a django task\'s payload is {{"args": [...], "kwargs": {{...}}}}, got {payload!r:.200}'
        )
    return payload.get("args", []), payload.get("kwargs", {})


def _worker_of(token: str | None) -> str:
    """The worker id of a claim token ``"<worker_id>:<32 hex>"`` (another SDK's UUID as it is)."""
    return (token or "").rpartition(":")[0] or (token or "")


def _task_error(detail: dict[str, Any], event_type: str) -> TaskError:
    failure = detail.get("failure")
    if not isinstance(failure, dict):
        failure = {}
    path = failure.get("exception") if failure.get("language") == "python" else None
    text = failure.get("traceback") or f"{event_type}: {detail.get('error', '')}"
    return TaskError(exception_class_path=path or FALLBACK_EXCEPTION, traceback=text)


def _stored_task(activity_type: str, metadata: dict[str, Any]) -> Task[..., Any] | None:
    """The task an activity was enqueued as: its function, with the priority, queue, backend and
    run_after it was enqueued with (the variant ``.using()`` made, if any)."""
    task = _resolver.defined(activity_type)
    if task is None:
        return None
    changes: dict[str, Any] = {"backend": metadata.get(META_BACKEND), "queue_name": metadata.get(META_QUEUE)}
    try:
        changes["priority"] = int(metadata[META_PRIORITY])
        if META_RUN_AFTER in metadata:
            changes["run_after"] = datetime.fromisoformat(metadata[META_RUN_AFTER])
        return task.using(**changes)
    except Exception as exc:  # a backend alias or queue since removed from TASKS: the task as declared
        log_event(
            logger,
            logging.DEBUG,
            "runnerq.tasks.variant_unavailable",
            "The task variant of %(activity_type)r is unavailable; using the task as declared: %(error)s",
            activity_type=activity_type,
            error=str(exc),
        )
        return task


# the worker's side -----------------------------------------------------------------------------------


class _TaskResolver:
    """The registry's resolver for django tasks: activity type = module path -> a handler that
    unpacks ``{"args", "kwargs"}`` and calls the task's function."""

    def __init__(self) -> None:
        # The tasks this process has defined (validate_task saw them).
        self._tasks: dict[str, Task[..., Any]] = {}
        self._handlers: dict[str, AnyActivity] = {}
        self._lock = threading.Lock()
        self._discovered = False

    def saw(self, task: Task[..., Any]) -> None:
        if task.module_path not in self._tasks:
            with self._lock:
                self._tasks.setdefault(task.module_path, task)

    def names(self) -> list[str]:
        return list(self._tasks)

    def discover(self) -> None:
        """Import the installed apps' ``tasks`` modules, once."""
        if not self._discovered:
            self._discovered = True
            autodiscover_modules("tasks")

    def all_defined(self) -> list[Task[..., Any]]:
        self.discover()
        return list(self._tasks.values())

    def defined(self, name: str) -> Task[..., Any] | None:
        """A task this process defined, after importing the installed apps' ``tasks`` modules
        once. Never imports the module a stored type names: ``get_result`` reads types from rows,
        and a row must not make the web process import whatever it says."""
        if name not in self._tasks:
            self.discover()
        return self._tasks.get(name)

    def task(self, name: str) -> Task[..., Any] | None:
        """For the worker: a defined task, or one named with ``runworker -t`` (the operator's
        choice), imported by its module path."""
        task = self.defined(name)
        if task is not None:
            return task
        try:
            found = import_string(name)  # a type named with runworker -t, a result of another process
        except ImportError:
            return None
        except Exception as exc:  # the module itself failed to import
            log_event(
                logger,
                logging.WARNING,
                "runnerq.tasks.import_failed",
                "Could not import the module of task %(activity_type)r: %(error)s",
                activity_type=name,
                error=str(exc),
            )
            return None
        if isinstance(found, Task) and isinstance(found.get_backend(), RunnerQTaskBackend):
            self.saw(found)
            return found
        return None

    def resolve(self, name: str) -> AnyActivity | None:
        handler = self._handlers.get(name)
        if handler is None:
            task = self.task(name)
            if task is None:
                return None
            handler = ActivityDefinition(_handler_for(task), name, ActivityOptions(), _TASK_RETRIES)
            with self._lock:
                handler = self._handlers.setdefault(name, handler)
        return handler


def _handler_for(task: Task[..., Any]) -> Callable[[Context, Any], Any]:
    """``(ctx, payload)`` for the worker. Like Django's backends, it sends ``task_started`` with
    this attempt's ``TaskResult`` (read like :meth:`RunnerQTaskBackend.get_result`: RUNNING,
    ``attempt`` counted; a ``takes_context`` task gets the same one), calls the function, and
    sends ``task_finished`` with that result SUCCESSFUL (the normalised return value) or FAILED
    (the exception as the attempt's last ``TaskError``), from inside the attempt: before the
    worker stores its outcome and, for a sync task, while the exception is being handled
    (Django's receiver logs it with ``logger.exception``). A durable wait, a timeout or a lost claim interrupt the
    task without ``task_finished``."""

    def started(ctx: Context) -> tuple[TaskResult[..., Any], Any]:
        backend = task.get_backend()
        result = backend.get_result(str(ctx.id))
        task_started.send(type(backend), task_result=result)
        context = None
        if task.takes_context:  # with the metadata saved last (by an earlier attempt)
            context = tasks_metadata.context_for(result, getattr(result, "metadata", {}))
        return result, context

    def leading(context: Any) -> list[Any]:
        return [] if context is None else [context]

    run: Callable[[Context, Any], Any]
    if iscoroutinefunction(task.func):

        async def run_async(ctx: Context, payload: Any) -> Any:
            args, kwargs = _unpack(payload)
            result, context = await sync_to_async(started)(ctx)
            try:
                value = _normalized(await task.func(*leading(context), *args, **kwargs))
            except Exception as exc:
                tasks_metadata.save_if_changed(context)
                await sync_to_async(_finished)(task, result, error=exc)
                raise
            tasks_metadata.save_if_changed(context)
            await sync_to_async(_finished)(task, result, value=value)
            return value

        run = run_async
    else:

        def run_sync(ctx: Context, payload: Any) -> Any:
            args, kwargs = _unpack(payload)
            result, context = started(ctx)
            try:
                value = _normalized(task.func(*leading(context), *args, **kwargs))
            except Exception as exc:
                tasks_metadata.save_if_changed(context)
                _finished(task, result, error=exc)
                raise
            tasks_metadata.save_if_changed(context)
            _finished(task, result, value=value)
            return value

        run = run_sync

    run.__qualname__ = run.__name__ = task.func.__qualname__
    run.__module__ = task.func.__module__
    return run


def _finished(
    task: Task[..., Any], result: TaskResult[..., Any], *, value: Any = None, error: Exception | None = None
) -> None:
    """Send ``task_finished`` with ``result`` as the attempt left it."""
    changes: dict[str, Any] = {"finished_at": timezone.now(), "status": TaskResultStatus.SUCCESSFUL}
    if error is not None:
        detail = recorded(error)
        failure = TaskError(exception_class_path=detail["exception"], traceback=detail["traceback"])
        changes.update(status=TaskResultStatus.FAILED, errors=[*result.errors, failure])
    finished = dataclasses.replace(result, **changes)
    if error is None:
        object.__setattr__(finished, "_return_value", value)
    task_finished.send(type(task.get_backend()), task_result=finished)


# The attribute that marks a return value's normalisation error (the same value every attempt).
UNSTORABLE = "runnerq_unstorable_return_value"


def _normalized(value: Any) -> Any:
    """Django's normalisation of a return value. One it can't normalise raises what Django's
    backends record (``TypeError`` for an unsupported type), marked so that the attempt fails
    for good: the same value comes back on every retry."""
    try:
        return normalize_json(value)
    except (TypeError, ValueError) as exc:
        setattr(exc, UNSTORABLE, True)  # read by _TaskRetries
        raise


@dataclasses.dataclass(frozen=True)
class _TaskRetries(RetryPolicy):
    """The default retry policy, but a return value that can't be stored is not retried."""

    def retryable(self, error: BaseException) -> bool:
        return not getattr(error, UNSTORABLE, False) and super().retryable(error)


_TASK_RETRIES = _TaskRetries()


_resolver = _TaskResolver()
registry.add_resolver(_resolver)
