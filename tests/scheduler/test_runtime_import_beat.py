"""``manage.py runnerq_import_beat`` against a real django-celery-beat installation's tables,
created by its migrations and filled by its own models in a process of their own; the import
itself runs in a process without the package (it reads the tables with SQL).

django-celery-beat is in the ``dev`` extra; where it is not importable (or not on
``RUNNERQ_BEAT_PATH``, a directory added to the processes' path) the test is skipped."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap

import pytest

from runnerq_django.scheduler import runtime_schedules as schedules
from tests.helpers import REPO, manage_env

pytestmark = pytest.mark.slow

FILL = textwrap.dedent(
    """
    import django
    django.setup()
    from datetime import datetime, timezone
    from django_celery_beat.models import (ClockedSchedule, CrontabSchedule, IntervalSchedule,
        PeriodicTask, SolarSchedule)

    daily = CrontabSchedule.objects.create(minute="0", hour="6", day_of_week="*", day_of_month="*",
                                           month_of_year="*", timezone="Europe/Paris")
    quarter = IntervalSchedule.objects.create(every=15, period=IntervalSchedule.MINUTES)
    hourly = IntervalSchedule.objects.create(every=1, period=IntervalSchedule.HOURS)
    launch = ClockedSchedule.objects.create(clocked_time=datetime(2031, 3, 1, 8, tzinfo=timezone.utc))
    sunset = SolarSchedule.objects.create(event="sunset", latitude=48.85, longitude=2.35)
    bad = CrontabSchedule.objects.create(minute="61", hour="*", day_of_week="*", day_of_month="*",
                                         month_of_year="*", timezone="UTC")
    PeriodicTask.objects.create(name="daily report", task="reports.daily", crontab=daily,
                                kwargs='{"customer": "acme"}', queue="reports", description="Acme")
    PeriodicTask.objects.create(name="sync every 15 min", task="sync.tenant", interval=quarter, args="[42]",
                                priority=5)
    PeriodicTask.objects.create(name="launch", task="mail.launch", clocked=launch, one_off=True)
    PeriodicTask.objects.create(name="sunset", task="lights.off", solar=sunset)
    PeriodicTask.objects.create(name="both", task="sync.tenant", interval=hourly, args="[1]", kwargs='{"a": 1}')
    PeriodicTask.objects.create(name="unmapped", task="unknown.task", interval=hourly)
    PeriodicTask.objects.create(name="bad cron", task="sync.tenant", crontab=bad)
    print("filled")
    """
)
MAPS = [
    "--map",
    "reports.daily=reports.Daily",
    "--map",
    "sync.tenant=sync.Tenant",
    "--map",
    "mail.launch=mail.Launch",
    "--map",
    "lights.off=lights.Off",
]


def beat_env(db_url: str) -> dict:
    path = os.pathsep.join(p for p in (str(REPO), os.environ.get("RUNNERQ_BEAT_PATH", "")) if p)
    return manage_env(db_url, DJANGO_SETTINGS_MODULE="tests.scheduler.settings_beat", PYTHONPATH=path)


def run(command: list[str], env: dict, check: bool = True) -> subprocess.CompletedProcess:
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=300)
    if check:
        assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    return result


def outcomes(text: str) -> dict[str, dict]:
    return {o["name"]: o for o in (json.loads(line) for line in text.splitlines() if line.startswith("{"))}


def test_import_beat_maps_what_it_can_and_says_why_not(live_db_url):
    env = beat_env(live_db_url)
    probe = run([sys.executable, "-c", "import django_celery_beat"], env, check=False)
    if probe.returncode != 0:
        pytest.skip("django-celery-beat is not installed (the dev extra; or set RUNNERQ_BEAT_PATH)")
    run([sys.executable, "manage.py", "migrate", "django_celery_beat", "-v", "0"], env)
    try:
        assert "filled" in run([sys.executable, "-c", FILL], env).stdout
        plain = manage_env(live_db_url)  # the import: no django-celery-beat installed
        dry = outcomes(
            run(
                [sys.executable, "manage.py", "runnerq_import_beat", "--dry-run", "--json", *MAPS], plain
            ).stdout
        )
        assert {name: o["status"] for name, o in dry.items()} == {
            "daily report": "would_create",
            "sync every 15 min": "would_create",
            "launch": "would_create",
            "sunset": "skipped",
            "both": "skipped",
            "unmapped": "skipped",
            "bad cron": "skipped",
        }
        assert "solar" in dry["sunset"]["reason"]
        assert "both args and kwargs" in dry["both"]["reason"]
        assert "--map unknown.task=ActivityType" in dry["unmapped"]["reason"]
        assert "cron: not a valid cron expression: '61 * * * *'" in dry["bad cron"]["reason"]
        assert "Celery priority 5 not mapped" in dry["sync every 15 min"]["notes"][0]
        assert schedules.list() == []  # a dry run creates nothing

        done = outcomes(
            run(
                [sys.executable, "manage.py", "runnerq_import_beat", "--json", "--by", "migration", *MAPS],
                plain,
            ).stdout
        )
        assert sorted(n for n, o in done.items() if o["status"] == "created") == [
            "daily report",
            "launch",
            "sync every 15 min",
        ]
        daily = schedules.get("celery.daily-report")
        assert (
            daily.kind,
            daily.cron,
            daily.tz,
            daily.activity,
            daily.payload,
            daily.queue,
            daily.description,
        ) == ("cron", "0 6 * * *", "Europe/Paris", "reports.Daily", {"customer": "acme"}, "reports", "Acme")
        quarter = schedules.get("celery.sync-every-15-min")
        assert (quarter.kind, quarter.every_seconds, quarter.payload) == ("interval", 900, [42])
        launch = schedules.get("celery.launch")
        assert (launch.kind, launch.at.isoformat(), launch.max_occurrences) == (
            "once",
            "2031-03-01T08:00:00+00:00",
            1,
        )
        assert schedules.history("celery.launch")[0].actor == "migration"
        again = outcomes(
            run([sys.executable, "manage.py", "runnerq_import_beat", "--json", *MAPS], plain).stdout
        )
        assert again["launch"]["status"] == "exists" and len(schedules.list()) == 3
    finally:
        run(
            [sys.executable, "manage.py", "migrate", "django_celery_beat", "zero", "-v", "0"],
            env,
            check=False,
        )
