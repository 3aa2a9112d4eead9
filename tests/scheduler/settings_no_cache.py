"""A project without periodic jobs and without the scheduler's cache alias: the test
project with no ``runnerq_scheduler`` in CACHES and its example ``periodic`` modules not read.
RUNNERQ['SCHEDULER'] overrides (a JOBS declaration) come from RQ_SCHEDULER_JSON, as in
tests.scheduler.settings."""

from tests.scheduler.settings import *  # noqa: F403
from tests.scheduler.settings import RUNNERQ

CACHES = {"default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}
RUNNERQ = {**RUNNERQ, "SCHEDULER": {"AUTODISCOVER_MODULES": [], **RUNNERQ["SCHEDULER"]}}
