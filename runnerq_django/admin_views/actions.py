"""The operator actions of the activity admin: retry, redrive, cancel, run now, reschedule, set
priority, delete a finished tree.

Each one calls ``runnerq_django.storage.commands`` (which writes the spec's event and the
``runnerq_commands`` ledger row), needs the ``runnerq_django.operate_activity`` permission, shows
an intermediate page -- with a dry run of what would happen -- before acting on more than one
activity (or when it needs a parameter, or is destructive), and reports what was applied and what
was skipped and why as admin messages.

The command id is minted when the confirmation page (or the detail page) is rendered and travels
with the form, so a double-submitted form replays the recorded outcome instead of acting twice.
"""

from __future__ import annotations

import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass
from datetime import datetime
from typing import TYPE_CHECKING, Any, Protocol

from django import forms
from django.contrib import admin, messages
from django.contrib.admin import helpers
from django.core.exceptions import PermissionDenied
from django.http import HttpResponseRedirect
from django.template.response import TemplateResponse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme

from runnerq_django.admin_views import database
from runnerq_django.admin_views.guard import BadFormValue
from runnerq_django.storage import commands
from runnerq_django.storage.errors import StorageError

if TYPE_CHECKING:
    from django.contrib.admin import AdminSite
    from django.db.models import QuerySet
    from django.forms import Media
    from django.http import HttpRequest, HttpResponse

    from runnerq_django.models import Activity


class OperatorAdmin(Protocol):
    """What an action reads of the model admin that runs it (``admin.ActivityAdmin``, which
    imports this module to list the actions)."""

    model: type[Activity]
    admin_site: AdminSite

    @property
    def media(self) -> Media: ...

    def has_operate_permission(self, request: HttpRequest) -> bool: ...


if TYPE_CHECKING:
    # An admin action: (model admin, request, selected rows) -> a response, or None to stay.
    AdminAction = Callable[[OperatorAdmin, HttpRequest, QuerySet[Activity]], HttpResponse]

MAX_TARGETS = commands.MAX_IDS
CONFIRM_FIELD = "runnerq_confirm"
AFTER_FIELD = "runnerq_after"  # select-all past the cap: continue after this (created_at, id)

FINISHED = ("completed", "failed", "dead_letter", "cancelled")
UNFINISHED = ("pending", "scheduled", "retrying", "processing", "waiting")


class ReasonForm(forms.Form):
    reason = forms.CharField(
        required=False,
        max_length=500,
        label="Reason (recorded in the activity's history)",
        widget=forms.TextInput(attrs={"size": 60}),
    )


class RedriveForm(ReasonForm):
    reset_attempts = forms.BooleanField(
        required=False, initial=True, label="Reset attempts (give back the whole attempt budget)"
    )


class RescheduleForm(ReasonForm):
    at = forms.DateTimeField(
        label="New time",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local"}),
        input_formats=["%Y-%m-%dT%H:%M", "%Y-%m-%dT%H:%M:%S", "%Y-%m-%d %H:%M", "%Y-%m-%d %H:%M:%S"],
        help_text="In the current time zone.",
    )


class PriorityForm(ReasonForm):
    priority = forms.TypedChoiceField(
        coerce=int, choices=[(4, "4 critical"), (3, "3 high"), (2, "2 normal"), (1, "1 low")], initial=3
    )


@dataclass(frozen=True)
class OperatorAction:
    name: str
    label: str
    verb: str
    form: type[forms.Form]
    run: Callable[..., commands.CommandResult]
    always_confirm: bool = False
    needs_form: bool = False  # a parameter without a sensible default: always show the form page
    help: str = ""
    statuses: tuple[str, ...] = ()  # the statuses it acts on (others are skipped)
    roots_only: bool = False

    def applies_to(self, status: str, is_root: bool) -> bool:
        return status in self.statuses and (is_root or not self.roots_only)


def _retry(reset: bool) -> Callable[..., commands.CommandResult]:
    def run(queue: str, ids: list[uuid.UUID], data: dict[str, Any], **kw: Any) -> commands.CommandResult:
        return commands.retry(queue, ids, reset_attempts=reset, **kw)

    return run


