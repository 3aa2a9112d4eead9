"""The admin as the editor of runtime schedules (``runnerq_schedules``).

List, create, edit, clone, pause and resume, delete and "run now". Every write goes through
``runnerq_django.scheduler.rows`` (the API's validation -- the declared jobs' rules and messages,
by field -- its row lock and its history row, recorded as ``admin <username>``), and Django's own
``LogEntry`` records it too. While editing, the form previews the next occurrences in the
schedule's zone (``preview/``, as the fields change); the change page shows the last occurrences
with links to their activities and the schedule's history.

Permissions are Django's: view-only users see everything and change nothing; pause, resume and
"run now" need the change permission, like editing.

Internal: not part of the public API.
"""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseNotAllowed, HttpResponseRedirect, JsonResponse
from django.urls import path, reverse
from django.utils.html import format_html

from runnerq_django.models import RuntimeSchedule, ScheduleChange
from runnerq_django.scheduler import rows
from runnerq_django.scheduler.schedules import ScheduleError, zone

if TYPE_CHECKING:
    from django.db.models import QuerySet
    from django.http import HttpRequest, HttpResponse
    from django.urls import URLPattern

    _ModelAdmin = admin.ModelAdmin[RuntimeSchedule]
else:
    _ModelAdmin = admin.ModelAdmin

PREVIEW_COUNT = 5
LAST_OCCURRENCES = 10
HISTORY_SHOWN = 30
BOOKKEEPING = (
    "revision",
    "occurrence_count",
    "timing_changed_at",
    "created_at",
    "created_by",
    "updated_at",
    "updated_by",
)


def actor_of(request: HttpRequest) -> str:
    return f"admin {request.user.get_username()}"


if TYPE_CHECKING:
    # django-stubs' ModelForm is generic in its model; Django's is not subscriptable.
    _ScheduleModelForm = forms.ModelForm[RuntimeSchedule]
else:
    _ScheduleModelForm = forms.ModelForm


class ScheduleForm(_ScheduleModelForm):
    """The row's fields, checked by the API's rules (the messages ``manage.py check`` gives)."""

    class Meta:
        model = RuntimeSchedule
        fields = ["id", *rows.EDITABLE]
        widgets = {
            "description": forms.Textarea(attrs={"rows": 2}),
            "payload": forms.Textarea(attrs={"rows": 3}),
            **{
                name: forms.TextInput(attrs={"size": 40})
                for name in ("id", "activity", "queue", "cron", "tz")
            },
        }

    def clean(self) -> dict[str, Any]:
        cleaned = super().clean() or {}
        schedule_id = cleaned.get("id") or (self.instance.pk if self.instance.pk else "")
        values = {name: cleaned.get(name) for name in rows.EDITABLE if name in cleaned}
        for column, problems in rows.problems_by_field(str(schedule_id), values).items():
            for problem in problems:
                self.add_error(column if column in self.fields else None, problem)
        return cleaned


def _zone_name(row_or_values: Any) -> str:
    kind = getattr(row_or_values, "kind", None) or "cron"
    tz = getattr(row_or_values, "tz", None) or "UTC"
    return tz if kind == "cron" else "UTC"


def _in_zone(moment: datetime, tz: str) -> str:
    try:
        local = moment.astimezone(zone(tz))
    except ScheduleError:
        local = moment.astimezone(UTC)
    return local.strftime("%Y-%m-%d %H:%M:%S %Z (UTC%z)")


