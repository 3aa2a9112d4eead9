"""Durable execution inside a handler: steps, sleeps, signals and children (SPEC.md section (e)).

A handler re-runs from the top after a crash, a retry or a park. The primitives here make that
replay cheap and safe: each is keyed by a name that must be stable across deploys and unique in
the handler, and stored under the spec's checkpoint id ``checkpoint_id(activity, kind, name)``
(kinds ``run``, ``sleep``, ``signal``), so Go and TypeScript handlers can signal and await
Python ones and the other way round.

Waiting durably is a *park*: the primitive records why the activity waits, then raises
:class:`~runnerq_django.exceptions.Park`. The worker unwinds the handler and parks the activity
(status ``waiting``, no worker held, no attempt counted) until its timer is due or the awaited
result is stored. ``Park`` derives from ``BaseException`` so ``except Exception`` does not catch
it; a handler that swallows it anyway (``except BaseException``) is still parked, because the
worker reads the request from the context, not from the exception.
"""

from __future__ import annotations

import contextvars
import json
import time
import uuid
from collections.abc import Callable, Iterable
from datetime import UTC, datetime, timedelta
from typing import TYPE_CHECKING, Any, NoReturn, TypeVar, overload

from runnerq_django import conf, routing
from runnerq_django.activities import arguments, versions
from runnerq_django.activities.nouns import WAIT_FOREVER_RECHECK, ActivityHandle, ParkRequest
from runnerq_django.exceptions import (
    AttemptLost,
    ChildFailed,
    CrossDatabaseError,
    NonRetryableError,
    Park,
    SignalTimeout,
    StepFailed,
)
from runnerq_django.observability import tracing
from runnerq_django.spec.keys import checkpoint_id, step_key
from runnerq_django.spec.serialization import handler_value, plain_json

if TYPE_CHECKING:
    from runnerq_django.activities.registry import ActivityDefinition, AnyActivity
    from runnerq_django.canvas.builder import Canvas
    from runnerq_django.progress.writer import Reports
    from runnerq_django.storage.types import Claim, ClaimedActivity, StoredResult

__all__ = [
    "Context",
    "current_context",
]

T = TypeVar("T")
R = TypeVar("R")


# Results read per statement when awaiting children (storage.get_results' batch bound).
RESULTS_PAGE = 1000

_current: contextvars.ContextVar[Context | None] = contextvars.ContextVar("runnerq_context", default=None)


def current_context() -> Context | None:
    """The context of the activity running in this thread (or task), ``None`` outside handlers."""
    return _current.get()


def _now() -> datetime:
    return datetime.now(UTC)


def _json_round_trip(value: Any, field: str) -> Any:
    """What a replay will read back: a first run returns the same shapes (lists, not tuples)."""
    arguments.json_value(value, field)
    if isinstance(value, (str, int, float, bool, type(None))):
        return value
    return json.loads(json.dumps(value))


