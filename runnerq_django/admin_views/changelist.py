"""Changelist pieces that keep the activity and event lists fast on millions of rows: a paginator
that never counts a whole table, and filters that spell statuses as literals."""

from __future__ import annotations

from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar, cast

from django.contrib import admin
from django.core.paginator import Paginator
from django.db.models import QuerySet
from django.utils.functional import cached_property

from runnerq_django.admin_views import database, queries
from runnerq_django.admin_views.guard import filter_value
from runnerq_django.admin_views.safe import visible
from runnerq_django.spec import events as spec_events
from runnerq_django.spec import statuses as st

if TYPE_CHECKING:
    from django.contrib.admin import ModelAdmin
    from django.http import HttpRequest

    _Paginator = Paginator[Any]  # django-stubs' Paginator is generic; Django's is not subscriptable
else:
    _Paginator = Paginator

_T = TypeVar("_T")

STATUS_LABELS = {
    "pending": "pending",
    "scheduled": "scheduled",
    "retrying": "retry backoff (retrying)",
    "processing": "running (processing)",
    "waiting": "waiting",
    "completed": "completed",
    "failed": "failed",
    "dead_letter": "dead letter",
    "cancelled": "cancelled",
}


class CappedCountPaginator(_Paginator):
    """Counts exactly up to ``cap`` rows (a bounded ``count(*) FROM (... LIMIT cap+1)``, which an
    index range answers in milliseconds) and above that uses the planner's estimate, flagged by
    ``estimated`` so templates can say "about". A page past an over-estimated end is empty rather
    than an error."""

    cap = 2000

    def __init__(self, *args: Any, **kwargs: Any) -> None:
        super().__init__(*args, **kwargs)
        self.estimated = False

    @cached_property
    def count(self) -> int:
        # The admin's changelist pages a queryset.
        queryset = cast("QuerySet[Any]", self.object_list).order_by()
        exact = queryset[: self.cap + 1].count()
        if exact <= self.cap:
            return exact
        self.estimated = True
        estimate: int = queries.estimated_rows(queryset)
        return max(self.cap + 1, estimate)

    def validate_number(self, number: int | float | str) -> int:
        number = super().validate_number(number) if not self.estimated else self._positive(number)
        return number

    def _positive(self, number: int | float | str) -> int:
        try:
            value = int(number)
        except (TypeError, ValueError):
            return 1
        return max(1, min(value, self.num_pages))


class StatusFilter(admin.SimpleListFilter):
    """Stored statuses, applied as a literal so ``idx_runnerq_query_status`` (non-completed) and
    the dequeue indexes' predicates are provable whatever the driver's parameter binding."""

    title = "status"
    parameter_name = "status"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [(s, STATUS_LABELS[s]) for s in st.STORED_STATUSES]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value in st.STORED_STATUSES:
            return queryset.extra(where=[f"runnerq_activities.status = {queries.literal_status(value)}"])
        return queryset


class _ColumnFilter(admin.SimpleListFilter):
    """Rows whose ``column`` is the chosen value (once Postgres can compare the column with it)."""

    parameter_name: str
    column: str

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        value = self.value()
        if value:
            return queryset.filter(**{self.column: filter_value(self.parameter_name, value)})
        return queryset


class DatabaseFilter(admin.SimpleListFilter):
    """Which database the list shows, when queues live on several (``RUNNERQ['QUEUE_DATABASES']``).
    It filters nothing itself: ``guard.run`` selects the database for the whole request, so the
    list, its other filters and the actions taken from it are all that database's."""

    title = "database"
    parameter_name = database.PARAMETER

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Any]) -> list[tuple[str, str]]:
        default = database.choices()[0]
        return [(alias, f"{alias} (default)" if alias == default else alias) for alias in database.choices()]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        return queryset


class QueueFilter(_ColumnFilter):
    title = "queue"
    parameter_name = "queue"
    column = "queue_name"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Any]) -> list[tuple[str, str]]:
        queues = _cached(request, "queues", lambda: queries.known_queues(queries.QUEUE_SCAN_LIMIT))
        return [(q, visible(q)) for q in _with_chosen(queues, self.value())]


class TypeFilter(_ColumnFilter):
    title = "type"
    parameter_name = "type"
    column = "activity_type"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Any]) -> list[tuple[str, str]]:
        queue = request.GET.get(QueueFilter.parameter_name)
        types = _cached(request, "types", lambda: queries.known_types([queue] if queue else None))
        return [(t, visible(t)) for t in _with_chosen(types, self.value())]


class EventQueueFilter(QueueFilter):
    pass


class EventTypeFilter(_ColumnFilter):
    title = "event type"
    parameter_name = "event_type"
    column = "event_type"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [(t, t) for t in spec_events.STORED_EVENT_TYPES]


class SinceFilter(admin.SimpleListFilter):
    """Events of the last 5 minutes .. 7 days. The time bound becomes an id bound (bisected on the
    primary key) so the list walks a short range of ids instead of filtering the whole table."""

    title = "time"
    parameter_name = "since"

    def lookups(self, request: HttpRequest, model_admin: ModelAdmin[Any]) -> list[tuple[str, str]]:
        return [
            ("5m", "last 5 minutes"),
            ("1h", "last hour"),
            ("24h", "last 24 hours"),
            ("7d", "last 7 days"),
        ]

    def queryset(self, request: HttpRequest, queryset: QuerySet[Any]) -> QuerySet[Any]:
        delta = queries.since_delta(self.value() or "")
        if delta is None:
            return queryset
        from django.utils import timezone

        since = timezone.now() - delta
        first_id = queries.first_event_id_since(since)
        if first_id is None:
            return queryset.none()
        return queryset.filter(id__gte=first_id, created_at__gte=since)


def _with_chosen(values: list[str], chosen: str | None) -> list[str]:
    return sorted([*values, chosen]) if chosen and chosen not in values else values


def _cached(request: HttpRequest, key: str, compute: Callable[[], _T]) -> _T:
    """``compute()``, computed once per request and kept on it."""
    cache: dict[str, Any] = request.__dict__.setdefault("_runnerq_admin_cache", {})
    if key not in cache:
        cache[key] = compute()
    value: _T = cache[key]
    return value
