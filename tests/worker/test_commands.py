"""The management commands: runworker's options and errors, runnerq_status, and the README's
run command processing the examples on a fresh database."""

from __future__ import annotations

import io
import json
import re
import signal
import time

import pytest

from runnerq_django.exceptions import ActivityFailed
from tests.helpers import (
    manage,
    manage_env,
    scratch_database,
    spawn_manage,
    stop_process,
    wait_until,
    with_dbname,
)
from tests.worker import handlers
from tests.worker.support import fetch, runs, wait_for_workers


def test_runworker_help_explains_every_option():
    out = manage("runworker", "--help").stdout
    for option in (
        "--queue",
        "--activity-type",
        "--concurrency",
        "--processes",
        "--lease",
        "--shutdown-grace",
        "--log-format",
        "--no-listen",
        "--migrate",
        "--scheduler",
        "--metrics-port",
        "--metrics-address",
        "--import",
    ):
        assert option in out, option
    assert "PgBouncer" in out and "second signal" in out


def test_runworker_refuses_unknown_activity_types(live_db_url):
    result = manage(
        "runworker", "--activity-type", "no.such.type", db_url=live_db_url, check=False, timeout=60
    )
    assert result.returncode != 0
    assert "no.such.type" in result.stderr and "no handler" in result.stderr


def test_runworker_refuses_bad_queue_names(live_db_url):
    result = manage("runworker", "--queue", "no-dashes", db_url=live_db_url, check=False, timeout=60)
    assert result.returncode != 0
    assert "--queue: must be 1-48 characters" in result.stderr and "Traceback" not in result.stderr


@pytest.mark.parametrize(
    "runnerq, message",
    [
        ({"QUEUES": ["default", "bad-queue"]}, "RUNNERQ['QUEUES'][1] must be 1-48 characters"),
        ({"QUEUES": "default"}, "RUNNERQ['QUEUES'] must be a non-empty list of queue names"),
        ({"DEFAULT_QUEUE": "no spaces"}, "RUNNERQ['DEFAULT_QUEUE'] must be 1-48 characters"),
    ],
)
def test_queue_settings_are_checked_by_the_storage_layers_rule(runnerq, message):
    from django.core.management import call_command
    from django.core.management.base import SystemCheckError
    from django.test import override_settings

    with override_settings(RUNNERQ=runnerq), pytest.raises(SystemCheckError, match=re.escape(message)):
        call_command("check", "--tag", "runnerq")


def test_runworker_runs_the_system_checks_before_any_work(live_db_url):
    env = manage_env(
        live_db_url,
        RUNNERQ_EXAMPLES="0",
        DJANGO_SETTINGS_MODULE="tests.worker.settings",
        RUNNERQ_TEST_SETTINGS=json.dumps({"QUEUES": ["bad-queue"]}),
    )
    result = manage("runworker", "--import", "tests.worker.handlers", check=False, timeout=60, env=env)
    assert result.returncode == 78
    assert "(runnerq.E001) RUNNERQ['QUEUES'][0] must be 1-48 characters" in result.stderr
    assert "worker.started" not in result.stderr and "claim_failed" not in result.stderr


def test_runnerq_status_refuses_bad_queue_names(transactional_db):
    from django.core.management import CommandError, call_command

    with pytest.raises(CommandError, match=r"--queue: must be 1-48 characters .* got 'bad-q'"):
        call_command("runnerq_status", "--queue", "bad-q", stdout=io.StringIO())
    with pytest.raises(CommandError, match="--database: unknown database alias 'nope'"):
        call_command("runnerq_status", "--database", "nope", stdout=io.StringIO())


