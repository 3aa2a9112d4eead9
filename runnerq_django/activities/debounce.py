"""Debounce and throttle enqueues, fleet-wide (docs/how-to/flow-control.md#debounce-and-throttle).

``enqueue(payload, debounce=Debounce(key="reindex:42", wait=timedelta(seconds=30),
max_wait=timedelta(minutes=5)))``: enqueues with the same key (of the same type, in the same
queue) collapse into one activity, which runs ``wait`` after the last of them and never later than
``max_wait`` after the first. The **last payload wins**: each enqueue that collapses replaces the
pending activity's payload with its own; every other option (priority, attempts, timeout,
metadata) is the first enqueue's.

``enqueue(payload, throttle=Throttle(key="digest:7", window=timedelta(minutes=10)))``: at most one
activity per key per window. The first enqueue runs at once and opens the window; an enqueue
inside it is dropped (``on_excess="drop"``, the default: it returns the window's activity) or
deferred (``"defer"``: one activity due when the window ends, which every enqueue until then
returns, with the payload of the first that deferred).

Either way the call returns the handle of the activity that will run; ``handle.created`` is False
when it is one an earlier enqueue made. Both are enforced in PostgreSQL, in the enqueue's own
transaction, so they hold across every process that enqueues (``runnerq_django.storage.windows``).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from datetime import timedelta
from typing import Any, Literal

from runnerq_django.activities import arguments
from runnerq_django.storage import windows as storage_windows
from runnerq_django.storage.types import NewActivity, SubmitResult

__all__ = ["Debounce", "Throttle"]

MIN_SECONDS = 0.001
MAX_SECONDS = storage_windows.MAX_WINDOW_MS / 1000

Submit = Callable[[str, NewActivity, str | None], SubmitResult]


def _ms(value: Any, field: str) -> int:
    return math.ceil(arguments.seconds(value, field, minimum=MIN_SECONDS, maximum=MAX_SECONDS) * 1000)


def _key(value: Any, field: str) -> str:
    key = arguments.idempotency_key(value, field)
    if key is None:
        raise arguments.invalid(field, "is required")
    return key


@dataclass(frozen=True)
class Debounce:
    """Collapse enqueues of ``key`` into one activity that runs ``wait`` (seconds or a
    ``timedelta``, 0.001 s to ten years) after the last of them, and never later than
    ``max_wait`` (at least ``wait``; ``None``: no cap) after the first. The last payload wins."""

    key: str
    wait: float | timedelta
    max_wait: float | timedelta | None = None

    def __post_init__(self) -> None:
        _key(self.key, "debounce.key")
        wait = _ms(self.wait, "debounce.wait")
        if self.max_wait is not None and _ms(self.max_wait, "debounce.max_wait") < wait:
            raise arguments.invalid(
                "debounce.max_wait",
                f"must be at least debounce.wait ({wait / 1000:g} s), got {self.max_wait!r}",
            )

    def submit(self, queue: str, activity: NewActivity, using: str | None) -> SubmitResult:
        return storage_windows.submit_debounced(
            queue,
            activity,
            key=self.key,
            wait_ms=_ms(self.wait, "debounce.wait"),
            max_wait_ms=None if self.max_wait is None else _ms(self.max_wait, "debounce.max_wait"),
            using=using,
        )


@dataclass(frozen=True)
class Throttle:
    """At most one activity of ``key`` per ``window`` (seconds or a ``timedelta``, 0.001 s to ten
    years). ``on_excess``: ``"drop"`` returns the window's activity, ``"defer"`` creates (or
    returns) the one due when the window ends."""

    key: str
    window: float | timedelta
    on_excess: Literal["drop", "defer"] = "drop"

    def __post_init__(self) -> None:
        _key(self.key, "throttle.key")
        _ms(self.window, "throttle.window")
        if self.on_excess not in storage_windows.ON_EXCESS:
            raise arguments.invalid(
                "throttle.on_excess", f"must be 'drop' or 'defer', got {self.on_excess!r}"
            )

    def submit(self, queue: str, activity: NewActivity, using: str | None) -> SubmitResult:
        return storage_windows.submit_throttled(
            queue,
            activity,
            key=self.key,
            window_ms=_ms(self.window, "throttle.window"),
            on_excess=self.on_excess,
            using=using,
        )


def submitter(debounce: Any, throttle: Any, options: Mapping[str, object]) -> Submit | None:
    """How to submit an enqueue given ``debounce`` and ``throttle`` (taken out of its
    ``options``), or None when neither is given. Refuses them together, or with what sets the
    activity's identity or time (``idempotency_key``, ``unique_key``, ``delay``), naming the field.

    Internal: the client's."""
    if debounce is None and throttle is None:
        return None
    if debounce is not None and throttle is not None:
        raise arguments.invalid("throttle", "give either debounce or throttle, not both")
    name, given, kind = (
        ("debounce", debounce, Debounce) if debounce is not None else ("throttle", throttle, Throttle)
    )
    if not isinstance(given, kind):
        raise arguments.invalid(name, f"must be a {kind.__name__}(...), got {type(given).__name__}")
    for other in ("idempotency_key", "unique_key", "delay"):
        if options.get(other) is not None:
            raise arguments.invalid(name, f"can't be combined with {other}")
    return given.submit
