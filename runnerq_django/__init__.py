"""runnerq-django: durable background work for Django on Postgres (RunnerQ spec 0.8).

The public API, imported lazily (``from runnerq_django import activity, enqueue``) so that
importing the package loads neither models nor settings before Django is set up.
"""

from __future__ import annotations

from importlib import import_module
from typing import TYPE_CHECKING, Any

__version__ = "0.1.0"  # the package's only version number (pyproject.toml reads it)

# public name -> module that defines it
_EXPORTS = {
    # defining
    "activity": "runnerq_django.registry",
    "ActivityDefinition": "runnerq_django.registry",
    "Backoff": "runnerq_django.retries",
    "Context": "runnerq_django.context",
    "current_context": "runnerq_django.context",
    "periodic": "runnerq_django.scheduler.declarations",
    # enqueueing, results, signals, cancellation
    "enqueue": "runnerq_django.client",
    "enqueue_many": "runnerq_django.client",
    "aenqueue": "runnerq_django.client",
    "aenqueue_many": "runnerq_django.client",
    "ActivityHandle": "runnerq_django.client",
    "get_handle": "runnerq_django.client",
    "signal": "runnerq_django.client",
    "signal_by_key": "runnerq_django.client",
    "cancel": "runnerq_django.client",
    "OnDuplicate": "runnerq_django.storage.types",
    "Priority": "runnerq_django.storage.types",
    # errors (one hierarchy: runnerq_django.exceptions)
    "RunnerQError": "runnerq_django.exceptions",
    "NonRetryableError": "runnerq_django.exceptions",
    "ActivityFailed": "runnerq_django.exceptions",
    "ChildFailed": "runnerq_django.exceptions",
    "StepFailed": "runnerq_django.exceptions",
    "SignalTimeout": "runnerq_django.exceptions",
    "ResultTimeout": "runnerq_django.exceptions",
    "InvalidArgument": "runnerq_django.storage.errors",
    "StorageError": "runnerq_django.storage.errors",
    "SchemaMissing": "runnerq_django.storage.errors",
}

__all__ = sorted(_EXPORTS)


def __getattr__(name: str) -> Any:
    module = _EXPORTS.get(name)
    if module is None:
        raise AttributeError(f"module 'runnerq_django' has no attribute {name!r}")
    value = getattr(import_module(module), name)
    globals()[name] = value  # later lookups skip __getattr__
    return value


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(_EXPORTS))


if TYPE_CHECKING:  # for type checkers and IDEs; never executed
    from runnerq_django.client import (  # noqa: F401
        ActivityHandle,
        aenqueue,
        aenqueue_many,
        cancel,
        enqueue,
        enqueue_many,
        get_handle,
        signal,
        signal_by_key,
    )
    from runnerq_django.context import Context, current_context  # noqa: F401
    from runnerq_django.exceptions import (  # noqa: F401
        ActivityFailed,
        ChildFailed,
        NonRetryableError,
        ResultTimeout,
        RunnerQError,
        SignalTimeout,
        StepFailed,
    )
    from runnerq_django.registry import ActivityDefinition, activity  # noqa: F401
    from runnerq_django.retries import Backoff  # noqa: F401
    from runnerq_django.scheduler.declarations import periodic  # noqa: F401
    from runnerq_django.storage.errors import InvalidArgument, SchemaMissing, StorageError  # noqa: F401
    from runnerq_django.storage.types import OnDuplicate, Priority  # noqa: F401
