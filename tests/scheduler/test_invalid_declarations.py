"""Invalid declarations are never dropped silently: the scheduler logs each one it skips, the
status view (``runnerq_schedule``, the admin) shows it as ``invalid`` with the reason, and the
scheduler service refuses to start on check errors -- whichever command runs it."""

from __future__ import annotations

import logging
import re
import threading

import pytest
from django.core.management import call_command
from django.test import override_settings

from runnerq_django.scheduler import service
from runnerq_django.scheduler.status import job_states
from tests.helpers import manage
from tests.scheduler.conftest import events, process_env

GOOD = {"activity": "tests.scheduler.Tick", "every": 60}
JOBS = {"ok.job": GOOD, "bad.cron": {"activity": "tests.scheduler.Tick", "cron": "61 * * * *"}}


def test_the_status_view_shows_an_invalid_declaration_with_its_reason(env, capsys):
    with override_settings(RUNNERQ={"SCHEDULER": {"NAMESPACE": env.namespace, "JOBS": JOBS}}):
        states = {s.id: s for s in job_states(namespace=env.namespace, cache=env.cache) if s.id in JOBS}
        call_command("runnerq_schedule", namespace=env.namespace)
    assert (states["ok.job"].state, states["bad.cron"].state) == ("missing", "invalid")
    assert "not a valid cron expression" in states["bad.cron"].detail
    assert states["bad.cron"].next is None and states["bad.cron"].source == "declaration"
    out = capsys.readouterr().out
    assert (
        re.search(r"^bad\.cron +invalid ", out, re.M)
        and "bad.cron: " in out
        and "not a valid cron expression" in out
    )


def test_the_scheduler_logs_each_declaration_it_skips(transactional_db, scheduler_logs):
    with override_settings(RUNNERQ={"SCHEDULER": {"JOBS": JOBS}}):
        core = service.build_core()
    assert "bad.cron" not in [spec.job_id for spec in core.specs] and "ok.job" in [
        s.job_id for s in core.specs
    ]
    (line,) = events(scheduler_logs, "periodic.job_skipped", logging.ERROR)
    assert line.job_id == "bad.cron" and "not a valid cron expression" in line.reason


def test_the_service_refuses_to_start_on_check_errors_like_runscheduler(
    transactional_db, scheduler_logs, live_db_url
):
    # runworker --scheduler runs SchedulerService().run(stop): the service itself refuses.
    with override_settings(RUNNERQ={"SCHEDULER": {"JOBS": JOBS}}):
        stop = threading.Event()
        runner = service.SchedulerService()
        with pytest.raises(service.SchedulerMisconfigured) as refused:
            runner.run(stop)
    assert runner.ticks == 0 and "runnerq.E102" in str(refused.value) and "'bad.cron'" in str(refused.value)
    (line,) = events(scheduler_logs, "periodic.check_failed", logging.ERROR)
    assert line.check == "runnerq.E102" and "'bad.cron'" in line.problem
    assert not events(scheduler_logs, "periodic.scheduler_started")

    # runscheduler refuses the same configuration with the same messages, in its own process.
    result = manage(
        "runscheduler", "--once", env=process_env(live_db_url, scheduler={"JOBS": JOBS}), check=False
    )
    assert result.returncode != 0
    assert str(refused.value) in result.stderr  # word for word the service's refusal
