"""Assertions about what was enqueued, read from the stored rows (what a worker would claim).

``Enqueued()`` notes the activities that exist when it is made; ``all()`` and the assertions look
only at those enqueued since (committed, or in the test's own transaction).

Internal: not part of the public API.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:
    from django.db.models import QuerySet

    from runnerq_django.models import Activity

_NOT_GIVEN: Any = object()
DELAY_TOLERANCE_SECONDS = 1.0  # the delay is read back from two database timestamps


@dataclass(frozen=True)
class EnqueuedActivity:
    id: uuid.UUID
    activity_type: str
    queue: str
    payload: Any
    status: str
    priority: int
    created_at: datetime
    scheduled_at: datetime | None
    idempotency_key: str | None  # as stored: the business key of (key, type)
    parent_id: uuid.UUID | None

    @property
    def delay_seconds(self) -> float:
        if self.scheduled_at is None:
            return 0.0
        return max(0.0, (self.scheduled_at - self.created_at).total_seconds())


def _contains(payload: Any, subset: Any) -> bool:
    """``subset`` is a part of ``payload``: dicts by their keys (recursively), anything else equal."""
    if isinstance(subset, dict):
        return isinstance(payload, dict) and all(
            k in payload and _contains(payload[k], v) for k, v in subset.items()
        )
    return bool(payload == subset)


class Enqueued:
    def __init__(self, using: str | None = None):
        from runnerq_django import conf

        self.using = using or conf.database_alias()
        self._before = set(self._rows().values_list("id", flat=True))

    def _rows(self) -> QuerySet[Activity]:
        from runnerq_django.models import Activity

        return Activity.objects.using(self.using)

    def all(self) -> list[EnqueuedActivity]:
        """What was enqueued since this object was made (children included), oldest first."""
        from runnerq_django.models import Input

        rows = [r for r in self._rows().order_by("created_at", "id") if r.id not in self._before]
        payloads = dict(
            Input.objects.using(self.using)
            .filter(activity_id__in=[r.id for r in rows])
            .values_list("activity_id", "payload")
        )
        return [
            EnqueuedActivity(
                r.id,
                r.activity_type,
                r.queue_name,
                payloads.get(r.id),
                r.status,
                r.priority,
                r.created_at,
                r.scheduled_at,
                r.idempotency_key,
                r.parent_activity_id,
            )
            for r in rows
        ]

    def filter(
        self,
        type: Any = _NOT_GIVEN,
        payload: Any = _NOT_GIVEN,
        payload_contains: Any = _NOT_GIVEN,
        queue: Any = _NOT_GIVEN,
        delay: Any = _NOT_GIVEN,
        idempotency_key: Any = _NOT_GIVEN,
        priority: Any = _NOT_GIVEN,
    ) -> list[EnqueuedActivity]:
        """The activities matching every criterion given: ``type`` (a handler or a type name),
        ``payload`` (equal), ``payload_contains`` (a subset), ``queue``, ``delay`` (seconds or
        a timedelta, within a second), ``idempotency_key`` (the key given to enqueue) and
        ``priority``."""
        from runnerq_django.activities import arguments
        from runnerq_django.client import resolve
        from runnerq_django.spec.keys import business_key

        type_name = None if type is _NOT_GIVEN else resolve(type)[0]
        wanted_delay = None if delay is _NOT_GIVEN else arguments.seconds(delay, "delay")
        found = []
        for item in self.all():
            if type_name is not None and item.activity_type != type_name:
                continue
            if payload is not _NOT_GIVEN and item.payload != payload:
                continue
            if payload_contains is not _NOT_GIVEN and not _contains(item.payload, payload_contains):
                continue
            if queue is not _NOT_GIVEN and item.queue != queue:
                continue
            if wanted_delay is not None and abs(item.delay_seconds - wanted_delay) > DELAY_TOLERANCE_SECONDS:
                continue
            if idempotency_key is not _NOT_GIVEN and item.idempotency_key != (
                None if idempotency_key is None else business_key(idempotency_key, item.activity_type)
            ):
                continue
            if priority is not _NOT_GIVEN and item.priority != priority:
                continue
            found.append(item)
        return found

    def assert_enqueued(self, count: int | None = None, **criteria: Any) -> list[EnqueuedActivity]:
        """Assert that some activity (exactly ``count``, if given) matches ``criteria`` (those of
        :meth:`filter`); returns the matches. The failure lists what was enqueued."""
        found = self.filter(**criteria)
        if (count is None and not found) or (count is not None and len(found) != count):
            wanted = "an activity" if count is None else f"{count} activit{'y' if count == 1 else 'ies'}"
            raise AssertionError(
                f"expected {wanted} enqueued matching {_describe(criteria)}, found {len(found)}; "
                f"enqueued: {self._summary()}"
            )
        return found

    def assert_not_enqueued(self, **criteria: Any) -> None:
        found = self.filter(**criteria)
        if found:
            raise AssertionError(
                f"expected nothing enqueued matching {_describe(criteria)}, found {len(found)}: "
                f"{self._summary(found)}"
            )

    def _summary(self, items: list[EnqueuedActivity] | None = None) -> str:
        items = self.all() if items is None else items
        return (
            "; ".join(f"{i.activity_type} on {i.queue!r} payload={i.payload!r}" for i in items) or "nothing"
        )


def _describe(criteria: dict[str, Any]) -> str:
    return ", ".join(f"{name}={value!r}" for name, value in criteria.items()) or "anything"
