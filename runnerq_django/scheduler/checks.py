"""System checks of the scheduler's declarations (``runnerq.E101``/``E102``/``W101``, and
``runnerq.W104`` against the database), with the cache alias's (``cache_check``). The app's
``ready()`` loads this module after ``runnerq_django.checks``, whose settings check comes first.

Internal: not part of the public API.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence
from datetime import datetime, timedelta
from typing import TYPE_CHECKING, Any

from django.core import checks

from runnerq_django.checks import settings_problems
from runnerq_django.scheduler.cache_check import cache_problems

if TYPE_CHECKING:
    from django.apps import AppConfig

    from runnerq_django.scheduler.declarations import PeriodicJob

__all__ = ["cache_problems", "check_declarations", "check_orphaned_progress", "declaration_errors"]

MIN_SENSIBLE_GRACE = timedelta(seconds=5)
ORPHAN_LOOKBACK = timedelta(days=35)


@checks.register("runnerq")
def check_declarations(app_configs: Sequence[AppConfig] | None, **kwargs: Any) -> list[checks.CheckMessage]:
    from runnerq_django import conf
    from runnerq_django.scheduler import declarations

    if settings_problems():
        return []  # the settings check reports those first
    try:
        declared = declarations.declared_jobs()
    except Exception as exc:  # a settings JOBS entry with unknown options, an import error...
        return [checks.Error(f"Periodic job declarations could not be loaded: {exc}", id="runnerq.E102")]
    # The cache alias is needed only where jobs are declared (or a scheduler starts: the service
    # asks for cache_problems() itself), so a project without periodic jobs needs no alias.
    return declaration_errors(declared, conf.scheduler_settings().namespace) + (
        cache_problems() if declared else []
    )


def declaration_errors(declared: Sequence[PeriodicJob], namespace: str) -> list[checks.CheckMessage]:
    """The problems of a list of declarations (what ``check_declarations`` reports)."""
    from runnerq_django.scheduler import records

    errors: list[checks.CheckMessage] = []
    counts = Counter(job.id for job in declared)
    for job_id, count in sorted(counts.items()):
        if count > 1:
            origins = ", ".join(f"{j.origin}:{j.target_path()}" for j in declared if j.id == job_id)
            errors.append(
                checks.Error(
                    f"Periodic job id {job_id!r} is declared {count} times ({origins})",
                    hint="Job ids name the cache record and the idempotency keys; each must be unique.",
                    id="runnerq.E101",
                )
            )
    for job in declared:
        for problem in job.validate():
            errors.append(checks.Error(f"Periodic job {job.id!r}: {problem}", id="runnerq.E102"))
        if isinstance(job.misfire_grace, timedelta) and timedelta(0) < job.misfire_grace < MIN_SENSIBLE_GRACE:
            errors.append(
                checks.Warning(
                    f"Periodic job {job.id!r}: misfire_grace {job.misfire_grace.total_seconds():g}s is under 5 s",
                    hint="Queue and tick latency would make occurrences miss the window; use a longer grace.",
                    id="runnerq.W101",
                )
            )
        key = records.key_for(namespace, f"job:{job.id}")
        if isinstance(job.id, str) and len(_full_key(key).encode()) > 250:
            errors.append(
                checks.Error(
                    f"Periodic job {job.id!r}: its cache key is longer than 250 bytes once prefixed",
                    id="runnerq.E102",
                )
            )
    return errors


def _full_key(key: str) -> str:
    from django.conf import settings

    from runnerq_django import conf

    config = settings.CACHES.get(conf.scheduler_settings().cache, {})
    return f"{config.get('KEY_PREFIX', '')}:{config.get('VERSION', 1)}:{key}"


@checks.register(checks.Tags.database)
def check_orphaned_progress(
    app_configs: Sequence[AppConfig] | None, databases: Sequence[str] | None = None, **kwargs: Any
) -> list[checks.CheckMessage]:
    """Occurrences enqueued recently under job ids that are no longer declared (a rename makes a
    new job: its progress does not carry over). An occurrence's guard row is on its job's queue's
    database, and a job no longer declared has no queue to look up: every database that hosts a
    queue is read (those of ``databases``)."""
    from runnerq_django import conf, routing
    from runnerq_django.scheduler import declarations
    from runnerq_django.storage import periodic as store
    from runnerq_django.storage.errors import StorageError

    if not databases or settings_problems():
        return []
    aliases = [alias for alias in routing.databases() if alias in databases]
    if not aliases:
        return []
    namespace = conf.scheduler_settings().namespace
    try:
        declared = {job.id for job in declarations.declared_jobs()}
    except Exception:
        return []  # check_declarations reports it
    declared |= row_checks.schedule_ids(conf.database_alias())  # runtime schedules are no orphans
    latest: dict[str, datetime] = {}
    for alias in aliases:
        try:
            since = store.db_now(using=alias) - ORPHAN_LOOKBACK
            found = store.recent_job_ids(namespace, since, using=alias)
        except StorageError:
            continue  # a database that can't be read now: the others are still checked
        for job_id, last in found:
            latest[job_id] = max(last, latest.get(job_id, last))
    return [
        checks.Warning(
            f"Periodic job {job_id!r} (namespace {namespace!r}) enqueued occurrences until {last:%Y-%m-%d %H:%M}Z "
            "but is no longer declared",
            hint=(
                "If it was renamed, the new id is a new job: its progress starts from the declaration. If it was "
                "removed, nothing more is enqueued and its cache record expires by itself."
            ),
            id="runnerq.W104",
        )
        for job_id, last in sorted(latest.items())
        if job_id not in declared and not job_id.startswith("beat:")
    ]


# The runtime schedules' checks (runnerq.E106/E107) register with this module.
from runnerq_django.scheduler import row_checks  # noqa: E402
