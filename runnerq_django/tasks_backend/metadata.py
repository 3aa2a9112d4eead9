"""Task metadata for the ``django.tasks`` backend, as Django's proposal has it (a writable
``context.metadata`` dict, ``context.save_metadata()`` / ``asave_metadata()``, saved again when
the task finishes if it changed, read back as ``TaskResult.metadata``; backends that keep it say
``supports_metadata``), so code written for it keeps working when Django ships it.

Behind a feature check: where the installed ``TaskContext`` and ``TaskResult`` lack a
``metadata`` field (Django 6.0, the django-tasks backport), the task gets a
:class:`RunnerQTaskContext` and ``get_result()`` a :class:`RunnerQTaskResult`, subclasses that
add it; where they have one, theirs is filled in. Either way the dict is stored as the
activity's newest event named :data:`METADATA_EVENT` (``ctx.publish``: JSON, at most 16 KiB), and
a number under its ``"progress"`` key is the activity's progress in percent (``ctx.progress(p,
100)``), which ``handle.progress()`` and the admin show.

Internal: not part of the public API.
"""

from __future__ import annotations

import dataclasses
import json
import uuid
from typing import TYPE_CHECKING, Any

from runnerq_django.storage import progress as stored
from runnerq_django.worker.context import current_context

if TYPE_CHECKING:
    from django.tasks.base import TaskContext, TaskResult
else:
    try:  # Django 6.0+
        from django.tasks.base import TaskContext, TaskResult
    except ImportError:  # Django 5.2: the django-tasks backport
        from django_tasks.base import TaskContext, TaskResult

__all__ = [
    "METADATA_EVENT",
    "NATIVE_CONTEXT_METADATA",
    "NATIVE_RESULT_METADATA",
    "context_for",
    "result_with",
    "save_if_changed",
    "saved_metadata",
]

METADATA_EVENT = "django.tasks.metadata"
# The feature checks: does the installed django.tasks carry metadata itself?
NATIVE_CONTEXT_METADATA = "metadata" in {f.name for f in dataclasses.fields(TaskContext)}
NATIVE_RESULT_METADATA = "metadata" in {f.name for f in dataclasses.fields(TaskResult)}


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunnerQTaskContext(TaskContext):  # type: ignore[misc,type-arg]  # frozen at run time
    """A task's context with ``metadata`` (see the module)."""

    if not NATIVE_CONTEXT_METADATA:
        metadata: dict[str, Any] = dataclasses.field(default_factory=dict)

    def save_metadata(self) -> None:
        """Store ``metadata`` now (buffered: written within a moment, before the outcome)."""
        _save(self)

    async def asave_metadata(self) -> None:
        _save(self)  # only buffers: nothing to await


@dataclasses.dataclass(frozen=True, kw_only=True)
class RunnerQTaskResult(TaskResult):  # type: ignore[misc,type-arg]  # frozen at run time
    """A task's result with the ``metadata`` it saved last."""

    if not NATIVE_RESULT_METADATA:
        metadata: dict[str, Any] = dataclasses.field(default_factory=dict)


def _text(metadata: Any) -> str:
    return json.dumps(metadata, sort_keys=True, default=str)


def _save(context: Any) -> None:
    metadata = context.metadata
    if not isinstance(metadata, dict):
        raise TypeError(f"metadata: must be a dict, got {type(metadata).__name__}")
    ctx = current_context()
    if ctx is None:
        raise RuntimeError("save_metadata() is for a task running on the RunnerQ backend")
    ctx.publish(METADATA_EVENT, metadata)
    progress = metadata.get("progress")
    if isinstance(progress, (int, float)) and not isinstance(progress, bool) and 0 <= progress <= 100:
        ctx.progress(progress, 100)
    object.__setattr__(context, "_rq_saved", _text(metadata))


def saved_metadata(queue: str, activity_id: uuid.UUID, using: str | None = None) -> dict[str, Any]:
    """The metadata a task saved last (``{}`` when none)."""
    found = stored.latest_event(queue, activity_id, METADATA_EVENT, using=using)
    return found if isinstance(found, dict) else {}


def context_for(result: Any, metadata: dict[str, Any]) -> Any:
    """The ``TaskContext`` a ``takes_context`` task receives, carrying ``metadata``."""
    context = RunnerQTaskContext(task_result=result, metadata=metadata)
    object.__setattr__(context, "_rq_saved", _text(metadata))
    return context


def save_if_changed(context: Any) -> None:
    """At the task's end: store ``metadata`` if it changed since it was last saved."""
    if context is None or getattr(context, "_rq_saved", None) == _text(context.metadata):
        return
    _save(context)


def result_with(result: Any, metadata: dict[str, Any]) -> Any:
    """``result`` with ``metadata``: the native field filled in, or as a :class:`RunnerQTaskResult`."""
    if NATIVE_RESULT_METADATA:
        return dataclasses.replace(result, metadata=metadata)
    values = {f.name: getattr(result, f.name) for f in dataclasses.fields(result) if f.init}
    found = RunnerQTaskResult(**values, metadata=metadata)
    if hasattr(result, "_return_value"):
        object.__setattr__(found, "_return_value", result._return_value)
    return found