class ScheduleAdmin(_ModelAdmin):
    form = ScheduleForm
    list_display = (
        "id",
        "enabled",
        "timing_col",
        "activity",
        "queue",
        "next_col",
        "revision",
        "updated_at",
        "updated_by",
    )
    list_filter = ("enabled", "kind")
    search_fields = ("id", "activity", "description")
    ordering = ("id",)
    list_per_page = 100
    show_full_result_count = False
    readonly_fields = BOOKKEEPING
    actions = ("pause_selected", "resume_selected", "run_selected")
    change_form_template = "admin/runnerq_django/schedule_change_form.html"

    def get_readonly_fields(self, request: HttpRequest, obj: RuntimeSchedule | None = None) -> Any:
        # The id is the schedule's identity (its record, its idempotency keys): fixed once created.
        return (("id",) if obj is not None else ()) + BOOKKEEPING

    def get_fieldsets(self, request: HttpRequest, obj: RuntimeSchedule | None = None) -> Any:
        return [
            (None, {"fields": ["id", "activity", "payload", "queue", "priority", "description", "enabled"]}),
            (
                "Timing",
                {"fields": ["kind", "cron", "tz", "every_seconds", "anchor", "at", "start_at", "end_at"]},
            ),
            (
                "Missed runs",
                {
                    "fields": [
                        "misfire_grace_seconds",
                        "coalesce",
                        "max_catch_up",
                        "catch_up_after_repair",
                        "jitter_seconds",
                        "max_occurrences",
                    ]
                },
            ),
            ("Bookkeeping", {"fields": list(BOOKKEEPING), "classes": ["collapse"]}),
        ]

    # --- the list ----------------------------------------------------------------------------
    def action_checkbox(self, obj: RuntimeSchedule) -> Any:
        """The stock checkbox as plain HTML: rendering a widget through the form templates for
        every row was a quarter of the list's time."""
        return format_html(
            '<input type="checkbox" name="{}" value="{}" class="action-select" aria-label="Select schedule {}">',
            helpers.ACTION_CHECKBOX_NAME,
            obj.pk,
            obj.pk,
        )

    @admin.display(description="timing")
    def timing_col(self, obj: RuntimeSchedule) -> str:
        try:
            return rows.job_of(obj).schedule.describe()
        except Exception as exc:  # a row written by hand that no longer validates
            return format_html('<span class="rq-warn">invalid: {}</span>', exc)

    @admin.display(description="next occurrence")
    def next_col(self, obj: RuntimeSchedule) -> str:
        if not obj.enabled:
            return "paused"
        try:
            job = rows.job_of(obj)
            if job.finished:
                return "finished (cap reached)"
            # The second, not the microsecond: rows sharing an expression share one computation.
            found = job.schedule.next_after(datetime.now(UTC).replace(microsecond=0))
        except Exception:
            return "—"
        return _in_zone(found, _zone_name(obj)) if found is not None else "never again"

    # --- writes go through the API -------------------------------------------------------------
    def save_model(self, request: HttpRequest, obj: RuntimeSchedule, form: Any, change: bool) -> None:
        values = {name: form.cleaned_data.get(name) for name in rows.EDITABLE if name in form.cleaned_data}
        activity = values.pop("activity")
        if change:
            saved = rows.update(obj.pk, activity=activity, actor=actor_of(request), **values)
        else:
            saved = rows.create(obj.id, activity=activity, actor=actor_of(request), **values)
        for name in (*rows.EDITABLE, *BOOKKEEPING):
            setattr(obj, name, getattr(saved, name))
        obj._state.adding = False

    def delete_model(self, request: HttpRequest, obj: RuntimeSchedule) -> None:
        rows.delete(obj.pk, actor=actor_of(request))

    def delete_queryset(self, request: HttpRequest, queryset: QuerySet[RuntimeSchedule]) -> None:
        for row_id in queryset.values_list("pk", flat=True):
            rows.delete(row_id, actor=actor_of(request))

    # --- actions (the change permission) --------------------------------------------------------
    @admin.action(description="Pause the selected schedules", permissions=["change"])
    def pause_selected(self, request: HttpRequest, queryset: QuerySet[RuntimeSchedule]) -> None:
        for row in queryset:
            self._pause(request, row, pause=True)

    @admin.action(description="Resume the selected schedules", permissions=["change"])
    def resume_selected(self, request: HttpRequest, queryset: QuerySet[RuntimeSchedule]) -> None:
        for row in queryset:
            self._pause(request, row, pause=False)

    @admin.action(description="Run the selected schedules now (one activity each)", permissions=["change"])
    def run_selected(self, request: HttpRequest, queryset: QuerySet[RuntimeSchedule]) -> None:
        for row in queryset:
            self._run(request, row, None)

    def _pause(self, request: HttpRequest, row: RuntimeSchedule, *, pause: bool) -> None:
        saved = (rows.pause if pause else rows.resume)(row.pk, actor=actor_of(request))
        verb = "Paused" if pause else "Resumed"
        self.log_change(request, saved, f"{verb} (revision {saved.revision})")
        messages.success(request, f"{verb} schedule {row.pk!r}.")

    def _run(self, request: HttpRequest, row: RuntimeSchedule, command_id: str | None) -> None:
        try:
            activity_id, created = rows.run_now(row.pk, actor=actor_of(request), command_id=command_id)
        except Exception as exc:
            messages.error(request, f"Schedule {row.pk!r} could not run: {type(exc).__name__}: {exc}")
            return
        link = reverse("admin:runnerq_django_activity_change", args=[str(activity_id)])
        if created:
            self.log_change(request, row, f"Ran now: activity {activity_id}")
            messages.success(
                request, format_html('Schedule {} enqueued <a href="{}">{}</a>.', row.pk, link, activity_id)
            )
        else:
            messages.info(
                request, format_html('Already run by this form: <a href="{}">{}</a>.', link, activity_id)
            )

    # --- pages --------------------------------------------------------------------------------
    def get_urls(self) -> list[URLPattern]:
        prefix = f"{self.opts.app_label}_{self.opts.model_name}"
        wrap = self.admin_site.admin_view
        return [
            path("preview/", wrap(self.preview_view), name=f"{prefix}_preview"),
            path("<path:object_id>/operate/", wrap(self.operate_view), name=f"{prefix}_operate"),
            path("<path:object_id>/clone/", wrap(self.clone_view), name=f"{prefix}_clone"),
            *super().get_urls(),
        ]

    def preview_view(self, request: HttpRequest) -> HttpResponse:
        """The next occurrences of the form's timing, in the schedule's zone (JSON)."""
        if not (self.has_add_permission(request) or self.has_change_permission(request)):
            raise PermissionDenied
        values: dict[str, Any] = {}
        for name in ("kind", "cron", "tz"):
            text = request.GET.get(name, "").strip()
            if text:
                values[name] = text
        for name in ("anchor", "at", "start_at", "end_at"):
            text = request.GET.get(name, "").strip()
            if text:
                values[name] = _instant(text)
        every = request.GET.get("every_seconds", "").strip()
        if every:
            try:
                values["every_seconds"] = int(every)
            except ValueError:
                return JsonResponse({"errors": {"every_seconds": [f"every: not a whole number: {every!r}"]}})
        try:
            found = rows.preview(values, count=PREVIEW_COUNT)
        except rows.ScheduleInvalid as exc:
            return JsonResponse({"errors": exc.errors})
        tz = values.get("tz", "UTC") if values.get("kind", "cron") == "cron" else "UTC"
        return JsonResponse({"zone": tz, "next": [_in_zone(moment, tz) for moment in found]})

    def operate_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        """The change page's buttons: pause, resume, run now (POST, the change permission)."""
        if request.method != "POST":
            return HttpResponseNotAllowed(["POST"])
        row = self.get_object(request, object_id)
        if row is None:
            return HttpResponseRedirect(reverse("admin:runnerq_django_runtimeschedule_changelist"))
        if not self.has_change_permission(request, row):
            raise PermissionDenied
        operation = request.POST.get("operation")
        if operation in ("pause", "resume"):
            self._pause(request, row, pause=operation == "pause")
        elif operation == "run":
            self._run(request, row, request.POST.get("command_id") or None)
        else:
            messages.error(request, f"Unknown operation {operation!r}.")
        return HttpResponseRedirect(reverse("admin:runnerq_django_runtimeschedule_change", args=[row.pk]))

    def clone_view(self, request: HttpRequest, object_id: str) -> HttpResponse:
        if not self.has_add_permission(request):
            raise PermissionDenied
        return HttpResponseRedirect(
            reverse("admin:runnerq_django_runtimeschedule_add") + f"?clone={uuid.uuid4().hex}:{object_id}"
        )

    def get_changeform_initial_data(self, request: HttpRequest) -> dict[str, Any]:
        initial: dict[str, Any] = dict(super().get_changeform_initial_data(request))
        source_id = request.GET.get("clone", "").partition(":")[2]
        if source_id:
            initial.pop("clone", None)
            source = RuntimeSchedule.objects.filter(pk=source_id).first()
            if source is not None:
                for name in rows.EDITABLE:
                    value = getattr(source, name)
                    initial[name] = json.dumps(value) if name == "payload" else value
                initial["id"] = f"{source.pk}-copy"
        return initial

    def change_view(
        self,
        request: HttpRequest,
        object_id: str,
        form_url: str = "",
        extra_context: dict[str, Any] | None = None,
    ) -> HttpResponse:
        row = self.get_object(request, object_id)
        extra = dict(extra_context or {})
        if row is not None:
            extra.update(self._panels(request, row))
        return super().change_view(request, object_id, form_url, extra)

    def add_view(
        self, request: HttpRequest, form_url: str = "", extra_context: dict[str, Any] | None = None
    ) -> HttpResponse:
        extra = dict(extra_context or {})
        extra["rq_preview_url"] = reverse("admin:runnerq_django_runtimeschedule_preview")
        return super().add_view(request, form_url, extra)

    def _panels(self, request: HttpRequest, row: RuntimeSchedule) -> dict[str, Any]:
        from runnerq_django import conf
        from runnerq_django.models import PeriodicOccurrence

        tz = _zone_name(row)
        try:
            upcoming = [_in_zone(moment, tz) for moment in rows.preview(_values(row), count=PREVIEW_COUNT)]
        except rows.ScheduleInvalid as exc:
            upcoming = [f"invalid: {exc}"]
        namespace = conf.scheduler_settings().namespace
        last = [
            {
                "occurrence": _in_zone(occurrence.occurrence, tz),
                "activity_id": occurrence.activity_id,
                "link": reverse("admin:runnerq_django_activity_change", args=[str(occurrence.activity_id)])
                if occurrence.activity_id
                else None,
            }
            for occurrence in PeriodicOccurrence.objects.filter(namespace=namespace, job_id=row.pk).order_by(
                "-occurrence"
            )[:LAST_OCCURRENCES]
        ]
        changes = list(
            ScheduleChange.objects.filter(schedule_id=row.pk).order_by("-at", "-id")[:HISTORY_SHOWN]
        )
        return {
            "rq_schedule": row,
            "rq_zone": tz,
            "rq_upcoming": upcoming,
            "rq_last": last,
            "rq_changes": changes,
            "rq_can_operate": self.has_change_permission(request, row),
            "rq_command_id": uuid.uuid4().hex,
            "rq_preview_url": reverse("admin:runnerq_django_runtimeschedule_preview"),
        }


def _instant(text: str) -> datetime | str:
    """A form's date and time (the admin's, in the current time zone) or an ISO instant."""
    from django.utils import timezone

    try:
        moment = datetime.fromisoformat(text.replace("Z", "+00:00"))
    except ValueError:
        return text  # refused by the rules, with their message
    return timezone.make_aware(moment) if timezone.is_naive(moment) else moment


def _values(row: RuntimeSchedule) -> dict[str, Any]:
    return {name: getattr(row, name) for name in rows.EDITABLE} | {"timing_changed_at": row.timing_changed_at}


admin.site.register(RuntimeSchedule, ScheduleAdmin)