ACTIONS: dict[str, OperatorAction] = {
    a.name: a
    for a in [
        OperatorAction(
            "retry_keep_attempts",
            "Retry failed, cancelled or dead-lettered (keep attempt count)",
            "Retry",
            ReasonForm,
            _retry(False),
            statuses=("failed", "cancelled", "dead_letter"),
            help="Failed and cancelled activities get a Retried event, dead letters a Redriven one; each "
            "gets one more attempt. Checkpoints are kept, so completed steps are not repeated.",
        ),
        OperatorAction(
            "retry_reset_attempts",
            "Retry failed, cancelled or dead-lettered (reset attempts)",
            "Retry",
            ReasonForm,
            _retry(True),
            statuses=("failed", "cancelled", "dead_letter"),
            help="As retry, and the attempt count starts again from zero.",
        ),
        OperatorAction(
            "redrive",
            "Redrive dead letters",
            "Redrive",
            RedriveForm,
            lambda queue, ids, data, **kw: commands.redrive(
                queue, ids, reset_attempts=data.get("reset_attempts", True), **kw
            ),
            help="Dead letters run again (Redriven event); anything else selected is skipped.",
            statuses=("dead_letter",),
        ),
        OperatorAction(
            "cancel",
            "Cancel (with their children)",
            "Cancel",
            ReasonForm,
            lambda queue, ids, data, **kw: commands.cancel(queue, ids, cascade=True, **kw),
            always_confirm=True,
            statuses=UNFINISHED,
            help="Unfinished activities and their unfinished descendants become cancelled; a running "
            "attempt loses its claim; whoever awaits them gets a cancellation error.",
        ),
        OperatorAction(
            "run_now",
            "Run now",
            "Run now",
            ReasonForm,
            lambda queue, ids, data, **kw: commands.run_now(queue, ids, **kw),
            help="Scheduled, retry-backoff and waiting activities become runnable now.",
            statuses=("scheduled", "retrying", "waiting"),
        ),
        OperatorAction(
            "reschedule",
            "Reschedule…",
            "Reschedule",
            RescheduleForm,
            lambda queue, ids, data, **kw: commands.reschedule(queue, ids, data["at"], **kw),
            needs_form=True,
            help="Scheduled (and retry-backoff) activities move to the new time.",
            statuses=("scheduled", "retrying"),
        ),
        OperatorAction(
            "set_priority",
            "Set priority…",
            "Set priority",
            PriorityForm,
            lambda queue, ids, data, **kw: commands.set_priority(queue, ids, data["priority"], **kw),
            needs_form=True,
            help="Unfinished activities get the new priority.",
            statuses=UNFINISHED,
        ),
        OperatorAction(
            "delete_tree",
            "Delete finished trees",
            "Delete",
            ReasonForm,
            lambda queue, ids, data, **kw: commands.delete_tree(queue, ids, **kw),
            always_confirm=True,
            help="Finished roots are deleted with their whole tree and history. Children, trees with "
            "unfinished work and trees another live workflow waits on are skipped.",
            statuses=FINISHED,
            roots_only=True,
        ),
    ]
}


def admin_actions() -> list[AdminAction]:
    """The ``ModelAdmin.actions`` entries, one function per operator action."""
    out: list[AdminAction] = []
    for op in ACTIONS.values():

        def action(
            modeladmin: OperatorAdmin,
            request: HttpRequest,
            queryset: QuerySet[Activity],
            op: OperatorAction = op,
        ) -> HttpResponse:
            return perform(modeladmin, request, queryset, op)

        action.__name__ = op.name
        out.append(admin.action(action, permissions=("operate",), description=op.label))
    return out


def _reason(request: HttpRequest, text: str | None) -> str:
    who = request.user.get_username()
    return f"admin {who}: {text}" if text else f"admin {who}"


def _aware(value: datetime | None) -> datetime | None:
    if value is not None and timezone.is_naive(value):
        return timezone.make_aware(value)
    return value


def _run(
    op: OperatorAction,
    targets: list[tuple[uuid.UUID, str]],
    data: dict[str, Any],
    *,
    command_id: str,
    reason: str | None,
    dry_run: bool,
) -> list[tuple[str, commands.CommandResult]]:
    by_queue: dict[str, list[uuid.UUID]] = defaultdict(list)
    for activity_id, queue in targets:
        by_queue[queue].append(activity_id)
    results = []
    for queue, ids in sorted(by_queue.items()):
        # One command per queue (commands act on one queue); the ledger key is (queue, command_id).
        # On the page's database (the list's "By database" filter), where the rows were read.
        results.append(
            (
                queue,
                op.run(
                    queue,
                    ids,
                    data,
                    command_id=command_id,
                    reason=reason,
                    dry_run=dry_run,
                    using=database.current(),
                ),
            )
        )
    return results


