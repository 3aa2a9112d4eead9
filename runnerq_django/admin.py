"""The Django admin as RunnerQ's operator console.

- Queues overview (``activity/overview/``, linked from the admin index): per queue, counts by
  status, the oldest runnable activity's age, completions and failures over 5 and 60 minutes,
  worker pools with capacity and last heartbeat, dead letters with a link to their list.
- Live console (on the overview; data from ``activity/overview/live.json``, see
  ``admin_views.live``): charts and live lists refreshed by a static script, pausable.
- Activities: a list that stays fast on millions of rows (index-ordered, statuses as literals,
  no whole-table count), and a detail page with the input, result, timeline, durable steps,
  signals, tree, dependencies, workers and why the activity is blocked.
- Events: the stored history, filterable by queue, type and time.
- Scheduler (``activity/scheduler/``): the declared periodic jobs and their cache records,
  read-only.
- Debounce and throttle windows (``activity/windows/``): each key's activity and how many
  enqueues collapsed into it; an activity's page names its window.
- Actions (retry, redrive, cancel, run now, reschedule, set priority, delete a finished tree)
  go through ``runnerq_django.storage.commands`` and need ``runnerq_django.operate_activity``.
- With ``RUNNERQ['READ_REPLICA']`` the pages read that replica and say its lag; actions (and the
  reads they decide on) run on the primary (``guard.read_alias``).

The models with composite primary keys (idempotency keys, dependencies, the command ledger) have
no changelist of their own: Django's admin cannot address their rows. They appear on the
activity detail page and the overview instead.

Internal: not part of the public API.
"""

from __future__ import annotations

import uuid
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, cast
from urllib.parse import urlencode

from django.contrib import admin
from django.contrib.admin.utils import unquote
from django.contrib.admin.views.main import ChangeList
from django.core.exceptions import PermissionDenied
from django.db.models import IntegerField, Q
from django.db.models.expressions import RawSQL
from django.forms import CheckboxInput
from django.template.response import TemplateResponse
from django.urls import path, reverse
from django.utils import timezone
from django.utils.html import format_html
from django.utils.safestring import SafeString
from django.utils.text import Truncator

from runnerq_django import conf
from runnerq_django.admin_views import actions as operator_actions
from runnerq_django.admin_views import changelist as cl
from runnerq_django.admin_views import database as admin_database
from runnerq_django.admin_views import flow as flow_admin
from runnerq_django.admin_views import fork as admin_fork
from runnerq_django.admin_views import guard, queries
from runnerq_django.admin_views import progress as admin_progress
from runnerq_django.admin_views import windows as windows_admin
from runnerq_django.admin_views.safe import (
    ACTIVITY_TIMES,
    LIST_TEXT_CHARS,
    MAX_JSON_CHARS,
    MAX_TEXT_CHARS,
    decoded,
    infinite_of,
    lengths_of,
    safe_rows,
    visible,
)
from runnerq_django.models import Activity, Event, TextArrayField, WorkerPool
from runnerq_django.spec.keys import application_key
from runnerq_django.spec.statuses import canonical_status
from runnerq_django.storage.reads import pool_types

if TYPE_CHECKING:
    from django.db.models import Model, QuerySet
    from django.http import HttpRequest, HttpResponse
    from django.urls import URLPattern

    # django-stubs' ModelAdmin is generic in its model; Django's is not subscriptable.
    _ModelAdmin = admin.ModelAdmin[Any]
else:
    _ModelAdmin = admin.ModelAdmin

OPERATE_PERMISSION = "runnerq_django.operate_activity"
# Seconds between two refreshes of the overview's live console (the rollups change every
# CONSOLE_ROLLUP_SECONDS; one refresh reads only them, so a few seconds is cheap).
LIVE_REFRESH_SECONDS = 3


def _time(obj: Model, name: str) -> str:
    """``obj.name`` compactly, or the stored text of an infinite timestamp (see ``safe_rows``)."""
    value = getattr(obj, name)
    infinite: str | None = getattr(obj, "rq_infinite", {}).get(name)
    if infinite:
        return format_html(
            '<span class="rq-warn" title="stored as {}: no Python datetime can hold it">{}</span>',
            infinite,
            infinite,
        )
    if value is None:
        return "—"
    local = timezone.localtime(value)
    now = timezone.localtime()
    text = local.strftime("%H:%M:%S") if local.date() == now.date() else local.strftime("%b %d %H:%M")
    return format_html('<span title="{}">{}</span>', local.isoformat(timespec="milliseconds"), text)


