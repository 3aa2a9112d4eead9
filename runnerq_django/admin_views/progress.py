"""Progress and published events in the admin: the list's progress column (one read per page,
by primary key) and the detail page's progress bar and event log (``ctx.progress()``,
``ctx.publish()``). The rows are the app's own tables (``ActivityProgress``,
``PublishedEvent``); every read starts at ``guard.rows``, and an event's data comes
pretty-printed and cut by Postgres (``safe.safe_rows``), like a step's."""

from __future__ import annotations

from typing import Any

from django.contrib.admin.views.main import ChangeList
from django.utils.html import format_html

from runnerq_django.admin_views import guard
from runnerq_django.admin_views.safe import ROW_JSON_CHARS, pretty_of, safe_rows
from runnerq_django.models import Activity, ActivityProgress, PublishedEvent
from runnerq_django.storage.progress import Progress

# The detail page shows the newest events up to this many (an activity keeps 1,000).
PUBLISHED_LIMIT = 200
MESSAGE_CHARS = 120  # of a progress message in the list's cell


def _progress(done: float, total: float | None, message: str | None) -> Progress:
    def number(value: float) -> int | float:
        return int(value) if float(value).is_integer() else value

    return Progress(number(done), None if total is None else number(total), message)


class ProgressChangeList(ChangeList):
    """The activities' list, each row of the page carrying its progress (``rq_progress``), read
    in one query by the page's ids."""

    def get_results(self, request: Any) -> None:
        super().get_results(request)
        rows = list(self.result_list)
        self.result_list = rows
        ids = [row.pk for row in rows]
        found = {
            activity_id: _progress(done, total, message)
            for activity_id, done, total, message in guard.rows(ActivityProgress)
            .filter(activity_id__in=ids, done__isnull=False)
            .values_list("activity_id", "done", "total", "message")
            if done is not None
        }
        for row in rows:
            row.rq_progress = found.get(row.pk)


def cell(obj: Activity) -> str:
    """The list's progress cell: a bar with its percentage, or the count without a total."""
    progress: Progress | None = getattr(obj, "rq_progress", None)
    if progress is None:
        return ""
    message = (progress.message or "")[:MESSAGE_CHARS]
    if progress.percent is None:
        return format_html('<span class="rq-progress-count" title="{}">{}</span>', message, progress.done)
    return format_html(
        '<progress class="rq-progress" max="100" value="{}" title="{}"></progress> {}%',
        progress.percent,
        message,
        progress.percent,
    )


def build(activity: Activity) -> dict[str, Any]:
    """The detail page's progress (``progress``: the latest value and when it was written) and
    published events (``published``, the newest ``PUBLISHED_LIMIT`` in order;
    ``published_count``: how many the activity published in all)."""
    row = (
        guard.rows(ActivityProgress)
        .filter(activity_id=activity.id)
        .values_list("done", "total", "message", "updated_at", "last_seq")
        .first()
    )
    if row is None:
        return {"progress": None, "published": [], "published_count": 0}
    done, total, message, updated_at, last_seq = row
    progress = None
    if done is not None:
        value = _progress(done, total, message)
        progress = {"value": value, "updated_at": updated_at, "percent": value.percent}
    newest = list(
        safe_rows(
            guard.rows(PublishedEvent).filter(activity_id=activity.id),
            times=("created_at",),
            pretty={"data": ROW_JSON_CHARS},
            ids=("name",),
        ).order_by("-seq")[:PUBLISHED_LIMIT]
    )
    published = [
        {"seq": e.seq, "name": e.name, "attempt": e.attempt, "row": e, "data_json": pretty_of(e)["data"]}
        for e in reversed(newest)
    ]
    return {"progress": progress, "published": published, "published_count": last_seq}
