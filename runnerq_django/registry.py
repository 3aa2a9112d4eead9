"""Activity definitions: the ``@activity`` decorator, the process-wide registry, and discovery.

The decorator does no I/O: it validates its options, wraps the function in an :class:`ActivityDefinition`
(callable as before, plus ``enqueue``), and registers it under its type name. The worker looks
handlers up here by the ``activity_type`` of each claimed row, so the name is what Go and
TypeScript producers use to enqueue work for a Python handler.
"""

from __future__ import annotations

import inspect
import logging
import threading
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar

from runnerq_django import arguments
from runnerq_django.concurrency import ConcurrencyLimit, RateLimit
from runnerq_django.retries import DEFAULT_POLICY, Backoff, RetryPolicy

if TYPE_CHECKING:
    from runnerq_django.client import ActivityHandle

__all__ = [
    "ActivityDefinition",
    "ActivityOptions",
    "ActivityRegistry",
    "Resolver",
    "activity",
    "autodiscover",
    "registry",
]

logger = logging.getLogger("runnerq_django.registry")

R = TypeVar("R")


@dataclass(frozen=True)
class ActivityOptions:
    """Defaults an activity type enqueues with; every one can be overridden per enqueue."""

    queue: str | None = None  # None: RUNNERQ['DEFAULT_QUEUE'] at enqueue time
    priority: int = 2
    max_attempts: int = 3  # the attempt limit (the schema's max_retries); 0 = unlimited
    timeout_seconds: int = 300
    retry_delay_seconds: int = 1  # backoff base: the first retry waits 2x this
    max_retry_delay_seconds: int = 0  # 0 = the spec's 3600 s cap

    @classmethod
    def build(
        cls, *, queue=None, priority=2, max_attempts=3, timeout=300, retry_delay=1, max_retry_delay=None
    ) -> ActivityOptions:
        return cls(
            queue=None if queue is None else arguments.queue_name(queue),
            priority=arguments.priority(priority),
            max_attempts=arguments.whole_number(max_attempts, "max_attempts"),
            timeout_seconds=arguments.whole_seconds(timeout, "timeout", minimum=1),
            retry_delay_seconds=arguments.whole_seconds(retry_delay, "retry_delay"),
            max_retry_delay_seconds=0
            if max_retry_delay is None
            else arguments.whole_seconds(max_retry_delay, "max_retry_delay", minimum=1),
        )


class ActivityDefinition(Generic[R]):
    """A registered handler. Calling it runs the function directly (handy in tests); ``enqueue``
    makes it durable work for a worker."""

    def __init__(
        self,
        func: Callable[..., R],
        name: str,
        options: ActivityOptions,
        retry_policy: RetryPolicy = DEFAULT_POLICY,
        concurrency: ConcurrencyLimit | None = None,
        rate_limit: RateLimit | None = None,
    ):
        self.func = func
        self.name = name
        self.options = options
        # Worker-side only (which exceptions retry, and the backoff): nothing of it is stored.
        self.retry_policy = retry_policy
        # Fleet-wide concurrency limit (runnerq_django.concurrency); None: unlimited.
        self.concurrency = concurrency
        # Fleet-wide rate limit (starts per period); None: unlimited.
        self.rate_limit = rate_limit
        self.is_async = inspect.iscoroutinefunction(func)
        self.takes_context = _takes_context(func)
        self.__name__ = getattr(func, "__name__", name)
        self.__qualname__ = getattr(func, "__qualname__", name)
        self.__module__ = getattr(func, "__module__", __name__)
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __call__(self, *args: Any, **kwargs: Any) -> R:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Activity {self.name}>"

    # Enqueueing lives in client.py; these are the handler-object spellings of it.
    def enqueue(self, payload: Any = None, **options: Any) -> ActivityHandle:
        from runnerq_django.client import enqueue

        return enqueue(self, payload, **options)

    def enqueue_many(self, payloads: Iterable[Any], **options: Any) -> list[ActivityHandle]:
        from runnerq_django.client import enqueue_many

        return enqueue_many(self, payloads, **options)

    async def aenqueue(self, payload: Any = None, **options: Any) -> ActivityHandle:
        from runnerq_django.client import aenqueue

        return await aenqueue(self, payload, **options)

    async def aenqueue_many(self, payloads: Iterable[Any], **options: Any) -> list[ActivityHandle]:
        from runnerq_django.client import aenqueue_many

        return await aenqueue_many(self, payloads, **options)


