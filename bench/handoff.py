"""The executor's hand-off of attempts to its threads, alone: CPU and thread sleeps per attempt.

    python bench/handoff.py [--attempts 30000] [--threads 8] [--work-us 20] [--claim-ms 0.3] [--runs 3]

No database, no Django: an ``ExecutorPool`` of ``--threads`` threads runs attempts fed the way
the dispatcher feeds it under a backlog (wait up to 2 ms for a quarter of the slots, a claim's
round trip of ``--claim-ms`` without the GIL, hand over as many as are free). Each attempt is
``--work-us`` of Python (about what the worker's own code spends around a no-op handler), so
threads overlap and wait for the GIL as in a worker. The process's CPU (user and system, from
``os.times``) is divided by the attempts (the attempts' own work is in every row alike), and so
are the times a thread went to sleep for want of work.

``current`` is the executor as it is (a queue ``put`` to wake the next thread for every attempt
taken while more wait). ``delayed wake`` is a prototype, not the product: a thread that takes an
attempt wakes another only once the batch has waited ``DELAY`` (the dispatcher's loop wakes one
too, so an attempt behind a slow handler waits at most that long), and threads sleep on a lock of
their own. The runs alternate. Run it with each Python to compare them:

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

from runnerq_django.worker.executor import ExecutorPool

GATHER_SECONDS = 0.002  # the dispatcher's BATCH_GATHER_SECONDS
DELAY = 0.001  # the prototype's: how long a batch waits before a second thread is woken for it


class CountingInbox:
    """The current executor's wake-up queue, counting the ``get`` calls that had to sleep."""

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


class Current(ExecutorPool):
    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sleeps = [0]
        self._inbox = CountingInbox(self.sleeps)

    def nudge(self) -> None:
        pass


class DelayedWake(ExecutorPool):
    """The prototype: one wake-up per batch, a second thread only for a batch that waits."""

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.sleeps = [0]
        self._sleeping: list[threading.Lock] = []  # each sleeping thread's lock, held until woken
        self._parked = threading.local()
        self._stopping = False
        self._handed_at = 0.0

    def submit(self, attempts):
        if not attempts:
            return
        self._pending.extend(attempts)
        with self._cond:
            self._busy += len(attempts)
            self._handed_at = time.monotonic()
            if self._sleeping:
                self._sleeping.pop().release()

    def nudge(self) -> None:
        """The dispatcher's part: a batch that waited DELAY gets one more thread."""
        if self._pending and self._sleeping and time.monotonic() - self._handed_at > DELAY:
            self._wake_one()

    def stop(self):
        with self._cond:
            self._stopping = True
            sleeping, self._sleeping = self._sleeping, []
        for parked in sleeping:
            parked.release()

    def _wake_one(self) -> None:
        with self._cond:
            if self._sleeping:
                self._handed_at = time.monotonic()
                self._sleeping.pop().release()

    def _next(self):
        parked = getattr(self._parked, "lock", None)
        if parked is None:
            parked = self._parked.lock = threading.Lock()
            parked.acquire()
        while True:
            try:
                attempt = self._pending.popleft()
            except IndexError:
                with self._cond:
                    if self._pending:
                        continue
                    if self._stopping:
                        return None
                    self._sleeping.append(parked)
                self.sleeps[0] += 1
                parked.acquire()
                continue
            self.nudge()
            return attempt


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
        pool.nudge()
        free = pool.wait_free(gather, min(GATHER_SECONDS, DELAY))
        if free <= 0:
            continue
        if claim_seconds:
            time.sleep(claim_seconds)
        batch = items[handed : handed + free]
        pool.submit(batch)
        handed += len(batch)
    while not pool.wait_idle(DELAY):
        pool.nudge()
    wall = time.perf_counter() - began
    ended_times = os.times()
    pool.stop()
    for thread in pool._threads:
        thread.join(10)
    user = (ended_times.user - began_times.user) / attempts * 1e6
    system = (ended_times.system - began_times.system) / attempts * 1e6
    return user, system, pool.sleeps[0] / attempts, attempts / wall


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--attempts", type=int, default=30_000)
    parser.add_argument("--threads", type=int, default=8)
    parser.add_argument("--work-us", type=float, default=20.0)
    parser.add_argument("--claim-ms", type=float, default=0.3)
    parser.add_argument("--runs", type=int, default=3)
    options = parser.parse_args()
    work = busy_loop(options.work_us)
    claim_seconds = options.claim_ms / 1000
    pools = {"current": Current, "delayed wake (prototype)": DelayedWake}
    results: dict[str, list[tuple[float, ...]]] = {name: [] for name in pools}
    for _ in range(options.runs):
        for name, pool_class in pools.items():
            results[name].append(run_once(pool_class, options.attempts, options.threads, work, claim_seconds))
    print(
        f"Python {platform.python_version()}, {options.threads} threads, "
        f"{options.attempts:,} attempts of {options.work_us:g} us, claims of {options.claim_ms:g} ms, "
        f"{options.runs} runs (medians)"
    )
    print()
    print("| hand-off | CPU us/attempt | user | system | sleeps/attempt | attempts/s (wall) |")
    print("|---|---|---|---|---|---|")
    for name, runs in results.items():
        total = statistics.median(r[0] + r[1] for r in runs)
        user, system, sleeps, rate = (statistics.median(r[i] for r in runs) for i in range(4))
        print(f"| {name} | {total:.1f} | {user:.1f} | {system:.1f} | {sleeps:.2f} | {rate:,.0f} |")


if __name__ == "__main__":
    main()
