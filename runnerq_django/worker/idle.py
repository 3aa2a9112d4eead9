"""``runworker --until-idle``: whether the worker's queues have nothing left for it to do now."""

from __future__ import annotations

from django.db.models import Q
from django.db.models.functions import Now

from runnerq_django.spec.statuses import PENDING, PROCESSING, RUNNABLE


def queues_idle(queues: list[str], types: list[str], alias: str) -> bool:
    """No activity of these types in these queues is running or due (the claim's rule: pending,
    or runnable and scheduled for now or earlier). Work scheduled for later (a delay, a retry
    backoff, a durable sleep) does not count: it is the next run's."""
    from runnerq_django.models import Activity

    busy_or_due = Q(status__in=(PENDING, PROCESSING)) | Q(status__in=RUNNABLE, scheduled_at__lte=Now())
    return not (
        Activity.objects.using(alias)
        .filter(busy_or_due, queue_name__in=queues, activity_type__in=types)
        .exists()
    )
