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
from collections.abc import Awaitable, Callable, Iterable, Mapping
from dataclasses import dataclass, fields, replace
from datetime import timedelta
from typing import (
    TYPE_CHECKING,
    Any,
    Concatenate,
    Generic,
    ParamSpec,
    Protocol,
    TypeAlias,
    TypedDict,
    TypeVar,
    Unpack,
    cast,
    overload,
)

from django.core.exceptions import ImproperlyConfigured

from runnerq_django import conf
from runnerq_django.activities import arguments, type_settings
from runnerq_django.activities import batch as batch_options
from runnerq_django.activities import options as vocabulary
from runnerq_django.activities.batch import BatchOptions
from runnerq_django.activities.concurrency import ConcurrencyLimit, RateLimit
from runnerq_django.activities.enqueue_options import check_option_names
from runnerq_django.activities.handler_signature import HandlerSignature
from runnerq_django.logs import log_event
from runnerq_django.retries import DEFAULT_POLICY, Backoff, RetryPolicy

if TYPE_CHECKING:
    from runnerq_django.activities.enqueue_options import EnqueueOptions
    from runnerq_django.activities.nouns import ActivityHandle, CanvasMember, HandlerContext

__all__ = [
    "ActivityArguments",
    "ActivityDecorator",
    "ActivityDefinition",
    "ActivityOptions",
    "ActivityRegistry",
    "AnyActivity",
    "ConfiguredActivity",
    "DefaultOptions",
    "LimitOptions",
    "Resolver",
    "TypeOptions",
    "activity",
    "autodiscover",
    "registry",
]

logger = logging.getLogger("runnerq_django.activities.registry")


@dataclass(frozen=True)
class ClientFunctions:
    """The client's enqueue functions, which a definition's ``enqueue`` spellings call. The client
    (a module above this one, which imports it) installs them when it loads, and ``apps.ready``
    loads it, so this module needs no import of the client."""

    enqueue: Callable[..., ActivityHandle[Any]]
    enqueue_many: Callable[..., list[ActivityHandle[Any]]]
    aenqueue: Callable[..., Awaitable[ActivityHandle[Any]]]
    aenqueue_many: Callable[..., Awaitable[list[ActivityHandle[Any]]]]


_client: ClientFunctions | None = None


def install_client(functions: ClientFunctions) -> None:
    global _client
    _client = functions


# canvas.signature, installed by the canvas module (above this one) when it loads.
_signature: Callable[..., CanvasMember] | None = None


def install_signature(factory: Callable[..., CanvasMember]) -> None:
    global _signature
    _signature = factory


def _signature_factory() -> Callable[..., CanvasMember]:
    if _signature is None:
        raise RuntimeError(
            "runnerq_django.canvas.builder is not loaded: call django.setup() before building a canvas"
        )
    return _signature


def _client_functions() -> ClientFunctions:
    if _client is None:
        raise RuntimeError(
            "runnerq_django.client is not loaded: add 'runnerq_django' to INSTALLED_APPS and call "
            "django.setup() (or import runnerq_django.client) before enqueueing"
        )
    return _client


P = ParamSpec("P")
R = TypeVar("R")
T = TypeVar("T")
# A handler's context parameter: the Context it is typed with, which a type checker holds to the
# protocol (so that a handler of one payload parameter falls to the (payload) overload).
C = TypeVar("C", bound="HandlerContext")


class DefaultOptions(TypedDict, total=False):
    """The per-type defaults ``@activity(...)`` takes (and ``enqueue`` overrides)."""

    queue: str | None  # None: RUNNERQ['DEFAULT_QUEUE'] at enqueue time
    priority: int
    max_attempts: int
    timeout: float | timedelta
    retry_delay: float | timedelta
    max_retry_delay: float | timedelta | None


class LimitOptions(TypedDict, total=False):
    """How the worker bounds a handler of the type (``@activity`` only: not enqueue options,
    since a Go or TypeScript producer could not set them; docs/how-to/time-limits.md)."""

    soft_timeout: float | timedelta | None  # the handler is told (an exception, or cancellation)
    isolation: str  # "thread" (default) or "process": the hard limit kills a child process


class TypeOptions(DefaultOptions, LimitOptions, total=False):
    """Every per-type option: what :meth:`ActivityOptions.build` takes."""