class Context:
    """What a handler taking ``(ctx, payload)`` receives: the activity's identity and the durable
    primitives. One per attempt; not shared between threads."""

    def __init__(
        self,
        activity: ClaimedActivity,
        *,
        using: str | None = None,
        inline_wait: float = 2.0,
        deadline: float | None = None,
    ):
        self.activity = activity
        self.using = using
        self.inline_wait = inline_wait  # waits up to this long happen in-process instead of parking
        self.deadline = deadline  # time.monotonic() at which the attempt times out
        self.park_request: ParkRequest | None = None
        self.lost: str | None = None  # why the claim was lost, once it was
        self._checkpoints: dict[uuid.UUID, StoredResult] | None = None
        # Added to the wall clock for this activity's timers: 0 under a worker; the test toolkit
        # (runnerq_django.testing) advances it when it fast-forwards a sleep or a timeout.
        self.clock_offset = timedelta(0)
        self._reports: Reports | None = None  # ctx.progress() and ctx.publish()'s buffer, on first use
        self._new_run = False  # the run had recorded nothing when this attempt first looked (versions)

    # identity -------------------------------------------------------------------------------------

    @property
    def id(self) -> uuid.UUID:
        return self.activity.id

    @property
    def activity_type(self) -> str:
        return self.activity.activity_type

    @property
    def queue(self) -> str:
        return self.activity.queue_name

    @property
    def payload(self) -> Any:
        return self.activity.payload

    @property
    def attempt(self) -> int:
        """1 on the first attempt; parks don't count, failures and expired leases do."""
        return self.activity.attempt

    @property
    def metadata(self) -> dict[str, str]:
        """The activity's metadata; ``{}`` when it has none (SQL ``NULL``, or a value another
        writer stored that is not a JSON object)."""
        return self.activity.metadata or {}

    @property
    def parent_id(self) -> uuid.UUID | None:
        return self.activity.parent_activity_id

    @property
    def root_id(self) -> uuid.UUID:
        return self.activity.root_activity_id or self.activity.id

    @property
    def depth(self) -> int:
        return self.activity.depth

    @property
    def claim(self) -> Claim:
        return self.activity.claim

    def now(self) -> datetime:
        """The activity's clock: what sleeps and wait timeouts are measured against."""
        return _now() + self.clock_offset

    def __repr__(self) -> str:
        return f"<Context {self.activity_type} {self.id} attempt {self.attempt}>"

    # progress and events --------------------------------------------------------------------------

    def progress(self, done: float, total: float | None = None, message: str | None = None) -> None:
        """Report how far the handler is: ``done`` of ``total`` (``None``: unknown), with an
        optional ``message``. Only the latest value is kept; it is written a moment later by a
        thread of the worker (at most four times a second whatever the handler calls), so this
        never waits on the database, in a sync or an async handler alike. Readers:
        ``handle.progress()``, the admin."""
        self._reporter().set_progress(done, total, message)

    def publish(self, name: str, data: Any = None) -> None:
        """Append event ``name`` with JSON ``data`` to the activity's event log, which readers
        follow with ``handle.events()``. Buffered like :meth:`progress`, in order; written before
        the attempt's outcome is. Code outside a step runs again on a replay: publish from a
        step's function for an event that must appear once per workflow."""
        self._reporter().publish(name, data)

    def _reporter(self) -> Reports:
        if self._reports is None:
            from runnerq_django.progress.writer import Reports

            self._reports = Reports(self.queue, self.claim, self.attempt, self.using)
        return self._reports

    def close_reports(self) -> None:
        """The handler is over: write its buffered progress and events now (the worker calls this
        before it records the outcome)."""
        if self._reports is not None:
            self._reports.close()

    # version gates --------------------------------------------------------------------------------

    def version(self, name: str, latest: int, *, oldest: int | None = None) -> int:
        """The version this run takes at gate ``name`` (``runnerq_django.activities.versions``): recorded on
        first reach, so every replay takes the same branch. A new run takes ``latest``; one that
        started before the gate existed takes ``oldest`` (the declared one, else 0). A run that
        recorded a version older than ``oldest`` fails, non-retryable."""
        self._check_live()
        declared = versions.gates_of(self.activity_type).get(name)
        floor = oldest if oldest is not None else declared.oldest if declared is not None else 0
        gate = versions.gate(name, (floor, latest))
        result_id = checkpoint_id(self.id, "version", name)
        stored = self._stored(result_id)
        if (
            stored is not None
            and isinstance(stored.data, dict)
            and isinstance(stored.data.get("version"), int)
        ):
            taken: int = stored.data["version"]
        else:
            taken = gate.latest if self._new_run else gate.oldest
            self._checkpoint(result_id, f"version:{name}", "Ok", {"version": taken})
        tracing.event("runnerq.version", {"runnerq.version.gate": name, "runnerq.version": taken})
        if taken < gate.oldest:
            raise NonRetryableError(
                f"version gate {name!r}: this run took version {taken}, and the code serves "
                f"{gate.oldest}..{gate.latest} (see runnerq_deploy_check)"
            )
        return taken

    # steps ----------------------------------------------------------------------------------------

    def step(self, name: str, fn: Callable[..., T], *args: Any, **kwargs: Any) -> T:
        """Run ``fn(*args, **kwargs)`` once per success: its JSON result is checkpointed and
        returned on every replay without running ``fn`` again. A :class:`NonRetryableError` is
        checkpointed too and raised again on replay as :class:`StepFailed`; any other exception
        propagates and the step runs again on the next attempt."""
        self._check_live()
        step = _step_name("run", name)
        result_id = checkpoint_id(self.id, "run", name)
        stored = self._stored(result_id)
        if stored is not None:
            tracing.event("runnerq.step.replayed", {"runnerq.step.name": name})
            replayed: T = self._replayed(name, stored)
            return replayed
        try:
            with tracing.step(name):
                value = fn(*args, **kwargs)
        except NonRetryableError as exc:
            error = f"{type(exc).__name__}: {exc}"
            self._checkpoint(result_id, step, "Err", {"error": error, "type": "non_retryable"})
            if isinstance(exc, StepFailed):
                raise
            raise StepFailed(name, error) from exc
        value = _json_round_trip(value, f"step {name!r} result")
        self._checkpoint(result_id, step, "Ok", value)
        return value  # what a replay returns: the JSON round trip of fn's value

    def _replayed(self, name: str, stored: StoredResult) -> Any:
        data = plain_json(stored.data, stored.serialization)
        if stored.ok:
            return data
        error = data.get("error", data) if isinstance(data, dict) else data
        raise StepFailed(name, str(error))

    # timers ---------------------------------------------------------------------------------------

    def sleep(self, name: str, duration: float | timedelta) -> None:
        """Sleep durably. The wake time is stored on first reach, so a replay after a crash or a
        deploy waits only the remainder. Short remainders (``RUNNERQ['INLINE_WAIT_SECONDS']``)
        wait in-process; longer ones park the activity without holding a worker or an attempt."""
        self._check_live()
        seconds = arguments.seconds(duration, "duration")
        result_id = checkpoint_id(self.id, "sleep", name)
        step = _step_name("sleep", name)
        stored = self._stored(result_id)
        if stored is None:
            wake_at = self.now() + timedelta(seconds=seconds)
            self._checkpoint(result_id, step, "Ok", {"wake_at": wake_at.isoformat()})
        else:
            wake_at = datetime.fromisoformat(stored.data["wake_at"])
        remaining = (wake_at - self.now()).total_seconds()
        tracing.event("runnerq.sleep", {"runnerq.step.name": name, "runnerq.wake_at": wake_at.isoformat()})
        if remaining <= 0:
            return
        if remaining <= self._inline_budget():
            time.sleep(remaining)
            self._check_live()
            return
        self._park(ParkRequest("sleep", step, wake_at))

    # signals --------------------------------------------------------------------------------------

    def wait_for_signal(self, name: str, timeout: float | timedelta | None = None) -> Any:
        """The payload of signal ``name``, parking until it arrives. A signal delivered earlier
        (even before the activity started) returns at once; per name the last payload wins.
        ``timeout`` counts from the first wait, across parks and restarts, and raises
        :class:`SignalTimeout` (non-retryable) when it passes."""
        self._check_live()
        signal_id = checkpoint_id(self.id, "signal", name)
        stored = self._fresh(signal_id)  # signals arrive at any time: never from the preload
        tracing.event(
            "runnerq.signal.wait", {"runnerq.signal.name": name, "runnerq.received": stored is not None}
        )
        if stored is not None:
            return handler_value(stored.data, stored.serialization, conf.get("SUPERJSON"))
        wake_at = self._deadline_for(f"signal:{name}", timeout)
        if wake_at is not None and wake_at <= self.now():
            raise SignalTimeout(name)
        self._park(
            ParkRequest(
                "signal",
                _step_name("signal", name),
                wake_at or self.now() + WAIT_FOREVER_RECHECK,
                result_id=signal_id,
            )
        )

    def _deadline_for(self, what: str, timeout: float | timedelta | None) -> datetime | None:
        """A wait's deadline, stored on first reach (kind ``deadline``) so it survives parks."""
        if timeout is None:
            return None
        seconds = arguments.seconds(timeout, "timeout")
        result_id = checkpoint_id(self.id, "deadline", what)
        stored = self._stored(result_id)
        if stored is not None:
            return datetime.fromisoformat(stored.data["deadline"])
        deadline = self.now() + timedelta(seconds=seconds)
        self._checkpoint(result_id, _step_name("deadline", what), "Ok", {"deadline": deadline.isoformat()})
        return deadline

    # children -------------------------------------------------------------------------------------

    def _refuse_other_database(self, options: dict[str, Any]) -> None:
        """Children live with their parent: the spec's tree is one database, so a ``using=`` (or
        ``across_databases=``) naming any other database than the parent's is refused."""
        options.pop("across_databases", None)
        wanted = options.pop("using", None)
        home = routing.database_for(self.queue, self.using)
        if wanted is not None and wanted != home:
            raise CrossDatabaseError(
                f"spawn into database {wanted!r} refused: a child lives with its parent, on queue "
                f"{self.queue!r} of database {home!r} (an activity tree is one database); "
                "enqueue() a new root there instead"
            )

    @overload
    def spawn(
        self, activity: ActivityDefinition[..., R], payload: Any = None, *, step: str, **options: Any
    ) -> ActivityHandle[R]: ...
    @overload
    def spawn(
        self, activity: str, payload: Any = None, *, step: str, **options: Any
    ) -> ActivityHandle[Any]: ...
    def spawn(
        self, activity: AnyActivity | str, payload: Any = None, *, step: str, **options: Any
    ) -> ActivityHandle[Any]:
        """Enqueue a child of this activity, once per ``step`` name: a replay finds the same child
        (its idempotency key is the spec's step key, ``rq:step:<root>:<parent>:<step>``). The child
        runs on this activity's queue, since a tree lives in one queue. ``options`` are enqueue's
        (priority, max_attempts, timeout, delay, metadata ...). For a keyword handler, ``payload``
        is the dict of its arguments, checked against them as enqueue checks them."""
        from runnerq_django import storage
        from runnerq_django.client import build_activity, count_enqueued

        self._check_live()
        if not isinstance(step, str) or not step:
            raise arguments.invalid("step", f"must be a non-empty string naming the spawn, got {step!r}")
        for refused in ("queue", "idempotency_key", "on_duplicate", "id"):
            if refused in options:
                raise arguments.invalid(refused, "is chosen by spawn (the parent's queue and the step key)")
        self._refuse_other_database(options)
        reused = self._stored(checkpoint_id(self.id, "spawn", step))  # a fork's: its origin's child
        if reused is not None and isinstance(reused.data, dict) and "id" in reused.data:
            return ActivityHandle(
                uuid.UUID(str(reused.data["id"])), self.queue, False, step=step, using=self.using
            )
        from runnerq_django.storage.types import OnDuplicate

        _, new = build_activity(
            activity,
            payload,
            queue=self.queue,
            raw_idempotency_key=step_key(self.root_id, self.id, step),
            on_duplicate=OnDuplicate.RETURN_EXISTING,
            parent_id=self.id,
            root_id=self.root_id,
            depth=self.depth + 1,
            **options,
        )
        with tracing.sending(self.queue, [new]) as send:  # a child of the attempt's span
            result = storage.submit(self.queue, send.activities[0], fence=self.claim, using=self.using)
            send.done([result])
        count_enqueued(self.queue, [result])  # a replay finding its child again counts nothing
        return ActivityHandle(result.id, self.queue, result.created, step=step, using=self.using)

    def wait(self, child: ActivityHandle[R]) -> R:
        """The child's result. A fast child is awaited in-process for a moment; otherwise the
        parent parks (no worker, no attempt) and the child's result wakes it. A failed child
        raises :class:`ChildFailed` with its stored error."""
        result: R = self.wait_all([child])[0]
        return result

    def wait_all(self, children: Iterable[ActivityHandle[Any]]) -> list[Any]:
        """The results of all ``children``, in order. While some are unfinished, the parent
        registers all of them as its dependencies in one statement and parks once, on the last
        unfinished one (children are claimed about in the order they were spawned, so that one
        finishes about last): the parent wakes once for the whole wait, finds every result, and
        goes on. A child that finishes later than the one parked on costs one more park, on the
        last still unfinished. A child found failed raises :class:`ChildFailed` at once, even
        while others still run (found when the parent wakes or replays)."""
        from runnerq_django import storage
        from runnerq_django.client import unwrap

        self._check_live()
        children = list(children)
        for child in children:
            if child.queue != self.queue:
                raise arguments.invalid(
                    "child", f"can only await activities of queue {self.queue!r}, got {child.queue!r}"
                )
        found = self._results([child.id for child in children])
        missing = [child for child in children if child.id not in found]
        if missing and not self._any_failed(found) and self._inline_budget() > 0:
            found.update(self._poll_results([child.id for child in missing]))
            missing = [child for child in children if child.id not in found]
        tracing.event(
            "runnerq.children.wait", {"runnerq.children": len(children), "runnerq.missing": len(missing)}
        )
        for child in children:
            if child.id in found and not found[child.id].ok:
                unwrap(child.id, found[child.id], ChildFailed)
        if not missing:
            return [unwrap(child.id, found[child.id], ChildFailed) for child in children]
        # Every awaited child, not just the one parked on: the rows pin their trees against
        # retention. One statement per page of ids (one for up to 1,000 children).
        missing_ids = [child.id for child in missing]
        for start in range(0, len(missing_ids), RESULTS_PAGE):
            page = missing_ids[start : start + RESULTS_PAGE]
            storage.register_dependencies(self.queue, self.claim, page, using=self.using)
        # The waking rule wakes a waiter on the one result it parks on (waiting_result_id).
        last = missing[-1]
        self._park(
            ParkRequest(
                "await",
                _step_name("child", last.step or str(last.id)),
                self.now() + WAIT_FOREVER_RECHECK,
                result_id=last.id,
                producer_id=last.id,
            )
        )

    # canvas ---------------------------------------------------------------------------------------

    def canvas(self, step: str, canvas: Canvas) -> ActivityHandle[Any]:
        """Start ``canvas`` (a chain, group, chord, map ...) as a child orchestrator of this
        activity, once per ``step``; await it with :meth:`wait` like any child."""
        from runnerq_django.canvas.builder import CANVAS_TYPE

        return self.spawn(CANVAS_TYPE, {"canvas": canvas.node()}, step=step)

    def group(
        self, step: str, members: Iterable[Any], *, on_failure: str = "fail_fast"
    ) -> ActivityHandle[Any]:
        """Dynamic fan-out: ``ctx.wait(ctx.group("fan", [a.s(x) for x in xs]))`` is the list of
        the members' results (``on_failure`` as for :func:`runnerq_django.canvas.builder.group`)."""
        from runnerq_django.canvas.builder import group

        return self.canvas(step, group(members, on_failure=on_failure))

    @staticmethod
    def _any_failed(found: dict[uuid.UUID, StoredResult]) -> bool:
        return any(not result.ok for result in found.values())

    def _results(self, ids: list[uuid.UUID]) -> dict[uuid.UUID, StoredResult]:
        from runnerq_django import storage

        # In pages: get_results takes at most 1,000 ids (the protocol's batch bound), and a
        # parent may await more children than that.
        found: dict[uuid.UUID, StoredResult] = {}
        for start in range(0, len(ids), RESULTS_PAGE):
            found.update(storage.get_results(self.queue, ids[start : start + RESULTS_PAGE], using=self.using))
        return found

    def _poll_results(self, ids: list[uuid.UUID]) -> dict[uuid.UUID, StoredResult]:
        """Short in-process wait for fast children before paying for a park and a replay."""
        deadline = time.monotonic() + self._inline_budget()
        pause = 0.005
        found: dict[uuid.UUID, StoredResult] = {}
        while time.monotonic() < deadline:
            time.sleep(min(pause, max(0.0, deadline - time.monotonic())))
            self._check_live()
            found.update(self._results([i for i in ids if i not in found]))
            if len(found) == len(ids) or self._any_failed(found):
                break
            pause = min(pause * 2, 0.25)
        return found

    # plumbing -------------------------------------------------------------------------------------

    def _inline_budget(self) -> float:
        budget = self.inline_wait
        if self.deadline is not None:
            budget = min(budget, self.deadline - time.monotonic() - 0.5)
        return max(0.0, budget)

    def _check_live(self) -> None:
        if self.lost is not None:
            raise AttemptLost(self.lost)
        if self.park_request is not None:
            # The handler caught the park and carried on: stop it again, it must unwind.
            raise Park(f"activity {self.id} is parking ({self.park_request.kind} {self.park_request.step})")

    def _park(self, request: ParkRequest) -> NoReturn:
        self.park_request = request
        tracing.event(
            "runnerq.park",
            {
                "runnerq.park.kind": request.kind,
                "runnerq.step.name": request.step,
                "runnerq.wake_at": request.wake_at.isoformat(),
            },
        )
        raise Park(f"activity {self.id} parks: {request.kind} {request.step}")

    def _stored(self, result_id: uuid.UUID) -> StoredResult | None:
        """A checkpoint of this activity, from one read of all of them on first use: a replay of a
        long workflow costs one query, not one per step."""
        if self._checkpoints is None:
            from runnerq_django import storage

            self._checkpoints = dict(storage.list_checkpoints(self.queue, self.id, using=self.using))
            if not self._checkpoints:  # a new run: it takes the latest version of every declared gate
                self._new_run = True
                for gate in versions.gates_of(self.activity_type).values():
                    gate_id = checkpoint_id(self.id, "version", gate.name)
                    self._checkpoint(gate_id, f"version:{gate.name}", "Ok", {"version": gate.latest})
        return self._checkpoints.get(result_id)

    def _fresh(self, result_id: uuid.UUID) -> StoredResult | None:
        from runnerq_django import storage

        stored: StoredResult | None = storage.get_result(self.queue, result_id, using=self.using)
        return stored

    def _checkpoint(self, result_id: uuid.UUID, step: str, state: str, data: Any) -> None:
        from runnerq_django import storage
        from runnerq_django.storage.types import StoredResult

        self._check_live()
        storage.checkpoint(
            self.queue, self.claim, result_id, state=state, data=data, step=step, using=self.using
        )
        if self._checkpoints is not None:
            self._checkpoints[result_id] = StoredResult(state=state, data=data, step=step)


def _step_name(kind: str, name: str) -> str:
    if not isinstance(name, str) or not name:
        raise arguments.invalid("name", f"{kind} names must be non-empty strings, got {name!r}")
    return f"{kind}:{name}"