def test_runnerq_status_reports_counts_age_and_workers(worker_process, queue_name):
    handlers.echo.enqueue_many([1, 2, 3], queue=queue_name)
    handlers.echo.enqueue("later", queue=queue_name, delay=3600)
    proc = worker_process("--queue", "default", "--concurrency", "3", "--log-format", "json")
    wait_for_workers("default", 1)
    time.sleep(0.2)
    report = json.loads(manage("runnerq_status", "--json", db_url=_db_url()).stdout)["queues"]
    assert report[queue_name]["counts"]["pending"] == 3
    assert report[queue_name]["counts"]["scheduled"] == 1
    assert report[queue_name]["oldest_runnable_seconds"] >= 0.2  # nobody serves this queue
    assert report[queue_name]["workers"] == 0
    assert (report["default"]["workers"], report["default"]["slots"]) == (1, 3)
    table = manage("runnerq_status", db_url=_db_url()).stdout
    assert queue_name in table and "oldest runnable" in table
    stop_process(proc)
    lines = [json.loads(line) for line in proc.log().splitlines() if line.startswith("{")]
    assert {"worker.started", "worker.stopping", "worker.stopped"} <= {line["event"] for line in lines}
    started = next(line for line in lines if line["event"] == "worker.started")
    assert started["concurrency"] == 3 and started["queues"] == "default"


def test_runnerq_status_stays_bounded_past_the_limits(transactional_db, queue_name, monkeypatch):
    """Beyond GROUPED_COUNT_LIMIT rows nothing counts a whole table: unfinished statuses are read
    up to the cap from their partial index, completed ones are the planner's estimate. (The
    limits are lowered here, as the admin's tests lower the paginator's cap.)"""
    from django.core.management import call_command
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    from runnerq_django import storage
    from runnerq_django.storage import reads

    handlers.echo.enqueue_many(list(range(6)), queue=queue_name)
    handlers.echo.enqueue_many(list(range(4)), queue=queue_name, priority=4)
    for claimed in storage.claim(queue_name, limit=4, lease_ms=30_000, worker_id="test"):
        storage.complete(queue_name, claimed.claim, "done")

    def status(*args) -> str:
        out = io.StringIO()
        call_command("runnerq_status", "--queue", queue_name, *args, stdout=out)
        return out.getvalue()

    exact = json.loads(status("--json"))["queues"][queue_name]
    assert (exact["counts"]["pending"], exact["counts"]["completed"]) == (6, 4)
    assert exact["capped"] == [] and exact["estimated"] == []
    monkeypatch.setattr(reads, "GROUPED_COUNT_LIMIT", 5)
    monkeypatch.setattr(reads, "STATUS_COUNT_CAP", 3)
    with CaptureQueriesContext(connection) as captured:
        big = json.loads(status("--json"))["queues"][queue_name]
    assert big["counts"]["pending"] == 4 and big["capped"] == [
        "pending"
    ]  # read up to the cap (+1), no further
    assert big["estimated"] == ["completed"] and isinstance(big["counts"]["completed"], int)
    for query in captured.captured_queries:
        sql = " ".join(query["sql"].split())
        assert "GROUP BY queue_name, status" not in sql
        if "'completed'" in sql and "runnerq_activities" in sql:
            assert sql.startswith("EXPLAIN") or "status <> 'completed'" in sql, sql  # estimated, or excluded
    table = status()
    assert f"{queue_name}  " in table and "3+" in table and "~" in table and "planner's estimate" in table


def _db_url():
    from django.db import connection

    from tests.helpers import url_for

    return url_for(connection.settings_dict)


