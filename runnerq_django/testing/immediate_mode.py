"""Immediate mode: ``enqueue()`` runs the activity at once, in this process, once the enqueue commits.

On (``RUNNERQ['IMMEDIATE'] = True``, or inside ``with immediate():`` / under ``@immediate()``),
every enqueue registers ``transaction.on_commit``: when the surrounding transaction commits (at
once in autocommit), the in-process worker (:mod:`runnerq_django.testing.worker`) runs the
activity's tree to its end with fast-forward -- its children, retries, sleeps and timeouts -- and
stores everything as a worker would. A wait that nothing can end (a signal not sent, a child
waiting for one) raises :class:`WaitsForever`; the activity stays ``waiting``, and sending the
signal runs it on.

It is a receiver of ``runnerq_django.signals.activity_enqueued``, connected when this module is
imported: by ``immediate()``'s users, by the pytest fixture, or by the app's start-up when
``RUNNERQ['IMMEDIATE']`` is on then (Django's test backends are named in ``TASKS`` the same way).

Under a Django ``TestCase`` (or pytest-django's ``db`` fixture) the transaction never commits,
so nothing would run: use ``TransactionTestCase`` / ``transactional_db``, or run the callbacks
with ``captureOnCommitCallbacks(execute=True)``.

Internal: not part of the public API.
"""

from __future__ import annotations

import contextlib
import threading
import uuid
from functools import partial
from typing import Any

from runnerq_django.exceptions import RunnerQError
from runnerq_django.signals import activity_enqueued

_lock = threading.Lock()
_depth = 0  # open immediate() blocks, in any thread: a test's threads share its mode


class WaitsForever(RunnerQError):
    """In immediate mode, an activity waits for something nothing will send."""

    def __init__(self, activity_id: uuid.UUID, activity_type: str, waiting_for: str):
        self.activity_id = activity_id
        self.activity_type = activity_type
        self.waiting_for = waiting_for
        super().__init__(
            f"activity {activity_type} {activity_id} waits for {waiting_for}, which nothing will send in immediate "
            "mode: send it in the same transaction as the enqueue (it is delivered when the activity runs), or send "
            "it afterwards (the activity then runs on); a wait with a timeout times out instead"
        )


class immediate(contextlib.ContextDecorator):
    """``with immediate():`` or ``@immediate()``: enqueues run at once (see the module)."""

    def __enter__(self) -> immediate:
        global _depth
        with _lock:
            _depth += 1
        return self

    def __exit__(self, *exc: object) -> None:
        global _depth
        with _lock:
            _depth -= 1


def active() -> bool:
    from runnerq_django import conf

    return _depth > 0 or conf.runnerq_settings().immediate


def enqueued(
    sender: object, *, queue: str, activity_ids: list[uuid.UUID], using: str | None, **kwargs: Any
) -> None:
    """The receiver of ``activity_enqueued``: in immediate mode, run these activities' trees on commit."""
    if not activity_ids or not active():
        return
    from django.db import transaction

    from runnerq_django import conf

    alias = using or conf.database_alias()
    for activity_id in activity_ids:
        transaction.on_commit(partial(run_tree, queue, activity_id, alias), using=alias)


activity_enqueued.connect(enqueued, dispatch_uid="runnerq_django.testing.immediate_mode")


def run_tree(queue: str, activity_id: uuid.UUID, using: str | None = None) -> None:
    """Run the tree of ``activity_id`` (an activity, or any of its descendants) until nothing
    in it can run; raise :class:`WaitsForever` for a wait nothing can end."""
    from django.db.models import Q

    from runnerq_django.models import Activity as ActivityRow
    from runnerq_django.testing.worker import InProcessWorker

    rows = ActivityRow.objects.using(using).filter(queue_name=queue)
    root = rows.filter(id=activity_id).values_list("root_activity_id", flat=True).first() or activity_id
    InProcessWorker(queues=[queue], root_id=root, using=using).run(fast_forward=True)
    # The deepest one waiting is the cause (its parent awaits it).
    stuck = (
        rows.filter(Q(id=root) | Q(root_activity_id=root), status="waiting")
        .order_by("-depth")
        .values_list("id", "activity_type")
        .first()
    )
    if stuck is not None:
        raise WaitsForever(stuck[0], stuck[1], _waiting_for(stuck[0]))


def _waiting_for(activity_id: uuid.UUID) -> str:
    from runnerq_django.testing.worker import last_park

    request = last_park(activity_id)
    if request is None:
        return "a result"
    kind, _, name = request.step.partition(":")
    return f"signal {name!r}" if kind == "signal" else f"child {name!r}" if kind == "child" else request.step
