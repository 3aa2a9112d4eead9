"""The options of one enqueue, as a typed dict: what ``enqueue(payload, **options)`` and
``handler.using(**options)`` accept. Below the client and the registry, which both check them.
Which names an enqueue takes is runnerq_django.activities.options' (the typed dict spells the same names
for type checkers; tests/client/test_options_declaration.py keeps the two equal).

Internal: not part of the public API (``EnqueueOptions`` is exported by ``runnerq_django.client``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any, TypedDict

from runnerq_django.activities import arguments
from runnerq_django.activities import options as vocabulary
from runnerq_django.storage.types import OnDuplicate

if TYPE_CHECKING:
    from runnerq_django.activities.debounce import Debounce, Throttle

__all__ = ["OPTION_NAMES", "EnqueueOptions", "check_option_names"]


class EnqueueOptions(TypedDict, total=False):
    """The options of one enqueue (``enqueue(payload, **options)``, ``handler.using(**options)``);
    each one left out is the handler's default (``@activity(...)``) or the setting's."""

    delay: float | timedelta | datetime | None  # seconds, a timedelta, or an aware datetime to run at
    priority: int | None
    idempotency_key: str | None
    on_duplicate: OnDuplicate | str
    metadata: dict[str, str] | None
    queue: str | None
    max_attempts: int | None
    timeout: float | timedelta | None
    retry_delay: float | timedelta | None
    max_retry_delay: float | timedelta | None
    id: uuid.UUID | None
    unique_key: str | None  # unique while active (flow control), instead of idempotency_key
    debounce: Debounce | None  # collapse enqueues of a key into one (runnerq_django.activities.debounce)
    throttle: Throttle | None  # at most one activity of a key per window
    # The partition of a partitioned concurrency (rate) limit, instead of the one the type's
    # concurrency_key (rate_limit_key) takes from the payload.
    concurrency_key: str | int | None
    rate_limit_key: str | int | None
    using: str | None  # the database alias (default: the queue's, RUNNERQ['QUEUE_DATABASES'])
    across_databases: bool  # allow it inside atomic() of another database (docs/how-to/several-databases.md)


OPTION_NAMES = frozenset(vocabulary.at(vocabulary.ENQUEUE))
PER_TYPE_ONLY = vocabulary.per_type_only()  # the options of a type that no enqueue can change


def check_option_names(options: Mapping[str, Any]) -> Mapping[str, Any]:
    for name in options:
        if name in PER_TYPE_ONLY:
            raise arguments.invalid(
                name,
                "is set per activity type, not per enqueue: on @activity(...) or in "
                "RUNNERQ['TYPES'][<type>] (docs/how-to/flow-control.md)",
            )
        if name not in OPTION_NAMES:
            raise arguments.invalid(
                name, f"is not an enqueue option (they are {vocabulary.listed(sorted(OPTION_NAMES))})"
            )
    return options
