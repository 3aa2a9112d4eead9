"""Version gates (public: ``runnerq_django.activities.versions``): change a workflow's code without changing what a run already in flight does.

``ctx.version("tax", latest=2)`` returns the branch this run takes at the gate ``"tax"``, and
records it (a checkpoint of kind ``version``), so every replay of the run -- after a crash, a
park, or a deploy -- takes the same branch. A new run takes ``latest``. A run that started on
code that did not have the gate takes ``oldest`` (0 unless declared), the code that was there
before the gate:

```python
from runnerq_django.activities import versions

versions.declare("orders.fulfil", tax=2)  # gates the type's code has, and their latest version


@activity(name="orders.fulfil")
def fulfil(ctx, order):
    if ctx.version("tax", latest=2) >= 2:
        total = ctx.step("total-v2", total_with_tax, order)
    else:
        total = ctx.step("total", old_total, order)  # what runs parked before the deploy took
```

Which runs are new: a declared gate is recorded for a run when it first records anything
(its first durable primitive), so a run started on the new code takes ``latest`` at a gate it
reaches days later, after parks. A gate not declared is decided when it is reached: ``latest``
when the run had recorded nothing before (it is new), ``oldest`` when it had (it may have
started on older code). ``versions.declare(type, gate=(oldest, latest))`` also declares the
oldest version the code still serves: a run that recorded an older one fails (non-retryable)
when it reaches the gate, and ``manage.py runnerq_deploy_check`` reports live runs that would.
"""

from __future__ import annotations

import threading
from typing import Any

from runnerq_django.activities import arguments

__all__ = ["Gate", "declare", "declared", "gate", "gates_of"]


class Gate:
    """A declared gate: the oldest version the code serves, and the latest (what new runs take)."""

    __slots__ = ("latest", "name", "oldest")

    def __init__(self, name: str, oldest: int, latest: int):
        self.name = name
        self.oldest = oldest
        self.latest = latest

    def __repr__(self) -> str:
        return f"Gate({self.name!r}, oldest={self.oldest}, latest={self.latest})"

    def __eq__(self, other: object) -> bool:
        return isinstance(other, Gate) and (self.name, self.oldest, self.latest) == (
            other.name,
            other.oldest,
            other.latest,
        )

    def __hash__(self) -> int:
        return hash((self.name, self.oldest, self.latest))


_lock = threading.Lock()
_gates: dict[str, dict[str, Gate]] = {}


def _version(field: str, value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or not 0 <= value <= 1_000_000:
        raise arguments.invalid(field, f"must be a whole number 0..1000000, got {value!r}")
    return value


def gate(name: str, value: int | tuple[int, int]) -> Gate:
    """A gate from ``latest`` or ``(oldest, latest)``, checked."""
    if not isinstance(name, str) or not name or len(name.encode()) > 200:
        raise arguments.invalid("name", f"a gate's name is 1 to 200 bytes, got {name!r}")
    oldest, latest = value if isinstance(value, tuple) else (0, value)
    oldest, latest = _version(f"{name}.oldest", oldest), _version(f"{name}.latest", latest)
    if oldest > latest:
        raise arguments.invalid(name, f"oldest ({oldest}) must not be above latest ({latest})")
    return Gate(name, oldest, latest)


def declare(activity_type: str, **gates: int | tuple[int, int]) -> None:
    """Declare the version gates the code of ``activity_type`` has: ``gate=latest`` or
    ``gate=(oldest, latest)``. Declared again, a gate takes the new value."""
    if not isinstance(activity_type, str) or not activity_type:
        raise arguments.invalid("activity_type", f"must be a non-empty string, got {activity_type!r}")
    checked = {name: gate(name, value) for name, value in gates.items()}
    with _lock:
        _gates.setdefault(activity_type, {}).update(checked)


def gates_of(activity_type: str) -> dict[str, Gate]:
    """The gates declared for ``activity_type`` (by name)."""
    with _lock:
        return dict(_gates.get(activity_type, {}))


def declared() -> dict[str, dict[str, Gate]]:
    """Every declared gate, by activity type and name."""
    with _lock:
        return {kind: dict(found) for kind, found in _gates.items()}
