"""The claim loop: claim as many activities as there are free slots, hand them to the executor
pool, and sleep until a ``NOTIFY``, a poll interval, or free slots when there is a backlog.

Claims are batched up to the free slots (one round trip for many activities). While a backlog
lasts, the loop waits a moment for a few slots to free up instead of claiming one activity per
round trip, which is what keeps the database work per activity small under load.
"""

from __future__ import annotations

import functools
import logging
import threading
import time
from collections.abc import Callable
from typing import TYPE_CHECKING

from runnerq_django import metrics
from runnerq_django.logs import log_event
from runnerq_django.worker.attempts import Attempts
from runnerq_django.worker.db import (
    Backoff,
    claim_without_jit,
    is_transient,
    plan_claims_generically,
    relax_commit,
    reset_connection,
)
from runnerq_django.worker.executor import ExecutorPool
from runnerq_django.worker.listener import Poller, WorkListener
from runnerq_django.worker.service import ThreadService

if TYPE_CHECKING:
    from runnerq_django.storage.types import ClaimedActivity
    from runnerq_django.worker.recycle import Recycler

logger = logging.getLogger("runnerq_django.worker")

MAX_CLAIM_BATCH = 500
# With a backlog, wait at most this long for a fuller batch of free slots.
BATCH_GATHER_SECONDS = 0.002


