"""Runtime schedules from code: periodic jobs kept in Postgres, beside those declared with
``@periodic`` (docs/how-to/periodic-jobs.md, "Schedules kept in Postgres").

    from runnerq_django.scheduler import runtime_schedules as schedules

    schedules.create("reports.acme", activity="reports.Daily", cron="0 6 * * *", tz="Europe/Paris",
                     payload={"customer": "acme"})
    schedules.update("reports.acme", cron="0 7 * * *")
    schedules.pause("reports.acme"); schedules.resume("reports.acme")
    schedules.delete("reports.acme")

Every write joins the caller's ``transaction.atomic()`` (like ``enqueue``) and is recorded, with
who made it, in the schedule's history. The scheduler sees a change within one tick.
"""

from runnerq_django.scheduler.rows import (
    RevisionConflict,
    ScheduleInvalid,
    ScheduleNotFound,
    create,
    delete,
    get,
    history,
    list_schedules,
    pause,
    preview,
    resume,
    run_now,
    update,
)

list = list_schedules  # schedules.list(), as the other verbs read

__all__ = [
    "RevisionConflict",
    "ScheduleInvalid",
    "ScheduleNotFound",
    "create",
    "delete",
    "get",
    "history",
    "list",
    "list_schedules",
    "pause",
    "preview",
    "resume",
    "run_now",
    "update",
]
