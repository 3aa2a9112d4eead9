"""Re-run a workflow from a step (public: ``runnerq_django.workflows.forks``): :func:`fork` makes a new run of a finished root activity whose
steps before the chosen one are kept from the original (their checkpoints copied, the children
they spawned reused), so its replay runs the chosen step and everything after it again.

```python
from runnerq_django import fork

new = fork(handle, from_step="charge", reason="fixed the tax bug (#812)")
new.result(timeout=60)
```
"""

from __future__ import annotations

import uuid
from typing import Any

from runnerq_django import routing
from runnerq_django.activities.nouns import ActivityHandle
from runnerq_django.client import get_handle
from runnerq_django.spec.statuses import TERMINAL
from runnerq_django.storage import commands
from runnerq_django.storage import fork as stored
from runnerq_django.storage.fork import Fork, ForkRecord, Step

__all__ = ["Fork", "ForkRecord", "Step", "fork", "forks_of", "steps_of"]

_KEEP: Any = object()


def fork(
    target: ActivityHandle[Any] | uuid.UUID | str,
    from_step: str,
    payload: Any = _KEEP,
    *,
    queue: str | None = None,
    cancel_running: bool = False,
    actor: str = "",
    reason: str | None = None,
    using: str | None = None,
) -> ActivityHandle[Any]:
    """Fork the root activity ``target`` from ``from_step`` (a step's name, or ``kind:name`` as
    :func:`steps_of` lists them): a new activity of the same type and queue, with the same input
    (or ``payload``), that keeps every step recorded before ``from_step`` and runs it and the
    rest again. The original must have ended (completed, failed, dead-lettered, cancelled); one
    still running or parked is refused, or cancelled first with ``cancel_running``. The fork is
    ledgered with ``actor`` and ``reason``. Returns the fork's handle."""
    handle = target if isinstance(target, ActivityHandle) else get_handle(target, queue, using=using)
    alias = routing.database_for(handle.queue, using or handle.using)
    if cancel_running:
        from runnerq_django.models import Activity

        status = Activity.objects.using(alias).filter(id=handle.id).values_list("status", flat=True).first()
        if status is not None and status not in TERMINAL:
            commands.cancel(
                handle.queue, [handle.id], reason=reason or f"forked from {from_step}", using=alias
            )
    kwargs: dict[str, Any] = {} if payload is _KEEP else {"payload": payload}
    made = stored.fork(
        handle.queue, handle.id, from_step=from_step, actor=actor, reason=reason, using=alias, **kwargs
    )
    _enqueued(handle.queue, made.id, alias)
    return ActivityHandle(made.id, handle.queue, True, using=alias)


def _enqueued(queue: str, activity_id: uuid.UUID, alias: str) -> None:
    """Immediate mode runs the fork (as it runs an enqueue)."""
    from runnerq_django.client import _enqueued as announce

    announce(queue, [activity_id], alias)


def steps_of(target: ActivityHandle[Any] | uuid.UUID | str, *, queue: str | None = None) -> list[Step]:
    """The steps the run recorded, in order (what :func:`fork` can start from)."""
    handle = target if isinstance(target, ActivityHandle) else get_handle(target, queue)
    return stored.steps_of(handle.queue, handle.id, using=routing.database_for(handle.queue, handle.using))


def forks_of(target: ActivityHandle[Any] | uuid.UUID | str, *, queue: str | None = None) -> list[ForkRecord]:
    """The forks of the run, and the one it is if it is a fork, newest first."""
    handle = target if isinstance(target, ActivityHandle) else get_handle(target, queue)
    return stored.forks_of(handle.queue, handle.id, using=routing.database_for(handle.queue, handle.using))
