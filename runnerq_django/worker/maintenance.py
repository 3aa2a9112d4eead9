"""Fleet-wide maintenance: the reaper (expired leases back to work or to the dead letter), the
retention sweeps (finished trees and old events; flow control's free slots and spent partition
keys; debounce and throttle windows over for a day), pruning of dead workers' pool rows, and the
queues' depth gauges (``worker.gauges``; every worker reads its own queues, no lock).

Every worker runs this loop, but each sweep runs under a transaction-level advisory lock taken
with ``pg_try_advisory_xact_lock``: one worker at a time does it, the others skip that round,
and a worker that dies mid-sweep releases the lock with its session. Go and TypeScript workers
reap with their own storage operations; a reap is idempotent, so sharing a queue with them is
safe.
"""

from __future__ import annotations

import functools
import hashlib
import logging
import threading
import time
import uuid
from collections.abc import Callable
from dataclasses import KW_ONLY, dataclass
from typing import Any, TypeVar

from django.db import transaction

from runnerq_django import conf, metrics
from runnerq_django.logs import log_event
from runnerq_django.storage import pools, session
from runnerq_django.worker import gauges
from runnerq_django.worker.db import is_transient, reset_connection
from runnerq_django.worker.service import ThreadService

T = TypeVar("T")

logger = logging.getLogger("runnerq_django.worker")

WINDOW_KEEP_SECONDS = 86400  # a debounce or throttle window's row, kept this long after it ended
MAX_ROUNDS = 20  # batches per sweep before yielding the lock (a backlog continues next interval)
LOGGED_IDS = 20  # activity ids named per reaper log line


def advisory_key(name: str) -> int:
    """A stable signed 64-bit lock key per (task, queue); unrelated to the schema lock key."""
    digest = hashlib.blake2b(f"runnerq-django:{name}".encode(), digest_size=8).digest()
    return int.from_bytes(digest, "big", signed=True)


def under_fleet_lock(alias: str, name: str, work: Callable[[], T]) -> T | None:
    """Run ``work`` in one transaction holding the fleet-wide lock ``name``; ``None`` when
    another worker holds it."""
    with transaction.atomic(using=alias):
        if not session.try_advisory_lock(alias, advisory_key(name)):
            return None
        return work()