class ActivityArguments(TypeOptions, total=False):
    """Every ``@activity`` option, typed (which names the decorator takes is runnerq_django.activities.options')."""

    name: str | None
    # The retry policy and the limits (docs/how-to/flow-control.md): per type only (here or
    # RUNNERQ['TYPES']), but for the limits' keys, which an enqueue may give as the partition.
    retry_on: type[BaseException] | Iterable[type[BaseException]]
    no_retry_on: type[BaseException] | Iterable[type[BaseException]]
    backoff: Backoff | None
    concurrency: int | None
    concurrency_key: str | Callable[[Any], Any] | None
    rate_limit: str | tuple[int, str] | None
    rate_limit_key: str | Callable[[Any], Any] | None
    batch: BatchOptions | None  # a batch handler (runnerq_django.activities.batch): @activity only


def _checker(option: vocabulary.Option) -> Callable[[Any], Any]:
    """The check of a value of ``option`` with the declaration's bounds; it names the option."""
    name, low, high = option.name, option.minimum, option.maximum
    if option.check == "queue":
        return arguments.queue_name
    if option.check == "whole" and high is not None:
        return lambda value: arguments.whole_number(value, name, minimum=int(low), maximum=int(high))
    if option.check == "whole_seconds" and high is not None:
        return lambda value: arguments.whole_seconds(value, name, minimum=int(low), maximum=high)
    if option.check == "seconds" and high is not None:
        return lambda value: arguments.seconds(value, name, minimum=low, maximum=high)
    if option.check == "choice":
        return lambda value: _choice(option, value)
    raise ValueError(f"the option {name} declares no check this module knows ({option.check!r})")


def _choice(option: vocabulary.Option, value: Any) -> str:
    if value not in option.choices:
        raise arguments.invalid(
            option.name, f"must be one of {vocabulary.listed(option.choices)}, got {value!r}"
        )
    checked: str = value
    return checked


def _checks(per_enqueue: bool) -> dict[str, tuple[str, Callable[[Any], Any]]]:
    """option -> (its ActivityOptions field, the check of a value given), for the checked options
    an enqueue may give (the type's defaults) or, ``per_enqueue`` false, the type's alone."""
    attributes = {field.name for field in fields(ActivityOptions)}
    return {
        name: (name if name in attributes else f"{name}_seconds", _checker(option))
        for name, option in vocabulary.OPTIONS.items()
        if option.check is not None and (vocabulary.ENQUEUE in option.places) == per_enqueue
    }


@dataclass(frozen=True)
class ActivityOptions:
    """Defaults an activity type enqueues with (every one overridable per enqueue), and its
    per-type time limits."""

    # The defaults are runnerq_django.activities.options' (a duration's field holds whole seconds).
    queue: str | None = vocabulary.OPTIONS["queue"].default  # None: RUNNERQ['DEFAULT_QUEUE'] at enqueue time
    priority: int = vocabulary.OPTIONS["priority"].default
    # The attempt limit (the schema's max_retries); 0 = unlimited.
    max_attempts: int = vocabulary.OPTIONS["max_attempts"].default
    timeout_seconds: int = vocabulary.OPTIONS["timeout"].default
    retry_delay_seconds: int = vocabulary.OPTIONS["retry_delay"].default  # the first retry waits 2x this
    max_retry_delay_seconds: int = 0  # 0 = the spec's 3600 s cap (the option's None)
    # Per type only (never per enqueue): see LimitOptions.
    soft_timeout_seconds: float | None = vocabulary.OPTIONS["soft_timeout"].default  # None: only the timeout
    isolation: str = vocabulary.OPTIONS["isolation"].default

    @classmethod
    def build(cls, **options: Unpack[TypeOptions]) -> ActivityOptions:
        """The defaults with the options given (durations as seconds or ``timedelta``) checked."""
        known = set(_DEFAULT_CHECKS) | set(_LIMIT_CHECKS)
        unknown = sorted(set(options) - known)
        if unknown:
            raise TypeError(f"unknown activity options {unknown}; known: {sorted(known)}")
        return cls().with_type_options(options)

    def with_type_options(self, given: Mapping[str, Any]) -> ActivityOptions:
        """These options with the per-type options of ``given`` (the keys of :class:`TypeOptions`;
        others are ignored) checked and applied."""
        built = self.overridden(given)
        limits = {
            field: check(given[name])
            for name, (field, check) in _LIMIT_CHECKS.items()
            if given.get(name) is not None
        }
        if limits:
            built = replace(built, **limits)
        soft = built.soft_timeout_seconds
        if soft is not None and soft >= built.timeout_seconds:
            raise arguments.invalid(
                "soft_timeout",
                f"must be shorter than the timeout ({built.timeout_seconds}s), got {soft}s: "
                "it warns the handler before the hard limit",
            )
        return built

    def overridden(self, options: Mapping[str, Any]) -> ActivityOptions:
        """These defaults with each option of ``options`` that is given (not ``None``) checked
        and applied; other keys (enqueue's ``delay``, ``metadata`` ...) are not these."""
        changes = {
            field: check(options[name])
            for name, (field, check) in _DEFAULT_CHECKS.items()
            if options.get(name) is not None
        }
        if not changes:
            return self
        # Per enqueue: dataclasses.replace() would cost more than every check here together.
        new = object.__new__(ActivityOptions)
        new.__dict__.update(self.__dict__, **changes)
        return new


