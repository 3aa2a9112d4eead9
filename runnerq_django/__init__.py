"""runnerq-django: durable background work for Django on Postgres (RunnerQ spec 0.8).

The public API, imported lazily (``from runnerq_django import activity, enqueue``) so that
importing the package loads neither models nor settings before Django is set up.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib import import_module
from typing import TYPE_CHECKING, Any

from runnerq_django._version import __version__ as __version__


def lazy_exports(
    package: str, exports: Mapping[str, str], namespace: dict[str, Any]
) -> tuple[Callable[[str], Any], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``, whose public names ``exports``
    maps to the module defining each; a name is kept in ``namespace`` (the package's globals)
    once imported, so later lookups skip ``__getattr__``."""

    def __getattr__(name: str) -> Any:
        module = exports.get(name)
        if module is None:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(import_module(module), name)
        namespace[name] = value
        return value

    def __dir__() -> list[str]:
        return sorted(set(namespace) | set(exports))

    return __getattr__, __dir__


# public name -> module that defines it
_EXPORTS = {
    # defining
    "activity": "runnerq_django.activities.registry",
    "ActivityDefinition": "runnerq_django.activities.registry",
    "Backoff": "runnerq_django.retries",
    "BatchItem": "runnerq_django.activities.batch",
    "BatchOptions": "runnerq_django.activities.batch",
    "BatchResult": "runnerq_django.activities.batch",
    "Context": "runnerq_django.worker.context",
    "current_context": "runnerq_django.worker.context",
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
    "fork": "runnerq_django.workflows.forks",
    "cancel": "runnerq_django.client",
    "OnDuplicate": "runnerq_django.storage.types",
    "Debounce": "runnerq_django.activities.debounce",
    "Throttle": "runnerq_django.activities.debounce",
    "Priority": "runnerq_django.storage.types",
    # errors (one hierarchy: runnerq_django.exceptions)
    "RunnerQError": "runnerq_django.exceptions",
    "NonRetryableError": "runnerq_django.exceptions",
    "ActivityFailed": "runnerq_django.exceptions",
    "ChildFailed": "runnerq_django.exceptions",
    "StepFailed": "runnerq_django.exceptions",
    "SignalTimeout": "runnerq_django.exceptions",
    "ResultTimeout": "runnerq_django.exceptions",
    "SoftTimeLimitExceeded": "runnerq_django.exceptions",
    "InvalidArgument": "runnerq_django.storage.errors",
    "StorageError": "runnerq_django.storage.errors",
    "SchemaMissing": "runnerq_django.storage.errors",
}

__all__ = sorted(_EXPORTS)


__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS, globals())


if TYPE_CHECKING:  # for type checkers and IDEs; never executed (`X as X`: an explicit re-export)
    from runnerq_django.activities.batch import BatchItem as BatchItem
    from runnerq_django.activities.batch import BatchOptions as BatchOptions
    from runnerq_django.activities.batch import BatchResult as BatchResult
    from runnerq_django.activities.debounce import Debounce as Debounce
    from runnerq_django.activities.debounce import Throttle as Throttle
    from runnerq_django.activities.registry import ActivityDefinition as ActivityDefinition
    from runnerq_django.activities.registry import activity as activity
    from runnerq_django.client import ActivityHandle as ActivityHandle
    from runnerq_django.client import aenqueue as aenqueue
    from runnerq_django.client import aenqueue_many as aenqueue_many
    from runnerq_django.client import cancel as cancel
    from runnerq_django.client import enqueue as enqueue
    from runnerq_django.client import enqueue_many as enqueue_many
    from runnerq_django.client import get_handle as get_handle
    from runnerq_django.client import signal as signal
    from runnerq_django.client import signal_by_key as signal_by_key
    from runnerq_django.exceptions import ActivityFailed as ActivityFailed
    from runnerq_django.exceptions import ChildFailed as ChildFailed
    from runnerq_django.exceptions import NonRetryableError as NonRetryableError
    from runnerq_django.exceptions import ResultTimeout as ResultTimeout
    from runnerq_django.exceptions import RunnerQError as RunnerQError
    from runnerq_django.exceptions import SignalTimeout as SignalTimeout
    from runnerq_django.exceptions import SoftTimeLimitExceeded as SoftTimeLimitExceeded
    from runnerq_django.exceptions import StepFailed as StepFailed
    from runnerq_django.retries import Backoff as Backoff
    from runnerq_django.scheduler.declarations import periodic as periodic
    from runnerq_django.storage.errors import InvalidArgument as InvalidArgument
    from runnerq_django.storage.errors import SchemaMissing as SchemaMissing
    from runnerq_django.storage.errors import StorageError as StorageError
    from runnerq_django.storage.types import OnDuplicate as OnDuplicate
    from runnerq_django.storage.types import Priority as Priority
    from runnerq_django.worker.context import Context as Context
    from runnerq_django.worker.context import current_context as current_context
    from runnerq_django.workflows.forks import fork as fork