def _time_column(name: str, description: str) -> Callable[[Any, Model], str]:
    """A list column showing the timestamp ``name`` of each row (see ``_time``)."""

    @admin.display(description=description)
    def column(model_admin: Any, obj: Model) -> str:
        return _time(obj, name)

    return column


def status_badge(status: str) -> str:
    return format_html(
        '<span class="rq-status rq-{}" title="stored status: {}">{}</span>',
        status,
        status,
        canonical_status(status).replace("_", " "),
    )


def _mono(text: object, chars: int = 24) -> str:
    """An id, token, type or queue: shown with its invisible characters spelled out, cut to ``chars``."""
    shown = visible(text)
    return format_html('<span class="rq-mono" title="{}">{}</span>', shown, Truncator(shown).chars(chars))


def alive_seconds() -> float:
    return max(30.0, 3 * float(conf.get("HEARTBEAT_SECONDS") or 10))


class ReadOnlyAdmin(_ModelAdmin):
    """RunnerQ rows change only through the storage layer (operator actions), never by a form.

    Every page reads through ``safe_rows`` (``safe_times`` finite-or-None, ``safe_texts`` cut in
    SQL) under ``guard.run``, and a list takes only the query parameters its own filters use."""

    safe_times: tuple[str, ...] = ()
    safe_texts: dict[str, int] = {}
    safe_ids: tuple[str, ...] = ()

    class Media:
        css = {"all": ("runnerq_django/admin.css",)}

    def get_queryset(self, request: HttpRequest) -> QuerySet[Any]:
        # guard.read_alias(): the page's database (the "By database" filter when queues live on
        # several), or the read replica of RUNNERQ['DATABASE'] for a page; the primary for an action.
        queryset = super().get_queryset(request).using(guard.read_alias())
        return safe_rows(queryset, times=self.safe_times, texts=self.safe_texts, ids=self.safe_ids)

    def get_list_filter(self, request: HttpRequest) -> tuple[Any, ...]:
        own = tuple(super().get_list_filter(request))
        return (cl.DatabaseFilter, *own) if admin_database.several() else own

    def get_list_display(self, request: HttpRequest) -> tuple[Any, ...]:
        own = tuple(super().get_list_display(request))
        return (*own, "database_col") if admin_database.several() else own

    @admin.display(description="database")
    def database_col(self, obj: Model) -> str:
        return _mono(admin_database.current())

    def lookup_allowed(self, lookup: str, value: str, request: HttpRequest | None = None) -> bool:
        """Only the filters' own parameters: any other lookup (``activity_type__regex``,
        ``last_error__icontains``) could scan a table of millions for a view-only user."""
        allowed: set[str | None] = set()
        for list_filter in self.get_list_filter(request) if request is not None else self.list_filter:
            if isinstance(list_filter, str):
                allowed |= {f"{list_filter}__exact", f"{list_filter}__isnull"}
            else:  # our lists filter by field names or by SimpleListFilter classes
                allowed.add(cast("type[admin.SimpleListFilter]", list_filter).parameter_name)
        return lookup in allowed

    def changelist_view(
        self, request: HttpRequest, extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        def view() -> HttpResponse:
            context = {**(extra_context or {})}
            if request.method in ("GET", "HEAD"):  # a list read from a replica says how stale it is
                context["replica"] = queries.replica_state()
            return super(ReadOnlyAdmin, self).changelist_view(request, context)

        return guard.run(self, request, view)

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        """A row's own page (events, worker pools): read like the lists (replica, timeout)."""
        return guard.run(
            self,
            request,
            lambda: super(ReadOnlyAdmin, self).change_view(request, object_id, form_url, extra_context),
        )

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: Model | None = None) -> bool:
        return False

    def get_search_results(
        self, request: HttpRequest, queryset: QuerySet[Any], search_term: str
    ) -> tuple[QuerySet[Any], bool]:
        """The list's own ``search`` of the stripped term: ids and exact matches, never Django's
        ``icontains`` over ``search_fields``, which would scan a table of millions."""
        term = search_term.strip()
        if not term:
            return queryset, False
        return self.search(request, queryset, term), False

    def search(self, request: HttpRequest, queryset: QuerySet[Any], term: str) -> QuerySet[Any]:
        return queryset  # a list without a search box

    @admin.display(description="queue")
    def queue_col(self, obj: Activity | Event | WorkerPool) -> str:
        return _mono(obj.queue_name)


