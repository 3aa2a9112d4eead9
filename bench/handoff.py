"""The executor's hand-off of attempts to its threads, alone: CPU and thread sleeps per attempt.

    python bench/handoff.py [--attempts 30000] [--threads 8] [--work-us 20] [--claim-ms 0.3] [--runs 3]

No database, no Django: an executor pool of ``--threads`` threads runs attempts fed the way the
dispatcher feeds it under a backlog (wait up to 2 ms for a quarter of the slots, a claim's round
trip of ``--claim-ms`` without the GIL, hand over as many as are free). Each attempt is
``--work-us`` of Python (about what the worker's own code spends around a no-op handler), so
threads overlap and wait for the GIL as in a worker. The process's CPU (user and system, from
``os.times``) is divided by the attempts (the attempts' own work is in every row alike), and so
are the times a thread went to sleep for want of work (the watcher's timed waits included).

``queue wake`` is the hand-off before issue 27, which Pythons before 3.13 keep (``QueueHandoffPool``: a
queue ``put`` to wake the next thread for every attempt taken while more wait). ``watched`` is
the one of 3.13 (``ExecutorPool``: one wake-up per batch, and a watcher that wakes a sleeping
thread for each attempt that waited ``HANDOFF_DELAY``). The runs alternate.

Then the other side of the trade: an attempt handed over behind a handler that blocks (all
threads asleep, a batch of two, the first blocks for 50 ms): how long until the second starts,
median and worst of ``--blocked-trials``. The queue wake starts it at once; the watched hand-off
within about ``HANDOFF_DELAY``. Run it with each Python to compare them:

    PYTHONPATH=. python3.11 bench/handoff.py
    PYTHONPATH=. /root/.pyenv/versions/3.13.0/bin/python3 bench/handoff.py
"""

from __future__ import annotations

import argparse
import os
import platform
import queue
import statistics
import sys
import threading
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent.parent))

from runnerq_django.worker import executor
from runnerq_django.worker.executor import ExecutorPool, QueueHandoffPool

GATHER_SECONDS = 0.002  # the dispatcher's BATCH_GATHER_SECONDS


class CountingInbox:
    """The queue hand-off's wake-up queue, counting the ``get`` calls that had to sleep."""

    def __init__(self, sleeps: list[int]):
        self._queue: queue.SimpleQueue[object] = queue.SimpleQueue()
        self._sleeps = sleeps

    def put(self, item: object) -> None:
        self._queue.put(item)

    def get(self) -> object:
        try:
            return self._queue.get_nowait()
        except queue.Empty:
            self._sleeps[0] += 1
            return self._queue.get()


class QueueWake(QueueHandoffPool):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sleeps = [0]
        self._inbox = CountingInbox(self.sleeps)


class CountingAlarm:
    """The watcher's alarm lock, counting its waits (each one a sleep, timed or not)."""

    def __init__(self, lock, sleeps: list[int]):
        self._lock = lock
        self._sleeps = sleeps

    def acquire(self, blocking: bool = True, timeout: float = -1) -> bool:
        self._sleeps[0] += 1
        return self._lock.acquire(blocking, timeout)

    def release(self) -> None:
        self._lock.release()


class Watched(ExecutorPool):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sleeps = [0]
        self._alarm = CountingAlarm(self._alarm, self.sleeps)

    def _sleep(self, lock):
        self.sleeps[0] += 1
        super()._sleep(lock)


def busy_loop(work_us: float):
    """A function that spends about ``work_us`` of Python CPU per call."""
    rounds = 1000
    began = time.process_time()
    for _ in range(rounds):
        for _ in range(1000):
            pass
    per_iteration = (time.process_time() - began) / (rounds * 1000)
    iterations = range(max(0, round(work_us / 1e6 / per_iteration)))

    def work(attempt):
        for _ in iterations:
            pass

    return work