def summarize(op: OperatorAction, results: list[tuple[str, commands.CommandResult]]) -> dict[str, Any]:
    applied = sum(r.applied for _, r in results)
    would = sum(1 for _, r in results for i in r.results if i.outcome == commands.WOULD_APPLY)
    cascaded = sum(r.cascaded or 0 for _, r in results)
    replayed = any(r.replayed for _, r in results)
    reasons: dict[str, list[str]] = defaultdict(list)
    for _, r in results:
        for item in r.results:
            if item.outcome == commands.SKIPPED:
                reasons[item.error.message if item.error else "skipped"].append(item.id)
    return {
        "applied": applied,
        "would_apply": would,
        "cascaded": cascaded,
        "replayed": replayed,
        "skipped": sum(len(v) for v in reasons.values()),
        "reasons": dict(reasons),
    }


def report(
    request: HttpRequest, op: OperatorAction, results: list[tuple[str, commands.CommandResult]]
) -> None:
    s = summarize(op, results)
    noun = "activity" if s["applied"] == 1 else "activities"
    text = f"{op.verb}: applied to {s['applied']} {noun}"
    if s["cascaded"]:
        text += f" and {s['cascaded']} descendant{'s' if s['cascaded'] != 1 else ''}"
    if s["replayed"]:
        text += " (this command had already run: its recorded outcome is shown, nothing was done twice)"
    messages.add_message(
        request, messages.SUCCESS if s["applied"] or not s["skipped"] else messages.INFO, text + "."
    )
    if s["skipped"]:
        parts = []
        for reason, ids in s["reasons"].items():
            shown = ", ".join(ids[:5]) + (f" and {len(ids) - 5} more" if len(ids) > 5 else "")
            parts.append(f"{len(ids)} × {reason} ({shown})")
        messages.warning(request, f"{op.verb}: skipped {s['skipped']}: " + "; ".join(parts) + ".")


def _targets(
    queryset: QuerySet[Activity], op: OperatorAction, *, select_across: bool, after: str | None
) -> tuple[list[tuple[uuid.UUID, str]], bool, str | None]:
    """Up to ``MAX_TARGETS`` (id, queue) pairs, newest first, whether there are more, and the
    cursor after the last one. A select-all takes only rows ``op`` acts on, after ``after``, so
    a run stopped at the cap continues with the rest instead of picking the same rows again."""
    if select_across:
        queryset = queryset.filter(status__in=op.statuses)
        if op.roots_only:
            queryset = queryset.filter(parent_activity_id__isnull=True)
        if after:
            created_at, activity_id = _cursor(after)
            queryset = queryset.extra(
                where=[
                    "(runnerq_activities.created_at, runnerq_activities.id) < (%s::timestamptz, %s::uuid)"
                ],
                params=[created_at, activity_id],
            )
    # The admin's queryset reads created_at through safe_rows: finite, or None and its text.
    # (The plugin checks values_list names against the model's fields; these two are annotations.)
    rows = list(
        queryset.order_by("-created_at", "-id").values_list(  # type: ignore[misc]
            "id", "queue_name", "rq_created_at", "rq_created_at_raw"
        )[: MAX_TARGETS + 1]
    )
    more = len(rows) > MAX_TARGETS
    rows = rows[:MAX_TARGETS]
    cursor = None
    if rows:
        activity_id, _, created_at, raw = rows[-1]
        cursor = f"{raw or created_at.isoformat()}|{activity_id}"
    return [(r[0], r[1]) for r in rows], more, cursor


def _cursor(after: str) -> tuple[str, str]:
    """The (created_at, id) of a ``runnerq_after`` cursor as ``_targets`` wrote it: a forged one
    is refused (400) before Postgres would fail on it."""
    created_at, _, activity_id = after.rpartition("|")
    try:
        activity_id = str(uuid.UUID(activity_id))
        if created_at not in ("infinity", "-infinity"):
            created_at = datetime.fromisoformat(created_at).isoformat()
    except ValueError:
        raise BadFormValue(
            f"{AFTER_FIELD}: not a cursor of this console (<created_at>|<activity id>), got {after[:80]!r}"
        ) from None
    return created_at, activity_id


def selected_ids(request: HttpRequest) -> list[str]:
    """The posted ``_selected_action`` values, each an activity id (else 400, nothing done)."""
    ids = request.POST.getlist(helpers.ACTION_CHECKBOX_NAME)
    for value in ids:
        try:
            uuid.UUID(value)
        except ValueError:
            raise BadFormValue(
                f"{helpers.ACTION_CHECKBOX_NAME}: not an activity id, got {value[:80]!r}"
            ) from None
    return ids


