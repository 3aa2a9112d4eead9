"""Settings with django-celery-beat installed: its tables are created and filled by its own
models, for runnerq_import_beat's test (tests/scheduler/test_runtime_import_beat.py)."""

from testproject.settings import *  # noqa: F403
from testproject.settings import INSTALLED_APPS

INSTALLED_APPS = [*INSTALLED_APPS, "django_celery_beat"]