@pytest.mark.slow
def test_the_readme_run_command_processes_the_examples(live_db_url, tmp_path):
    """``python manage.py runworker --migrate`` on an empty database: migrates, enqueues the
    examples' tour once, and runs every example to the end."""
    with scratch_database(with_dbname(live_db_url, "postgres"), prefix="rq_readme") as url:
        log_path = tmp_path / "worker.log"
        with open(log_path, "w") as log:
            env = manage_env(url)
            env.pop("RUNNERQ_EXAMPLES", None)
            proc = spawn_manage("runworker", "--migrate", env=env, stdout=log, stderr=log)
        try:
            wait_until(
                lambda: "tour finished" in log_path.read_text(),
                timeout=60,
                interval=0.2,
                message="the examples' tour to finish",
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        output = log_path.read_text()
        assert proc.returncode == 0, output
        for line in (
            "webhook_enqueues_created: [True, False]",
            "hello: {",
            "steps_and_retries: {",
            "checkpoint: {",
            "durable_sleep: {",
            "approval: {'by': 'auto-approver', 'approved': True}",
            "fan_out: {",
            "always_fails: dead_letter",
        ):
            assert line in output, line
        import psycopg

        with psycopg.connect(url) as conn:
            statuses = dict(
                conn.execute("SELECT status, count(*) FROM runnerq_activities GROUP BY status").fetchall()
            )
        assert set(statuses) <= {"completed", "dead_letter"}, statuses  # nothing left behind
        assert statuses["dead_letter"] == 1
        assert "runworker: serving queue(s) default with 8 thread(s). Ctrl-C or SIGTERM stops it" in output

        # A warm start says that the tour already ran, and how to run it again.
        warm_log = tmp_path / "warm.log"
        with open(warm_log, "w") as log:
            proc = spawn_manage("runworker", "--migrate", env=env, stdout=log, stderr=log)
        try:
            wait_until(
                lambda: "[examples]" in warm_log.read_text(),
                timeout=60,
                interval=0.2,
                message="the warm start's word on the tour",
            )
        finally:
            proc.send_signal(signal.SIGTERM)
            proc.wait(30)
        warm = warm_log.read_text()
        assert "runworker: serving queue(s) default with 8 thread(s). Ctrl-C or SIGTERM stops it" in warm
        assert re.search(
            r"\[examples\] the tour of the examples already ran in this database \(activity \S+, "
            r"completed\); run it again with: python manage.py run_example tour",
            warm,
        ), warm
        assert "starting the tour" not in warm


@pytest.mark.parametrize(
    "name, expected",
    [
        ("hello", "result: {'shouted': 'HELLO, DJANGO!'"),
        ("exactly_once_webhook", "created=[True, False, False], one activity: True"),
        (
            "dead_letter",
            "examples.always_fails: dead_letter after events ['Retrying', 'Retrying', 'DeadLetter']",
        ),
    ],
)
def test_run_example(live_db_url, name, expected):
    out = manage("run_example", name, db_url=live_db_url, timeout=120).stdout
    assert expected in out, out


def test_runworker_scheduler_option_runs_the_scheduler(worker_process, redis_url):
    """A job declared in settings, due every second: the worker's scheduler thread enqueues its
    occurrences and the same worker runs them."""
    import uuid

    namespace = "w" + uuid.uuid4().hex[:10]  # its own cache records and occurrence keys
    jobs = {"t.tick": {"activity": "t.counted", "every": 1, "payload": {"tick": True}}}
    env = {
        "DJANGO_SETTINGS_MODULE": "tests.worker.settings",
        "REDIS_URL": redis_url,
        "RUNNERQ_TEST_SETTINGS": json.dumps({"SCHEDULER": {"NAMESPACE": namespace, "JOBS": jobs}}),
    }
    proc = worker_process(
        "--scheduler", "--queue", "default", "--poll-interval", "0.2", "--log-format", "json", env=env
    )
    ran = wait_until(
        lambda: fetch(
            "SELECT a.id, a.metadata FROM runnerq_activities a JOIN rq_test_runs r ON r.activity_id = a.id"
            " WHERE a.activity_type = 't.counted' AND a.status = 'completed'"
        ),
        timeout=30,
        message="an occurrence of the periodic job to be enqueued and run",
    )
    metadata = json.loads(ran[0][1]) if isinstance(ran[0][1], str) else ran[0][1]
    assert metadata["periodic_job"] == "t.tick" and metadata["periodic_namespace"] == namespace
    assert handlers.echo.enqueue("still a worker").result(timeout=15) == "still a worker"
    stop_process(proc)
    assert proc.returncode == 0
    assert "periodic.scheduler_started" in proc.log() and "worker.stopped" in proc.log()


def test_metrics_are_served_for_prometheus(worker_process):
    import urllib.request

    from tests.helpers import free_port

    port = free_port()
    worker_process("--metrics-port", str(port), "--queue", "default")
    assert handlers.echo.enqueue("counted").result(timeout=30) == "counted"
    with pytest.raises(ActivityFailed):
        handlers.fail_non_retryable.enqueue(None).result(timeout=30)
    body = wait_until(lambda: _scrape(urllib.request, port), timeout=10, message="the metrics endpoint")
    assert 'runnerq_activity_completed_total{queue="default"} 1.0' in body
    assert 'runnerq_activity_failed_non_retry_total{queue="default"} 1.0' in body
    assert "runnerq_activity_execution_seconds_bucket" in body
    # Loopback only by default: no authentication, so not on the machine's other addresses
    # (127.0.0.2 reaches a socket bound to every address, never one bound to 127.0.0.1).
    assert _scrape(urllib.request, port, "127.0.0.2") is None


def test_metrics_address_chooses_where_the_metrics_listen(worker_process):
    import urllib.request

    from tests.helpers import free_port

    port = free_port()
    worker_process("--metrics-port", str(port), "--metrics-address", "0.0.0.0", "--queue", "default")
    handlers.echo.enqueue("counted").result(timeout=30)
    with pytest.raises(ActivityFailed):
        handlers.fail_non_retryable.enqueue(None).result(timeout=30)
    for host in ("127.0.0.2", "127.0.0.1"):
        wait_until(
            lambda h=host: _scrape(urllib.request, port, h), timeout=10, message=f"the metrics on {host}"
        )
    for args, message in (
        (
            ["--metrics-port", "9100", "--metrics-address", "example.com"],
            "--metrics-address: must be an IP address",
        ),
        (["--metrics-address", "0.0.0.0"], "--metrics-address needs --metrics-port"),
    ):
        result = manage("runworker", *args, check=False, timeout=60)
        assert result.returncode != 0 and message in result.stderr, result.stderr


def _scrape(urllib_request, port: int, host: str = "127.0.0.1") -> str | None:
    try:
        body = urllib_request.urlopen(f"http://{host}:{port}/metrics", timeout=2).read().decode()
    except OSError:
        return None
    return body if "runnerq_activity_failed_non_retry_total" in body else None


def test_runworker_until_idle_runs_what_is_due_and_exits_0(live_db_url, runs_table, queue_name):
    due = [handlers.echo.enqueue(n, queue=queue_name) for n in range(3)]
    later = handlers.echo.enqueue("later", queue=queue_name, delay=3600)
    env = manage_env(live_db_url, RUNNERQ_EXAMPLES="0")
    result = manage(
        "runworker",
        "--import",
        "tests.worker.handlers",
        "--queue",
        queue_name,
        "--until-idle",
        check=False,
        timeout=90,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "reason=idle" in result.stderr
    assert [handle.result(timeout=1) for handle in due] == [0, 1, 2]
    assert fetch("SELECT status FROM runnerq_activities WHERE id = %s", [later.id]) == [("scheduled",)]


def test_runworker_until_idle_exits_when_what_is_due_is_only_rows_it_cannot_claim(
    live_db_url, runs_table, queue_name
):
    """An input in a serialization this worker doesn't read (another SDK's, written by SQL) is
    left for that SDK by the claim: it kept --until-idle up for ever. The worker exits, naming
    the rows it left."""
    due = handlers.echo.enqueue("due", queue=queue_name)
    foreign = handlers.echo.enqueue("foreign", queue=queue_name)
    fetch("UPDATE runnerq_inputs SET serialization = 'nope-v9' WHERE activity_id = %s", [foreign.id])
    env = manage_env(live_db_url, RUNNERQ_EXAMPLES="0")
    result = manage(
        "runworker",
        "--import",
        "tests.worker.handlers",
        "--queue",
        queue_name,
        "--until-idle",
        check=False,
        timeout=90,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "reason=idle" in result.stderr
    assert due.result(timeout=1) == "due"
    assert fetch("SELECT status FROM runnerq_activities WHERE id = %s", [foreign.id]) == [("pending",)]
    [line] = [line for line in result.stderr.splitlines() if "worker.idle_left_unclaimable" in line]
    assert "nope-v9" in line and str(foreign.id) in line, line


def test_runworker_until_idle_waits_for_work_running_elsewhere(live_db_url, worker_process, queue_name):
    """An activity another worker is running keeps the queue busy (it may still spawn children or
    fail into a retry): --until-idle exits only once it has finished."""
    other = worker_process("--queue", queue_name)
    slow = handlers.slow.enqueue({"seconds": 3}, queue=queue_name)
    wait_until(lambda: runs("start", slow.id), timeout=30, message="the slow activity to start elsewhere")
    env = manage_env(live_db_url, RUNNERQ_EXAMPLES="0")
    result = manage(
        "runworker",
        "--import",
        "tests.worker.handlers",
        "--queue",
        queue_name,
        "--until-idle",
        check=False,
        timeout=90,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert runs("end", slow.id), "exited while the activity was still running"
    assert "claimed=0" in result.stderr, other.log()


def test_runworker_until_idle_runs_one_process():
    result = manage("runworker", "--until-idle", "--processes", "2", check=False, timeout=60)
    assert result.returncode == 78
    assert "--until-idle runs one worker process" in result.stderr


def test_work_no_live_worker_handles_is_named_by_the_worker_and_runnerq_status(live_db_url, queue_name):
    """A typo (or a type whose worker is down): --until-idle still exits 0 having claimed nothing,
    but it says which types it leaves due and that nobody handles them; runnerq_status breaks the
    due work down by type and marks those."""
    from runnerq_django import enqueue

    for n in range(2):
        enqueue("tests.worker.handlers.ech0", {"n": n}, queue=queue_name)
    handled = handlers.echo.enqueue("handled", queue=queue_name)
    status = json.loads(manage("runnerq_status", "--json", "--queue", queue_name, db_url=live_db_url).stdout)
    due = status["queues"][queue_name]["due_by_type"]
    assert due["tests.worker.handlers.ech0"] == {"due": 2, "handled": False}
    assert due["t.echo"] == {"due": 1, "handled": False}  # no worker is running at all
    table = manage("runnerq_status", "--queue", queue_name, db_url=live_db_url).stdout
    assert f"{queue_name}/tests.worker.handlers.ech0: 2  UNHANDLED" in table

    env = manage_env(live_db_url, RUNNERQ_EXAMPLES="0")
    worker = spawn_manage(
        "runworker",
        "--import",
        "tests.worker.handlers",
        "--queue",
        queue_name,
        "--log-format",
        "json",
        env=env,
    )
    wait_for_workers(queue_name, 1)
    assert handled.result(timeout=30) == "handled"
    status = json.loads(manage("runnerq_status", "--json", "--queue", queue_name, db_url=live_db_url).stdout)
    assert status["queues"][queue_name]["due_by_type"] == {
        "tests.worker.handlers.ech0": {"due": 2, "handled": False}
    }  # the echo ran; the live worker handles the types it registers, not the typo
    stop_process(worker)

    result = manage(
        "runworker",
        "--import",
        "tests.worker.handlers",
        "--queue",
        queue_name,
        "--until-idle",
        check=False,
        timeout=90,
        env=env,
    )
    assert result.returncode == 0, result.stderr
    assert "claimed=0" in result.stderr
    [line] = [line for line in result.stderr.splitlines() if "worker.unhandled_types" in line]
    assert (
        f"queue={queue_name}" in line
        and "activity_type=tests.worker.handlers.ech0" in line
        and "due=2" in line
    )


def test_a_running_worker_says_what_nobody_handles_without_repeating_itself(live_db_url, queue_name):
    from runnerq_django import enqueue

    enqueue("nobody.handles_this", None, queue=queue_name)
    env = manage_env(
        live_db_url,
        RUNNERQ_EXAMPLES="0",
        DJANGO_SETTINGS_MODULE="tests.worker.settings",
        RUNNERQ_TEST_SETTINGS=json.dumps({"HEARTBEAT_SECONDS": 0.5}),
    )
    worker = spawn_manage("runworker", "--queue", queue_name, "--log-format", "json", env=env)
    wait_for_workers(queue_name, 1)
    time.sleep(4)  # the first look comes one heartbeat after the start; the next a minute later
    log = stop_process(worker)
    said = [
        json.loads(line) for line in log.splitlines() if line.startswith("{") and "unhandled_types" in line
    ]
    assert len(said) == 1, log
    assert said[0]["activity_type"] == "nobody.handles_this" and said[0]["queue"] == queue_name
    assert said[0]["level"] == "warning" and "no live worker handles that type" in said[0]["message"]


def test_runnerq_status_json_errors_are_json_documents():
    result = manage("runnerq_status", "--json", "--alive", "-1", check=False, timeout=60)
    assert result.returncode == 2
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "invalid_argument" and error["field"] == "alive" and "--alive" in error["message"]
    result = manage("runnerq_status", "--json", "--database", "nope", check=False, timeout=60)
    assert result.returncode == 1
    assert json.loads(result.stdout)["error"]["field"] == "database"