class OperatorMixin:
    def has_operate_permission(self, request: HttpRequest) -> bool:
        return request.user.is_active and request.user.has_perm(OPERATE_PERMISSION)


# The console's entry on the admin index. An app's admin/index.html could not win the template
# lookup (django.contrib.admin comes first in INSTALLED_APPS), but the site's documented
# index_template can name ours, which extends the stock index. A project with its own index
# template keeps it (and can include "admin/runnerq_django/console_links.html").
if admin.site.index_template is None:
    admin.site.index_template = "admin/runnerq_django/index.html"


@admin.register(Activity)
class ActivityAdmin(OperatorMixin, ReadOnlyAdmin):
    list_display = (
        "short_id",
        "status_col",
        "type_col",
        "queue_col",
        "key_col",
        "priority",
        "attempt_col",
        "created_col",
        "scheduled_col",
        "started_col",
        "completed_col",
        "worker_col",
        "progress_col",
        "error_col",
    )
    list_display_links = ("short_id",)
    list_filter = (cl.QueueFilter, cl.StatusFilter, cl.TypeFilter)
    # The search is ours (get_search_results); a non-empty search_fields shows the box.
    search_fields = ("id",)
    search_help_text = (
        "An activity id, an idempotency key (the application key, or the stored rq:key:… form) "
        "or an activity type."
    )
    ordering = ("-created_at", "-id")  # walks idx_runnerq_query_created (or idx_runnerq_query_status)
    sortable_by = ()
    paginator = cl.CappedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 50
    list_max_show_all = 200
    actions = operator_actions.admin_actions()
    safe_times = ACTIVITY_TIMES
    safe_texts = {"last_error": LIST_TEXT_CHARS}
    safe_ids = ("activity_type", "current_worker_id", "last_worker_id")

    def get_queryset(self, request: HttpRequest) -> QuerySet[Activity]:
        return super().get_queryset(request).defer("metadata")  # the detail page reads it as cut text

    # -- columns ----------------------------------------------------------------------------------

    def action_checkbox(self, obj: Activity) -> SafeString:
        """The stock checkbox, labelled by the id alone (``str(obj)`` would carry the stored type)."""
        attrs = {"class": "action-select", "aria-label": f"Select activity {obj.pk} for an action"}
        return CheckboxInput(attrs, lambda value: False).render(
            admin.helpers.ACTION_CHECKBOX_NAME, str(obj.pk)
        )

    @admin.display(description="id")
    def short_id(self, obj: Activity) -> str:
        return format_html('<span title="{}" class="rq-mono">{}</span>', obj.id, str(obj.id)[:8])

    @admin.display(description="activity type")
    def type_col(self, obj: Activity) -> str:
        return _mono(obj.activity_type, 40)

    @admin.display(description="status")
    def status_col(self, obj: Activity) -> str:
        return status_badge(obj.status)

    @admin.display(description="key")
    def key_col(self, obj: Activity) -> str:
        """The idempotency key decoded as the application key (step keys of children are not shown)."""
        if not obj.idempotency_key:
            return ""
        shown = application_key(obj.idempotency_key, obj.activity_type)
        if not shown:
            return ""
        return format_html(
            '<span title="{}">{}</span>',
            Truncator(visible(obj.idempotency_key)).chars(LIST_TEXT_CHARS),
            Truncator(visible(shown)).chars(24),
        )

    @admin.display(description="attempt")
    def attempt_col(self, obj: Activity) -> str:
        return f"{obj.retry_count + 1} / {obj.max_retries or '∞'}"

    created_col = _time_column("created_at", "created")
    scheduled_col = _time_column("scheduled_at", "scheduled")
    started_col = _time_column("started_at", "started")
    completed_col = _time_column("completed_at", "completed")

    @admin.display(description="worker")
    def worker_col(self, obj: Activity) -> str:
        token = obj.current_worker_id or obj.last_worker_id
        return _mono(token) if token else "—"

    @admin.display(description="progress")
    def progress_col(self, obj: Activity) -> str:
        return admin_progress.cell(obj)  # read for the whole page by admin_progress.ProgressChangeList

    def get_changelist(self, request: HttpRequest, **kwargs: Any) -> type[ChangeList]:
        return admin_progress.ProgressChangeList

    @admin.display(description="last error")
    def error_col(self, obj: Activity) -> str:
        if not obj.last_error:
            return ""
        # obj.last_error is already cut to LIST_TEXT_CHARS in SQL (a 4 MiB error stays in Postgres).
        return format_html('<span title="{}">{}</span>', obj.last_error, Truncator(obj.last_error).chars(60))

    def response_action(
        self, request: HttpRequest, queryset: QuerySet[Any], *args: Any, **kwargs: Any
    ) -> HttpResponse | None:
        """Django's, once every selected value is an activity id (Django would fail on another
        with a 500 when it filters by them)."""
        operator_actions.selected_ids(request)
        return super().response_action(request, queryset, *args, **kwargs)

    # -- search -----------------------------------------------------------------------------------

    def search(self, request: HttpRequest, queryset: QuerySet[Any], term: str) -> QuerySet[Any]:
        try:
            return queryset.filter(id=uuid.UUID(term))
        except ValueError:
            pass
        queues = cl._cached(request, "queues", lambda: queries.known_queues(queries.QUEUE_SCAN_LIMIT))
        chosen_queue = request.GET.get(cl.QueueFilter.parameter_name)
        types = cl._cached(
            request, "types", lambda: queries.known_types([chosen_queue] if chosen_queue else None)
        )
        queues = cl._with_chosen(queues, chosen_queue)
        types = cl._with_chosen(types, request.GET.get(cl.TypeFilter.parameter_name))
        ids = queries.ids_for_key(term, queues, types)
        if term in types:
            return queryset.filter(Q(activity_type=term) | Q(id__in=ids))
        if ids:
            # Primary-key lookups only: an OR with an unindexed type match would scan the table.
            return queryset.filter(id__in=ids)
        # Not a key and not a type we know of (types only ever completed are not in the
        # indexes): an exact type match, the one search that walks the whole created index.
        return queryset.filter(activity_type=term)

    # -- views ------------------------------------------------------------------------------------

    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.model._meta.app_label}_{self.model._meta.model_name}"
        own = [
            path("overview/", self.admin_site.admin_view(self.overview_view), name=f"{prefix}_overview"),
            path("overview/live.json", self.admin_site.admin_view(self.live_view), name=f"{prefix}_live"),
            path("scheduler/", self.admin_site.admin_view(self.scheduler_view), name=f"{prefix}_scheduler"),
            path("flow/", self.admin_site.admin_view(self.flow_view), name=f"{prefix}_flow"),
            path("windows/", self.admin_site.admin_view(self.windows_view), name=f"{prefix}_windows"),
            path("<path:object_id>/fork/", self.admin_site.admin_view(self.fork_view), name=f"{prefix}_fork"),
        ]
        return own + super().get_urls()

    def _context(self, request: HttpRequest, title: str, **extra: Any) -> dict[str, Any]:
        return {
            **self.admin_site.each_context(request),
            "opts": self.model._meta,
            "title": title,
            "can_operate": self.has_operate_permission(request),
            **extra,
        }

    def fork_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """POST: re-run the activity from a step (admin_views.fork)."""
        if request.method != "POST" or not self.has_operate_permission(request):
            raise PermissionDenied
        try:
            uuid.UUID(object_id)
        except ValueError:
            raise PermissionDenied from None
        return guard.run(self, request, lambda: admin_fork.post(request, object_id))

    def overview_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        return guard.run(self, request, lambda: self._overview(request))

    def _overview(self, request: HttpRequest) -> TemplateResponse:
        data = queries.overview()
        changelist = reverse("admin:runnerq_django_activity_changelist")
        # The lists it links to show the overview's database (?database=, when there are several).
        on = {"database": admin_database.current()} if admin_database.several() else {}
        for summary in data["queues"]:
            summary.dead_letter_url = (
                f"{changelist}?{urlencode({'queue': summary.name, 'status': 'dead_letter', **on})}"
            )
            summary.list_url = f"{changelist}?{urlencode({'queue': summary.name, **on})}"
        flow_url = reverse("admin:runnerq_django_activity_flow")
        paused = flow_admin.overview_context([summary.name for summary in data["queues"]])
        for summary in data["queues"]:
            summary.paused = paused["pauses_by_queue"][summary.name]
            summary.paused_more = paused["pause_counts"].get(summary.name, 0) - len(summary.paused)
            if summary.paused_more > 0:  # the pauses page from the last one shown on the card
                last = summary.paused[-1]
                cursor = f"{last.queue_name}/{last.activity_type}"
                summary.paused_more_url = f"{flow_url}?{urlencode({'after': cursor})}"
        context = self._context(
            request,
            "Queues overview" + (f" (database {admin_database.current()})" if on else ""),
            **data,
            pauses=paused["pauses"],
            pause_total=paused["pause_total"],
            flow_changes=paused["flow_changes"],
            slots=paused["slots"],
            flow_url=flow_url,
            now=timezone.now(),
            changelist_url=changelist,
            events_url=reverse("admin:runnerq_django_event_changelist"),
            scheduler_url=reverse("admin:runnerq_django_activity_scheduler"),
            **self._live_context(),
        )
        return TemplateResponse(request, "admin/runnerq_django/overview.html", context)

    def _read_page(
        self, request: HttpRequest, template: str, title: str, build: Callable[[], dict[str, Any]]
    ) -> HttpResponse:
        """A read-only console page: ``build()``'s context (run inside the database guard) with the
        links and the replica state every such page shows."""
        return guard.run(
            self,
            request,
            lambda: TemplateResponse(
                request,
                template,
                self._context(
                    request,
                    title,
                    **build(),
                    overview_url=reverse("admin:runnerq_django_activity_overview"),
                    replica=queries.replica_state(),
                ),
            ),
        )

    def windows_view(self, request: HttpRequest) -> HttpResponse:
        """The latest debounce and throttle windows (``?kind=debounce|throttle``)."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        return self._read_page(
            request,
            "admin/runnerq_django/windows.html",
            "Debounce and throttle windows",
            lambda: {
                **windows_admin.windows_page(request.GET.get("kind")),
                "windows_url": reverse("admin:runnerq_django_activity_windows"),
            },
        )

    def flow_view(self, request: HttpRequest) -> HttpResponse:
        """Every pause, a page at a time (GET), or pause or resume a queue or type (POST from the
        overview's forms; operate permission)."""
        if request.method in ("GET", "HEAD"):
            if not self.has_view_permission(request):
                raise PermissionDenied
            return self._read_page(
                request,
                "admin/runnerq_django/pauses.html",
                "Paused queues and types",
                lambda: {
                    **flow_admin.pauses_page(request.GET.get("after")),
                    "flow_url": reverse("admin:runnerq_django_activity_flow"),
                },
            )
        return flow_admin.post(
            request,
            can_operate=self.has_operate_permission(request),
            back=reverse("admin:runnerq_django_activity_overview"),
        )

    def _live_context(self) -> dict[str, Any]:
        """What the live console's include (live_console.html) needs."""
        rollup = float(conf.get("CONSOLE_ROLLUP_SECONDS") or 0)
        return {
            "live_url": reverse("admin:runnerq_django_activity_live")
            + (f"?database={admin_database.current()}" if admin_database.several() else ""),
            "live_rollup_seconds": rollup,
            "live_refresh_seconds": LIVE_REFRESH_SECONDS,
        }

    def live_view(self, request: HttpRequest) -> HttpResponse:
        """The live console's charts and lists as JSON (admin_views.live), for the overview's script."""
        if not self.has_view_permission(request):
            raise PermissionDenied
        from django.http import JsonResponse

        from runnerq_django.admin_views import live

        window = request.GET.get("window", "1h")
        if window not in live.WINDOWS:
            message = f"window: must be one of {', '.join(live.WINDOWS)}, got {window[:40]!r}"
            return JsonResponse({"error": message}, status=400)
        queue = request.GET.get("queue") or None

        def answer() -> HttpResponse:
            chosen = None if queue is None else guard.filter_value("queue", queue)
            return JsonResponse(live.live_data(window, chosen))

        return guard.run(self, request, answer)

    def scheduler_view(self, request: HttpRequest) -> HttpResponse:
        if not self.has_view_permission(request):
            raise PermissionDenied
        from runnerq_django.admin_views.scheduler import scheduler_context

        return guard.run(
            self,
            request,
            lambda: TemplateResponse(
                request,
                "admin/runnerq_django/scheduler.html",
                self._context(request, "Scheduler", **scheduler_context()),
            ),
        )

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        return guard.run(self, request, lambda: self._detail(request, object_id))

    def _detail(self, request: HttpRequest, object_id: str) -> HttpResponse:
        from runnerq_django.admin_views import detail

        try:
            activity_id = uuid.UUID(unquote(object_id))
        except ValueError:
            activity_id = None
        obj = self._activity(activity_id)
        if obj is None and activity_id and admin_database.several() and not admin_database.named(request):
            # Reached by a link that does not say its database (a child, the root, an event): the
            # activity is on the first other database that has it, and the page is read there.
            for alias in [a for a in admin_database.choices() if a != admin_database.current()]:
                with guard.page_on(alias):
                    obj = self._activity(activity_id)
                    if obj is not None:
                        response = self._detail_page(request, obj, detail)
                        if hasattr(response, "render"):
                            response.render()
                        return response
        if obj is None:
            # Django's own "no such object" redirect (private: django-stubs leave it out).
            redirect: HttpResponse = self._get_obj_does_not_exist_redirect(  # type: ignore[attr-defined]
                request, self.model._meta, object_id
            )
            return redirect
        return self._detail_page(request, obj, detail)

    def _activity(self, activity_id: uuid.UUID | None) -> Activity | None:
        """The activity on the page's database (the detail page shows a longer cut of last_error
        than the list)."""
        if activity_id is None:
            return None
        found: Activity | None = safe_rows(
            guard.rows(Activity).filter(id=activity_id),
            times=self.safe_times,
            texts={"last_error": MAX_TEXT_CHARS},
            pretty={"metadata": MAX_JSON_CHARS},
            ids=self.safe_ids,
        ).first()
        return found

    def _detail_page(self, request: HttpRequest, obj: Activity, detail: Any) -> HttpResponse:
        if not self.has_view_permission(request, obj):
            raise PermissionDenied
        on = f"database={admin_database.current()}" if admin_database.several() else ""
        context = self._context(
            request,
            f"{visible(obj.activity_type)} {obj.id}",
            **detail.build(obj, alive_seconds=alive_seconds()),
            original=obj,
            object_id=obj.id,
            changelist_url=reverse("admin:runnerq_django_activity_changelist"),
            # The page's database, for the actions' form and the queue's list (several databases).
            database_query=f"?{on}" if on else "",
            database_param=f"&{on}" if on else "",
            overview_url=reverse("admin:runnerq_django_activity_overview"),
            actions_available=self._detail_actions(obj),
            command_id=f"admin:{uuid.uuid4()}",
            action_checkbox_name=admin.helpers.ACTION_CHECKBOX_NAME,
            confirm_field=operator_actions.CONFIRM_FIELD,
            priorities=[(4, "4 critical"), (3, "3 high"), (2, "2 normal"), (1, "1 low")],
            now_local=timezone.localtime().strftime("%Y-%m-%dT%H:%M"),
            media=self.media,
            replica=queries.replica_state(),
        )
        return TemplateResponse(request, "admin/runnerq_django/activity/detail.html", context)

    def _detail_actions(self, obj: Activity) -> list[str]:
        """The actions that apply to this activity's current status (others would be skipped)."""
        is_root = obj.parent_activity_id is None
        return [name for name, op in operator_actions.ACTIONS.items() if op.applies_to(obj.status, is_root)]


@admin.register(Event)
class EventAdmin(ReadOnlyAdmin):
    list_display = ("id", "created_col", "type_col", "activity_link", "queue_col", "worker_col", "detail_col")
    list_filter = (cl.EventQueueFilter, cl.EventTypeFilter, cl.SinceFilter)
    search_fields = ("activity_id",)
    search_help_text = "An activity id."
    ordering = ("-id",)  # the primary key, or idx_runnerq_events_queue_seq with a queue filter
    sortable_by = ()
    paginator = cl.CappedCountPaginator
    show_full_result_count = False
    show_facets = admin.ShowFacets.NEVER
    list_per_page = 100
    actions = None
    safe_times = ("created_at",)
    safe_texts = {"detail": LIST_TEXT_CHARS}
    safe_ids = ("event_type", "worker_id")

    def search(self, request: HttpRequest, queryset: QuerySet[Any], term: str) -> QuerySet[Any]:
        try:
            return queryset.filter(activity_id=uuid.UUID(term))
        except ValueError:
            return queryset.none()

    created_col = _time_column("created_at", "at")

    @admin.display(description="event type")
    def type_col(self, obj: Event) -> str:
        return _mono(obj.event_type, 40)

    @admin.display(description="activity")
    def activity_link(self, obj: Event) -> str:
        url = reverse("admin:runnerq_django_activity_change", args=[obj.activity_id])
        return format_html(
            '<a class="rq-mono" href="{}" title="{}">{}</a>', url, obj.activity_id, str(obj.activity_id)[:8]
        )

    @admin.display(description="worker")
    def worker_col(self, obj: Event) -> str:
        return _mono(obj.worker_id) if obj.worker_id else "—"

    @admin.display(description="detail")
    def detail_col(self, obj: Event) -> str:
        """``k=v, ...`` of the detail when it was read whole, else its stored text (cut in SQL)."""
        if obj.detail is None:
            return ""
        length = lengths_of(obj)["detail"]
        value = decoded(obj.detail, length, LIST_TEXT_CHARS)
        if isinstance(value, dict):
            text = ", ".join(f"{k}={v}" for k, v in value.items() if k not in ("started_at",))
        else:
            text = obj.detail + ("…" if length is not None and length > LIST_TEXT_CHARS else "")
        return format_html(
            '<span title="{}">{}</span>', Truncator(text).chars(LIST_TEXT_CHARS), Truncator(text).chars(90)
        )


@admin.register(WorkerPool)
class WorkerPoolAdmin(ReadOnlyAdmin):
    list_display = (
        "pool_id",
        "queue_col",
        "max_workers",
        "types_col",
        "started_col",
        "last_seen_col",
        "alive_col",
    )
    list_filter = ("queue_name",)
    ordering = ("queue_name", "-last_seen_at")
    show_facets = admin.ShowFacets.NEVER
    safe_times = ("started_at", "last_seen_at")

    def get_queryset(self, request: HttpRequest) -> QuerySet[WorkerPool]:
        """The first types of each pool, cut, and their number (a type list of megabytes stays
        in Postgres)."""
        shown, count = pool_types("runnerq_worker_pools.activity_types")
        pools: QuerySet[WorkerPool] = super().get_queryset(request)
        return pools.defer("activity_types").annotate(
            rq_types=RawSQL(shown, (), output_field=TextArrayField()),
            rq_type_count=RawSQL(count, (), output_field=IntegerField()),
        )

    @admin.display(description="activity types")
    def types_col(self, obj: WorkerPool) -> str:
        shown: list[str] = getattr(obj, "rq_types", None) or []
        if not shown:
            return "all"
        more = getattr(obj, "rq_type_count", 0) - len(shown)
        return _mono(", ".join(shown) + (f" and {more:,} more" if more > 0 else ""), 90)

    started_col = _time_column("started_at", "started")
    last_seen_col = _time_column("last_seen_at", "last seen")

    @admin.display(description="alive", boolean=True)
    def alive_col(self, obj: WorkerPool) -> bool:
        if obj.last_seen_at is None:
            return infinite_of(obj).get("last_seen_at") == "infinity"
        return (timezone.now() - obj.last_seen_at).total_seconds() <= alive_seconds()


# The editor of runtime schedules (admin_views.schedules registers its ModelAdmin).
from runnerq_django.admin_views import schedules as _schedules  # noqa: E402, F401
