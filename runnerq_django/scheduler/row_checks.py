"""System checks of runtime schedules against the database: ``runnerq.E106`` (a schedule whose
id a job declared in code has: declared jobs and schedules share one namespace of ids; the
declaration runs, the row does not) and ``runnerq.E107`` (a row that no longer validates, e.g.
written by hand). ``scheduler.checks`` loads this module, so ``ready()`` registers them.

Internal: not part of the public API.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import TYPE_CHECKING, Any

from django.core import checks

if TYPE_CHECKING:
    from django.apps import AppConfig


def schedule_ids(alias: str) -> set[str]:
    """Ids of the runtime schedules on ``alias`` (empty when the table is not there yet)."""
    from django.db import DatabaseError

    from runnerq_django.models import RuntimeSchedule

    try:
        return set(RuntimeSchedule.objects.using(alias).values_list("pk", flat=True))
    except DatabaseError:
        return set()


@checks.register(checks.Tags.database)
def check_runtime_schedules(
    app_configs: Sequence[AppConfig] | None, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    from django.db import DatabaseError

    from runnerq_django import conf
    from runnerq_django.checks import settings_problems
    from runnerq_django.models import RuntimeSchedule
    from runnerq_django.scheduler import declarations, rows

    if settings_problems():
        return []
    alias = conf.database_alias()
    if not databases or alias not in databases:
        return []
    try:
        declared = {job.id: job for job in declarations.declared_jobs() if isinstance(job.id, str)}
    except Exception:
        return []  # check_declarations reports it
    try:
        found = list(RuntimeSchedule.objects.using(alias).order_by("pk"))
    except DatabaseError:
        return []  # not migrated yet
    messages: list[checks.CheckMessage] = []
    for row in found:
        if row.pk in declared:
            job = declared[row.pk]
            messages.append(
                checks.Error(
                    f"Schedule {row.pk!r} has the id of a periodic job declared in code "
                    f"({job.origin}:{job.target_path()}); the declared job runs, the schedule does not",
                    hint="Declared jobs and runtime schedules share one namespace of ids: rename or delete one.",
                    id="runnerq.E106",
                )
            )
            continue
        for problem in rows.job_of(row).validate():
            messages.append(checks.Error(f"Schedule {row.pk!r}: {problem}", id="runnerq.E107"))
    return messages


__all__ = ["check_runtime_schedules", "schedule_ids"]