def _takes_context(func: Callable) -> bool:
    """Handlers are ``f(payload)`` or ``f(ctx, payload)``: two positional parameters mean the
    first one receives the durable :class:`~runnerq_django.context.Context`."""
    try:
        params = inspect.signature(func).parameters.values()
    except (TypeError, ValueError):
        return False
    positional = [p for p in params if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD)]
    if len(positional) not in (1, 2):
        raise TypeError(
            f"activity handler {getattr(func, '__qualname__', func)!r} must take (payload) or (ctx, payload), "
            f"got {len(positional)} positional parameters"
        )
    return len(positional) == 2


def default_name(func: Callable) -> str:
    """``module.qualname``: stable across processes and deploys while the function stays put."""
    return f"{func.__module__}.{func.__qualname__}"


class Resolver(Protocol):
    """Finds handlers that are not ``@activity`` functions (the ``django.tasks`` backend's
    ``@task`` functions, by module path). Registered with :meth:`ActivityRegistry.add_resolver`."""

    def resolve(self, name: str) -> ActivityDefinition | None:
        """The handler of activity type ``name``, or ``None`` when this resolver has none."""

    def names(self) -> Iterable[str]:
        """The types this resolver already knows it handles (a worker claims them)."""


class ActivityRegistry:
    """Activity type name -> :class:`ActivityDefinition`, shared by every thread of the process."""

    def __init__(self) -> None:
        self._activities: dict[str, ActivityDefinition] = {}
        self._resolvers: list[Resolver] = []
        self._lock = threading.Lock()

    def register(self, activity: ActivityDefinition) -> ActivityDefinition:
        with self._lock:
            existing = self._activities.get(activity.name)
            if existing is not None and existing.func is not activity.func:
                # Same module imported twice under two names is harmless; two functions claiming one
                # type would route work to whichever registered last.
                if default_name(existing.func) != default_name(activity.func):
                    raise ValueError(
                        f"activity type {activity.name!r} is already registered by {default_name(existing.func)}"
                    )
            self._activities[activity.name] = activity
        return activity

    def get(self, name: str) -> ActivityDefinition | None:
        return self._activities.get(name)

    def names(self) -> list[str]:
        return sorted(self._activities)

    def __contains__(self, name: str) -> bool:
        return name in self._activities

    def __len__(self) -> int:
        return len(self._activities)

    def unregister(self, name: str) -> None:
        with self._lock:
            self._activities.pop(name, None)

    # Handlers that resolvers find (the worker's view; get() and names() stay @activity only).

    def add_resolver(self, resolver: Resolver) -> None:
        with self._lock:
            if resolver not in self._resolvers:
                self._resolvers.append(resolver)

    def resolve(self, name: str) -> ActivityDefinition | None:
        """The ``@activity`` handler of ``name`` or, failing that, the first resolver's."""
        found = self._activities.get(name)
        if found is not None:
            return found
        for resolver in list(self._resolvers):
            found = resolver.resolve(name)
            if found is not None:
                return found
        return None

    def handles(self, name: str) -> bool:
        """Whether a handler of ``name`` is known here, without importing anything."""
        return name in self._activities or any(name in resolver.names() for resolver in list(self._resolvers))

    def handled_names(self) -> list[str]:
        """Every type this process can run: ``@activity`` handlers and resolvers' known types."""
        names = set(self._activities)
        for resolver in list(self._resolvers):
            names.update(resolver.names())
        return sorted(names)


registry = ActivityRegistry()


