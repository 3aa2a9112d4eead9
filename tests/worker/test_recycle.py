"""Workers that recycle themselves (``--max-activities-per-process``, ``--max-memory-per-process``;
docs/how-to/production.md): real worker processes, the outcome read from the database."""

from __future__ import annotations

import io
import math
import time
from collections import Counter

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from runnerq_django import conf
from runnerq_django.worker.exit_status import EX_TEMPFAIL
from runnerq_django.worker.recycle import Recycler
from tests.helpers import wait_until
from tests.worker import handlers
from tests.worker import recycle_handlers as rh
from tests.worker.support import fetch, row_of, runs

FAST = ("--import", "tests.worker.recycle_handlers", "--poll-interval", "0.2", "--lease", "10")


def completed(ids) -> int:
    return fetch(
        "SELECT count(*) FROM runnerq_activities WHERE status = 'completed' AND id = ANY(%s::uuid[])",
        [[str(i) for i in ids]],
    )[0][0]


def assert_each_ran_once(handles) -> Counter[int]:
    """Every activity completed once, on its first attempt, nothing requeued or released; the
    runs per process."""
    ids = [h.id for h in handles]
    assert completed(ids) == len(ids)
    rows = runs("run")
    assert sorted(str(r[0]) for r in rows) == sorted(str(i) for i in ids)  # once each
    assert fetch(
        "SELECT max(retry_count), count(*) FILTER (WHERE last_worker_id IS NULL) FROM runnerq_activities"
        " WHERE id = ANY(%s::uuid[])",
        [[str(i) for i in ids]],
    )[0] == (0, 0)
    assert fetch("SELECT count(*) FROM runnerq_events")[0][0] == 0  # no Requeued, no retry
    return Counter(r[3] for r in rows)


# the budget and the limits' rules ----------------------------------------------------------------


def test_the_claim_budget_grants_only_what_is_left_and_takes_back_what_a_claim_left_unused():
    budget = Recycler(max_activities=5, max_memory_mb=None)
    assert budget.take(4) == 4 and budget.due() is None
    budget.give_back(1)  # the claim found 3
    assert budget.take(10) == 2  # 3 + 2 = 5: the last round takes the remainder only
    assert budget.take(1) == 0
    assert budget.due() == "max_activities" and budget.fields["activities"] == 5
    assert "claimed 5 activities" in budget.sentence()
    unlimited = Recycler(None, None)
    assert unlimited.take(500) == 500 and unlimited.due() is None and not unlimited.enabled


def test_the_memory_limit_is_the_process_resident_memory():
    assert Recycler(None, 10**6).due() is None
    small = Recycler(None, 1)  # below any Python process
    assert small.take(3) == 3  # it has claimed work
    assert small.due() == "max_memory" and small.fields["resident_mb"] > 1
    assert "over its limit of 1 MiB" in small.sentence()


def test_a_memory_limit_below_an_idle_process_is_dropped_instead_of_recycling_in_a_loop():
    idle = Recycler(None, 1)  # nothing claimed yet, and already over it
    assert idle.due() is None and idle.reason is None
    assert idle.below_idle is not None and idle.below_idle["max_memory_mb"] == 1
    assert idle.max_memory_mb is None and not idle.enabled


@pytest.mark.parametrize(
    "runnerq, expected",
    [
        (
            {"MAX_ACTIVITIES_PER_PROCESS": 0},
            "RUNNERQ['MAX_ACTIVITIES_PER_PROCESS'] must be None (no limit) or a whole number 1..1000000000, got 0",
        ),
        (
            {"MAX_MEMORY_PER_PROCESS_MB": 8},
            "RUNNERQ['MAX_MEMORY_PER_PROCESS_MB'] must be None (no limit) or a whole number 32..1048576, got 8",
        ),
        (
            {"MAX_MEMORY_PER_PROCESS_MB": "512MB"},
            "RUNNERQ['MAX_MEMORY_PER_PROCESS_MB'] must be None (no limit) or a whole number 32..1048576, got '512MB'",
        ),
    ],
)
def test_the_settings_name_the_field_and_the_limit(runnerq, expected):
    from django.core import checks

    with override_settings(RUNNERQ=runnerq):
        found = [m.msg for m in checks.run_checks(tags=["runnerq"]) if m.id == "runnerq.E001"]
        assert found == [expected]
        typed = conf.runnerq_settings()  # a bad value reads as the default: no limit
        assert (typed.max_activities_per_process, typed.max_memory_per_process_mb) == (None, None)
    with override_settings(RUNNERQ={"MAX_ACTIVITIES_PER_PROCESS": 100, "MAX_MEMORY_PER_PROCESS_MB": 512}):
        typed = conf.runnerq_settings()
        assert (typed.max_activities_per_process, typed.max_memory_per_process_mb) == (100, 512)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["--max-activities-per-process", "0"],
            "argument --max-activities-per-process: must be a whole number 1..1000000000, got 0",
        ),
        (
            ["--max-memory-per-process", "16"],
            "argument --max-memory-per-process: must be a whole number 32..1048576, got 16",
        ),
        (
            ["--max-memory-per-process", "1.5"],
            "argument --max-memory-per-process: must be a whole number 32..1048576, got '1.5'",
        ),
    ],
)
def test_the_command_line_options_name_the_flag_and_the_limit(args, message):
    with pytest.raises(CommandError) as err:
        call_command("runworker", *args, stdout=io.StringIO(), stderr=io.StringIO())
    assert message in str(err.value)


# real workers ------------------------------------------------------------------------------------


