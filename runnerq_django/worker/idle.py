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
    from runnerq_django.storage import flow

    busy_or_due = Q(status__in=(PENDING, PROCESSING)) | Q(status__in=RUNNABLE, scheduled_at__lte=Now())
    rows = Activity.objects.using(alias).filter(busy_or_due, queue_name__in=queues, activity_type__in=types)
    # Paused work (flow control) is not this worker's to wait for: it would never become idle.
    # What still runs in a paused queue or type counts (PROCESSING), what waits does not.
    for pause in flow.pauses(using=alias):
        paused = Q(queue_name=pause.queue_name) & ~Q(status=PROCESSING)
        if pause.activity_type:
            paused &= Q(activity_type=pause.activity_type)
        rows = rows.exclude(paused)
    return not rows.exists()
