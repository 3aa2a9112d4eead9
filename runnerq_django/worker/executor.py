"""A fixed pool of handler threads and the count of free slots the dispatcher claims for.

A slot is taken when the dispatcher hands an attempt over and given back when its handler's
outcome is decided (a completion waiting in the ack buffer no longer holds a slot). The
dispatcher waits for free slots through :meth:`wait_free`, which wakes it only once enough slots
are free, not on every completion.

Handing over wakes one thread per batch, not one per attempt. A batch goes into a shared deque
and wakes one sleeping thread. A thread that finishes looks in the deque before it sleeps, so
short handlers are run by the threads already awake. Every wake-up costs a sleep and a wake of a
thread, and the GIL hand-offs after it: more than a no-op handler does, and on Python 3.13 (where
a woken thread runs at once instead of waiting for the GIL) about 15 us of system time each.

Slow handlers still get a thread each, within ``HANDOFF_DELAY`` (1 ms). An attempt that waited
that long in the deque means the awake threads are held up (a handler blocked on I/O or busy),
so a watcher thread wakes a sleeping thread for each attempt still waiting. A thread that takes
an attempt makes the same check, which costs no system call unless the head of the deque is
late. When the handlers' typical run time (a moving average) is itself longer than the delay,
as with I/O-bound work, a thread that takes an attempt while more wait wakes the next one at once
instead, as before: it is about to be held up, and a wake-up costs little beside such handlers;
the watcher then stays asleep.
The watcher is a thread of the pool's own, not the dispatcher: the dispatcher can be in a
claim round trip, in a poll wait of seconds, or backing off after a failed claim, and none of
those should hold up work already claimed. The watcher is woken by a hand-over that leaves more
attempts than the woken thread takes and threads asleep to take them; it then ticks (a timed wait
of at most 1 ms) while attempts wait or batches keep coming, and sleeps untimed otherwise, or
when no thread sleeps (a thread looks in the deque before it sleeps, so none sleeps while
attempts wait there). A
batch of one costs it nothing, a lull no wake-ups, and a burn-down at most a thousand ticks a
second.

Pythons before 3.13 keep the hand-off of before (``QueueHandoffPool``: a thread that takes an
attempt while more wait puts a wake-up in a queue for the next one). There the woken thread waits
for the GIL while the awake ones drain the batch, so most wake-ups are found stale: about one
sleep per batch already (0.13 per attempt on 3.11 and 3.12 against 1.00 on 3.13), the watched
hand-off saves them no CPU worth having, and it would start an attempt queued behind a blocked
handler up to 1 ms later (``bench/handoff.py``; figures in bench/PROFILE.md).
"""

from __future__ import annotations

import logging
import queue
import sys
import threading
import time
from collections import deque
from collections.abc import Callable

from runnerq_django.exceptions import Interrupt
from runnerq_django.logs import log_event
from runnerq_django.worker.attempts import Attempt

logger = logging.getLogger("runnerq_django.worker")

# How long an attempt handed over may wait in the deque before a sleeping thread is woken for it.
HANDOFF_DELAY = 0.001
# The handlers' typical run time is a moving average over about this many attempts.
TYPICAL_WEIGHT = 16


