"""An in-process worker for tests: the worker's own execution path, one attempt at a time.

Claims go through ``storage.claim``, handlers run through the worker's :class:`Runner` (context,
steps, parks, failures, retries, the ``internal error`` last resort) and completions through its
ack buffer's write, on the calling thread and the real database. What differs from
``runworker``, so that a test runs deterministically:

- one attempt at a time, in the caller's thread (a worker with ``--concurrency 1``); no lease keeper, so a synchronous handler's
  timeout is not enforced (an async handler's is);
- durable waits always park (a worker with ``INLINE_WAIT_SECONDS = 0``): nothing else would run
  the awaited child while the parent polled for it;
- with ``fast_forward``, work due later (a delay, a retry backoff, a sleep, a wait's timeout) is
  made due at once, and the activity's clock (:meth:`Context.now`) is advanced to the time it
  was due, so its timers read as passed. Waits with no timer (a signal nobody sent, a child
  still waiting) are left waiting.

Internal: not part of the public API.
"""

from __future__ import annotations

import threading
import uuid
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any

from runnerq_django import routing
from runnerq_django.activities.nouns import WAIT_FOREVER_RECHECK, ParkRequest
from runnerq_django.worker.acks import AckBuffer
from runnerq_django.worker.attempts import Attempt, Attempts
from runnerq_django.worker.context import Context
from runnerq_django.worker.dispatcher import observe_claimed
from runnerq_django.worker.runner import Runner, build_runner

if TYPE_CHECKING:
    from runnerq_django.activities.registry import ActivityRegistry
    from runnerq_django.storage.fast_forward import DueLater

WORKER_ID = "runnerq-testing"
LEASE_MS = 3600 * 1000  # nothing renews it: long enough for any test's handler
# A wait whose timer is this close to the recheck horizon was parked without a timeout.
_NO_TIMEOUT_BEYOND = WAIT_FOREVER_RECHECK - timedelta(minutes=1)

# Per activity: how far its clock runs ahead of the wall clock. Process-wide, so the clock
# survives from one run_until_idle() (or immediate enqueue) to the next; reset() clears it.
_offsets: dict[uuid.UUID, timedelta] = {}
_parks: dict[uuid.UUID, ParkRequest | None] = {}  # the last park request of each activity
_lock = threading.Lock()


@dataclass(frozen=True)
class Ran:
    """One attempt the in-process worker ran. ``outcome`` is the activity's stored status right
    after it: ``completed``, ``retrying``, ``failed``, ``dead_letter``, ``waiting`` (parked),
    ``pending`` (parked on something already there), or ``None`` if the row is gone."""

    id: uuid.UUID
    activity_type: str
    queue: str
    attempt: int
    outcome: str | None


def reset() -> None:
    """Forget the activities' clocks and parks (between tests)."""
    with _lock:
        _offsets.clear()
        _parks.clear()


def last_park(activity_id: uuid.UUID) -> ParkRequest | None:
    return _parks.get(activity_id)


class _Runner(Runner):
    def context_for(self, attempt: Attempt) -> Context:
        ctx = super().context_for(attempt)
        ctx.clock_offset = _offsets.get(attempt.activity.id, timedelta(0))
        return ctx

    def park(self, attempt: Attempt, ctx: Context) -> None:
        with _lock:
            _parks[attempt.activity.id] = ctx.park_request
        super().park(attempt, ctx)


class _Acks(AckBuffer):
    """The worker's ack buffer, writing each completion as it comes instead of on its thread."""

    def add(self, attempt: Attempt, value: Any) -> None:
        if not self.write_now(attempt, value):
            raise RuntimeError(f"the completion of activity {attempt.activity.id} could not be recorded")


