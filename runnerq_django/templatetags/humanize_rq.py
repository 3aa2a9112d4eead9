"""Small template filters for the admin console (no dependency on django.contrib.humanize, which
a project may not install)."""

from __future__ import annotations

from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django import template
from django.utils import timezone

if TYPE_CHECKING:
    from runnerq_django.admin_views.queries import QueueSummary

register = template.Library()


@register.filter
def intcomma_rq(value: Any) -> Any:  # any template value; what int() can't read stays
    try:
        return f"{int(value):,}"
    except (TypeError, ValueError):
        return value


@register.filter
def age_rq(value: object) -> str:
    """How long ago ``value`` was (or how far ahead), compactly: "3 s", "4 min", "2 h 5 min", "3 d"."""
    if not isinstance(value, datetime):
        return "—"
    delta = timezone.now() - value
    future = delta < timedelta(0)
    seconds = int(abs(delta.total_seconds()))
    if seconds < 60:
        text = f"{seconds} s"
    elif seconds < 3600:
        text = f"{seconds // 60} min"
    elif seconds < 86400:
        text = f"{seconds // 3600} h {seconds % 3600 // 60} min"
    else:
        text = f"{seconds // 86400} d {seconds % 86400 // 3600} h"
    return f"in {text}" if future else f"{text} ago"


@register.filter
def duration_rq(value: object) -> str:
    """The age of ``value`` without "ago": how long something has been waiting."""
    text = age_rq(value)
    return text[:-4] if text.endswith(" ago") else text


@register.filter
def get_rq(mapping: Any, key: object) -> Any:  # a template's dict or list, and what it holds
    try:
        return mapping[key]
    except (KeyError, TypeError, IndexError):
        return ""


@register.filter
def localtime_rq(value: object) -> str:
    if not isinstance(value, datetime):
        return "—"
    return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S %Z")


@register.simple_tag
def queue_count(summary: QueueSummary, status: str) -> str:
    return summary.count(status)


_STATUS_LABELS = {"processing": "running", "retrying": "retry backoff", "dead_letter": "dead letter"}


@register.filter
def status_label_rq(status: str) -> str:
    return _STATUS_LABELS.get(status, status)


@register.filter
def visible_rq(value: object) -> str:
    """An id, type, queue or token with its bidirectional and zero-width characters spelled out."""
    from runnerq_django.admin_views.safe import visible

    return visible(value)


@register.filter
def time_rq(obj: object, name: str) -> str:
    """``obj``'s timestamp ``name`` (read by ``safe_rows``) in local time, or its stored text when infinite."""
    infinite: str | None = getattr(obj, "rq_infinite", {}).get(name)
    if infinite:
        return f"{infinite} (as stored; no Python datetime can hold it)"
    return localtime_rq(getattr(obj, name, None))
