"""The nouns the layers above storage share: the handle of an enqueued activity, what a handler's
context is to the code around the handler, why an activity parks, and what a canvas and a
member are to their callers (``a.s() | b.s()`` is a ``CanvasPart``, typed).

A leaf: it names the storage layer's records (in annotations) and imports nothing else of the
package. The registry, the client, the canvas, the context, tracing and the worker each name these
without importing one another, the way River's ``rivertype`` holds the types its packages share.
The handle's operations are the client's: the client installs them when it loads (``apps.ready``
loads it), as it installs its enqueue functions into the registry.

Internal: not part of the public API. ``ActivityHandle`` is public as
``runnerq_django.ActivityHandle`` and ``runnerq_django.client.ActivityHandle``.
"""

from __future__ import annotations

import uuid
from collections.abc import AsyncIterator, Awaitable, Callable, Coroutine, Iterator, Mapping
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, Generic, Protocol, TypeVar, overload

if TYPE_CHECKING:
    from runnerq_django.storage.commands import CommandResult
    from runnerq_django.storage.progress import Progress, PublishedEvent
    from runnerq_django.storage.types import StoredResult

__all__ = [
    "WAIT_FOREVER_RECHECK",
    "ActivityHandle",
    "CanvasMember",
    "CanvasPart",
    "EventFollower",
    "HandleFunctions",
    "HandlerContext",
    "ParkRequest",
    "ProgressFunctions",
    "SignsMembers",
    "install_handle_functions",
    "install_progress_functions",
]

R = TypeVar("R")
T = TypeVar("T")


# A wait without a timeout still needs a wake time (the Yielded event requires one): the activity
# wakes this long after parking, finds nothing new, and parks again. Cheap, and it bounds how
# long a parked row can go unnoticed by anything that watches scheduled_at.
WAIT_FOREVER_RECHECK = timedelta(days=30)


@dataclass(frozen=True)
class ParkRequest:
    """Why and until when the activity waits; the worker turns it into the storage ``park``."""

    kind: str  # "sleep", "signal" or "await"
    step: str
    wake_at: datetime
    result_id: uuid.UUID | None = None
    producer_id: uuid.UUID | None = None


class HandlerContext(Protocol):
    """What the code around a handler reads of its ``runnerq_django.worker.context.Context`` (the one
    class that is one): why its claim was lost, once it was, and the park it asked for."""

    lost: str | None
    park_request: ParkRequest | None


@dataclass(frozen=True)
class HandleFunctions:
    """The client's operations on a handle, which its methods call. The client (above this
    module, which it imports) installs them when it loads."""

    result: Callable[[ActivityHandle[Any], float | None], Any]
    aresult: Callable[[ActivityHandle[Any], float | None], Awaitable[Any]]
    stored_result: Callable[[ActivityHandle[Any]], StoredResult | None]
    status: Callable[[ActivityHandle[Any]], str | None]
    signal: Callable[[ActivityHandle[Any], str, Any, str | None], bool]
    cancel: Callable[[ActivityHandle[Any], str | None, bool], CommandResult]


_functions: HandleFunctions | None = None


def install_handle_functions(functions: HandleFunctions) -> None:
    global _functions
    _functions = functions


def _client() -> HandleFunctions:
    if _functions is None:
        raise RuntimeError("runnerq_django.client is not loaded: call django.setup() before using a handle")
    return _functions


class EventFollower(Protocol):
    """What ``handle.events()`` returns (``progress.readers.EventStream``): the activity's
    published events, oldest first, as a sync and an async iterator."""

    def __iter__(self) -> Iterator[PublishedEvent]: ...
    def __aiter__(self) -> AsyncIterator[PublishedEvent]: ...


@dataclass(frozen=True)
class ProgressFunctions:
    """The readers of progress and events a handle's methods call (``progress.readers``, above
    this module, installs them when it loads)."""

    progress: Callable[[ActivityHandle[Any]], Progress | None]
    events: Callable[[ActivityHandle[Any], int | None, bool], EventFollower]


_progress_functions: ProgressFunctions | None = None


def install_progress_functions(functions: ProgressFunctions) -> None:
    global _progress_functions
    _progress_functions = functions


def _progress() -> ProgressFunctions:
    if _progress_functions is None:
        raise RuntimeError("runnerq_django.progress is not loaded: call django.setup() before using a handle")
    return _progress_functions


