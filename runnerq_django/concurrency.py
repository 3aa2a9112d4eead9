"""Concurrency limits of an activity type, declared with ``@activity(concurrency=N,
concurrency_key=...)`` (docs/how-to/flow-control.md): at most ``N`` activities of the type run at
once across every runnerq-django worker, or at most ``N`` per partition when ``concurrency_key``
names a payload field (a dotted path) or is a callable of the payload. ``concurrency=1`` with a key
is a lock per key. Go and TypeScript workers claiming the same type do not honour the limit.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from runnerq_django import arguments
from runnerq_django.storage import validation
from runnerq_django.storage.limits import MAX_PARTITION_KEY_BYTES, MAX_RUNNING

__all__ = ["ConcurrencyLimit"]

PartitionKey = str | Callable[[Any], Any]


@dataclass(frozen=True)
class ConcurrencyLimit:
    """``limit`` running at once, per partition of ``key`` (None: one partition for the type)."""

    limit: int
    key: PartitionKey | None = None

    @classmethod
    def build(cls, limit: Any, key: Any = None) -> ConcurrencyLimit:
        checked = arguments.whole_number(limit, "concurrency", minimum=1, maximum=MAX_RUNNING)
        if (
            key is not None
            and not callable(key)
            and (not isinstance(key, str) or not key or any(not part for part in key.split(".")))
        ):
            raise validation.invalid(
                "concurrency_key", f"must be a dotted payload path or a callable, got {key!r}"
            )
        return cls(checked, key)

    @property
    def partitioned(self) -> bool:
        return self.key is not None

    def partition_of(self, payload: Any) -> str:
        """The partition key of an activity with ``payload`` (text), evaluated at enqueue."""
        if self.key is None:
            return ""
        if callable(self.key):
            value = self.key(payload)
        else:
            value = payload
            for part in self.key.split("."):
                if not isinstance(value, dict) or part not in value:
                    raise validation.invalid(
                        "payload", f"has no {self.key!r} for the concurrency key (missing {part!r})"
                    )
                value = value[part]
        if value is None or isinstance(value, (dict, list)):
            raise validation.invalid(
                "concurrency_key", f"must give a string or a number for the partition, got {value!r}"
            )
        text = str(value)
        return validation.text("concurrency_key", text, MAX_PARTITION_KEY_BYTES, allow_empty=True)
