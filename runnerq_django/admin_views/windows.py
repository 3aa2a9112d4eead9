"""Debounce and throttle windows in the admin: the window an activity is the activity of (its
detail page), and the list of the latest windows (``activity/windows/``), each with its key, its
wait or window, and how many enqueues collapsed into its activity."""

from __future__ import annotations

import uuid
from typing import Any

from runnerq_django.admin_views.guard import BadFilterValue, read_alias
from runnerq_django.storage import windows
from runnerq_django.storage.errors import InvalidArgument

WINDOWS_SHOWN = 100


def window_of(activity_id: uuid.UUID) -> windows.Window | None:
    return windows.window_of(activity_id, using=read_alias())


def windows_page(kind: str | None) -> dict[str, Any]:
    """The latest ``WINDOWS_SHOWN`` windows (of ``kind`` when given) and how many of each kind."""
    alias = read_alias()
    try:
        shown = windows.recent_windows(limit=WINDOWS_SHOWN, kind=kind or None, using=alias)
    except InvalidArgument as exc:
        raise BadFilterValue(exc.message) from None
    counts = windows.window_counts(using=alias)
    return {
        "windows": shown,
        "kind": kind or "",
        "window_counts": counts,
        "window_total": sum(counts.values()),
    }