def perform(
    modeladmin: OperatorAdmin, request: HttpRequest, queryset: QuerySet[Activity], op: OperatorAction
) -> HttpResponse:
    if not modeladmin.has_operate_permission(request):
        raise PermissionDenied
    select_across = request.POST.get("select_across") == "1"
    after = request.POST.get(AFTER_FIELD) or None
    targets, more, cursor = _targets(queryset, op, select_across=select_across, after=after)
    confirmed = request.POST.get(CONFIRM_FIELD) == "1"
    bulk = len(targets) > 1 or select_across
    form = op.form(request.POST if confirmed else None)
    if confirmed and form.is_valid():
        data = dict(form.cleaned_data)
        if "at" in data:
            data["at"] = _aware(data["at"])
        command_id = request.POST.get("command_id") or f"admin:{uuid.uuid4()}"
        try:
            results = _run(
                op,
                targets,
                data,
                command_id=command_id,
                reason=_reason(request, data.get("reason")),
                dry_run=False,
            )
        except StorageError as exc:
            messages.error(request, f"{op.verb}: nothing was done: {exc.message}")
            return _back(request)
        report(request, op, results)
        if more:
            messages.warning(
                request,
                f"{op.verb}: only the first {MAX_TARGETS:,} selected activities were acted on; "
                "the next ones are below: confirm to go on.",
            )
            rest, more, _ = _targets(queryset, op, select_across=True, after=cursor)
            return confirmation_page(
                modeladmin,
                request,
                op,
                rest,
                op.form(),
                more=more,
                select_across=True,
                after=cursor,
                command_id=f"admin:{uuid.uuid4()}",
            )
        return _back(request)
    if not confirmed and not bulk and not op.always_confirm and not op.needs_form:
        data = {"reset_attempts": True} if op.name == "redrive" else {}
        command_id = request.POST.get("command_id") or f"admin:{uuid.uuid4()}"
        try:
            results = _run(
                op, targets, data, command_id=command_id, reason=_reason(request, None), dry_run=False
            )
        except StorageError as exc:
            messages.error(request, f"{op.verb}: nothing was done: {exc.message}")
            return _back(request)
        report(request, op, results)
        return _back(request)
    return confirmation_page(
        modeladmin,
        request,
        op,
        targets,
        form,
        more=more,
        select_across=select_across,
        after=after,
        command_id=request.POST.get("command_id") or f"admin:{uuid.uuid4()}",
    )


def confirmation_page(
    modeladmin: OperatorAdmin,
    request: HttpRequest,
    op: OperatorAction,
    targets: list[tuple[uuid.UUID, str]],
    form: forms.Form,
    *,
    more: bool,
    select_across: bool,
    after: str | None,
    command_id: str,
) -> TemplateResponse:
    preview = None
    if not form.is_bound or form.is_valid():
        data: dict[str, Any] = (
            dict(form.cleaned_data)
            if form.is_bound
            else {"at": timezone.now(), "priority": 3, "reset_attempts": True}
        )
        if data.get("at") is not None:
            data["at"] = _aware(data["at"])
        try:
            preview = summarize(op, _run(op, targets, data, command_id="", reason=None, dry_run=True))
        except StorageError as exc:
            preview = {"error": exc.message}
    opts = modeladmin.model._meta
    context = {
        **modeladmin.admin_site.each_context(request),
        "title": f"{op.label}: are you sure?",
        "op": op,
        "opts": opts,
        "form": form,
        # A select-all travels as its filter (the page's query string), select_across and the
        # cursor, never as up to 1,000 ids: that many fields would pass Django's default
        # DATA_UPLOAD_MAX_NUMBER_FIELDS (1,000). One selected id stays, as Django's changelist
        # only runs an action when something is selected; it ignores it under select_across.
        "targets": (selected_ids(request)[:1] if select_across else [str(t[0]) for t in targets]),
        "preview_targets": targets[:50],
        "count": len(targets),
        "more": more,
        "select_across": select_across,
        "preview": preview,
        "command_id": command_id,
        "after_field": AFTER_FIELD,
        "after": after,
        "action_checkbox_name": helpers.ACTION_CHECKBOX_NAME,
        "confirm_field": CONFIRM_FIELD,
        "next": _same_host_path(request, request.POST.get("next")),
        "media": modeladmin.media + form.media,
    }
    return TemplateResponse(request, "admin/runnerq_django/activity/confirm_action.html", context)


def _same_host_path(request: HttpRequest, target: str | None) -> str:
    """``target`` if it is a path on this host (``/admin/...``), else ``""``: the confirmation
    page's links and the redirect after an action never lead elsewhere."""
    if not target or not target.startswith("/") or target.startswith("//"):
        return ""
    if not url_has_allowed_host_and_scheme(
        target, allowed_hosts={request.get_host()}, require_https=request.is_secure()
    ):
        return ""
    return target


def _back(request: HttpRequest) -> HttpResponseRedirect:
    return HttpResponseRedirect(_same_host_path(request, request.POST.get("next")) or request.get_full_path())
