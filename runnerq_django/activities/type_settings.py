"""``RUNNERQ['TYPES']``: per activity type overrides, in settings, of what ``@activity(...)``
declares (docs/how-to/flow-control.md, "Overriding in settings").

``{"shop.sync": {"concurrency": 4, "rate_limit": "20/s", "backoff": {"base": 0.5}, ...}}``: each
key given replaces the decorator's value of that option when the definition is resolved (the
registry's :class:`~runnerq_django.activities.registry.ActivityDefinition` reads them lazily and again when
``RUNNERQ`` changes); enqueue options still win over both. Settings are data, so a value is the
data spelling of the option: ``retry_on`` takes dotted paths of exception classes, ``backoff`` a
dict of :class:`~runnerq_django.retries.Backoff`'s fields, ``concurrency_key`` a dotted payload
path. ``None`` removes the decorator's ``concurrency``, ``rate_limit`` or ``backoff``.

Internal: not part of the public API.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

from runnerq_django.activities import options as vocabulary
from runnerq_django.activities.arguments import activity_type
from runnerq_django.storage.errors import InvalidArgument
from runnerq_django.storage.validation import invalid

SETTING = "RUNNERQ['TYPES']"
# The options a settings entry may set (runnerq_django.activities.options: every @activity option but ``name``).
KEYS = vocabulary.at(vocabulary.TYPES)
# Options whose None means "none of it" (the decorator's removed), not "not given".
REMOVABLE = frozenset({"concurrency", "rate_limit", "backoff"})
BACKOFF_FIELDS = ("base", "cap", "factor", "jitter")


def path(type_name: str, field: str = "") -> str:
    """``RUNNERQ['TYPES']['shop.sync']['backoff']['base']`` for the field ``backoff.base``."""
    keys = "".join(f"[{part!r}]" for part in field.split(".") if part)
    return f"{SETTING}[{type_name!r}]{keys}"


def message(type_name: str, error: InvalidArgument) -> str:
    """The error of a field of the entry, named by its place in the settings."""
    field = error.field or ""
    text = error.message.removeprefix(f"{field}: ") if field else error.message
    return f"{path(type_name, field)} {text}"


def _exception_class(value: Any, field: str) -> type[BaseException]:
    if isinstance(value, str):
        from django.utils.module_loading import import_string

        try:
            value = import_string(value)
        except ImportError as exc:
            raise invalid(field, f"names {value!r}, which cannot be imported ({exc})") from None
    if not (isinstance(value, type) and issubclass(value, BaseException)):
        raise invalid(field, f"takes dotted paths of exception classes, got {value!r}")
    return value


def _classes(value: Any, field: str) -> tuple[type[BaseException], ...]:
    items = [value] if isinstance(value, (str, type)) else value
    if not isinstance(items, (list, tuple)):
        raise invalid(field, f"takes a list of dotted paths of exception classes, got {value!r}")
    return tuple(_exception_class(item, field) for item in items)


def _backoff(value: Any) -> Any:
    from runnerq_django.retries import Backoff

    if value is None or isinstance(value, Backoff):
        return value
    if not isinstance(value, Mapping):
        raise invalid("backoff", f"must be a dict of {', '.join(BACKOFF_FIELDS)}, got {value!r}")
    unknown = sorted(str(key) for key in value if key not in BACKOFF_FIELDS)
    if unknown:
        raise invalid(
            f"backoff.{unknown[0]}", f"is not a backoff field (they are {', '.join(BACKOFF_FIELDS)})"
        )
    return Backoff(**value)  # its checks name backoff.base, backoff.cap ...


def _partition_path(value: Any, field: str) -> Any:
    # In settings a key is data: a payload path, not a callable.
    if value is not None and not isinstance(value, str):
        raise invalid(field, f"must be a dotted payload path such as 'customer.id', got {value!r}")
    return value


def arguments(given: Mapping[str, Any]) -> dict[str, Any]:
    """The ``@activity`` arguments of a settings entry (values converted from their data spelling).
    Raises InvalidArgument naming the key (``concurrency``, ``backoff.base`` ...)."""
    unknown = sorted(str(key) for key in given if key not in KEYS)
    if unknown:
        raise invalid(
            unknown[0], f"is not an option of an activity type (they are {vocabulary.listed(KEYS)})"
        )
    converted: dict[str, Any] = {}
    for key, value in given.items():
        if key in ("retry_on", "no_retry_on"):
            value = _classes(value, key)
        elif key == "backoff":
            value = _backoff(value)
        elif key in ("concurrency_key", "rate_limit_key"):
            value = _partition_path(value, key)
        elif key == "rate_limit" and isinstance(value, list):
            value = tuple(value)  # [20, "second"]
        converted[key] = value
    return converted


def problems(value: Any, name: str, judge: Callable[[str, Mapping[str, Any]], object]) -> list[str]:
    """Every problem of a ``RUNNERQ['TYPES']`` value, for the system checks: its shape, and each
    entry as ``judge(type_name, entry)`` finds it (the registry's: the entry over the decorator of
    a type registered here, or alone; it raises InvalidArgument naming the key)."""
    if not isinstance(value, Mapping):
        return [f"{name} must be a dict of activity type -> dict of options, got {type(value).__name__}"]
    found = []
    for type_name, given in value.items():
        try:
            activity_type(type_name, "activity type")
        except InvalidArgument as exc:
            found.append(f"{name}[{type_name!r}] is not an activity type name: {exc.message}")
            continue
        if not isinstance(given, Mapping):
            found.append(f"{path(type_name)} must be a dict of options, got {type(given).__name__}")
            continue
        try:
            judge(type_name, given)
        except InvalidArgument as exc:
            found.append(message(type_name, exc))
    return found