# The checked options: the type's enqueue defaults (an enqueue may change them), and its time limits.
_DEFAULT_CHECKS = _checks(per_enqueue=True)
_LIMIT_CHECKS = _checks(per_enqueue=False)


@dataclass(frozen=True)
class EffectiveOptions:
    """The per-type options of a definition, built: its enqueue defaults, retry policy and limits."""

    options: ActivityOptions
    retry_policy: RetryPolicy
    concurrency: ConcurrencyLimit | None
    rate_limit: RateLimit | None


# The per-type options built into the retry policy and the limits, not into ActivityOptions.
_POLICY_AND_LIMITS = frozenset(vocabulary.at(vocabulary.TYPES)) - set(_DEFAULT_CHECKS) - set(_LIMIT_CHECKS)


def build_options(
    declared: Mapping[str, Any],
    overrides: Mapping[str, Any] | None = None,
    *,
    base: ActivityOptions | None = None,
) -> EffectiveOptions:
    """The per-type options of ``@activity`` arguments ``declared`` with ``overrides`` (a settings
    entry, converted: type_settings.arguments) replacing them key by key. Raises InvalidArgument
    naming the option."""
    overrides = overrides or {}
    merged = {**declared, **overrides}
    for limit_name, key_name in (("concurrency", "concurrency_key"), ("rate_limit", "rate_limit_key")):
        if limit_name in overrides and overrides[limit_name] is None and key_name not in overrides:
            merged.pop(key_name, None)  # removing the limit removes its key too

    def blame(*names: str) -> str:
        """The option to name in an error: the one the overrides gave, when they gave one."""
        return next((n for n in names if n in overrides), names[0])

    policy = RetryPolicy.build(
        retry_on=merged.get("retry_on", ()),
        no_retry_on=merged.get("no_retry_on", ()),
        backoff=merged.get("backoff"),
    )
    concurrency, concurrency_key = merged.get("concurrency"), merged.get("concurrency_key")
    rate_limit, rate_limit_key = merged.get("rate_limit"), merged.get("rate_limit_key")
    if concurrency is None and concurrency_key is not None:
        raise arguments.invalid("concurrency_key", "needs concurrency=N (the limit per key)")
    if rate_limit is None and rate_limit_key is not None:
        raise arguments.invalid("rate_limit_key", "needs rate_limit='N/s' (the limit per key)")
    if rate_limit is not None and concurrency is not None:
        raise arguments.invalid(
            blame("rate_limit", "concurrency"),
            "a type takes concurrency or rate_limit, not both (yet)"
            + ("; remove the other with None" if overrides else ""),
        )
    limit = None if concurrency is None else ConcurrencyLimit.build(concurrency, concurrency_key)
    rate = None if rate_limit is None else RateLimit.parse(rate_limit, rate_limit_key)
    rest = {key: value for key, value in merged.items() if key not in _POLICY_AND_LIMITS}
    if base is None:
        options = ActivityOptions.build(**cast(TypeOptions, rest))
    else:
        options = base.with_type_options(rest)
    return EffectiveOptions(options, policy, limit, rate)