class Dispatcher(ThreadService):
    thread_name = "runnerq-dispatcher"

    def __init__(
        self,
        *,
        queues: list[str],
        types: list[str] | None,
        pool: ExecutorPool,
        limits: dict[str, int] | None = None,
        rates: dict[str, tuple[int, float]] | None = None,
        attempts: Attempts,
        alias: str,
        worker_id: str,
        lease_ms: int,
        poll_interval: float,
        wakeups: Poller | WorkListener,
        stop: threading.Event,
        relaxed_commit: bool = True,
        budget: Recycler | None = None,
    ):
        super().__init__()
        self.queues = queues
        self.types = types
        # Flow control: concurrency-limited types are claimed apart, each by the claim that takes
        # its slots (storage.limits.claim_limited); the others by the usual claim.
        self.limits = dict(limits or {})
        self.rates = dict(rates or {})  # rate-limited types: claimed apart too (claim_rated)
        self.unlimited = (
            None if types is None else [t for t in types if t not in self.limits and t not in self.rates]
        )
        self.pool = pool
        self.attempts = attempts
        self.alias = alias
        self.worker_id = worker_id
        self.lease_ms = lease_ms
        self.poll_interval = poll_interval
        self.wakeups = wakeups
        self.stop = stop
        self.relaxed_commit = relaxed_commit
        self.budget = budget  # --max-activities-per-process: claim no more than what is left
        self.claimed_total = 0
        self._next_queue = 0

    def _loop(self) -> None:
        try:
            self._claim_until_stopped()
        finally:
            self.wakeups.close()

    def _claim_until_stopped(self) -> None:
        backoff = Backoff()
        backlog = False
        gather = max(1, self.pool.size // 4)
        while not self.stop.is_set():
            if backlog:
                free = self.pool.wait_free(gather, BATCH_GATHER_SECONDS)
            else:
                free = self.pool.wait_free(1, self.poll_interval)
            if free <= 0 or self.stop.is_set():
                continue
            # Before claiming: what was notified is committed, so this claim sees it; a NOTIFY
            # from now on wakes the next wait.
            self.wakeups.drain()
            try:
                backlog = self.budgeted_round(free)
                backoff.succeeded()
            except Exception as exc:
                if is_transient(exc):
                    reset_connection(self.alias)
                pause = backoff.failed()
                log_event(
                    logger,
                    logging.WARNING,
                    "runnerq.dispatcher.claim_failed",
                    "Could not claim work (retrying in %(retry_in_s).1f s): %(error)s",
                    error=str(exc),
                    retry_in_s=pause,
                )
                self.stop.wait(pause)
                continue
            if not backlog:
                self.wakeups.wait(self.poll_interval)

    def budgeted_round(self, free: int) -> bool:
        """:meth:`claim_round` within what is left of the process's claim budget (recycling)."""
        if self.budget is None:
            return self.claim_round(free)
        granted = self.budget.take(free)
        if granted <= 0:
            return False  # spent: the process recycles (the main thread sees it and drains)
        before = self.claimed_total
        try:
            return self.claim_round(granted)
        finally:
            self.budget.give_back(granted - (self.claimed_total - before))

    def claim_round(self, free: int) -> bool:
        """Claim up to ``free`` across the queues (rotating which goes first, so one busy queue
        can't starve the others). Returns whether some queue may hold more runnable work."""
        from runnerq_django import storage

        if self.relaxed_commit:
            relax_commit(self.alias)  # a claim lost in a database crash just runs again
            claim_without_jit(self.alias)
            if not (self.limits or self.rates):
                plan_claims_generically(self.alias)
        more = False
        count = len(self.queues)
        start = self._next_queue
        self._next_queue = (start + 1) % count
        for offset in range(count):
            if free <= 0:
                return True
            queue = self.queues[(start + offset) % count]
            if self.limits or self.rates:
                for activity_type, max_running in self.limits.items():
                    if free <= 0:
                        return True
                    free, got_all = self._claim_limited(queue, activity_type, max_running, free)
                    more = more or got_all
                for activity_type, (max_starts, period) in self.rates.items():
                    if free <= 0:
                        return True
                    free, got_all = self._claim_rated(queue, activity_type, max_starts, period, free)
                    more = more or got_all
                if free <= 0:
                    return True
                if not self.unlimited:
                    continue
            limit = min(free, MAX_CLAIM_BATCH)
            sent = time.monotonic()
            began = time.perf_counter()
            claimed = storage.claim(
                queue,
                types=self.unlimited if (self.limits or self.rates) else self.types,
                limit=limit,
                lease_ms=self.lease_ms,
                worker_id=self.worker_id,
                using=self.alias,
            )
            metrics.observe("dequeue_roundtrip", time.perf_counter() - began, queue=queue)
            if not claimed:
                continue
            observe_claimed(queue, claimed)
            self.claimed_total += len(claimed)
            # The database starts the lease after we send the claim: counting it from the send
            # time can only end it early by our clock, never late.
            self.pool.submit(self.attempts.add(claimed, lease_until=sent + self.lease_ms / 1000))
            free -= len(claimed)
            more = more or len(claimed) == limit
        return more

    def _claim_limited(self, queue: str, activity_type: str, max_running: int, free: int) -> tuple[int, bool]:
        """Claim a concurrency-limited type (its slots taken in the same statement). Returns the
        free executor slots left and whether the claim was full (more may be claimable)."""
        from runnerq_django.storage import limits

        return self._claim_slotted(
            functools.partial(limits.claim_limited, queue, activity_type, max_running), free
        )

    def _claim_rated(
        self, queue: str, activity_type: str, max_starts: int, period: float, free: int
    ) -> tuple[int, bool]:
        """Claim a rate-limited type (its window's starts taken in the same statement)."""
        from runnerq_django.storage import limits

        return self._claim_slotted(
            functools.partial(limits.claim_rated, queue, activity_type, max_starts, period), free
        )

    def _claim_slotted(self, claim: Callable[..., list[ClaimedActivity]], free: int) -> tuple[int, bool]:
        """Run ``claim`` (a slotted claim with its type and limit bound) for at most the free
        executor slots and hand what it claimed to the pool. Returns the free slots left and
        whether the claim was full."""
        from runnerq_django import conf

        limit = min(free, MAX_CLAIM_BATCH)  # the statement gives at most the free slots
        sent = time.monotonic()
        claimed = claim(
            limit=limit,
            lease_ms=self.lease_ms,
            worker_id=self.worker_id,
            superjson_mode=str(conf.get("SUPERJSON")),
            using=self.alias,
        )
        if claimed:
            observe_claimed(claimed[0].queue_name, claimed)
            self.claimed_total += len(claimed)
            self.pool.submit(self.attempts.add(claimed, lease_until=sent + self.lease_ms / 1000))
        return free - len(claimed), len(claimed) == limit


def observe_claimed(queue: str, claimed: list[ClaimedActivity]) -> None:
    """The claim's metrics, one batch each, both on the database clock: how far behind the
    workers are (from due to this claim), and, for first attempts due at once (not delayed, not
    woken from a park), from the enqueue to this claim."""
    lags, waits = [], []
    for activity in claimed:
        if activity.due_at is not None:
            lags.append(max(0.0, (activity.started_at - activity.due_at).total_seconds()))
        if activity.retry_count == 0 and activity.due_at == activity.created_at:
            waits.append(max(0.0, (activity.started_at - activity.created_at).total_seconds()))
    metrics.observe_many("activity_claim_lag", lags, queue=queue)
    metrics.observe_many("activity_enqueue_to_start", waits, queue=queue)