@dataclass(frozen=True)
class ActivityHandle(Generic[R]):
    """A reference to one activity: its id and queue. Rebuild one anywhere with
    :func:`get_handle`; nothing else is kept, so a handle survives pickling and processes.
    Generic in the handler's result: ``handler.enqueue(...)`` returns an ``ActivityHandle`` whose
    ``result()`` a type checker knows the type of."""

    id: uuid.UUID
    queue: str
    created: bool = True  # False when an idempotency key returned an existing activity
    step: str | None = field(default=None, compare=False)  # the spawning step, for children
    using: str | None = field(default=None, compare=False, repr=False)

    # R is the handler's return type: for an async def handler, a coroutine of the result.
    @overload
    def result(self: ActivityHandle[Coroutine[Any, Any, T]], timeout: float | None = None) -> T: ...
    @overload
    def result(self: ActivityHandle[T], timeout: float | None = None) -> T: ...
    def result(self, timeout: float | None = None) -> Any:
        """The activity's result, waiting up to ``timeout`` seconds (``None``: forever).
        Raises :class:`ActivityFailed` with the stored error, or :class:`ResultTimeout`."""
        return _client().result(self, timeout)

    @overload
    async def aresult(self: ActivityHandle[Coroutine[Any, Any, T]], timeout: float | None = None) -> T: ...
    @overload
    async def aresult(self: ActivityHandle[T], timeout: float | None = None) -> T: ...
    async def aresult(self, timeout: float | None = None) -> Any:
        """:meth:`result` for async code, ``timeout`` counted from the call. It waits on the
        event loop, woken by the process's shared ``LISTEN`` session: it holds no thread, and a
        connection only for each short read (run in the loop's default executor)."""
        return await _client().aresult(self, timeout)

    def stored_result(self) -> StoredResult | None:
        """The result row if there is one yet, without waiting."""
        return _client().stored_result(self)

    def status(self) -> str | None:
        """The stored status (``pending`` ... ``cancelled``), or ``None`` once retention deleted it."""
        return _client().status(self)

    def signal(self, name: str, payload: Any = None, *, reason: str | None = None) -> bool:
        return _client().signal(self, name, payload, reason)

    def cancel(self, *, reason: str | None = None, cascade: bool = True) -> CommandResult:
        return _client().cancel(self, reason, cascade)

    def progress(self) -> Progress | None:
        """The latest progress the activity reported (``ctx.progress()``), or ``None``."""
        return _progress().progress(self)

    def events(self, after: int | None = None, *, follow: bool = True) -> EventFollower:
        """The events the activity published (``ctx.publish()``) after sequence number
        ``after``, oldest first: ``for event in handle.events()`` or ``async for``. With
        ``follow`` (the default) the iteration waits for new events as they are written and ends
        when the activity ends (finished, or deleted); without, it ends with the events stored now."""
        return _progress().events(self, after, follow)


class CanvasPart(Protocol):
    """What every canvas is to its caller (a member, a chain, a group, a chord: ``canvas.Canvas``
    is the one class): its JSON, its enqueue, and ``|``, which chains it with another part."""

    def node(self) -> dict[str, Any]: ...
    def enqueue(
        self,
        *,
        queue: str | None = None,
        priority: int | None = None,
        idempotency_key: str | None = None,
        metadata: dict[str, str] | None = None,
        delay: Any = None,
        using: str | None = None,
    ) -> ActivityHandle[Any]: ...
    async def aenqueue(self, **options: Any) -> ActivityHandle[Any]: ...
    def __or__(self, other: CanvasPart | SignsMembers) -> CanvasPart: ...  # a canvas.Chain


class SignsMembers(Protocol):
    """What a canvas takes in place of a member: a handler (``ActivityDefinition``), whose
    ``.s()`` is the member."""

    def s(self, *payload: Any, **options: Any) -> CanvasMember: ...


class CanvasMember(CanvasPart, Protocol):
    """A canvas member as ``ActivityDefinition.s()`` and ``.si()`` return it: ``canvas.Signature``
    is the one class (the canvas package, above the registry, installs its factory there). What
    the canvas functions and a caller use of it."""

    @property
    def activity_type(self) -> str: ...
    @property
    def payload(self) -> Any: ...
    @property
    def immutable(self) -> bool: ...
    @property
    def options(self) -> Mapping[str, Any]: ...
    @property
    def receives_input(self) -> bool: ...