class ActivityDefinition(Generic[P, R]):
    """A registered handler. Calling it runs the function directly (handy in tests); ``enqueue``
    makes it durable work for a worker.

    Generic in the handler's parameters after ``ctx`` (``P``) and its return type (``R``, a
    coroutine for an ``async def`` handler, which ``handle.result()`` types as what it awaits):
    a type checker sees ``enqueue``'s arguments and the type of ``handle.result()``."""

    def __init__(
        self,
        func: Callable[..., Any],
        name: str,
        options: ActivityOptions,
        retry_policy: RetryPolicy = DEFAULT_POLICY,
        concurrency: ConcurrencyLimit | None = None,
        rate_limit: RateLimit | None = None,
        *,
        declared: Mapping[str, Any] | None = None,
    ):
        self.func = func
        self.name = name
        # What the code declares. RUNNERQ['TYPES'][name] overrides it (type_settings): the
        # properties below are the effective values, rebuilt when RUNNERQ changes.
        self.declared = EffectiveOptions(options, retry_policy, concurrency, rate_limit)
        # The @activity arguments the declaration was built from (settings merge over them);
        # {} for a definition built in code (the options above are then the base).
        self.declared_arguments: Mapping[str, Any] = dict(declared or {})
        self._effective: EffectiveOptions = self.declared
        self._effective_for: object = None
        # The client's plans of this handler's common enqueue, by queue (client._plan).
        self.enqueue_plans: dict[str | None, Any] = {}
        self.is_async = inspect.iscoroutinefunction(func)
        # A batch handler's gathering (runnerq_django.activities.batch); None: one activity per call.
        self.batch: BatchOptions | None = None
        self.signature = HandlerSignature(func)
        self.takes_context = self.signature.takes_context
        self.keywords = self.signature.keywords  # payload members are keyword arguments
        self.__name__ = getattr(func, "__name__", name)
        self.__qualname__ = getattr(func, "__qualname__", name)
        self.__module__ = getattr(func, "__module__", __name__)
        self.__doc__ = func.__doc__
        self.__wrapped__ = func

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        return self.func(*args, **kwargs)

    def __repr__(self) -> str:
        return f"<Activity {self.name}>"

    # The effective per-type options: the declaration with RUNNERQ['TYPES'][name] over it.

    @property
    def options(self) -> ActivityOptions:
        """The defaults the type enqueues with (each one overridable per enqueue)."""
        return self.effective().options

    @property
    def retry_policy(self) -> RetryPolicy:
        """Worker-side only (which exceptions retry, and the backoff): nothing of it is stored."""
        return self.effective().retry_policy

    @property
    def concurrency(self) -> ConcurrencyLimit | None:
        """Fleet-wide concurrency limit (runnerq_django.activities.concurrency); None: unlimited."""
        return self.effective().concurrency

    @property
    def rate_limit(self) -> RateLimit | None:
        """Fleet-wide rate limit (starts per period); None: unlimited."""
        return self.effective().rate_limit

    def effective(self) -> EffectiveOptions:
        """The declaration with the type's ``RUNNERQ['TYPES']`` entry applied, built once per
        version of the settings. Raises ImproperlyConfigured naming the bad key of the entry."""
        try:
            current = conf.runnerq_settings()
        except ImproperlyConfigured:  # no Django settings (a script importing handlers): as declared
            return self.declared
        if self._effective_for is current:
            return self._effective
        given = current.types.get(self.name)
        if given is None:
            effective = self.declared
        else:
            try:
                effective = self.overridden_by(given)
            except arguments.InvalidArgument as exc:
                raise ImproperlyConfigured(type_settings.message(self.name, exc)) from None
        # Two threads may build it at once: both build the same value.
        self._effective, self._effective_for = effective, current
        return effective

    def overridden_by(self, given: Mapping[str, Any]) -> EffectiveOptions:
        """The declaration with the settings entry ``given`` applied (InvalidArgument naming the
        key on a bad value)."""
        overrides = type_settings.arguments(given)
        if self.declared_arguments or not overrides:
            built = build_options(self.declared_arguments, overrides)
        else:  # built in code: its options are the base, its policy and limits stay unless replaced
            built = build_options({}, overrides, base=self.declared.options)
            built = EffectiveOptions(
                built.options,
                built.retry_policy
                if {"retry_on", "no_retry_on", "backoff"} & set(overrides)
                else self.declared.retry_policy,
                built.concurrency if "concurrency" in overrides else self.declared.concurrency,
                built.rate_limit if "rate_limit" in overrides else self.declared.rate_limit,
            )
        if built.options.isolation == "process" and self.is_async:
            raise arguments.invalid(
                "isolation", f"'process' runs sync handlers; {self.name} is async: use isolation='thread'"
            )
        return built

    def invoke(self, ctx: HandlerContext, payload: Any) -> Any:
        """Run the handler for one attempt (what the worker and the testing toolkit call): the
        payload as it is, or its members as keyword arguments. A coroutine for ``async def``."""
        return self.signature.call(ctx, payload)

    def using(self, **options: Unpack[EnqueueOptions]) -> ConfiguredActivity[P, R]:
        """This handler with enqueue options (``queue``, ``delay``, ``priority``,
        ``idempotency_key`` ...) set: ``send_email.using(delay=60).enqueue(to=..., subject=...)``.
        The way to give options to a keyword handler, whose ``enqueue`` keywords are its own."""
        return ConfiguredActivity(self, dict(options))

    # Enqueueing lives in client.py; these are the handler-object spellings of it.
    @overload
    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> ActivityHandle[R]: ...
    @overload
    def enqueue(self, payload: Any, /, **options: Unpack[EnqueueOptions]) -> ActivityHandle[R]: ...
    def enqueue(self, *args: Any, **kwargs: Any) -> ActivityHandle[R]:
        """A keyword handler: ``enqueue(to=..., subject=...)``, the handler's arguments after ctx.
        A single-payload handler: ``enqueue(payload, **options)``, as ever."""
        if len(args) == 1 and not self.keywords:  # what ConfiguredActivity(self, {}) would call
            return _client_functions().enqueue(self, args[0], **kwargs)
        return ConfiguredActivity(self, {})._enqueue(args, kwargs)

    def enqueue_many(
        self, payloads: Iterable[Any], **options: Unpack[EnqueueOptions]
    ) -> list[ActivityHandle[R]]:
        """One activity per payload (for a keyword handler, a dict of its arguments each)."""
        return ConfiguredActivity(self, {}).enqueue_many(payloads, **options)

    @overload
    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> ActivityHandle[R]: ...
    @overload
    async def aenqueue(self, payload: Any, /, **options: Unpack[EnqueueOptions]) -> ActivityHandle[R]: ...
    async def aenqueue(self, *args: Any, **kwargs: Any) -> ActivityHandle[R]:
        return await ConfiguredActivity(self, {})._aenqueue(args, kwargs)

    async def aenqueue_many(
        self, payloads: Iterable[Any], **options: Unpack[EnqueueOptions]
    ) -> list[ActivityHandle[R]]:
        return await ConfiguredActivity(self, {}).aenqueue_many(payloads, **options)

    # Canvas members (runnerq_django.canvas.builder): a payload, or none to receive the member's input.
    # A keyword handler's keywords are its arguments (the payload); its member options go through
    # canvas.signature(handler, payload, **options).
    def s(self, *payload: Any, **options: Any) -> CanvasMember:
        if self.keywords and options:
            return _signature_factory()(self, self.signature.bind(payload, options))
        if len(payload) > 1:
            raise TypeError(f"{self.name}.s() takes at most one payload, got {len(payload)}")
        return _signature_factory()(self, *payload, **options)

    def si(self, payload: Any = None, **options: Any) -> CanvasMember:
        """A member whose payload is fixed: in a chain or a chord's callback, the input is dropped."""
        if self.keywords and options:
            payload = self.signature.bind((), options)
            options = {}
        return _signature_factory()(self, payload, immutable=True, **options)


