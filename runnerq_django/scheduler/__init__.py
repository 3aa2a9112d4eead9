"""Periodic jobs declared in code, with one cache record per job (see README "Periodic jobs").

- ``@periodic(id=..., cron=... | every=..., ...)`` declares a job (``declarations``);
- ``service.SchedulerService().run(stop_event)`` runs the scheduler loop (``runscheduler``,
  ``runworker --scheduler``);
- ``status.job_states()`` is the read-only view (``runnerq_schedule``, the admin);
- ``celery_beat.RunnerQScheduler`` backs Celery beat with the same records and guard.

Public: this package, ``declarations``, ``celery_beat`` and ``status``.
Internal: the other modules, not part of the public API.
"""

from runnerq_django.scheduler.declarations import PeriodicJob, periodic
from runnerq_django.signals import record_repaired

__all__ = ["PeriodicJob", "periodic", "record_repaired"]
