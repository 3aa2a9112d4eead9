"""A Celery app for the beat tests: ``celery -A tests.scheduler.celery_app beat -S
runnerq_django.scheduler.celery_beat:RunnerQScheduler``. Broker, queue and the beat schedule
come from the environment (RQ_BEAT_BROKER, RQ_BEAT_QUEUE, RQ_BEAT_EVERY). The scheduler's log lines
are printed as ``event key=value ...`` so that tests can read their fields."""

import logging
import os
from datetime import timedelta

import django

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "tests.scheduler.settings")
django.setup()

from celery import Celery, signals  # noqa: E402

from runnerq_django.logs import configure  # noqa: E402


@signals.beat_init.connect
def _structured_logs(**kwargs):
    # After Celery's Django fixup has re-run django.setup() (and the project's LOGGING with it).
    configure("text", logging.INFO)  # the scheduler's lines as "event key=value ..." on stderr


app = Celery("runnerq_beat_tests", broker=os.environ.get("RQ_BEAT_BROKER", "memory://"))
app.conf.timezone = "UTC"
app.conf.beat_max_loop_interval = 1
app.conf.beat_schedule = {
    "every second": {
        "task": "tests.scheduler.ping",
        "schedule": timedelta(seconds=float(os.environ.get("RQ_BEAT_EVERY", "1"))),
        "args": ("ping",),
        "options": {
            "queue": os.environ.get("RQ_BEAT_QUEUE", "beat-tests"),
            "runnerq": {"coalesce": False, "misfire_grace": 30},
        },
    },
}