def activity(
    func: Callable[..., R] | None = None,
    *,
    name: str | None = None,
    queue: str | None = None,
    priority: int = 2,
    max_attempts: int = 3,
    timeout: float | timedelta = 300,
    retry_delay: float | timedelta = 1,
    max_retry_delay: float | timedelta | None = None,
    retry_on: type[BaseException] | Iterable[type[BaseException]] = (),
    no_retry_on: type[BaseException] | Iterable[type[BaseException]] = (),
    backoff: Backoff | None = None,
    concurrency: int | None = None,
    concurrency_key: str | Callable[[Any], Any] | None = None,
    rate_limit: str | tuple[int, str] | None = None,
    rate_limit_key: str | Callable[[Any], Any] | None = None,
):
    """Register a function as the handler of an activity type.

    ``@activity`` or ``@activity(name="emails.send", queue="emails", max_attempts=5, ...)``.
    ``name`` defaults to ``module.qualname``; set it explicitly for types that other languages
    enqueue or that must survive a refactor. ``async def`` handlers work too. A handler takes
    ``(payload)`` or ``(ctx, payload)``; its return value (JSON) is the activity's result.

    ``retry_on`` / ``no_retry_on`` (exception classes) and ``backoff`` (a
    :class:`~runnerq_django.retries.Backoff`) are the type's retry policy, applied by the worker
    that runs a failed attempt (docs/how-to/flow-control.md); without them the spec's backoff
    (``retry_delay`` doubling, capped at ``max_retry_delay``) applies.

    ``concurrency=N`` allows at most N activities of the type running at once across every
    runnerq-django worker; with ``concurrency_key`` (a dotted payload path or a callable of the
    payload, evaluated at enqueue) at most N per key: ``concurrency=1`` makes it a lock per key.
    ``rate_limit="20/s"`` (or ``/m``, ``/h``, or ``(20, "second")``) allows at most that many starts
    per period, fleet-wide, per ``rate_limit_key`` when given. A type has one of the two limits.
    """
    policy = RetryPolicy.build(retry_on=retry_on, no_retry_on=no_retry_on, backoff=backoff)
    if concurrency is None and concurrency_key is not None:
        raise arguments.invalid("concurrency_key", "needs concurrency=N (the limit per key)")
    limit = None if concurrency is None else ConcurrencyLimit.build(concurrency, concurrency_key)
    if rate_limit is None and rate_limit_key is not None:
        raise arguments.invalid("rate_limit_key", "needs rate_limit='N/s' (the limit per key)")
    if rate_limit is not None and concurrency is not None:
        raise arguments.invalid("rate_limit", "a type takes concurrency or rate_limit, not both (yet)")
    rate = None if rate_limit is None else RateLimit.parse(rate_limit, rate_limit_key)
    options = ActivityOptions.build(
        queue=queue,
        priority=priority,
        max_attempts=max_attempts,
        timeout=timeout,
        retry_delay=retry_delay,
        max_retry_delay=max_retry_delay,
    )

    def decorate(fn: Callable[..., R]) -> ActivityDefinition[R]:
        if not callable(fn):
            raise TypeError(f"@activity decorates a function, got {fn!r}")
        type_name = arguments.activity_type(name if name is not None else default_name(fn), "name")
        return registry.register(ActivityDefinition(fn, type_name, options, policy, limit, rate))

    return decorate(func) if func is not None else decorate


def autodiscover(module_names: Iterable[str] | None = None) -> None:
    """Import the ``activities`` module (``RUNNERQ['AUTODISCOVER_MODULES']``) of every installed
    app, the way the admin imports ``admin.py`` (Django's ``autodiscover_modules``; the scheduler
    uses it for its ``periodic`` modules too). An app without one is fine; an error *inside* one
    propagates, since a worker that silently lacks handlers would leave their work waiting."""
    from django.utils.module_loading import autodiscover_modules

    from runnerq_django import conf

    names = list(module_names or conf.get("AUTODISCOVER_MODULES"))
    autodiscover_modules(*names)
    logger.debug("runnerq.registry.discovered", extra={"modules": names, "activity_types": registry.names()})