@pytest.mark.slow
def test_max_activities_recycles_pool_children_and_runs_every_activity_exactly_once(worker_process):
    total, limit = 40, 7
    handles = handlers.counted.enqueue_many(list(range(total)))
    proc = worker_process(
        *FAST, "--processes", "2", "--concurrency", "3", "--max-activities-per-process", str(limit)
    )
    wait_until(lambda: completed([h.id for h in handles]) == total, timeout=90, message="all to complete")
    per_process = assert_each_ran_once(handles)
    assert max(per_process.values()) <= limit  # a process never claims past its budget
    assert len(per_process) >= math.ceil(total / limit)  # so it took fresh processes to finish
    assert [h.result(timeout=5) for h in handles] == list(range(total))
    wait_until(lambda: "supervisor.child_recycled" in proc.log(), timeout=10, message="the parent's log")
    log = proc.log()
    assert "worker.recycling" in log and "reason=max_activities" in log
    assert "worker.released" not in log  # the drains handed back nothing: it all finished
    assert "restarting it in" not in log  # a recycle is no crash: no backoff
    assert proc.poll() is None  # the pool keeps serving


@pytest.mark.slow
def test_a_worker_over_its_memory_limit_recycles_with_nothing_lost(worker_process):
    # How much an idle worker of this project holds, so the limit is above it whatever the machine.
    probe = worker_process(*FAST, "--concurrency", "1")
    baseline = rh.resident.enqueue(None).result(timeout=30)["resident_mb"]
    probe.terminate()
    assert probe.wait(30) == 0
    limit = int(baseline) + 100
    handles = [rh.hoard.enqueue({"mb": 40, "seconds": 0.5}) for _ in range(10)]
    proc = worker_process(
        *FAST, "--processes", "2", "--concurrency", "1", "--max-memory-per-process", str(limit)
    )
    wait_until(lambda: completed([h.id for h in handles]) == 10, timeout=120, message="all to complete")
    per_process = assert_each_ran_once(handles)
    # 40 MiB kept per activity: no process ran more than its limit allows, plus what it ran in
    # the half second before it looked (at most two more) and its one in flight.
    assert max(per_process.values()) <= 100 // 40 + 3
    assert len(per_process) > 2  # processes were replaced
    wait_until(lambda: "supervisor.child_recycled" in proc.log(), timeout=10, message="the parent's log")
    log = proc.log()
    assert "reason=max_memory" in log and f"max_memory_mb={limit}" in log
    assert "worker.released" not in log


@pytest.mark.slow
def test_a_recycle_lets_a_running_handler_finish_past_the_grace_and_exits_75(worker_process):
    """A lone worker (no --processes parent) exits with 75 for its process manager to restart it;
    what it held finishes there (the shutdown grace is for stop signals), it is not released."""
    long = handlers.slow.enqueue({"seconds": 3})
    time.sleep(0.05)
    short = handlers.counted.enqueue(1)
    proc = worker_process(
        *FAST, "--concurrency", "2", "--shutdown-grace", "0.2", "--max-activities-per-process", "2"
    )
    assert proc.wait(60) == EX_TEMPFAIL
    assert row_of(long.id)["status"] == "completed" and row_of(short.id)["status"] == "completed"
    assert long.result(timeout=5)["pid"] == proc.pid
    assert [r[1] for r in runs(activity_id=long.id)] == ["start", "end"]
    log = proc.log()
    assert "worker.recycling" in log and "worker.released" not in log
    assert "code=75" in log


@pytest.mark.slow
def test_a_stop_signal_during_a_recycle_gives_running_handlers_the_grace(worker_process):
    long = handlers.slow.enqueue({"seconds": 60})
    proc = worker_process(
        *FAST, "--concurrency", "1", "--shutdown-grace", "0.5", "--max-activities-per-process", "1"
    )
    wait_until(lambda: "worker.recycling" in proc.log(), timeout=30, message="the recycle to begin")
    proc.terminate()
    assert proc.wait(20) == EX_TEMPFAIL  # it recycled (and was told to stop): not the 60 s handler
    row = row_of(long.id)
    assert row["status"] == "pending" and row["retry_count"] == 0  # released: no attempt counted
    assert "worker.released" in proc.log()


@pytest.mark.slow
def test_a_process_mode_child_is_held_to_the_memory_limit_on_its_own(worker_process):
    probe = worker_process(*FAST, "--concurrency", "1")
    baseline = rh.resident.enqueue(None).result(timeout=30)["resident_mb"]
    probe.terminate()
    assert probe.wait(30) == 0
    limit = int(baseline) + 60
    handles = [rh.hoard_in_child.enqueue({"mb": 150}) for _ in range(3)]
    proc = worker_process(*FAST, "--concurrency", "1", "--max-memory-per-process", str(limit))
    pids = {h.result(timeout=60)["pid"] for h in handles}
    assert len(pids) == 3 and proc.pid not in pids  # a child each, none the worker
    assert_each_ran_once(handles)
    log = proc.log()
    assert log.count("worker.child_over_memory") == 3 and f"max_memory_mb={limit}" in log
    assert "worker.recycling" not in log  # the worker's own memory never held the children's
    assert proc.poll() is None


@pytest.mark.slow
def test_a_memory_limit_below_an_idle_worker_is_reported_and_the_worker_keeps_serving(worker_process):
    proc = worker_process(*FAST, "--concurrency", "1", "--max-memory-per-process", "32")
    wait_until(lambda: "worker.memory_limit_below_idle" in proc.log(), timeout=30, message="the error line")
    handles = handlers.counted.enqueue_many([1, 2, 3])
    assert [h.result(timeout=30) for h in handles] == [1, 2, 3]
    assert proc.poll() is None and "worker.recycling" not in proc.log()
    assert "max_memory_mb=32" in proc.log()
