"""The executor's hand-off of attempts to its threads (issue 27: one wake-up per batch on Python
3.13, and a watcher for attempts queued behind a handler that blocks).

The pool's own tests run real threads on plain items (no database); the last one runs a real
worker process. None bounds a time tighter than generous: the speed is measured in
``bench/handoff.py``.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter

import pytest

from runnerq_django.worker import executor
from runnerq_django.worker.executor import ExecutorPool, QueueHandoffPool, executor_pool
from tests.helpers import wait_until
from tests.worker import handlers
from tests.worker.support import runs, worker_processes

POOLS = [ExecutorPool, QueueHandoffPool]


@pytest.mark.parametrize("pool_class", POOLS)
def test_an_item_queued_behind_blocked_handlers_starts_while_they_block(pool_class):
    """Three items block until released; the fourth, handed over in the same batch behind them,
    must start while they still block (no awake thread is left to take it: the watcher must
    wake one)."""
    release = threading.Event()
    started = threading.Event()

    def run(item):
        if item == "next":
            started.set()
        else:
            release.wait(60)

    pool = pool_class(4, run)
    pool.start()
    try:
        time.sleep(0.2)  # every thread asleep, the watcher in its untimed wait
        pool.submit(["blocker-1", "blocker-2", "blocker-3", "next"])
        assert started.wait(20), "the item behind the blocked handlers never started"
        # The blockers still hold their slots, and the item behind them gave its own back.
        wait_until(lambda: pool.busy() == 3, timeout=20, message="three slots taken")
        assert not release.is_set()
    finally:
        release.set()
    assert pool.wait_idle(20)
    pool.stop()
    for thread in pool._threads:
        thread.join(10)
        assert not thread.is_alive()


def test_while_handlers_run_long_an_item_behind_blocked_ones_starts_too():
    """After handlers that each ran 5 ms (longer than the hand-off's delay), a thread that takes
    an item wakes the next at once and the watcher stays asleep: the item behind three blocked
    handlers must start all the same."""
    release = threading.Event()
    started = threading.Event()

    def run(item):
        if item == "next":
            started.set()
        elif item == "short":
            time.sleep(0.005)
        else:
            release.wait(60)

    pool = ExecutorPool(4, run)
    pool.start()
    try:
        for _ in range(8):
            pool.submit(["short"] * 4)
            assert pool.wait_idle(20)
        assert pool._typical_run >= executor.HANDOFF_DELAY
        time.sleep(0.2)
        pool.submit(["blocker-1", "blocker-2", "blocker-3", "next"])
        assert started.wait(20), "the item behind the blocked handlers never started"
    finally:
        release.set()
    assert pool.wait_idle(20)
    pool.stop()


@pytest.mark.parametrize("pool_class", POOLS)
def test_every_item_runs_once_under_mixed_handlers_and_stop_ends_the_threads(pool_class):
    """Batches of every size, handed over as slots free, of items that return at once, burn a
    little CPU or block a few milliseconds: each runs exactly once, the slot count returns to
    zero, and a stop ends every thread (the watcher's too)."""
    ran: Counter[int] = Counter()
    lock = threading.Lock()
    chooser = random.Random(27)
    kinds = [chooser.choice(("now", "cpu", "block")) for _ in range(3000)]

    def run(item):
        if kinds[item] == "cpu":
            sum(range(2000))
        elif kinds[item] == "block":
            time.sleep(0.002)
        with lock:
            ran[item] += 1

    pool = pool_class(8, run)
    pool.start()
    handed = 0
    while handed < len(kinds):
        free = pool.wait_free(chooser.randint(1, 8), 0.002)
        if free <= 0:
            continue
        batch = list(range(handed, min(len(kinds), handed + chooser.randint(1, free))))
        pool.submit(batch)
        handed += len(batch)
    assert pool.wait_idle(60)
    assert pool.busy() == 0
    assert sorted(ran) == list(range(len(kinds))) and set(ran.values()) == {1}
    pool.stop()
    threads = [*pool._threads, *([pool._watcher] if pool._watcher is not None else [])]
    for thread in threads:
        thread.join(10)
    assert [t.name for t in threads if t.is_alive()] == []


def test_what_was_handed_over_before_a_stop_still_runs():
    """A stop ends the threads once the deque is empty: work handed over before it is not left
    in the deque (the worker's drain waits for it, or releases its claims)."""
    ran = []
    release = threading.Event()

    def run(item):
        if item == 0:
            release.wait(60)
        ran.append(item)

    pool = ExecutorPool(1, run)
    pool.start()
    pool.submit([0, 1, 2])
    wait_until(lambda: pool._pending and len(pool._pending) == 2, timeout=20, message="item 0 to be taken")
    pool.stop()
    release.set()
    assert pool.wait_idle(20)
    assert ran == [0, 1, 2]
    pool._threads[0].join(10)
    assert not pool._threads[0].is_alive()


def test_the_pool_for_this_python():
    import sys

    pool = executor_pool(2, lambda attempt: None)
    assert type(pool) is (ExecutorPool if sys.version_info >= (3, 13) else QueueHandoffPool)


@pytest.mark.slow
@pytest.mark.parametrize("handlers_module", ["tests.worker.handlers", "tests.worker.watched_handoff"])
def test_an_activity_claimed_behind_blocked_handlers_starts_while_they_run(
    live_db_url, runs_table, tmp_path, handlers_module
):
    """A real worker of 4 threads claims three slow activities (60 s, higher priority, so first
    in the batch) and a quick one in one claim: the quick one completes while the slow ones are
    still running, instead of waiting for a thread to come free. With this Python's hand-off,
    and with the watched one whatever the Python."""
    slow = [handlers.slow.enqueue({"seconds": 60}, priority=4) for _ in range(3)]
    quick = handlers.counted.enqueue({"quick": True}, priority=1)
    with worker_processes(live_db_url, tmp_path, handlers_module) as start:
        start("--concurrency", "4", "--poll-interval", "0.2", "--shutdown-grace", "0.5")
        assert quick.result(timeout=30) == {"quick": True}
        wait_until(lambda: len(runs("start")) == 3, timeout=30, message="the three slow handlers to start")
        assert {str(row[0]) for row in runs("start")} == {str(handle.id) for handle in slow}
        assert runs("end") == []  # the quick one did not wait for a slow one to finish
