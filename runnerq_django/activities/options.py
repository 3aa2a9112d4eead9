"""Every option of an activity, declared once: its name, what it takes, its bounds and default, and
where it may be given (docs/reference/options.md is generated from this table).

The places: ``@activity(...)`` (:data:`DECORATOR`), a ``RUNNERQ['TYPES'][<type>]`` entry
(:data:`TYPES`), one enqueue (``enqueue(payload, **options)``, ``handler.using(...)``:
:data:`ENQUEUE`) and the ``django.tasks`` backend's ``OPTIONS`` (:data:`TASKS_BACKEND`, in its own
upper-case spelling). The decorator, the settings checks, the enqueue checks and the backend read
their accepted names, their bounds and the words of their errors from here, like River's one
``InsertOpts`` that serves both a kind's defaults and one insert. An option given at a later place
wins: decorator, then settings, then enqueue.

It imports nothing but the storage layer's bounds, so every layer may read it.

Internal: not part of the public API.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from runnerq_django.storage.limits import MAX_RUNNING
from runnerq_django.storage.types import OnDuplicate
from runnerq_django.storage.validation import (
    MAX_DURATION_SECONDS,
    MAX_INT4,
    MAX_KEY_BYTES,
    MAX_TYPE_BYTES,
)

__all__ = [
    "DECORATOR",
    "ENQUEUE",
    "OPTIONS",
    "PLACES",
    "TASKS_BACKEND",
    "TYPES",
    "Option",
    "at",
    "listed",
    "per_type_only",
]

DECORATOR = "@activity"
TYPES = "RUNNERQ['TYPES']"
ENQUEUE = "enqueue"
TASKS_BACKEND = "django.tasks OPTIONS"
PLACES = (DECORATOR, TYPES, ENQUEUE, TASKS_BACKEND)
_PER_TYPE = (DECORATOR, TYPES)
_EVERYWHERE = (DECORATOR, TYPES, ENQUEUE)


@dataclass(frozen=True)
class Option:
    """One option. ``check`` names how its value is checked (registry.py applies it with
    ``minimum``/``maximum``/``choices``); ``None`` for the options another module parses whole
    (a ``Backoff``, a rate ``"20/s"``, the enqueue-only values the client converts)."""

    name: str
    takes: str  # what a value is, in words
    default: Any  # the value a definition has when no place gives it
    places: tuple[str, ...]
    help: str
    default_words: str = ""  # the default in words, when it is not a value (docs)
    check: str | None = None  # "queue", "whole", "whole_seconds", "seconds", "choice"
    minimum: float = 0
    maximum: float | None = None
    choices: tuple[str, ...] = ()
    backend_key: str | None = None  # its name in the django.tasks backend's OPTIONS

    def allowed(self) -> str:
        """The bounds, in words (what the check enforces)."""
        if self.choices:
            return " or ".join(repr(choice) for choice in self.choices)
        if self.check in ("whole", "whole_seconds", "seconds") and self.maximum is not None:
            unit = "" if self.check == "whole" else " s"
            return f"{_number(self.minimum)}{unit} to {_number(self.maximum)}{unit}"
        return ""


def _number(value: float) -> str:
    return f"{value:,.0f}" if value == int(value) else f"{value:g}"


OPTIONS: dict[str, Option] = {
    option.name: option
    for option in (
        Option(
            "name",
            f"a type name (up to {MAX_TYPE_BYTES} bytes)",
            None,
            (DECORATOR,),
            "The activity type: what Go and TypeScript producers enqueue.",
            default_words="module.qualname of the function",
        ),
        Option(
            "queue",
            "a queue name",
            None,
            _EVERYWHERE,
            "The queue the activity waits in.",
            default_words="RUNNERQ['DEFAULT_QUEUE']",
            check="queue",
        ),
        Option(
            "priority",
            "int",
            2,
            _EVERYWHERE,
            "1 low, 2 normal, 3 high, 4 critical: higher runs first.",
            check="whole",
            minimum=1,
            maximum=4,
        ),
        Option(
            "max_attempts",
            "int",
            3,
            (*_EVERYWHERE, TASKS_BACKEND),
            "Attempts before the activity is dead-lettered; 0 = unlimited.",
            check="whole",
            maximum=MAX_INT4,
            backend_key="MAX_ATTEMPTS",
        ),
        Option(
            "timeout",
            "seconds or a timedelta (whole seconds, rounded up)",
            300,
            (*_EVERYWHERE, TASKS_BACKEND),
            "How long one attempt may run (its lease).",
            check="whole_seconds",
            minimum=1,
            maximum=MAX_DURATION_SECONDS,
            backend_key="TIMEOUT",
        ),
        Option(
            "retry_delay",
            "seconds or a timedelta (whole seconds, rounded up)",
            1,
            (*_EVERYWHERE, TASKS_BACKEND),
            "Backoff base: the n-th retry waits retry_delay x 2^n.",
            check="whole_seconds",
            maximum=MAX_DURATION_SECONDS,
            backend_key="RETRY_DELAY",
        ),
        Option(
            "max_retry_delay",
            "seconds or a timedelta, or None",
            None,
            (*_EVERYWHERE, TASKS_BACKEND),
            "Cap of the backoff.",
            default_words="the spec's 3600 s cap",
            check="whole_seconds",
            minimum=1,
            maximum=MAX_DURATION_SECONDS,
            backend_key="MAX_RETRY_DELAY",
        ),
        Option(
            "soft_timeout",
            "seconds or a timedelta, or None",
            None,
            _PER_TYPE,
            "SoftTimeLimitExceeded in the handler (an async one is cancelled) before the timeout; "
            "shorter than the timeout (docs/how-to/time-limits.md).",
            check="seconds",
            minimum=0.001,
            maximum=MAX_DURATION_SECONDS,
        ),
        Option(
            "isolation",
            "str",
            "thread",
            _PER_TYPE,
            "'process' runs a sync handler in a child process killed at the timeout.",
            check="choice",
            choices=("thread", "process"),
        ),
        Option(
            "retry_on",
            "exception classes (dotted paths in settings)",
            (),
            _PER_TYPE,
            "Only these exceptions retry (docs/how-to/flow-control.md).",
        ),
        Option(
            "no_retry_on",
            "exception classes (dotted paths in settings)",
            (),
            _PER_TYPE,
            "These exceptions fail at once, without a retry.",
        ),
        Option(
            "backoff",
            "a Backoff (a dict of base, cap, factor, jitter in settings), or None",
            None,
            _PER_TYPE,
            "The type's retry backoff, instead of the spec's doubling retry_delay.",
        ),
        Option(
            "concurrency",
            f"int 1 to {MAX_RUNNING:,}, or None",
            None,
            _PER_TYPE,
            "At most N of the type running at once across the fleet (per concurrency_key when given).",
        ),
        Option(
            "concurrency_key",
            "a dotted payload path (or a callable of the payload in code), or None",
            None,
            _EVERYWHERE,
            "The partition of the concurrency limit; per enqueue, the partition itself.",
        ),
        Option(
            "rate_limit",
            f"'N/s', 'N/m', 'N/h' or (N, 'second'), N 1 to {MAX_RUNNING:,}, or None",
            None,
            _PER_TYPE,
            "At most N starts of the type per period across the fleet (per rate_limit_key when given).",
        ),
        Option(
            "rate_limit_key",
            "a dotted payload path (or a callable of the payload in code), or None",
            None,
            _EVERYWHERE,
            "The partition of the rate limit; per enqueue, the partition itself.",
        ),
        Option(
            "batch",
            "a BatchOptions(max_size=1 to 1,000, max_wait=0 to 60 s), or None",
            None,
            (DECORATOR,),
            "A batch handler: it takes a list of up to max_size activities of the type, gathered for "
            "at most max_wait once one is due; each keeps its own outcome (docs/how-to/batches.md).",
        ),
        Option(
            "delay",
            "seconds, a timedelta, or an aware datetime to run at",
            None,
            (ENQUEUE,),
            "Run no sooner than this.",
        ),
        Option(
            "idempotency_key",
            f"str up to {MAX_KEY_BYTES} bytes",
            None,
            (ENQUEUE,),
            "One activity per key: an enqueue again with it finds the first (on_duplicate).",
        ),
        Option(
            "on_duplicate",
            f"an OnDuplicate, or one of {', '.join(name.lower() for name in OnDuplicate.__members__)}",
            "return_existing",
            (ENQUEUE,),
            "What an enqueue whose idempotency_key exists does.",
        ),
        Option("metadata", "dict of str to str", None, (ENQUEUE,), "Stored with the activity."),
        Option("id", "a UUID", None, (ENQUEUE,), "The activity's id.", default_words="a new uuid4"),
        Option(
            "unique_key",
            "str",
            None,
            (ENQUEUE,),
            "Unique while active (queued or running), instead of idempotency_key.",
        ),
        Option(
            "debounce",
            "a Debounce(key, wait, max_wait)",
            None,
            (ENQUEUE,),
            "Collapse enqueues of the key into one activity, run wait after the last (last payload "
            "wins; docs/how-to/flow-control.md).",
        ),
        Option(
            "throttle",
            "a Throttle(key, window, on_excess)",
            None,
            (ENQUEUE,),
            "At most one activity of the key per window; the rest dropped or deferred.",
        ),
        Option(
            "using",
            "a DATABASES alias",
            None,
            (ENQUEUE,),
            "The database to write to.",
            default_words="the queue's (RUNNERQ['QUEUE_DATABASES'])",
        ),
        Option(
            "across_databases",
            "bool",
            False,
            (ENQUEUE,),
            "Allow it inside atomic() of another database (docs/how-to/several-databases.md).",
        ),
    )
}


def at(place: str) -> tuple[str, ...]:
    """The names of the options ``place`` accepts, in the declaration's order."""
    return tuple(name for name, option in OPTIONS.items() if place in option.places)


def per_type_only() -> frozenset[str]:
    """The options a type's settings take and no enqueue may change: the limits and the retry
    policy bind every activity of the type alike (a worker applies them by type), and the time
    limits are the worker's."""
    return frozenset(at(TYPES)) - frozenset(at(ENQUEUE))


def listed(names: Iterable[str]) -> str:
    """Names for an error message: ``a, b, c``."""
    return ", ".join(names)
