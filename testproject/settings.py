"""Settings of the test project: a Django project that uses runnerq_django.

The database comes from ``DATABASE_URL`` (or ``PG*``); with none, an embedded PostgreSQL starts
under ``.runnerq/pgdata`` (see ``testproject/database.py``). The scheduler's cache is django-redis
when ``REDIS_URL`` is set, otherwise Django's database cache, which also works across processes.
"""

import importlib.util
import os
from pathlib import Path

from testproject.database import database_url, django_database

BASE_DIR = Path(__file__).resolve().parent.parent

SECRET_KEY = os.environ.get("DJANGO_SECRET_KEY", "runnerq-testproject-not-secret")
# Off unless asked for (DJANGO_DEBUG=1): a technical 500 page shows the settings to whoever sees it.
DEBUG = os.environ.get("DJANGO_DEBUG", "0") == "1"
ALLOWED_HOSTS = os.environ.get("DJANGO_ALLOWED_HOSTS", "localhost,127.0.0.1,[::1]").split(",")

INSTALLED_APPS = [
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "django.contrib.staticfiles",
    "runnerq_django",
    "testproject.examples",
]

MIDDLEWARE = [
    "django.middleware.security.SecurityMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    "django.contrib.messages.middleware.MessageMiddleware",
]

ROOT_URLCONF = "testproject.urls"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
            ],
        },
    },
]

DATABASES = {"default": django_database(database_url())}

REDIS_URL = os.environ.get("REDIS_URL", "")
CACHES = {
    "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"},
    # One record per declared periodic job, as JSON text (the scheduler never unpickles, whatever
    # the serializer; JSONSerializer makes cache.get on this alias safe and readable too).
    "runnerq_scheduler": (
        {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": REDIS_URL,
            "OPTIONS": {
                "CLIENT_CLASS": "django_redis.client.DefaultClient",
                "SERIALIZER": "django_redis.serializers.json.JSONSerializer",
            },
        }
        if REDIS_URL
        else {
            "BACKEND": "django.core.cache.backends.db.DatabaseCache",
            "LOCATION": "runnerq_scheduler_cache",
        }
    ),
}

USE_TZ = True
TIME_ZONE = "UTC"
LANGUAGE_CODE = "en-us"
USE_I18N = True
STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / ".runnerq" / "static"
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

RUNNERQ: dict[str, object] = {
    "QUEUES": ["default"],
}

# Behind the test run's PgBouncer in transaction pooling (tests/pgbouncer.py, .ci/run): the settings
# docs/how-to/pgbouncer.md gives. The suite creates and migrates its database past the pooler.
if os.environ.get("RUNNERQ_TEST_PGBOUNCER"):
    DATABASES["default"]["DISABLE_SERVER_SIDE_CURSORS"] = True
    RUNNERQ["LISTEN"] = False
    RUNNERQ["PREPARED_STATEMENTS"] = os.environ.get("RUNNERQ_TEST_PGBOUNCER_PREPARED") == "1"

# django.tasks (Django 6) or its backport django-tasks (Django 5.2): @task functions become RunnerQ
# activities (docs/how-to/django-tasks.md). QUEUES [] lets any valid RunnerQ queue name through.
TASKS = {
    "default": {
        "BACKEND": "runnerq_django.tasks_backend.RunnerQTaskBackend",
        "QUEUES": [],
        "OPTIONS": {"MAX_ATTEMPTS": 2},
    },
}
if importlib.util.find_spec("django.tasks") is None and importlib.util.find_spec("django_tasks") is not None:
    INSTALLED_APPS.append("django_tasks")  # the backport's system checks, on Django 5.2

LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "handlers": {"console": {"class": "logging.StreamHandler"}},
    "loggers": {
        "runnerq_django": {"handlers": ["console"], "level": os.environ.get("RUNNERQ_LOG_LEVEL", "INFO")}
    },
}