class ExecutorPool:
    """The pool, with the hand-off that wakes one thread per batch (and the watcher)."""

    def __init__(
        self,
        size: int,
        run: Callable[[Attempt], None],
        *,
        on_crash: Callable[[Attempt, BaseException], None] | None = None,
        on_thread_exit: Callable[[], None] | None = None,
    ):
        self.size = size
        self._run = run
        self._on_crash = on_crash
        self._on_thread_exit = on_thread_exit
        # Handed over, not yet taken by a thread: (when handed over, attempt), oldest first.
        self._pending: deque[tuple[float, Attempt]] = deque()
        self._busy = 0
        # Guards the slot count, the sleeping threads and the watcher's state (not the deque:
        # threads take from it without the lock).
        self._cond = threading.Condition(threading.Lock())
        self._want = 0  # free slots the dispatcher waits for (0: nobody waits)
        self._threads: list[threading.Thread] = []
        self._sleeping: list[threading.Lock] = []  # each sleeping thread's lock, held until it is woken
        self._own_lock = threading.local()
        self._stopping = False
        self._handovers = 0  # batches handed over: the watcher sees from it that work goes on
        self._alarm = threading.Lock()  # the watcher sleeps on it; released to wake it when untimed
        self._alarm.acquire()
        self._watcher_untimed = True  # the watcher starts with an untimed wait, for the first hand-over
        self._watcher: threading.Thread | None = None
        self._typical_run = 0.0  # seconds, a moving average of the handlers' run times

    def start(self) -> None:
        for index in range(self.size):
            thread = threading.Thread(target=self._loop, name=f"runnerq-executor-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)
        self._watcher = threading.Thread(target=self._watch, name="runnerq-executor-watcher", daemon=True)
        self._watcher.start()

    def free(self) -> int:
        return self.size - self._busy

    def busy(self) -> int:
        return self._busy

    def submit(self, attempts: list[Attempt]) -> None:
        if not attempts:
            return
        handed = time.monotonic()
        with self._cond:
            self._busy += len(attempts)  # before a thread can take one (and give its slot back)
            self._pending.extend([(handed, attempt) for attempt in attempts])
            self._handovers += 1
            if self._sleeping:
                self._sleeping.pop().release()  # one thread; the watcher wakes more if they wait
            # The watcher is needed only while more than the woken thread's attempt waits and
            # there are threads left to wake (a thread looks in the deque before it sleeps).
            # While handlers run long, each thread that takes an attempt wakes the next (in
            # _next): no watcher needed.
            if (
                self._watcher_untimed
                and self._sleeping
                and len(self._pending) > 1
                and self._typical_run < HANDOFF_DELAY
            ):
                self._watcher_untimed = False
                self._alarm.release()

    def wait_free(self, at_least: int, timeout: float) -> int:
        """Wait up to ``timeout`` for ``at_least`` free slots; returns the free slots then."""
        with self._cond:
            if self.size - self._busy < at_least:
                self._want = at_least
                self._cond.wait_for(lambda: self.size - self._busy >= self._want, timeout)
                self._want = 0
            return self.size - self._busy

    def wait_idle(self, timeout: float) -> bool:
        """Wait until no slot is taken (shutdown's drain); False on timeout."""
        with self._cond:
            self._want = self.size
            try:
                return self._cond.wait_for(lambda: self._busy == 0, timeout)
            finally:
                self._want = 0

    def stop(self) -> None:
        """Threads end once the deque is empty (what is in it still runs, as before a stop)."""
        with self._cond:
            self._stopping = True
            sleeping, self._sleeping = self._sleeping, []
            if self._watcher_untimed:
                self._watcher_untimed = False
                self._alarm.release()
        for lock in sleeping:
            lock.release()

    def _release_slot(self) -> None:
        with self._cond:
            self._busy -= 1
            if self._want and self.size - self._busy >= self._want:
                self._cond.notify_all()

    def _crashed(self, attempt: Attempt, exc: BaseException) -> None:
        """Something raised outside the handler, in the worker's own code around it. The attempt
        must still be settled (``on_crash``): an attempt nobody settles keeps its claim, and its
        lease is renewed for as long as the process lives."""
        if not isinstance(exc, Interrupt):
            log_event(
                logger,
                logging.ERROR,
                "runnerq.executor.crashed",
                "The worker failed around the handler of activity %(activity_id)s; settling its attempt.",
                exc_info=exc,
                activity_id=str(attempt.activity.id),
            )
        if self._on_crash is None:
            return
        try:
            self._on_crash(attempt, exc)
        except BaseException:
            log_event(
                logger,
                logging.ERROR,
                "runnerq.executor.settle_failed",
                "Could not settle the attempt of activity %(activity_id)s; its lease is renewed while"
                " this process lives.",
                exc_info=True,
                activity_id=str(attempt.activity.id),
            )

    def _wake_for_late(self, now: float) -> bool:
        """With the lock held: if the oldest attempt in the deque waited ``HANDOFF_DELAY``, wake
        a sleeping thread for each attempt there (the awake ones are held up). Whether it was."""
        try:
            handed = self._pending[0][0]
        except IndexError:
            return False
        if now - handed < HANDOFF_DELAY:
            return False
        for _ in range(min(len(self._pending), len(self._sleeping))):
            self._sleeping.pop().release()
        return True

    def _sleep(self, lock: threading.Lock) -> None:
        """Sleep until woken (another thread releases ``lock``); ``bench/handoff.py`` counts these."""
        lock.acquire()

    def _next(self) -> Attempt | None:
        """The next attempt handed over, waiting for one; None once stopped."""
        own = getattr(self._own_lock, "lock", None)
        if own is None:
            own = self._own_lock.lock = threading.Lock()
            own.acquire()
        while True:
            try:
                _, attempt = self._pending.popleft()
            except IndexError:
                with self._cond:
                    if self._pending:  # handed over since the look above
                        continue
                    if self._stopping:
                        return None
                    self._sleeping.append(own)
                self._sleep(own)
                continue
            if not self._sleeping:
                return attempt
            if self._typical_run >= HANDOFF_DELAY:
                # Handlers run longer than the delay (I/O-bound work): this thread will be held
                # up, so the next attempt gets a thread now, as a wake-up costs little beside them.
                if self._pending:
                    with self._cond:
                        if self._pending and self._sleeping:
                            self._sleeping.pop().release()
            else:
                # More waiting and threads asleep: the same check as the watcher's, in case this
                # thread runs while the watcher waits for the GIL (no system call unless one is late).
                try:
                    late = time.monotonic() - self._pending[0][0] >= HANDOFF_DELAY
                except IndexError:  # none left
                    late = False
                if late:
                    with self._cond:
                        self._wake_for_late(time.monotonic())
                elif self._watcher_untimed and self._pending:
                    # Handlers got short while attempts wait (submit left the watcher asleep
                    # while they ran long): the watcher bounds their wait from now on.
                    with self._cond:
                        if self._watcher_untimed and self._pending and self._sleeping:
                            self._watcher_untimed = False
                            self._alarm.release()
            return attempt

    def _watch(self) -> None:
        """Bound how long an attempt waits in the deque while the awake threads are held up."""
        seen = -1
        timeout = -1.0
        while True:
            self._alarm.acquire(timeout=timeout)
            with self._cond:
                if self._stopping:
                    return
                now = time.monotonic()
                handed_over, seen = self._handovers != seen, self._handovers
                if not self._sleeping:
                    # Nobody to wake, and no thread goes to sleep while attempts wait: until a
                    # hand-over leaves attempts waiting beside sleeping threads, nothing to do.
                    self._watcher_untimed = True
                    timeout = -1.0
                elif self._wake_for_late(now):
                    timeout = HANDOFF_DELAY  # give the woken threads that long to take them
                elif self._pending:
                    timeout = max(0.0, self._pending[0][0] + HANDOFF_DELAY - now)
                elif handed_over and self._typical_run < HANDOFF_DELAY:
                    timeout = (
                        HANDOFF_DELAY  # work keeps coming: one more tick rather than a wake-up each time
                    )
                else:
                    self._watcher_untimed = True  # until the next hand-over releases the alarm
                    timeout = -1.0

    def _loop(self) -> None:
        try:
            while True:
                attempt = self._next()
                if attempt is None:
                    return
                began = time.perf_counter()
                try:
                    self._run(attempt)
                except BaseException as exc:  # a bug here must not kill the thread and leak its slot
                    self._crashed(attempt, exc)
                finally:
                    # Unlocked: a lost update between threads only blurs an average.
                    self._typical_run += (time.perf_counter() - began - self._typical_run) / TYPICAL_WEIGHT
                    self._release_slot()
        finally:
            if self._on_thread_exit is not None:
                self._on_thread_exit()


_STOP = object()
_WAKE = object()


class QueueHandoffPool(ExecutorPool):
    """The hand-off Pythons before 3.13 keep: a thread that takes an attempt while more wait puts a
    wake-up in a queue for the next thread. No watcher: every attempt left in the deque has a
    wake-up on its way."""

    def __init__(
        self,
        size: int,
        run: Callable[[Attempt], None],
        *,
        on_crash: Callable[[Attempt, BaseException], None] | None = None,
        on_thread_exit: Callable[[], None] | None = None,
    ):
        super().__init__(size, run, on_crash=on_crash, on_thread_exit=on_thread_exit)
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()  # wake-ups (_WAKE) and _STOP

    def start(self) -> None:
        for index in range(self.size):
            thread = threading.Thread(target=self._loop, name=f"runnerq-executor-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def submit(self, attempts: list[Attempt]) -> None:
        if not attempts:
            return
        with self._cond:
            self._busy += len(attempts)
        self._pending.extend([(0.0, attempt) for attempt in attempts])
        self._inbox.put(_WAKE)  # one thread; it wakes the next while attempts remain

    def stop(self) -> None:
        for _ in self._threads:
            self._inbox.put(_STOP)

    def _next(self) -> Attempt | None:
        while True:
            try:
                _, attempt = self._pending.popleft()
            except IndexError:
                if self._inbox.get() is _STOP:
                    return None
                continue  # a wake-up: another thread may have taken the attempts meanwhile
            if self._pending:
                self._inbox.put(_WAKE)
            return attempt


def executor_pool(
    size: int,
    run: Callable[[Attempt], None],
    *,
    on_crash: Callable[[Attempt, BaseException], None] | None = None,
    on_thread_exit: Callable[[], None] | None = None,
) -> ExecutorPool:
    """The pool for this Python: the watched hand-off from 3.13 on, the queue's before."""
    kind = ExecutorPool if sys.version_info >= (3, 13) else QueueHandoffPool
    return kind(size, run, on_crash=on_crash, on_thread_exit=on_thread_exit)
