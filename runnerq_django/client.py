"""The public Python API for producers: enqueue, results, signals and cancellation.

Every write runs on the Django connection of the queue's database (``routing.database_for``:
``RUNNERQ['QUEUE_DATABASES']``, else ``RUNNERQ['DATABASE']``; ``using`` overrides it), so inside
``transaction.atomic(using=<that alias>)`` an enqueue commits or rolls back with the caller's own
rows, and the ``NOTIFY`` that wakes workers is only heard once it commits. An enqueue inside
``atomic()`` of another database only is refused (``CrossDatabaseError``) unless
``across_databases=True``.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
import uuid
from collections.abc import Callable, Iterable
from contextlib import nullcontext
from typing import TYPE_CHECKING, Any, TypeVar, Unpack, overload

from asgiref.sync import sync_to_async

from runnerq_django import conf, metrics, routing
from runnerq_django.activities import arguments, debounce, handled_types
from runnerq_django.activities.concurrency import ConcurrencyLimit
from runnerq_django.activities.enqueue_options import EnqueueOptions, check_option_names
from runnerq_django.activities.nouns import ActivityHandle, HandleFunctions, install_handle_functions
from runnerq_django.activities.registry import (
    ActivityDefinition,
    ActivityOptions,
    AnyActivity,
    ClientFunctions,
    install_client,
    registry,
)
from runnerq_django.exceptions import ActivityFailed, ResultTimeout
from runnerq_django.observability import tracing
from runnerq_django.signals import activity_enqueued
from runnerq_django.spec.keys import business_key
from runnerq_django.spec.serialization import handler_value, plain_json
from runnerq_django.storage import config as storage_config
from runnerq_django.storage import validation
from runnerq_django.storage.submit import checked_payload, root_template, submit_root
from runnerq_django.storage.types import NewActivity, OnDuplicate, StoredResult

if TYPE_CHECKING:
    from runnerq_django.listen.result_notices import ResultNotices, Wait
    from runnerq_django.storage.commands import CommandResult
    from runnerq_django.storage.types import SubmitResult

__all__ = [
    "ActivityHandle",
    "EnqueueOptions",
    "aenqueue",
    "aenqueue_many",
    "cancel",
    "enqueue",
    "enqueue_many",
    "get_handle",
    "signal",
    "signal_by_key",
]


_DEFAULT_OPTIONS = ActivityOptions()
R = TypeVar("R")


def _enqueued(queue: str, activity_ids: list[uuid.UUID], using: str | None) -> None:
    """Send ``signals.activity_enqueued`` (the test toolkit's immediate mode receives it)."""
    activity_enqueued.send(sender=None, queue=queue, activity_ids=activity_ids, using=using)


def get_handle(
    activity_id: uuid.UUID | str, queue: str | None = None, *, using: str | None = None
) -> ActivityHandle[Any]:
    """A handle for an activity enqueued anywhere (another process, another language), on its
    queue's database unless ``using`` names another."""
    queue_name = _queue(queue)
    return ActivityHandle(
        _as_uuid(activity_id, "activity_id"), queue_name, using=routing.database_for(queue_name, using)
    )


# --- enqueue ---------------------------------------------------------------------------------------


@overload
def enqueue(
    activity: ActivityDefinition[..., R], payload: Any = None, **options: Unpack[EnqueueOptions]
) -> ActivityHandle[R]: ...
@overload
def enqueue(activity: str, payload: Any = None, **options: Unpack[EnqueueOptions]) -> ActivityHandle[Any]: ...
def enqueue(
    activity: AnyActivity | str, payload: Any = None, **options: Unpack[EnqueueOptions]
) -> ActivityHandle[Any]:
    """Enqueue one activity: a registered handler or, for work another language handles, a type
    name. Joins the caller's transaction. ``delay`` is seconds, a ``timedelta`` or an aware
    ``datetime``; ``idempotency_key`` with ``on_duplicate`` makes the enqueue exactly-once. For a
    keyword handler the payload is the JSON object of its arguments, checked against them."""
    return _enqueue(activity, payload, options)


def _enqueue(activity: AnyActivity | str, payload: Any, options: EnqueueOptions) -> ActivityHandle[Any]:
    plan = _plan(activity, options) if len(options) < 2 else None
    if plan is not None:
        return _enqueue_planned(plan, payload)
    return _enqueue_checked(activity, payload, options)


def _enqueue_checked(
    activity: AnyActivity | str, payload: Any, options: EnqueueOptions
) -> ActivityHandle[Any]:
    """An enqueue with every option resolved and checked in this call (``_plan`` is the short
    way of the common one)."""
    from runnerq_django import storage

    options = options.copy()  # the caller's dict stays as given
    across = bool(options.pop("across_databases", False))
    # debounce= or throttle= (runnerq_django.activities.debounce): how to submit it instead
    windowed = debounce.submitter(options.pop("debounce", None), options.pop("throttle", None), options)
    unique_key = options.pop("unique_key", None)
    if unique_key is not None:
        # Unique while active: an ordinary idempotency key, which the submit treats as released
        # once the activity holding it has finished (docs/how-to/flow-control.md).
        if options.get("idempotency_key") is not None:
            raise arguments.invalid("unique_key", "give either idempotency_key or unique_key, not both")
        arguments.idempotency_key(unique_key, "unique_key")  # named for its own field
        options["idempotency_key"] = unique_key
    given_partition = _given_partition(activity, options)
    queue_name, new = build_activity(activity, payload, **options)
    using = _routed(queue_name, options.get("using"), across)
    limit = _concurrency(activity)
    # Evaluated first: a payload without its key is refused before anything is written.
    partition = (
        given_partition
        if given_partition is not None
        else limit.partition_of(new.payload)
        if limit is not None and limit.partitioned
        else None
    )
    with (
        _partitioning(limit, using),
        tracing.sending(queue_name, [new]) as send,  # a producer span, its context in the metadata
    ):
        if windowed is not None:
            result = windowed(queue_name, send.activities[0], using)
        elif unique_key is None:
            result = storage.submit(queue_name, send.activities[0], using=using)
        else:
            from runnerq_django.storage.unique import submit_unique_while_active

            result = submit_unique_while_active(queue_name, send.activities[0], using=using)
        send.done([result])
        if partition is not None and result.created:
            _record_partitions(queue_name, new.activity_type, [(new.id, partition)], using)
    count_enqueued(queue_name, [result])
    _enqueued(queue_name, [result.id], using)
    return _handle(queue_name, result, using)


# --- the common enqueue, planned ------------------------------------------------------------------
#
# ``handler.enqueue(payload)`` or ``handler.enqueue(payload, queue=...)`` of a handler without a
# partitioned limit, tracing off: everything but the payload and the id is the same from one call
# to the next, so it is resolved, checked and encoded once per (handler, queue) into a _Plan, and
# each call checks and encodes its payload once (storage.submit.checked_payload), makes an id and
# sends one prepared statement (storage.submit.submit_root). The plan is for one version of the
# settings (conf.runnerq_settings() and the storage config are rebuilt when RUNNERQ or DATABASES
# change: a plan of another is rebuilt) and one handler object (re-registering a type makes a new
# definition, with no plans; a type name is looked up in the registry on each call). Anything
# else (other options, a partitioned limit, tracing on, a type not registered here) goes through
# _enqueue_checked, as does a plan that can't be made: that path then raises what it raises.

_NO_QUEUE = object()
_MAX_PLANS = 64  # per handler: the queues it is enqueued to by name, kept


class _Plan:
    __slots__ = ("alias", "check", "config", "queue", "settings", "template")

    def __init__(
        self,
        queue: str,
        alias: str,
        check: Callable[[Any], Any] | None,
        template: Any,
        settings: Any,
        config: Any,
    ) -> None:
        self.queue = queue
        self.alias = alias
        self.check = check  # a keyword handler's check of its arguments
        self.template = template  # storage.submit.RootTemplate
        self.settings = settings
        self.config = config


def _plan(activity: AnyActivity | str, options: EnqueueOptions) -> _Plan | None:
    """The plan of an enqueue of ``activity`` with ``options`` when it has one (see above)."""
    if options:
        queue = options.get("queue", _NO_QUEUE)
        if type(queue) is not str:
            return None  # another option, or a queue that is not a string: checked in full
    else:
        queue = None
    definition = activity if isinstance(activity, ActivityDefinition) else None
    if definition is None:
        if type(activity) is not str:
            return None
        definition = registry.get(activity)
        if definition is None:
            return None
    plans = definition.enqueue_plans
    plan = plans.get(queue)
    settings = conf.runnerq_settings()
    current = storage_config.active()
    if plan is None or plan.settings is not settings or plan.config is not current:
        plan = _new_plan(definition, queue, settings, current)
        if plan is None:
            return None
        if len(plans) >= _MAX_PLANS:
            plans.clear()
        plans[queue] = plan
    if tracing.active() is not None:
        return None
    return plan


def _new_plan(definition: AnyActivity, queue: str | None, settings: Any, current: Any) -> _Plan | None:
    if settings.max_payload_bytes != current.max_payload_bytes:
        return None  # the client's limit and the storage's are checked apart
    limit = definition.concurrency or definition.rate_limit
    if limit is not None and limit.partitioned:
        return None  # each enqueue records its partition key
    try:
        options: EnqueueOptions = {} if queue is None else {"queue": queue}
        queue_name, template = build_activity(definition, None, **options)
        root = root_template(queue_name, template)
    except Exception:  # the full path raises it, in its order
        return None
    alias = routing.database_for(queue_name)
    check = definition.signature.check if definition.keywords else None
    return _Plan(queue_name, alias, check, root, settings, current)


def _enqueue_planned(plan: _Plan, payload: Any) -> ActivityHandle[Any]:
    """What _enqueue_checked does for the plan's enqueues, in its order: the payload checked
    (a keyword handler's arguments, then its JSON), the database's transaction guard, the submit,
    the count and the hooks."""
    if plan.check is not None:
        payload = plan.check(payload)
    checked = checked_payload(payload)
    queue, alias = plan.queue, plan.alias
    routing.refuse_outside_transaction(alias, queue)
    activity_id = uuid.uuid4()
    submit_root(plan.template, activity_id, checked, using=alias)
    metrics.inc("activity_enqueued", 1, queue=queue)
    if activity_enqueued.receivers:  # the hot path: no list built when nothing listens
        _enqueued(queue, [activity_id], alias)
    return ActivityHandle(activity_id, queue, True, using=alias)


def enqueue_many(
    activity: AnyActivity | str,
    payloads: Iterable[Any],
    *,
    idempotency_keys: Iterable[str] | None = None,
    **options: Unpack[EnqueueOptions],
) -> list[ActivityHandle[Any]]:
    """Enqueue one activity per payload in one round trip, all with the same options (and one
    idempotency key each from ``idempotency_keys``, if given). Joins the caller's transaction."""
    return _enqueue_many(activity, payloads, idempotency_keys, options)


def _enqueue_many(
    activity: AnyActivity | str,
    payloads: Iterable[Any],
    idempotency_keys: Iterable[str] | None,
    options: EnqueueOptions,
) -> list[ActivityHandle[Any]]:
    from runnerq_django import storage

    payloads = list(payloads)
    if "idempotency_key" in options:
        raise arguments.invalid("idempotency_key", "enqueue_many takes idempotency_keys (one per payload)")
    for name in ("unique_key", "debounce", "throttle"):
        if name in options:
            raise arguments.invalid(name, "enqueue_many does not take it: enqueue one at a time")
    keys: list[str | None] = (
        list(idempotency_keys) if idempotency_keys is not None else [None] * len(payloads)
    )
    if len(keys) != len(payloads):
        raise arguments.invalid(
            "idempotency_keys", f"needs one key per payload: {len(keys)} keys for {len(payloads)} payloads"
        )
    if not payloads:
        return []
    options = options.copy()
    across = bool(options.pop("across_databases", False))
    given_partition = _given_partition(activity, options)
    if _uniform(activity, options):
        return _enqueue_uniform(activity, payloads, keys, options, across)
    built = [
        build_activity(activity, payload, **_with_key(options, key)) for payload, key in zip(payloads, keys)
    ]
    queue_name = built[0][0]
    using = _routed(queue_name, options.get("using"), across)
    limit = _concurrency(activity)
    partitions = (
        [given_partition] * len(built)
        if given_partition is not None
        else [limit.partition_of(new.payload) for _, new in built]
        if limit is not None and limit.partitioned
        else None
    )
    with _partitioning(limit, using), tracing.sending(queue_name, [new for _, new in built]) as send:
        results = storage.submit_many(queue_name, send.activities, using=using)
        send.done(results)
        if partitions is not None:
            created = [
                (new.id, key) for (_, new), result, key in zip(built, results, partitions) if result.created
            ]
            _record_partitions(queue_name, built[0][1].activity_type, created, using)
    count_enqueued(queue_name, results)
    _enqueued(queue_name, [result.id for result in results], using)
    return [_handle(queue_name, result, using) for result in results]


def _routed(queue: str, using: str | None, across: bool) -> str:
    """The alias an enqueue to ``queue`` runs on, refusing one that would leave the caller's
    ``atomic()`` block on another database (unless ``across``)."""
    alias = routing.database_for(queue, using)
    routing.refuse_outside_transaction(alias, queue, allowed=across)
    return alias


def _uniform(activity: AnyActivity | str, options: EnqueueOptions) -> bool:
    """Whether enqueue_many's activities need nothing per activity but a payload, an id and a key:
    no partitioned limit to record, no producer span per activity, no id given."""
    return options.get("id") is None and _concurrency(activity) is None and tracing.active() is None


def _enqueue_uniform(
    activity: AnyActivity | str,
    payloads: list[Any],
    keys: list[str | None],
    options: EnqueueOptions,
    across: bool,
) -> list[ActivityHandle[Any]]:
    """enqueue_many without an activity object per payload: the options are checked once (with
    the first payload, by ``build_activity``), then each payload and key by the storage's batch
    submit, which sends them as arrays (``storage.submit.submit_uniform``)."""
    from runnerq_django.storage.submit import submit_uniform

    queue_name, template = build_activity(activity, payloads[0], **options)
    using = _routed(queue_name, options.get("using"), across)
    definition = _definition(activity)
    check = definition.signature.check if definition is not None and definition.keywords else None
    results = submit_uniform(
        queue_name, template, [template.payload, *payloads[1:]], keys, check_payload=check, using=using
    )
    count_enqueued(queue_name, results)
    _enqueued(queue_name, [result.id for result in results], using)
    return [ActivityHandle(result.id, queue_name, result.created, using=using) for result in results]


def _with_key(options: EnqueueOptions, key: str | None) -> EnqueueOptions:
    keyed = options.copy()
    keyed["idempotency_key"] = key
    return keyed


def _concurrency(activity: AnyActivity | str) -> ConcurrencyLimit | None:
    """The type's concurrency or rate limit, when it has one (a handler object, or a registered name)."""
    definition = _definition(activity)
    if definition is None:
        return None
    # A rate limit is a ConcurrencyLimit too: its partition key is stored the same way.
    return definition.concurrency or definition.rate_limit


PARTITION_OPTIONS = ("concurrency_key", "rate_limit_key")


def _given_partition(activity: AnyActivity | str, options: EnqueueOptions) -> str | None:
    """The partition an enqueue names (``concurrency_key=`` or ``rate_limit_key=``), popped from
    ``options``, checked against the type's limit: the type must have a partitioned limit of that
    kind (a key for a type without one would be stored and never read)."""
    given = [(name, options.pop(name)) for name in PARTITION_OPTIONS if name in options]  # type: ignore[misc]
    given = [(name, value) for name, value in given if value is not None]
    if not given:
        return None
    if len(given) > 1:
        raise arguments.invalid("rate_limit_key", "give concurrency_key or rate_limit_key, not both")
    name, value = given[0]
    limit = _concurrency(activity)
    kind = "concurrency" if name == "concurrency_key" else "rate_limit"
    declared = getattr(_definition(activity), kind, None) if limit is not None else None
    type_name = activity.name if isinstance(activity, ActivityDefinition) else activity
    if declared is None or not declared.partitioned:
        raise arguments.invalid(
            name,
            f"the activity type {type_name!r} has no partitioned {kind} limit here "
            f"(@activity({kind}=N, {name}=...) or RUNNERQ['TYPES']): the key would never be read",
        )
    return ConcurrencyLimit.partition_text(value, name)


def _definition(activity: AnyActivity | str) -> AnyActivity | None:
    return activity if isinstance(activity, ActivityDefinition) else registry.get(activity)


def _partitioning(limit: ConcurrencyLimit | None, using: str) -> Any:
    """The enqueue and its partition keys in one transaction: a worker must never claim a
    partitioned activity before its key is stored."""
    if limit is None or not limit.partitioned:
        return nullcontext()
    from django.db import transaction

    return transaction.atomic(using=using)


def _record_partitions(
    queue: str, activity_type: str, keys: list[tuple[uuid.UUID, str]], using: str | None
) -> None:
    from runnerq_django.storage.limits import record_partitions

    record_partitions(queue, activity_type, keys, using=using)


def count_enqueued(queue: str, results: Iterable[SubmitResult]) -> None:
    """``activity_enqueued``: the activities a submit created (enqueue, enqueue_many, spawn). A
    duplicate idempotency key that returned the existing activity enqueued nothing."""
    metrics.inc("activity_enqueued", sum(1 for result in results if result.created), queue=queue)


async def aenqueue(
    activity: AnyActivity | str, payload: Any = None, **options: Unpack[EnqueueOptions]
) -> ActivityHandle[Any]:
    """:func:`enqueue` for async views: runs on Django's thread for sync database work, so it
    shares the connection (and transaction) that ``sync_to_async`` ORM calls use."""
    return await sync_to_async(_enqueue, thread_sensitive=True)(activity, payload, options)


async def aenqueue_many(
    activity: AnyActivity | str,
    payloads: Iterable[Any],
    *,
    idempotency_keys: Iterable[str] | None = None,
    **options: Unpack[EnqueueOptions],
) -> list[ActivityHandle[Any]]:
    return await sync_to_async(_enqueue_many, thread_sensitive=True)(
        activity, list(payloads), idempotency_keys, options
    )


def build_activity(
    activity: AnyActivity | str,
    payload: Any = None,
    *,
    raw_idempotency_key: str | None = None,
    parent_id: uuid.UUID | None = None,
    root_id: uuid.UUID | None = None,
    depth: int = 0,
    **options: Unpack[EnqueueOptions],
) -> tuple[str, NewActivity]:
    """Validate enqueue arguments (naming the field and the limit) into ``(queue, NewActivity)``.
    ``using`` is the caller's (where to submit), not part of the activity."""
    check_option_names(options)
    for name in PARTITION_OPTIONS:
        if options.get(name) is not None:
            raise arguments.invalid(name, "is taken by enqueue() and enqueue_many() only")
    type_name, defaults = resolve(activity)
    definition = activity if isinstance(activity, ActivityDefinition) else registry.get(type_name)
    if definition is not None and definition.keywords:
        payload = definition.signature.check(payload)
    effective = defaults.overridden(options)
    queue_name = _queue(effective.queue)
    new = NewActivity(
        activity_type=type_name,
        payload=arguments.json_value(payload, "payload", max_bytes=conf.runnerq_settings().max_payload_bytes),
        id=_new_id(options.get("id")),
        priority=effective.priority,
        max_retries=effective.max_attempts,
        timeout_seconds=effective.timeout_seconds,
        delay_seconds=arguments.delay_seconds(options.get("delay")),
        retry_delay_seconds=effective.retry_delay_seconds,
        max_retry_delay_seconds=effective.max_retry_delay_seconds,
        metadata=arguments.metadata(options.get("metadata")),
        idempotency_key=arguments.idempotency_key(options.get("idempotency_key")),
        on_duplicate=on_duplicate_policy(options.get("on_duplicate", OnDuplicate.RETURN_EXISTING)),
        raw_idempotency_key=raw_idempotency_key,
        parent_id=parent_id,
        root_id=root_id,
        depth=depth,
    )
    return queue_name, new


def _new_id(value: Any) -> uuid.UUID:
    return uuid.uuid4() if value is None else _as_uuid(value, "id")


def resolve(activity: AnyActivity | str) -> tuple[str, ActivityOptions]:
    """The type name and defaults of a handler object or a type name (registered here or not)."""
    if isinstance(activity, ActivityDefinition):
        return activity.name, activity.options
    if isinstance(activity, str):
        registered = registry.get(activity)
        name = arguments.activity_type(activity, "activity")
        if registered is None:
            handled_types.check(name)
        return name, registered.options if registered else _DEFAULT_OPTIONS
    raise arguments.invalid(
        "activity", f"must be an @activity handler or an activity type name, got {activity!r}"
    )


def on_duplicate_policy(value: OnDuplicate | str) -> OnDuplicate:
    if isinstance(value, OnDuplicate):
        return value
    if isinstance(value, str) and value.upper() in OnDuplicate.__members__:
        return OnDuplicate[value.upper()]
    names = ", ".join(name.lower() for name in OnDuplicate.__members__)
    raise arguments.invalid("on_duplicate", f"must be an OnDuplicate or one of {names}; got {value!r}")


def _handle(queue_name: str, result: SubmitResult, using: str | None) -> ActivityHandle[Any]:
    return ActivityHandle(result.id, queue_name, result.created, using=using)


def _queue(queue: str | None) -> str:
    return arguments.queue_name(conf.runnerq_settings().default_queue if queue is None else queue)


def _as_uuid(value: Any, field_name: str) -> uuid.UUID:
    return validation.activity_id(field_name, value if isinstance(value, uuid.UUID) else str(value))


# --- results ---------------------------------------------------------------------------------------


def unwrap(
    activity_id: uuid.UUID, stored: StoredResult, failure: type[ActivityFailed] = ActivityFailed
) -> Any:
    """The value of a stored result (a TypeScript SDK's ``superjson-v1`` one decoded per
    ``RUNNERQ['SUPERJSON']``), or ``failure`` carrying the stored error."""
    if stored.ok:
        return handler_value(stored.data, stored.serialization, conf.get("SUPERJSON"))
    raise failure(activity_id, plain_json(stored.data, stored.serialization))


def wait_for_result(
    queue: str, result_id: uuid.UUID, timeout: float | None, *, using: str | None = None
) -> StoredResult:
    """Wait for a result row: woken by the queue's result channel (this process's one ``LISTEN``
    session of the database, ``result_notices``), re-reading when a notification names
    ``result_id``, with a poll as the fallback for lost notifications (and as the only mechanism
    when ``RUNNERQ['LISTEN']`` is off). Between reads the thread's connection is closed, outside
    a transaction (``_release_connection``)."""
    from runnerq_django import storage

    using = routing.database_for(queue, using)
    deadline = None if timeout is None else time.monotonic() + timeout
    stored: StoredResult | None = storage.get_result(queue, result_id, using=using)
    if stored is not None:
        return stored
    poll = conf.runnerq_settings().poll_interval_seconds
    notices, wait = _listen_for_result(queue, result_id, using, timeout)
    try:
        # Read once more once listening: a result committed between the first read and the
        # LISTEN announced itself to nobody.
        backoff = 0.01
        while True:
            stored = storage.get_result(queue, result_id, using=using)
            if stored is not None:
                return stored
            remaining = None if deadline is None else deadline - time.monotonic()
            if remaining is not None and remaining <= 0:
                raise ResultTimeout(f"no result for activity {result_id} after {timeout:g}s")
            if wait is not None and not wait.lost:
                pause = poll if remaining is None else min(poll, remaining)
                _release_connection(using, pause)
                wait.event.wait(pause)
                wait.event.clear()
            else:
                # Without LISTEN: poll quickly at first (short activities), then every POLL_INTERVAL.
                backoff = min(backoff * 2, poll)
                pause = backoff if remaining is None else min(backoff, remaining)
                _release_connection(using, pause)
                time.sleep(pause)
    finally:
        if notices is not None and wait is not None:
            notices.unregister(wait)


# A pause shorter than this keeps the waiter's connection: reconnecting would cost more.
_RELEASE_FOR_PAUSES_FROM = 0.1


def _release_connection(alias: str, pause: float) -> None:
    """Close this thread's connection of ``alias`` before the wait pauses ``pause`` seconds, so
    that N threads waiting for results do not hold N connections doing nothing (the next read
    opens one). Not inside a transaction: the caller's ``atomic()`` keeps its connection, and its
    reads stay in its transaction."""
    from django.db import connections

    conn = connections[alias]
    if (
        pause >= _RELEASE_FOR_PAUSES_FROM
        and conn.connection is not None
        and not conn.in_atomic_block
        and conn.get_autocommit()
    ):
        conn.close()


async def await_result(
    queue: str, result_id: uuid.UUID, timeout: float | None, *, using: str | None = None
) -> StoredResult:
    """:func:`wait_for_result` on an event loop. The deadline counts from the call. Between
    reads it awaits its wait's event on the loop (set by the process's shared ``LISTEN``
    session's thread, ``result_notices``), so it holds no thread: a wait in the loop's default
    executor would hold one of its few threads for as long as it waited, delaying every other
    ``run_in_executor`` and wait behind it. Each read is one short query in that executor, whose
    thread's connection is closed after it (the executor's threads are everyone's)."""
    loop = asyncio.get_running_loop()
    deadline = None if timeout is None else loop.time() + timeout
    using = routing.database_for(queue, using)
    read = sync_to_async(_read_and_release, thread_sensitive=False)
    stored = await read(queue, result_id, using)
    if stored is not None:
        return stored
    poll = conf.runnerq_settings().poll_interval_seconds
    notices, wait = _listen_for_result_async(queue, result_id, using, loop)
    try:
        backoff = 0.01
        while True:
            # Read again once registered: a result committed after the first read announced
            # itself to nobody (the wait is woken again once its channel is listened on).
            stored = await read(queue, result_id, using)
            if stored is not None:
                return stored
            remaining = None if deadline is None else deadline - loop.time()
            if remaining is not None and remaining <= 0:
                raise ResultTimeout(f"no result for activity {result_id} after {timeout:g}s")
            if wait is not None and wait.async_event is not None and not wait.lost:
                with contextlib.suppress(TimeoutError):
                    await asyncio.wait_for(
                        wait.async_event.wait(), poll if remaining is None else min(poll, remaining)
                    )
                wait.async_event.clear()
            else:
                backoff = min(backoff * 2, poll)
                await asyncio.sleep(backoff if remaining is None else min(backoff, remaining))
    finally:
        if notices is not None and wait is not None:
            notices.unregister(wait, join=False)  # the session's thread closes it, unawaited


def _read_and_release(queue: str, result_id: uuid.UUID, using: str) -> StoredResult | None:
    from django.db import connections

    from runnerq_django import storage

    try:
        stored: StoredResult | None = storage.get_result(queue, result_id, using=using)
        return stored
    finally:
        connections[using].close()


def _listen_for_result(
    queue: str, result_id: uuid.UUID, using: str, timeout: float | None
) -> tuple[ResultNotices | None, Wait | None]:
    if not conf.runnerq_settings().listen:
        return None, None
    from runnerq_django.listen import result_notices
    from runnerq_django.spec.constants import result_channel

    notices = result_notices.for_alias(using)
    # None when the session could not listen in time: the wait polls (the session's thread logs
    # why it failed, once per session).
    return notices, notices.register(result_channel(queue), str(result_id), within=timeout)


def _listen_for_result_async(
    queue: str, result_id: uuid.UUID, using: str, loop: asyncio.AbstractEventLoop
) -> tuple[ResultNotices | None, Wait | None]:
    if not conf.runnerq_settings().listen:
        return None, None
    from runnerq_django.listen import result_notices
    from runnerq_django.spec.constants import result_channel

    notices = result_notices.for_alias(using)
    return notices, notices.register_async(result_channel(queue), str(result_id), loop)


# --- signals and cancellation ----------------------------------------------------------------------


def signal(
    target: ActivityHandle[Any] | uuid.UUID | str,
    name: str,
    payload: Any = None,
    *,
    queue: str | None = None,
    reason: str | None = None,
    using: str | None = None,
) -> bool:
    """Deliver signal ``name`` to an activity (by handle or id). The last payload per name wins; a
    signal sent before the handler waits for it is kept. Returns whether it woke the activity."""
    from runnerq_django import storage

    activity_id, queue_name, using = _target(target, queue, using)
    if not isinstance(name, str) or not name:
        raise arguments.invalid("name", f"must be a non-empty string, got {name!r}")
    payload = arguments.json_value(payload, "payload", max_bytes=conf.runnerq_settings().max_payload_bytes)
    woke = storage.signal(queue_name, activity_id, name, payload, reason=reason, using=using)
    _enqueued(queue_name, [activity_id], using)  # in immediate mode, it runs on
    return woke


def signal_by_key(
    activity: AnyActivity | str,
    idempotency_key: str,
    name: str,
    payload: Any = None,
    *,
    queue: str | None = None,
    reason: str | None = None,
    using: str | None = None,
) -> bool:
    """Signal the activity that an idempotency key names (the key and type it was enqueued with)."""
    from runnerq_django import storage

    type_name, defaults = resolve(activity)
    queue_name = _queue(queue if queue is not None else defaults.queue)
    key = arguments.idempotency_key(idempotency_key)
    if key is None:
        raise arguments.invalid("idempotency_key", "is required")
    using = routing.database_for(queue_name, using)
    activity_id = storage.lookup_key(queue_name, business_key(key, type_name), using=using)
    return signal(activity_id, name, payload, queue=queue_name, reason=reason, using=using)


def cancel(
    target: ActivityHandle[Any] | uuid.UUID | str,
    *,
    queue: str | None = None,
    reason: str | None = None,
    cascade: bool = True,
    using: str | None = None,
) -> CommandResult:
    """Cancel an activity with the spec's semantics: non-terminal descendants too (``cascade``),
    a running attempt is fenced out (its writes refused, its handler stopped at the next lease
    renewal), and a cancellation error result wakes whoever awaits it. Returns the storage
    layer's ``CommandResult``."""
    from runnerq_django.storage import commands

    activity_id, queue_name, using = _target(target, queue, using)
    result: CommandResult = commands.cancel(
        queue_name, [activity_id], cascade=cascade, reason=reason, using=using
    )
    return result


def _target(target: Any, queue: str | None, using: str | None) -> tuple[uuid.UUID, str, str]:
    if isinstance(target, ActivityHandle):
        queue_name = target.queue if queue is None else _queue(queue)
        return target.id, queue_name, routing.database_for(queue_name, using or target.using)
    queue_name = _queue(queue)
    return _as_uuid(target, "activity_id"), queue_name, routing.database_for(queue_name, using)


# --- a handle's operations ------------------------------------------------------------------------


def _result(handle: ActivityHandle[Any], timeout: float | None) -> Any:
    return unwrap(handle.id, wait_for_result(handle.queue, handle.id, timeout, using=handle.using))


async def _aresult(handle: ActivityHandle[Any], timeout: float | None) -> Any:
    return unwrap(handle.id, await await_result(handle.queue, handle.id, timeout, using=handle.using))


def _stored_result(handle: ActivityHandle[Any]) -> StoredResult | None:
    from runnerq_django import storage

    stored: StoredResult | None = storage.get_result(handle.queue, handle.id, using=handle.using)
    return stored


def _status(handle: ActivityHandle[Any]) -> str | None:
    from runnerq_django.models import Activity as ActivityRow

    alias = routing.database_for(handle.queue, handle.using)
    return ActivityRow.objects.using(alias).filter(id=handle.id).values_list("status", flat=True).first()


def _signal(handle: ActivityHandle[Any], name: str, payload: Any, reason: str | None) -> bool:
    return signal(handle, name, payload, reason=reason)


def _cancel(handle: ActivityHandle[Any], reason: str | None, cascade: bool) -> CommandResult:
    return cancel(handle, reason=reason, cascade=cascade)


# Activity definitions (activities/registry.py, below) call these for their .enqueue() spellings, and a
# handle (activities/nouns.py, below) these for its methods.
install_client(ClientFunctions(enqueue, enqueue_many, aenqueue, aenqueue_many))
install_handle_functions(HandleFunctions(_result, _aresult, _stored_result, _status, _signal, _cancel))
