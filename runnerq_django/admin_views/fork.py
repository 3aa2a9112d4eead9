"""Re-running a workflow from a step in the admin: the detail page lists a root's recorded steps
(steps, sleeps, signals, deadlines and children, in the order they were recorded) with a
"Re-run from step…" form, and links a fork and its origin both ways; the form posts to
:func:`post`, which makes the fork (``runnerq_django.workflows.forks``, ledgered with the operator's user
name and reason) and goes to its page."""

from __future__ import annotations

import uuid
from typing import Any

from django.contrib import messages
from django.http import HttpRequest, HttpResponse, HttpResponseRedirect
from django.urls import reverse

from runnerq_django.admin_views import database, guard
from runnerq_django.models import Activity
from runnerq_django.storage import fork as stored
from runnerq_django.storage.errors import StorageError

STEPS_SHOWN = 500


def build(activity: Activity) -> dict[str, Any]:
    """``fork_steps`` (a root's steps, for the form), ``forks`` (its forks) and ``forked_from``."""
    alias = guard.read_alias()
    try:
        records = stored.forks_of(activity.queue_name, activity.id, using=alias)
    except StorageError:  # a row another SDK wrote that this API refuses (its queue's name): no fork
        return {"forks": [], "forked_from": None, "fork_steps": []}
    context: dict[str, Any] = {
        "forks": [r for r in records if r.origin_id == activity.id],
        "forked_from": next((r for r in records if r.fork_id == activity.id), None),
        "fork_steps": [],
    }
    if activity.parent_activity_id is None:
        context["fork_steps"] = stored.steps_of(activity.queue_name, activity.id, using=alias)[:STEPS_SHOWN]
    return context


def post(request: HttpRequest, object_id: str) -> HttpResponse:
    """Fork the activity from the posted ``from_step`` (``reason``, ``cancel_running``) and go to
    the fork's page; back to the activity's page with the error when it is refused."""
    from runnerq_django.client import get_handle
    from runnerq_django.workflows import forks

    activity_id = uuid.UUID(object_id)
    alias = database.current()
    back = reverse("admin:runnerq_django_activity_change", args=[activity_id])
    queue = Activity.objects.using(alias).filter(id=activity_id).values_list("queue_name", flat=True).first()
    if queue is None:
        messages.error(request, f"No activity {activity_id}.")
        return HttpResponseRedirect(back)
    user = request.user
    actor = f"admin:{user.get_username()}" if user.is_authenticated else "admin"
    try:
        made = forks.fork(
            get_handle(activity_id, queue, using=alias),
            str(request.POST.get("from_step", "")),
            cancel_running=request.POST.get("cancel_running") == "on",
            actor=actor,
            reason=str(request.POST.get("reason") or "") or None,
            using=alias,
        )
    except StorageError as exc:
        messages.error(request, f"Not forked: {exc.message}")
        return HttpResponseRedirect(back)
    messages.success(
        request, f"Forked {activity_id} from {request.POST.get('from_step')}: this is the new run."
    )
    return HttpResponseRedirect(reverse("admin:runnerq_django_activity_change", args=[made.id]))
