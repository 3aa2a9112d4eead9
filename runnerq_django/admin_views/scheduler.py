"""The scheduler page: the declared periodic jobs and the state of their cache records, as the
scheduler's read-only ``runnerq_django.scheduler.status.job_states()`` reports them (one raw
read of the records as JSON text, never unpickled, and a few SELECTs). This page never writes to the cache."""

from __future__ import annotations

from typing import Any

from runnerq_django.admin_views.guard import read_alias

STATE_HELP = {
    "present": "The cache record is there and matches the declaration.",
    "missing": "No cache record (evicted, flushed or never written): the owner rebuilds it from Postgres at its next tick.",
    "unreadable": "The cache holds something that is not a valid record: it will be repaired.",
    "schema": "The record was written by another record schema version: it will be rewritten.",
    "schedule_changed": "The declared schedule changed since the record was written: progress restarts from the new schedule.",
    "implausible": "The record's progress does not fit the declared schedule (forged or corrupted): it will be rebuilt from the declaration and Postgres.",
    "stale_definition": "The record was written for an older definition of the job.",
    "cache_unavailable": "The scheduler cache could not be read.",
}


def scheduler_context() -> dict[str, Any]:
    try:
        from runnerq_django.scheduler import status
    except ImportError as exc:
        return {"jobs": [], "unavailable": f"the scheduler's status module is not available ({exc})"}
    try:
        states = status.job_states(using=read_alias())
    except Exception as exc:  # a broken cache or an undeclared table is something to show, not a 500
        return {"jobs": [], "unavailable": f"{type(exc).__name__}: {exc}"}
    jobs = []
    for s in states:
        jobs.append(
            {
                "id": s.id,
                "key": s.key,
                "schedule": s.schedule,
                "state": s.state,
                "detail": s.detail,
                "state_help": STATE_HELP.get(s.state, ""),
                "ok": s.state == "present",
                "last": s.last,
                "next": s.next,
                "source": s.source,
                "last_enqueued": s.last_enqueued,
                "owner": s.owner,
                "owner_release": s.owner_release,
                "lease_expires_at": s.lease_expires_at,
                "lease_expired": s.lease_expired,
                "repairs": sorted(s.repairs.items()),
                "repair_total": s.repair_total,
                "written_by": s.written_by,
                "written_at": s.written_at,
            }
        )
    owner = next(
        ((j["owner"], j["owner_release"], j["lease_expires_at"], j["lease_expired"]) for j in jobs), None
    )
    return {"jobs": jobs, "owner": owner, "unavailable": None}
