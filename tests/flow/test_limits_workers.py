"""Concurrency limits with real ``runworker`` processes: 3 workers x 16 threads, a ledger of start
and end times written by the handlers, never more overlapping executions than the limit; a lock
per key over 20 keys; and slots coming back after a worker is killed with ``kill -9``."""

from __future__ import annotations

import os
import signal

import pytest

from tests.flow import handlers
from tests.flow.conftest import ledger_rows
from tests.helpers import wait_until
from tests.worker.support import fetch, wait_for_workers

pytestmark = pytest.mark.slow

Q = "flow_limited"
ARGS = ("--queue", Q, "--concurrency", "16", "--poll-interval", "1")


def max_overlap(rows) -> int:
    """The most executions running at one instant (ledger start/end times, database clock; one
    not ended yet is running now)."""
    now = fetch("SELECT clock_timestamp()")[0][0]
    edges = sorted([(r[5], 1) for r in rows] + [(r[6] or now, -1) for r in rows], key=lambda e: (e[0], e[1]))
    running = peak = 0
    for _, step in edges:
        running += step
        peak = max(peak, running)
    return peak


def finished(count: int) -> bool:
    return fetch("SELECT count(*) FROM rq_flow_ledger WHERE ended_at IS NOT NULL")[0][0] >= count


def start_three(flow_worker, *extra: str) -> list:
    procs = [flow_worker(*ARGS, *extra) for _ in range(3)]
    wait_for_workers(Q, 3)
    return procs


def test_three_workers_never_run_more_than_the_limit(flow_worker):
    start_three(flow_worker)
    handlers.limited.enqueue_many([{"seconds": 0.2}] * 60, queue=Q)
    wait_until(lambda: finished(60), timeout=90, message="60 limited activities to finish")
    rows = ledger_rows()
    assert len(rows) == 60
    assert max_overlap(rows) <= 4
    assert max_overlap(rows) == 4  # and the limit is used, not merely respected
    # A freed slot wakes a waiting worker: 60 x 0.2 s at 4 at a time is 3 s, so it stays close.
    span = (max(r[6] for r in rows) - min(r[5] for r in rows)).total_seconds()
    assert span < 3.0 * 2.5, span


def test_a_lock_per_key_over_20_keys_runs_keys_in_parallel_but_never_one_key_twice(flow_worker):
    start_three(flow_worker)
    handlers.per_key.enqueue_many([{"seconds": 0.1, "key": f"k{i % 20}"} for i in range(200)], queue=Q)
    wait_until(lambda: finished(200), timeout=120, message="200 per-key activities to finish")
    rows = ledger_rows()
    by_key: dict[str, list] = {}
    for row in rows:
        by_key.setdefault(row[4], []).append(row)
    assert len(by_key) == 20
    assert all(max_overlap(key_rows) == 1 for key_rows in by_key.values())
    assert max_overlap(rows) > 4  # different keys ran at the same time


def test_slots_of_a_worker_killed_with_kill_9_come_back_once_its_leases_are_reaped(flow_worker):
    victim = flow_worker(*ARGS, "--lease", "3")
    wait_for_workers(Q, 1)
    handlers.limited.enqueue_many([{"seconds": 30}] * 4 + [{"seconds": 0.1}] * 20, queue=Q)
    wait_until(lambda: len(ledger_rows()) >= 4, timeout=30, message="the victim to take the 4 slots")
    assert len(ledger_rows()) == 4  # the limit: the other 20 wait
    os.killpg(victim.pid, signal.SIGKILL)
    victim.wait(10)
    survivors = [flow_worker(*ARGS, "--lease", "3") for _ in range(2)]
    wait_until(lambda: finished(20), timeout=90, message="the queue to drain after the reap")
    rows = ledger_rows()
    assert {r[3] for r in rows if r[6] is not None} <= {p.pid for p in survivors}
    assert max_overlap([r for r in rows if r[3] != victim.pid]) <= 4