def run_once(pool_class, attempts: int, threads: int, work, claim_seconds: float) -> tuple[float, ...]:
    """CPU user and system microseconds per attempt, sleeps per attempt, attempts per second."""
    pool = pool_class(threads, work)
    pool.start()
    gather = max(1, threads // 4)
    items = list(range(attempts))
    began_times, began = os.times(), time.perf_counter()
    handed = 0
    while handed < attempts:
        free = pool.wait_free(gather, GATHER_SECONDS)
        if free <= 0:
            continue
        if claim_seconds:
            time.sleep(claim_seconds)
        batch = items[handed : handed + free]
        pool.submit(batch)
        handed += len(batch)
    pool.wait_idle(60)
    wall = time.perf_counter() - began
    ended_times = os.times()
    pool.stop()
    for thread in pool._threads:
        thread.join(10)
    user = (ended_times.user - began_times.user) / attempts * 1e6
    system = (ended_times.system - began_times.system) / attempts * 1e6
    return user, system, pool.sleeps[0] / attempts, attempts / wall


def behind_a_blocked_handler(pool_class, threads: int, trials: int) -> list[float]:
    """Milliseconds from the hand-over of [blocker, next] to an idle pool whose handlers were
    short until then, until ``next`` starts."""
    started: dict[str, float] = {}
    ready = threading.Event()

    def run(item):
        if item == "blocker":
            time.sleep(0.05)  # a query of 50 ms: the GIL is free meanwhile
        else:
            started[item] = time.perf_counter()
            ready.set()

    pool = pool_class(threads, run)
    pool.start()
    waits = []
    for _ in range(trials):
        pool.wait_idle(10)
        time.sleep(0.1)  # every thread asleep, the watcher's ticks over
        # Handlers typically short (the blockers of the trials before would otherwise make the
        # pool wake the next thread at once, as it does while handlers run long): the watcher's case.
        pool._typical_run = 0.0
        ready.clear()
        handed = time.perf_counter()
        pool.submit(["blocker", "next"])
        ready.wait(10)
        waits.append((started["next"] - handed) * 1000)
    pool.wait_idle(10)
    pool.stop()
    return waits


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--attempts", type=int, default=30_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--work-us", type=float, default=20.0)
    parser.add_argument("--claim-ms", type=float, default=0.3)
    parser.add_argument("--runs", type=int, default=3)
    parser.add_argument("--blocked-trials", type=int, default=30)
    parser.add_argument(
        "--delay-ms", type=float, help="the watched hand-off's HANDOFF_DELAY (default: the product's)"
    )
    options = parser.parse_args()
    if options.delay_ms is not None:
        executor.HANDOFF_DELAY = options.delay_ms / 1000
    work = busy_loop(options.work_us)
    claim_seconds = options.claim_ms / 1000
    pools = {"queue wake (before 3.13)": QueueWake, "watched": Watched}
    results: dict[str, list[tuple[float, ...]]] = {name: [] for name in pools}
    for _ in range(options.runs):
        for name, pool_class in pools.items():
            results[name].append(run_once(pool_class, options.attempts, options.threads, work, claim_seconds))
    print(
        f"Python {platform.python_version()}, {options.threads} threads, "
        f"{options.attempts:,} attempts of {options.work_us:g} us, claims of {options.claim_ms:g} ms, "
        f"{options.runs} runs (medians), HANDOFF_DELAY {executor.HANDOFF_DELAY * 1000:g} ms"
    )
    print()
    print("| hand-off | CPU us/attempt | user | system | sleeps/attempt | attempts/s (wall) |")
    print("|---|---|---|---|---|---|")
    for name, runs in results.items():
        total = statistics.median(r[0] + r[1] for r in runs)
        user, system, sleeps, rate = (statistics.median(r[i] for r in runs) for i in range(4))
        print(f"| {name} | {total:.1f} | {user:.1f} | {system:.1f} | {sleeps:.2f} | {rate:,.0f} |")
    print()
    print("| hand-off | behind a blocked handler: ms to start, median | worst |")
    print("|---|---|---|")
    for name, pool_class in pools.items():
        waits = behind_a_blocked_handler(pool_class, options.threads, options.blocked_trials)
        print(f"| {name} | {statistics.median(waits):.2f} | {max(waits):.2f} |")


if __name__ == "__main__":
    main()
