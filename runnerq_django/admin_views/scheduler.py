"""The scheduler page: the declared periodic jobs and the state of their cache records, as the
scheduler's read-only ``job_states()`` reports them. This page never writes to the cache."""

from __future__ import annotations

import dataclasses
from datetime import datetime
from typing import Any

from django.utils import timezone


def scheduler_context() -> dict[str, Any]:
    try:
        from runnerq_django.scheduler import status
    except ImportError as exc:
        return {"jobs": [], "unavailable": f"the scheduler's status module is not available ({exc})"}
    try:
        states = status.job_states()
    except Exception as exc:  # a cache outage is something to show, not a 500
        return {"jobs": [], "unavailable": f"{type(exc).__name__}: {exc}"}
    jobs = [dataclasses.asdict(s) if dataclasses.is_dataclass(s) else dict(s) for s in states]
    columns: list[str] = []
    for job in jobs:
        columns.extend(k for k in job if k not in columns)
    rows = [[_show(job.get(k)) for k in columns] for job in jobs]
    return {"jobs": jobs, "columns": columns, "rows": rows, "unavailable": None}


def _show(value: Any) -> str:
    if value is None:
        return "—"
    if isinstance(value, datetime):
        return timezone.localtime(value).strftime("%Y-%m-%d %H:%M:%S %Z") if timezone.is_aware(value) else value.isoformat()
    if isinstance(value, (list, tuple)):
        return ", ".join(_show(v) for v in value)
    return str(value)
