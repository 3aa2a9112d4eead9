"""The check of the scheduler's cache alias, which both the system checks (``scheduler.checks``)
and a starting scheduler (``service.check_configuration``) report. A module of its own, so that
the scheduler asks it without loading (and registering) the system checks.

Internal: not part of the public API.
"""

from __future__ import annotations

from django.core import checks


def cache_problems() -> list[checks.CheckMessage]:
    """The problems of the scheduler's cache alias: missing (E103), a backend the scheduler would
    have to unpickle (E104), a backend that can't be loaded (E105, naming the extra), a
    process-local cache (W103). Reported where periodic jobs are declared, and whenever a
    scheduler starts (``service.check_configuration``)."""
    from django.conf import settings

    from runnerq_django.scheduler import cacheio
    from runnerq_django.scheduler.cachetable import cache_alias

    try:
        cacheio.alias_records()
    except cacheio.CacheMisconfigured as exc:
        return [checks.Error(exc.message, hint=exc.hint, id=exc.check_id)]
    alias = cache_alias()
    backend = str(settings.CACHES[alias].get("BACKEND", ""))
    if backend.endswith(("LocMemCache", "DummyCache")):
        return [
            checks.Warning(
                f"The scheduler's cache alias {alias!r} uses {backend.rsplit('.', 1)[-1]}, which no other process sees",
                hint="Records then live per process: every scheduler repairs them on start. Use Redis or the database cache.",
                id="runnerq.W103",
            )
        ]
    return []
