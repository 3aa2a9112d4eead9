"""A fixed pool of handler threads and the count of free slots the dispatcher claims for.

A slot is taken when the dispatcher hands an attempt over and given back when its handler's
outcome is decided (a completion waiting in the ack buffer no longer holds a slot). The
dispatcher waits for free slots through :meth:`wait_free`, which wakes it only once enough slots
are free, not on every completion.

Handing over wakes threads one at a time: a batch goes into a shared deque with one wake-up, and
a thread that takes an attempt while more are waiting wakes the next thread before running it.
A thread that finishes looks in the deque before sleeping, so short handlers are run by the
threads already awake instead of waking one thread per attempt (each wake-up, and the GIL
hand-offs after it, cost more than a no-op handler); slow ones still get a thread each, one
wake-up later than the previous one.
"""

from __future__ import annotations

import logging
import queue
import threading
from collections import deque
from collections.abc import Callable

from runnerq_django.exceptions import Interrupt
from runnerq_django.logs import log_event
from runnerq_django.worker.attempts import Attempt

logger = logging.getLogger("runnerq_django.worker")

_STOP = object()
_WAKE = object()


class ExecutorPool:
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
        self._pending: deque[Attempt] = deque()  # handed over, not yet taken by a thread
        self._inbox: queue.SimpleQueue[object] = queue.SimpleQueue()  # wake-ups (_WAKE) and _STOP
        self._busy = 0
        self._cond = threading.Condition(threading.Lock())
        self._want = 0  # free slots the dispatcher waits for (0: nobody waits)
        self._threads: list[threading.Thread] = []

    def start(self) -> None:
        for index in range(self.size):
            thread = threading.Thread(target=self._loop, name=f"runnerq-executor-{index}", daemon=True)
            thread.start()
            self._threads.append(thread)

    def free(self) -> int:
        return self.size - self._busy

    def busy(self) -> int:
        return self._busy

    def submit(self, attempts: list[Attempt]) -> None:
        if not attempts:
            return
        with self._cond:
            self._busy += len(attempts)
        self._pending.extend(attempts)
        self._inbox.put(_WAKE)  # one thread; it wakes the next while attempts remain

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
        for _ in self._threads:
            self._inbox.put(_STOP)

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

    def _next(self) -> Attempt | None:
        """The next attempt handed over, waiting for one; None once stopped."""
        while True:
            try:
                attempt = self._pending.popleft()
            except IndexError:
                if self._inbox.get() is _STOP:
                    return None
                continue  # a wake-up: another thread may have taken the attempts meanwhile
            if self._pending:
                self._inbox.put(_WAKE)
            return attempt

    def _loop(self) -> None:
        try:
            while True:
                attempt = self._next()
                if attempt is None:
                    return
                try:
                    self._run(attempt)
                except BaseException as exc:  # a bug here must not kill the thread and leak its slot
                    self._crashed(attempt, exc)
                finally:
                    self._release_slot()
        finally:
            if self._on_thread_exit is not None:
                self._on_thread_exit()
