"""Flow control across the whole fleet of runnerq-django workers (docs/how-to/flow-control.md):
pause and resume a queue, or one activity type in a queue.

A pause is a row in the app's own table ``runnerq_flow_pauses``; every runnerq-django claim reads
it in its own statement, so a pause takes effect at each worker's next claim (within one poll
interval) and running attempts finish. Paused activities stay ``pending`` (or ``scheduled``,
``retrying``). Every pause and resume is recorded, with who and why, in ``runnerq_flow_ledger``.
Go and TypeScript workers claiming the same queue do not honour pauses.
"""

from __future__ import annotations

import getpass
import os
import socket
from typing import TYPE_CHECKING

from runnerq_django import conf, routing
from runnerq_django.activities import arguments
from runnerq_django.storage import flow as flow_storage
from runnerq_django.storage.flow import FlowChange, Pause

if TYPE_CHECKING:
    from runnerq_django.activities.registry import AnyActivity

__all__ = ["FlowChange", "Pause", "history", "pause", "paused", "resume"]


def default_actor() -> str:
    """Who a pause from Python code is recorded as: the OS user, host and process."""
    try:
        user = getpass.getuser()
    except Exception:  # no user name in this environment (a container without /etc/passwd entry)
        user = f"uid {os.getuid()}" if hasattr(os, "getuid") else "unknown"
    return f"python {user}@{socket.gethostname()} pid {os.getpid()}"


def _target(queue: str | None, activity_type: str | AnyActivity | None) -> tuple[str, str | None]:
    from runnerq_django.activities.registry import ActivityDefinition

    type_name: str | None
    if isinstance(activity_type, ActivityDefinition):
        type_name = activity_type.name
        if queue is None:
            queue = activity_type.options.queue
    elif activity_type is None:
        type_name = None
    else:
        type_name = arguments.activity_type(activity_type)
    return arguments.queue_name(queue if queue is not None else conf.get("DEFAULT_QUEUE")), type_name


def pause(
    queue: str | None = None,
    activity_type: str | AnyActivity | None = None,
    *,
    by: str | None = None,
    reason: str = "",
    using: str | None = None,
) -> bool:
    """Pause ``queue`` (default ``RUNNERQ['DEFAULT_QUEUE']``, or the type's own queue), or only
    ``activity_type`` in it (a name or an ``@activity``). Returns whether it was not paused yet;
    pausing again updates who and why."""
    target_queue, type_name = _target(queue, activity_type)
    return flow_storage.pause(
        target_queue,
        type_name,
        actor=by or default_actor(),
        reason=reason,
        using=routing.database_for(target_queue, using),
    )


def resume(
    queue: str | None = None,
    activity_type: str | AnyActivity | None = None,
    *,
    by: str | None = None,
    reason: str = "",
    using: str | None = None,
) -> bool:
    """Resume what :func:`pause` paused (the same ``queue`` and ``activity_type``) and wake the
    queue's workers. Returns whether it was paused. Resuming a queue leaves its paused types paused."""
    target_queue, type_name = _target(queue, activity_type)
    return flow_storage.resume(
        target_queue,
        type_name,
        actor=by or default_actor(),
        reason=reason,
        using=routing.database_for(target_queue, using),
    )


def paused(*, using: str | None = None) -> list[Pause]:
    """Every pause in effect (``Pause.activity_type`` is ``""`` for a whole queue)."""
    return flow_storage.pauses(using=using)


def history(limit: int = 100, *, using: str | None = None) -> list[FlowChange]:
    """The latest pauses and resumes, newest first."""
    return flow_storage.ledger(limit, using=using)
