"""The options of one enqueue, as a typed dict: what ``enqueue(payload, **options)`` and
``handler.using(**options)`` accept. Below the client and the registry, which both check them.

Internal: not part of the public API (``EnqueueOptions`` is exported by ``runnerq_django.client``).
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from datetime import datetime, timedelta
from typing import Any, TypedDict

from runnerq_django import arguments
from runnerq_django.storage.types import OnDuplicate

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
    using: str | None  # the database alias


OPTION_NAMES = frozenset(EnqueueOptions.__optional_keys__)


def check_option_names(options: Mapping[str, Any]) -> Mapping[str, Any]:
    for name in options:
        if name not in OPTION_NAMES:
            raise arguments.invalid(
                name, f"is not an enqueue option (they are {', '.join(sorted(OPTION_NAMES))})"
            )
    return options
