"""Flow control in the admin: what is paused, by whom and why, on the overview, and the
pause and resume forms, which need the ``runnerq_django.operate_activity`` permission and are
recorded in the flow ledger as ``admin <username>``, like every admin action is recorded under
its operator."""

from __future__ import annotations

from typing import Any

from django.contrib import messages
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseNotAllowed, HttpResponseRedirect

from runnerq_django import routing
from runnerq_django.admin_views.guard import BadFilterValue, read_alias
from runnerq_django.storage import flow
from runnerq_django.storage.errors import InvalidArgument

RECENT_CHANGES = 20
ACTIONS = ("pause", "resume")
# The overview lists the first PAUSES_SHOWN pauses (of every queue) and the first
# PAUSES_PER_QUEUE on each queue's card, each with the number in all; the pauses page lists
# them all, PAUSES_PER_PAGE at a time. 20,000 pauses once made the overview 84 MB.
PAUSES_SHOWN = 50
PAUSES_PER_QUEUE = 3
PAUSES_PER_PAGE = 100


def overview_context(queue_names: list[str]) -> dict[str, Any]:
    """The first pauses in effect (also of queues the overview does not show) and how many there
    are in all, the first pauses of each shown queue and how many it has, and the latest changes."""
    alias = read_alias()
    by_queue: dict[str, list[flow.Pause]] = {name: [] for name in queue_names}
    for pause in flow.pauses_in(queue_names, PAUSES_PER_QUEUE, using=alias) if queue_names else []:
        by_queue[pause.queue_name].append(pause)
    from runnerq_django.storage import limits

    return {
        "pauses": flow.pauses(limit=PAUSES_SHOWN, using=alias),
        "pause_total": flow.pause_total(using=alias),
        "pauses_by_queue": by_queue,
        "pause_counts": flow.pause_counts(queue_names, using=alias) if queue_names else {},
        "flow_changes": flow.ledger(RECENT_CHANGES, using=alias),
        "slots": limits.slots_in_use(using=alias),
    }


def pauses_page(after: str | None) -> dict[str, Any]:
    """A page of the pauses list: ``PAUSES_PER_PAGE`` pauses after ``after`` ("queue/type",
    the last of the previous page), how many there are in all, and the next page's ``after``."""
    alias = read_alias()
    queue, _, activity_type = (after or "").partition("/")
    try:
        page = flow.pauses(limit=PAUSES_PER_PAGE + 1, after=(queue, activity_type), using=alias)
    except InvalidArgument as exc:
        raise BadFilterValue(exc.message) from None
    more = len(page) > PAUSES_PER_PAGE
    page = page[:PAUSES_PER_PAGE]
    return {
        "pauses": page,
        "pause_total": flow.pause_total(using=alias),
        "next_after": f"{page[-1].queue_name}/{page[-1].activity_type}" if more else None,
        "first_page": not after,
    }


def actor(request: HttpRequest) -> str:
    return f"admin {request.user.get_username()}"


def post(request: HttpRequest, *, can_operate: bool, back: str) -> HttpResponse:
    """Pause or resume from the overview's forms (``action``, ``queue``, optional ``activity_type``
    and ``reason``), then back to the overview with a message saying what happened."""
    if request.method != "POST":
        return HttpResponseNotAllowed(["POST"])
    if not can_operate:
        raise PermissionDenied
    action = request.POST.get("action", "")
    if action not in ACTIONS:
        messages.error(request, f"Nothing changed: action: must be pause or resume, got {action[:40]!r}")
        return HttpResponseRedirect(back)
    queue = request.POST.get("queue", "")
    kind = request.POST.get("activity_type", "").strip() or None
    reason = request.POST.get("reason", "").strip()
    operation = flow.pause if action == "pause" else flow.resume
    try:
        changed = operation(
            queue, kind, actor=actor(request), reason=reason, using=routing.database_for(queue)
        )
    except InvalidArgument as exc:
        messages.error(request, f"Nothing changed: {exc.message}")
        return HttpResponseRedirect(back)
    what = f"type {kind} in queue {queue}" if kind else f"queue {queue}"
    if action == "pause":
        text = f"Paused {what}." if changed else f"{what} was already paused; who and why updated."
    else:
        text = f"Resumed {what}." if changed else f"{what} was not paused; nothing changed."
    messages.add_message(request, messages.SUCCESS if changed else messages.INFO, text)
    return HttpResponseRedirect(back)
