"""``runworker --until-idle``: whether the worker's queues have nothing left for it to do now."""

from __future__ import annotations

from typing import Any

from django.db.models import Count, Exists, OuterRef, Q
from django.db.models.functions import Now

from runnerq_django.spec.constants import SERIALIZATION_JSON, SERIALIZATION_SUPERJSON
from runnerq_django.spec.statuses import PENDING, PROCESSING, RUNNABLE

# The input serializations a claim takes (sql.OUR_INPUT; a missing input or a NULL one too).
CLAIMED_SERIALIZATIONS = (SERIALIZATION_JSON, "", SERIALIZATION_SUPERJSON)
SHOWN_IDS = 10  # of the rows left unclaimable, the log names this many


def queues_idle(queues: list[str], types: list[str], alias: str) -> bool:
    """No activity of these types in these queues is running or due (the claim's rule: pending,
    or runnable and scheduled for now or earlier). Work scheduled for later (a delay, a retry
    backoff, a durable sleep) does not count: it is the next run's. Nor does due work the claim
    leaves for another SDK (an input in a serialization it can't read: ``unclaimable``)."""
    rows = _busy_or_due(queues, types, alias).exclude(Q(unclaimable=True) & ~Q(status=PROCESSING))
    return not rows.exists()


def unclaimable(queues: list[str], types: list[str], alias: str) -> dict[str, Any]:
    """The due activities of these types the claim leaves (their input's serialization is none
    it reads): how many of each serialization, and the ids of the first few."""
    rows = _busy_or_due(queues, types, alias).filter(unclaimable=True).exclude(status=PROCESSING)
    counts = _foreign_inputs(alias).filter(activity_id__in=rows.values("id")).values("serialization")
    return {
        "serializations": {row["serialization"]: row["n"] for row in counts.annotate(n=Count("*"))},
        "activity_ids": [str(pk) for pk in rows.order_by("id").values_list("id", flat=True)[:SHOWN_IDS]],
    }


def _foreign_inputs(alias: str) -> Any:
    from runnerq_django.models import Input

    return (
        Input.objects.using(alias)
        .filter(serialization__isnull=False)
        .exclude(serialization__in=CLAIMED_SERIALIZATIONS)
    )


def _busy_or_due(queues: list[str], types: list[str], alias: str) -> Any:
    from runnerq_django.models import Activity
    from runnerq_django.storage import flow

    busy_or_due = Q(status__in=(PENDING, PROCESSING)) | Q(status__in=RUNNABLE, scheduled_at__lte=Now())
    rows = (
        Activity.objects.using(alias)
        .filter(busy_or_due, queue_name__in=queues, activity_type__in=types)
        .annotate(unclaimable=Exists(_foreign_inputs(alias).filter(activity_id=OuterRef("id"))))
    )
    # Paused work (flow control) is not this worker's to wait for: it would never become idle.
    # What still runs in a paused queue or type counts (PROCESSING), what waits does not.
    for pause in flow.pauses(using=alias):
        paused = Q(queue_name=pause.queue_name) & ~Q(status=PROCESSING)
        if pause.activity_type:
            paused &= Q(activity_type=pause.activity_type)
        rows = rows.exclude(paused)
    return rows
