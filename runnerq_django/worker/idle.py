"""``runworker --until-idle``: whether the worker's queues have nothing left for it to do now;
and the work due on them that no live worker handles, which waits without a word otherwise."""

from __future__ import annotations

import logging
import time
from typing import Any

from django.db.models import Count, Exists, OuterRef, Q
from django.db.models.functions import Now

from runnerq_django.logs import log_event
from runnerq_django.spec.constants import SERIALIZATION_JSON, SERIALIZATION_SUPERJSON
from runnerq_django.spec.statuses import PENDING, PROCESSING, RUNNABLE

logger = logging.getLogger("runnerq_django.worker")

# The input serializations a claim takes (storage.sql.claims.OUR_INPUT; a missing input or a NULL one too).
CLAIMED_SERIALIZATIONS = (SERIALIZATION_JSON, "", SERIALIZATION_SUPERJSON)
SHOWN_IDS = 10  # of the rows left unclaimable, the log names this many
CHECK_SECONDS = 60.0  # how often a worker looks for due work no live worker handles
REPEAT_SECONDS = 600.0  # how often it says so again for the same queue and type
COUNT_CAP = 100  # the most it counts of one type (every type due is counted, each minute)


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


class UnhandledWatch:
    """Logs the types due on the worker's queues that no live worker handles (a typo in
    ``enqueue()``, a worker started with ``--activity-type``, another SDK's worker down): looked
    for at most every ``CHECK_SECONDS``, first one heartbeat after the start (workers started
    together have registered by then), and said at most every ``REPEAT_SECONDS`` per queue and
    type."""

    def __init__(self, queues: list[str], alias: str, *, alive_seconds: float, first_after: float):
        self.queues = queues
        self.alias = alias
        self.alive_seconds = alive_seconds
        self.next_check = time.monotonic() + first_after
        self.said: dict[tuple[str, str], float] = {}

    def check(self, *, now: bool = False) -> None:
        """Look if it is time (``now``: whatever the time, as ``--until-idle`` does on its way
        out) and log what no live worker handles."""
        from runnerq_django.activities.handled_types import unhandled_due

        at = time.monotonic()
        if not now and at < self.next_check:
            return
        self.next_check = at + CHECK_SECONDS
        found = unhandled_due(self.alias, self.queues, self.alive_seconds, COUNT_CAP)
        for queue, types in found.items():
            for kind, due in types.items():
                said = self.said.get((queue, kind))
                if said is not None and at - said < REPEAT_SECONDS:
                    continue
                self.said[(queue, kind)] = at
                log_event(
                    logger,
                    logging.WARNING,
                    "worker.unhandled_types",
                    "%(due)s activities of type %(activity_type)r are due on queue %(queue)r, and no"
                    " live worker handles that type: they wait until one does. Is the type misspelt"
                    " where it is enqueued, or is its worker down? (runnerq_status lists them; said"
                    " again every %(repeat_s)s s.)",
                    queue=queue,
                    activity_type=kind,
                    due=f"{due}+" if due >= COUNT_CAP else due,
                    repeat_s=int(REPEAT_SECONDS),
                )