class ConfiguredActivity(Generic[P, R]):
    """A handler with enqueue options bound (:meth:`ActivityDefinition.using`); its ``enqueue``
    takes exactly what the handler takes after ctx."""

    def __init__(self, definition: ActivityDefinition[P, R], options: dict[str, Any]):
        self.definition = definition
        check_option_names(options)
        self.options = options

    def __repr__(self) -> str:
        return f"<Activity {self.definition.name} using {self.options!r}>"

    def using(self, **options: Unpack[EnqueueOptions]) -> ConfiguredActivity[P, R]:
        return ConfiguredActivity(self.definition, {**self.options, **options})

    def _call(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
        """``(payload, options)`` of one enqueue call."""
        if self.definition.keywords:
            return self.definition.signature.bind(args, kwargs), self.options
        payload = kwargs.pop("payload", None) if not args else None
        if len(args) > 1:
            raise arguments.invalid(
                "payload",
                f"{self.definition.name} takes one payload (it is a single-payload handler), got {len(args)}",
            )
        return (args[0] if args else payload), {**self.options, **kwargs}

    def enqueue(self, *args: P.args, **kwargs: P.kwargs) -> ActivityHandle[R]:
        return self._enqueue(args, kwargs)

    def _enqueue(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ActivityHandle[R]:
        payload, options = self._call(args, kwargs)
        return _client_functions().enqueue(self.definition, payload, **options)

    def enqueue_many(
        self, payloads: Iterable[Any], **options: Unpack[EnqueueOptions]
    ) -> list[ActivityHandle[R]]:
        return _client_functions().enqueue_many(self.definition, payloads, **{**self.options, **options})

    async def aenqueue(self, *args: P.args, **kwargs: P.kwargs) -> ActivityHandle[R]:
        return await self._aenqueue(args, kwargs)

    async def _aenqueue(self, args: tuple[Any, ...], kwargs: dict[str, Any]) -> ActivityHandle[R]:
        payload, options = self._call(args, kwargs)
        return await _client_functions().aenqueue(self.definition, payload, **options)

    async def aenqueue_many(
        self, payloads: Iterable[Any], **options: Unpack[EnqueueOptions]
    ) -> list[ActivityHandle[R]]:
        return await _client_functions().aenqueue_many(
            self.definition, payloads, **{**self.options, **options}
        )


AnyActivity: TypeAlias = ActivityDefinition[..., Any]  # for code that handles any handler


def default_name(func: Callable[..., Any]) -> str:
    """``module.qualname``: stable across processes and deploys while the function stays put."""
    return f"{func.__module__}.{func.__qualname__}"


class Resolver(Protocol):
    """Finds handlers that are not ``@activity`` functions (the ``django.tasks`` backend's
    ``@task`` functions, by module path). Registered with :meth:`ActivityRegistry.add_resolver`."""

    def resolve(self, name: str) -> AnyActivity | None:
        """The handler of activity type ``name``, or ``None`` when this resolver has none."""

    def names(self) -> Iterable[str]:
        """The types this resolver already knows it handles (a worker claims them)."""


class ActivityRegistry:
    """Activity type name -> :class:`ActivityDefinition`, shared by every thread of the process."""

    def __init__(self) -> None:
        self._activities: dict[str, AnyActivity] = {}
        self._resolvers: list[Resolver] = []
        self._lock = threading.Lock()

    def register(self, activity: AnyActivity) -> AnyActivity:
        with self._lock:
            existing = self._activities.get(activity.name)
            # Same module imported twice under two names is harmless; two functions claiming one
            # type would route work to whichever registered last.
            if (
                existing is not None
                and existing.func is not activity.func
                and default_name(existing.func) != default_name(activity.func)
            ):
                raise ValueError(
                    f"activity type {activity.name!r} is already registered by {default_name(existing.func)}"
                )
            self._activities[activity.name] = activity
        return activity

    def get(self, name: str) -> AnyActivity | None:
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

    def resolve(self, name: str) -> AnyActivity | None:
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


def _judge_type_entry(type_name: str, given: Mapping[str, Any]) -> object:
    """A ``RUNNERQ['TYPES']`` entry over the decorator of its type when registered here (not
    resolvers': a check imports nothing), else alone on the defaults (InvalidArgument if bad)."""
    definition = registry.get(type_name)
    if definition is not None:
        return definition.overridden_by(given)
    return build_options({}, type_settings.arguments(given))


conf.install_judge("types", lambda value, name: type_settings.problems(value, name, _judge_type_entry))


class ActivityDecorator(Protocol):
    """What ``@activity(name=..., ...)`` returns: the decorator, typed like bare ``@activity``."""

    @overload
    def __call__(  # type: ignore[overload-overlap]  # see activity()
        self, func: Callable[Concatenate[C, P], R], /
    ) -> ActivityDefinition[P, R]: ...
    @overload
    def __call__(self, func: Callable[[T], R], /) -> ActivityDefinition[[T], R]: ...


# A handler typed (x: Context) alone matches both; it is a (payload) handler, and the first
# overload's [] parameters make its enqueue() take no payload: rare enough to leave.
@overload
def activity(func: Callable[Concatenate[C, P], R], /) -> ActivityDefinition[P, R]: ...  # type: ignore[overload-overlap]
@overload
def activity(func: Callable[[T], R], /) -> ActivityDefinition[[T], R]: ...
@overload
def activity(func: None = None, /, **options: Unpack[ActivityArguments]) -> ActivityDecorator: ...
def activity(func: Callable[..., Any] | None = None, /, **options: Unpack[ActivityArguments]) -> Any:
    """Register a function as the handler of an activity type.

    ``@activity`` or ``@activity(name="emails.send", queue="emails", max_attempts=5, ...)``.
    ``name`` defaults to ``module.qualname``; set it explicitly for types that other languages
    enqueue or that must survive a refactor. ``async def`` handlers work too. A handler takes
    ``(payload)``, ``(ctx, payload)`` or ``(ctx, <keyword arguments>)`` (the payload is then a
    JSON object of them); its return value (JSON) is the activity's result. The options (and
    their defaults): ``queue`` (``RUNNERQ['DEFAULT_QUEUE']``), ``priority`` (2),
    ``max_attempts`` (3), ``timeout`` (300 s), ``retry_delay`` (1 s), ``max_retry_delay``
    (the spec's 3600 s cap). Per type only: ``soft_timeout`` (none; seconds, shorter than the
    timeout) raises :class:`~runnerq_django.exceptions.SoftTimeLimitExceeded` in the handler (an
    async one is cancelled) so it may clean up; ``isolation="process"`` runs a sync handler in a
    child process that is killed at the timeout (the default ``"thread"`` cannot stop a blocking
    C call). See docs/how-to/time-limits.md.

    ``retry_on`` / ``no_retry_on`` (exception classes) and ``backoff`` (a
    :class:`~runnerq_django.retries.Backoff`) are the type's retry policy, applied by the worker
    that runs a failed attempt (docs/how-to/flow-control.md); without them the spec's backoff
    (``retry_delay`` doubling, capped at ``max_retry_delay``) applies.

    ``concurrency=N`` allows at most N activities of the type running at once across every
    runnerq-django worker; with ``concurrency_key`` (a dotted payload path or a callable of the
    payload, evaluated at enqueue) at most N per key: ``concurrency=1`` makes it a lock per key.
    ``rate_limit="20/s"`` (or ``/m``, ``/h``, or ``(20, "second")``) allows at most that many starts
    per period, fleet-wide, per ``rate_limit_key`` when given. A type has one of the two limits.

    ``RUNNERQ['TYPES'][name]`` in settings overrides any of these options but ``name``, key by key,
    and enqueue options override both; per enqueue, ``concurrency_key=`` / ``rate_limit_key=`` name
    the partition (docs/how-to/flow-control.md, "Overriding in settings and per enqueue").
    Every option, its bounds and the places that take it: docs/reference/options.md.
    """
    unknown = sorted(set(options) - set(vocabulary.at(vocabulary.DECORATOR)))
    if unknown:
        raise TypeError(
            f"unknown activity options {unknown}; known: {sorted(vocabulary.at(vocabulary.DECORATOR))}"
        )
    name = options.pop("name", None)
    batching = batch_options.checked(options.pop("batch", None))
    given: dict[str, Any] = dict(options)
    built = build_options(given)
    defaults = built.options

    def decorate(fn: Callable[..., Any]) -> ActivityDefinition[..., Any]:
        if not callable(fn):
            raise TypeError(f"@activity decorates a function, got {fn!r}")
        if defaults.isolation == "process" and inspect.iscoroutinefunction(fn):
            raise arguments.invalid(
                "isolation",
                f"'process' runs sync handlers; {default_name(fn)} is async (its timeout already "
                "cancels it: use isolation='thread')",
            )
        type_name = arguments.activity_type(name if name is not None else default_name(fn), "name")
        definition: AnyActivity = ActivityDefinition(
            fn, type_name, defaults, built.retry_policy, built.concurrency, built.rate_limit, declared=given
        )
        if batching is not None:
            batch_options.check_handler(definition, batching)
            definition.batch = batching
        return registry.register(definition)

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
    log_event(
        logger,
        logging.DEBUG,
        "runnerq.registry.discovered",
        "Imported %(modules)s: handlers registered for %(activity_types)s.",
        modules=names,
        activity_types=registry.names(),
    )
