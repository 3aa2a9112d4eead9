"""Optional parts stay optional: a project without periodic jobs needs no scheduler cache
alias, and the worker, client and admin import neither Celery nor django-redis (extras); what
needs one says which extra to install. Real processes, the test database."""

from __future__ import annotations

import json
import subprocess
import sys

from django.db import connection

from tests.helpers import REPO, manage, manage_env, spawn_manage, stop_process, wait_until

NO_CACHE = "tests.scheduler.settings_no_cache"
DECLARED = {"JOBS": {"reports.hourly": {"activity": "reports.Hourly", "every": 3600}}}


def env_without_alias(db_url: str, scheduler: dict | None = None) -> dict:
    return manage_env(db_url, DJANGO_SETTINGS_MODULE=NO_CACHE, RQ_SCHEDULER_JSON=json.dumps(scheduler or {}))


def test_without_periodic_jobs_check_and_runworker_need_no_scheduler_cache(live_db_url):
    env = env_without_alias(live_db_url)
    checked = manage("check", env=env, check=False)
    assert checked.returncode == 0, checked.stderr
    worker = spawn_manage("runworker", "-c", "1", env=env)
    try:

        def pools():
            with connection.cursor() as cursor:
                cursor.execute("SELECT count(*) FROM runnerq_worker_pools")
                return cursor.fetchone()[0]

        wait_until(
            lambda: pools() > 0 or worker.poll() is not None, timeout=60, message="runworker to register"
        )
        assert worker.poll() is None, "runworker exited"
    finally:
        output = stop_process(worker)
    assert worker.returncode == 0, output
    assert "E103" not in output


def test_a_declared_job_or_a_started_scheduler_without_the_alias_is_one_clear_error(live_db_url):
    declared = manage("check", env=env_without_alias(live_db_url, DECLARED), check=False)
    assert declared.returncode != 0
    assert (
        "(runnerq.E103) RUNNERQ['SCHEDULER']['CACHE'] names cache alias 'runnerq_scheduler', which is not in CACHES"
        in declared.stderr
    )
    started = manage("runscheduler", "--once", env=env_without_alias(live_db_url), check=False)
    assert started.returncode != 0 and "Traceback" not in started.stderr
    assert "refuses to start" in started.stderr and "runnerq.E103" in started.stderr


BLOCKED = r"""
import sys
for name in ("celery", "kombu", "django_redis"):
    sys.modules[name] = None  # any import of them raises ImportError
import django
django.setup()
import importlib, pkgutil, runnerq_django
from django.core.management import call_command
call_command("check")
skip = {"runnerq_django.scheduler.celery_beat", "runnerq_django.tasks_backend"}  # extras: celery, tasks
for info in pkgutil.walk_packages(runnerq_django.__path__, "runnerq_django."):
    if info.name not in skip and ".migrations." not in info.name:
        importlib.import_module(info.name)
try:
    import runnerq_django.scheduler.celery_beat
except ImportError as exc:
    print("celery_beat:", exc)
from django.test import override_settings
from runnerq_django.scheduler.checks import cache_problems
alias = {"runnerq_scheduler": {"BACKEND": "django_redis.cache.RedisCache", "LOCATION": "redis://127.0.0.1:1/0"}}
with override_settings(CACHES={**alias, "default": {"BACKEND": "django.core.cache.backends.locmem.LocMemCache"}}):
    for problem in cache_problems():
        print(problem.id, problem.msg, "|", problem.hint)
"""


def test_worker_client_and_admin_import_without_celery_and_django_redis_and_extras_are_named(live_db_url):
    result = subprocess.run(
        [sys.executable, "-c", BLOCKED],
        cwd=REPO,
        env=env_without_alias(live_db_url),
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode == 0, result.stderr
    lines = result.stdout.splitlines()
    assert any(
        line.startswith("celery_beat: The Celery beat scheduler needs Celery")
        and 'pip install "runnerq-django[celery]"' in line
        for line in lines
    ), result.stdout
    assert any(
        line.startswith("runnerq.E105 The scheduler's cache alias 'runnerq_scheduler' can't be loaded")
        and line.endswith('| pip install "runnerq-django[redis]"')
        for line in lines
    ), result.stdout