@dataclass(eq=False)
class Maintenance(ThreadService):
    thread_name = "runnerq-maintenance"

    queues: list[str]
    alias: str
    _: KW_ONLY
    reaper_interval: float
    reaper_batch: int
    retention: dict[str, Any]
    pool_stale_seconds: float
    stop: threading.Event
    queue_metrics_interval: float = gauges.QUEUE_METRICS_INTERVAL

    def __post_init__(self) -> None:
        super().__init__()
        # Where each flow-control walk (queue, table) goes on at the next sweep.
        self._flow_cursors: dict[tuple[str, str], Any] = {}

    def _loop(self) -> None:
        next_reap = time.monotonic() + min(1.0, self.reaper_interval)
        retention_interval = self.retention["INTERVAL_SECONDS"]
        next_sweep = time.monotonic() + min(5.0, retention_interval) if retention_interval else None
        next_gauges = time.monotonic()
        rollup_interval = float(conf.get("CONSOLE_ROLLUP_SECONDS") or 0)
        next_rollup = time.monotonic() + min(1.0, rollup_interval) if rollup_interval else None
        while not self.stop.wait(0.2):
            now = time.monotonic()
            if now >= next_gauges:
                self._guarded(
                    "queue_metrics", functools.partial(gauges.report_queues, self.alias, self.queues)
                )
                next_gauges = time.monotonic() + self.queue_metrics_interval
            if next_rollup is not None and now >= next_rollup:
                self._guarded("console", self.roll_up_all)
                next_rollup = time.monotonic() + rollup_interval
            if now >= next_reap:
                self._guarded("reap", self.reap_all)
                next_reap = time.monotonic() + self.reaper_interval
            if next_sweep is not None and now >= next_sweep:
                self._guarded("retention", self.sweep_all)
                next_sweep = time.monotonic() + retention_interval

    def _guarded(self, what: str, fn: Callable[[], object]) -> None:
        try:
            fn()
        except Exception as exc:
            if is_transient(exc):
                reset_connection(self.alias)
            log_event(
                logger,
                logging.WARNING,
                f"runnerq.{what}.failed",
                f"The worker's {what} round failed (tried again next round): %(error)s",
                error=str(exc),
            )

    def _rounds(self, lock_name: str, batch: int, one_batch: Callable[[], int]) -> int:
        """Batches of a sweep, each its own transaction under the fleet lock, until one comes
        back short (or another worker holds the lock)."""
        total = 0
        for _ in range(MAX_ROUNDS):
            count = under_fleet_lock(self.alias, lock_name, one_batch)
            if not count:
                break
            total += count
            if count < batch or self.stop.is_set():
                break
        return total

    def reap_all(self) -> int:
        total = 0
        for queue in self.queues:
            reaped: list[uuid.UUID] = []
            one_batch = functools.partial(self._reap_batch, queue, reaped)
            count = self._rounds(f"reap:{queue}", self.reaper_batch, one_batch)
            if count:
                metrics.inc("activity_requeued", count, queue=queue)
                named: dict[str, object] = {"activity_ids": ",".join(str(i) for i in reaped[:LOGGED_IDS])}
                if count > LOGGED_IDS:
                    named["more_ids"] = count - LOGGED_IDS
                log_event(
                    logger,
                    logging.INFO,
                    "runnerq.reaper.requeued",
                    "Returned %(count)s activities of queue %(queue)r whose lease ran out to the queue.",
                    queue=queue,
                    count=count,
                    **named,
                )
            total += count
        return total

    def _reap_batch(self, queue: str, reaped: list[uuid.UUID]) -> int:
        from runnerq_django import storage

        ids = storage.reap_ids(queue, self.reaper_batch, using=self.alias)
        reaped.extend(ids)
        return len(ids)

    def roll_up_all(self) -> int:
        """The live console's per-minute rollups of each queue (one worker at a time per queue),
        and their pruning with the retention sweeps."""
        from runnerq_django.storage import console

        total = 0
        for queue in self.queues:
            roll_up = functools.partial(console.roll_up, queue, using=self.alias)
            written = under_fleet_lock(self.alias, f"console:{queue}", roll_up)
            total += written or 0
        return total

    def sweep_all(self) -> int:
        total = 0
        for queue in self.queues:
            sweep = functools.partial(self._sweep_batch, queue)
            count = self._rounds(f"retention:{queue}", self.retention["BATCH"], sweep)
            if count:
                metrics.inc("activity_trees_swept", count, queue=queue)
                log_event(
                    logger,
                    logging.INFO,
                    "runnerq.retention.swept",
                    "Deleted %(trees)s finished activity trees of queue %(queue)r past their retention.",
                    queue=queue,
                    trees=count,
                )
            total += count
            self.sweep_flow(queue)
        pruned = under_fleet_lock(
            self.alias, "pools", lambda: pools.prune(self.pool_stale_seconds, using=self.alias)
        )
        if pruned:
            log_event(
                logger,
                logging.INFO,
                "runnerq.pools.pruned",
                "Deleted %(count)s pool rows of workers that stopped heartbeating.",
                count=pruned,
            )
        self._guarded("windows", self.sweep_windows)
        keep = int(self.retention.get("CONSOLE_SECONDS") or 0)
        if keep:
            from runnerq_django.storage import console

            under_fleet_lock(self.alias, "console-prune", lambda: console.prune(keep, using=self.alias))
        return total

    def sweep_windows(self) -> int:
        """Debounce and throttle windows that ended a day ago, whose activity no longer waits to
        run (every queue of this database: the table is one)."""
        from runnerq_django.storage import windows

        batch = int(self.retention["BATCH"])
        sweep = functools.partial(
            windows.sweep_windows, older_than_seconds=WINDOW_KEEP_SECONDS, batch=batch, using=self.alias
        )
        count = self._rounds("windows", batch, sweep)
        if count:
            log_event(
                logger,
                logging.INFO,
                "runnerq.retention.windows_swept",
                "Deleted %(count)s debounce and throttle windows that ended over a day ago.",
                count=count,
            )
        return count

    def sweep_flow(self, queue: str) -> int:
        """Flow control's state of ``queue``: free concurrency slot rows (idle for
        ``RETENTION['FLOW_SLOT_IDLE_SECONDS']``) and the partition keys of activities that are
        gone or completed. Each table is walked in key order, a page per statement, each its own
        transaction under the queue's fleet lock, at most ``MAX_ROUNDS`` pages per table per
        sweep; the walk goes on where it stopped at the next sweep of this worker."""
        from runnerq_django.storage import limits

        idle_s = int(self.retention.get("FLOW_SLOT_IDLE_SECONDS", 300))
        deleted = {"slots": 0, "partitions": 0}
        walks: dict[str, Callable[[Any], limits.SweepPage]] = {
            "slots": lambda after: limits.sweep_slots(queue, after=after, idle_s=idle_s, using=self.alias),
            "partitions": lambda after: limits.sweep_partitions(queue, after=after, using=self.alias),
        }
        for table, walk in walks.items():
            cursor_key = (queue, table)
            for _ in range(MAX_ROUNDS):
                after = self._flow_cursors.get(cursor_key)
                page = under_fleet_lock(self.alias, f"flow:{queue}", functools.partial(walk, after))
                if page is None:  # another worker sweeps this queue
                    break
                deleted[table] += page.deleted
                self._flow_cursors[cursor_key] = page.after
                if page.after is None or self.stop.is_set():
                    break
        if deleted["slots"] or deleted["partitions"]:
            log_event(
                logger,
                logging.INFO,
                "runnerq.retention.flow_swept",
                "Deleted %(slots)s idle flow-control slots and %(partitions)s partition keys of queue %(queue)r.",
                queue=queue,
                **deleted,
            )
        return deleted["slots"] + deleted["partitions"]

    def _sweep_batch(self, queue: str) -> int:
        from runnerq_django import storage

        policy = self.retention
        swept: int = storage.cleanup(
            queue,
            completed_s=policy["COMPLETED_SECONDS"],
            failed_s=policy["FAILED_SECONDS"],
            events_s=policy["EVENTS_SECONDS"],
            batch=policy["BATCH"],
            using=self.alias,
        )
        return swept