class InProcessWorker:
    """Runs the activities of ``queues`` and ``types`` (default: every type with a handler here,
    as ``runworker``), or of one tree (``root_id``), in the calling thread."""

    def __init__(
        self,
        *,
        queues: Iterable[str] | None = None,
        types: Iterable[str] | None = None,
        root_id: uuid.UUID | None = None,
        using: str | None = None,
        registry: ActivityRegistry | None = None,
    ):
        from runnerq_django import conf
        from runnerq_django.activities.registry import registry as default_registry
        from runnerq_django.worker.runtime import resolve_types

        self.queues = list(queues) if queues is not None else list(conf.get("QUEUES"))
        # The queues' database (RUNNERQ['QUEUE_DATABASES']); run_until_idle makes one per database.
        self.alias = (
            routing.databases(self.queues)[0]
            if using is None and self.queues
            else using or conf.database_alias()
        )
        registry = registry or default_registry
        self.root_id = root_id
        self.types = resolve_types(registry, list(types) if types else None)
        self.attempts = Attempts()
        self.runner = build_runner(
            registry=registry,
            attempts=self.attempts,
            alias=self.alias,
            inline_wait=0.0,
            acks_class=_Acks,
            runner_class=_Runner,
        )
        self.acks = self.runner.acks

    def run(self, *, max_activities: int | None = None, fast_forward: bool = False) -> list[Ran]:
        """Claim and run what is due, one attempt at a time (as ``runworker --concurrency 1``
        would: the next claim comes after the last outcome), until nothing is due or
        ``max_activities`` attempts ran; with ``fast_forward``, work due later is made due."""
        ran: list[Ran] = []
        while max_activities is None or len(ran) < max_activities:
            attempt = self._claim_one()
            if attempt is None:
                if fast_forward and self.fast_forward():
                    continue
                break
            group = self._batch_of(attempt, max_activities, len(ran))
            ran += self._run_batch(group) if group else [self._run(attempt)]
        return ran

    def _batch_of(self, attempt: Attempt, max_activities: int | None, ran: int) -> list[Attempt]:
        """A batch handler's attempt with more of its type and queue claimed beside it (up to
        its ``max_size``), as a worker gathers them (alone inside a transaction, a ``TestCase``,
        where the members' threads could not see the claims); [] for other handlers."""
        from django.db import connections

        from runnerq_django import storage

        handler = self.runner.registry.resolve(attempt.activity.activity_type)
        batch = None if handler is None else handler.batch
        if batch is None:
            return []
        room = batch.max_size - 1
        if max_activities is not None:
            room = min(room, max_activities - ran - 1)
        if room <= 0 or connections[self.alias].in_atomic_block:
            return [attempt]
        activity = attempt.activity
        more = storage.claim(
            activity.queue_name,
            types=[activity.activity_type],
            limit=room,
            lease_ms=LEASE_MS,
            worker_id=WORKER_ID,
            root_id=self.root_id,
            using=self.alias,
        )
        if more:
            observe_claimed(activity.queue_name, more)
        return [attempt, *self.attempts.add(more)]

    def _run_batch(self, group: list[Attempt]) -> list[Ran]:
        """Run the members of one batch, each on a thread of its own (as a worker's executor
        threads do), the handler called once for them all."""
        from django.db import connections

        self.runner.batches.expect(group[0].activity.activity_type, len(group))  # no waiting
        if len(group) == 1:
            return [self._run(group[0])]
        results: dict[int, Ran] = {}

        def member(index: int, attempt: Attempt) -> None:
            try:
                results[index] = self._run(attempt)
            finally:
                connections.close_all()

        threads = [
            threading.Thread(target=member, args=(index, attempt), name=f"runnerq-testing-batch-{index}")
            for index, attempt in enumerate(group)
        ]
        for thread in threads:
            thread.start()
        for thread in threads:
            thread.join()
        return [results[index] for index in range(len(group)) if index in results]

    def _claim_one(self) -> Attempt | None:
        from runnerq_django import storage

        for queue in self.queues:
            claimed = storage.claim(
                queue,
                types=self.types,
                limit=1,
                lease_ms=LEASE_MS,
                worker_id=WORKER_ID,
                root_id=self.root_id,
                using=self.alias,
            )
            if claimed:
                observe_claimed(queue, claimed)
                return self.attempts.add(claimed)[0]
        return None

    def _run(self, attempt: Attempt) -> Ran:
        from runnerq_django.models import Activity as ActivityRow

        try:
            self.runner(attempt)
        except BaseException as exc:  # what the executor pool does with an error around the handler
            self.runner.crashed(attempt, exc)
        activity = attempt.activity
        status = (
            ActivityRow.objects.using(self.alias)
            .filter(id=activity.id)
            .values_list("status", flat=True)
            .first()
        )
        return Ran(activity.id, activity.activity_type, activity.queue_name, activity.attempt, status)

    def fast_forward(self) -> list[uuid.UUID]:
        """Make due now what is due later (except waits without a timer), advancing each one's
        clock to its due time. Returns the ids made due."""
        from runnerq_django.storage import fast_forward as ff

        now = datetime.now(UTC)
        made_due: list[uuid.UUID] = []
        for queue in self.queues:
            later = ff.due_later(queue, types=self.types, root_id=self.root_id, using=self.alias)
            chosen = {row.id: row.scheduled_at for row in later if not self._waits_forever(row, now)}
            if not chosen:
                continue
            changed = ff.make_due(queue, list(chosen), using=self.alias)
            with _lock:
                for activity_id in changed:
                    ahead = chosen[activity_id] - now
                    _offsets[activity_id] = max(_offsets.get(activity_id, timedelta(0)), ahead)
            made_due += changed
        return made_due

    @staticmethod
    def _waits_forever(row: DueLater, now: datetime) -> bool:
        """Parked on a signal or a child without a timeout: its timer is only the recheck."""
        clock = now + _offsets.get(row.id, timedelta(0))
        return row.awaits_result and row.scheduled_at - clock >= _NO_TIMEOUT_BEYOND


def run_until_idle(
    queues: Iterable[str] | None = None,
    types: Iterable[str] | None = None,
    max_activities: int | None = None,
    fast_forward: bool = False,
    using: str | None = None,
) -> list[Ran]:
    """Claim and run, in this process and over the real database, every activity that is due in
    ``queues`` (default ``RUNNERQ['QUEUES']``) of ``types`` (default: every registered handler),
    until none is or ``max_activities`` attempts ran. ``fast_forward`` also runs what is due
    later -- delays, retry backoffs, durable sleeps and wait timeouts -- at once, as if that time
    had passed. Returns the attempts run, in order."""
    from runnerq_django import conf

    wanted = list(queues) if queues is not None else list(conf.get("QUEUES"))
    grouped = routing.by_database(wanted, using)
    if len(grouped) <= 1:
        worker = InProcessWorker(queues=wanted, types=types, using=using)
        return worker.run(max_activities=max_activities, fast_forward=fast_forward)
    # Queues on several databases: one in-process worker per database, in turns, until none runs
    # anything (work on one database can make work due on another only through new enqueues).
    workers = [InProcessWorker(queues=on, types=types, using=alias) for alias, on in grouped.items()]
    ran: list[Ran] = []
    while max_activities is None or len(ran) < max_activities:
        before = len(ran)
        for worker in workers:
            left = None if max_activities is None else max_activities - len(ran)
            if left == 0:
                break
            ran += worker.run(max_activities=left, fast_forward=fast_forward)
        if len(ran) == before:
            break
    return ran
