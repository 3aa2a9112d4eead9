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

from runnerq_django.activities import arguments
from runnerq_django.storage import validation
from runnerq_django.storage.limits import MAX_PARTITION_KEY_BYTES, MAX_RUNNING

__all__ = ["PERIODS", "ConcurrencyLimit", "RateLimit"]

PartitionKey = str | Callable[[Any], Any]


@dataclass(frozen=True)
class ConcurrencyLimit:
    """``limit`` running at once, per partition of ``key`` (None: one partition for the type)."""

    limit: int
    key: PartitionKey | None = None

    @classmethod
    def build(
        cls, limit: Any, key: Any = None, *, field: str = "concurrency", key_field: str = "concurrency_key"
    ) -> ConcurrencyLimit:
        checked = arguments.whole_number(limit, field, minimum=1, maximum=MAX_RUNNING)
        if (
            key is not None
            and not callable(key)
            and (not isinstance(key, str) or not key or any(not part for part in key.split(".")))
        ):
            raise validation.invalid(key_field, f"must be a dotted payload path or a callable, got {key!r}")
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
        return self.partition_text(value)

    @staticmethod
    def partition_text(value: Any, field: str = "concurrency_key") -> str:
        """A partition key value as the text stored for it: a string, or an integer within
        +-(2**53 - 1) (what every SDK reads as the same number). Anything else (bytes, a float,
        a Decimal) has no single text the other spellings of its key would share: refused."""
        if isinstance(value, str):
            text = str.__str__(value)  # a subclass's own __str__ would store another key
        elif isinstance(value, int) and not isinstance(value, bool):
            if not -validation.MAX_SAFE_INTEGER <= value <= validation.MAX_SAFE_INTEGER:
                raise validation.invalid(
                    field, f"an integer partition key must be within +-(2**53 - 1), got {_short(value)}"
                )
            text = int.__repr__(value)  # an IntEnum's number, not its name
        else:
            raise validation.invalid(
                field, f"must be a string or an integer for the partition, got {_short(value)}"
            )
        return validation.text(field, text, MAX_PARTITION_KEY_BYTES, allow_empty=True)


def _short(value: Any) -> str:
    """``value`` for an error message, without converting a huge integer to decimal (Python
    refuses past 4,300 digits) or quoting a huge value whole."""
    if isinstance(value, int) and not isinstance(value, bool) and value.bit_length() > 64:
        return f"an integer of {value.bit_length()} bits"
    text = repr(value)
    return text if len(text) <= 80 else f"{text[:77]}..."


# Rate-limit periods by name and by the one-letter unit of the "N/s" spelling.
PERIODS = {"second": 1.0, "minute": 60.0, "hour": 3600.0, "s": 1.0, "m": 60.0, "h": 3600.0}


@dataclass(frozen=True)
class RateLimit(ConcurrencyLimit):
    """At most ``limit`` starts per ``period_seconds`` (per partition of ``key``), fleet-wide."""

    period_seconds: float = 1.0

    @classmethod
    def parse(cls, spec: Any, key: Any = None) -> RateLimit:
        """``"20/s"``, ``"100/m"``, ``"1000/h"`` or ``(20, "second")``."""
        if isinstance(spec, str) and "/" in spec:
            count_text, _, unit = spec.partition("/")
            try:
                count: Any = int(count_text.strip())
            except ValueError:
                raise validation.invalid(
                    "rate_limit", f"must be 'N/s', 'N/m' or 'N/h', got {spec!r}"
                ) from None
        elif isinstance(spec, tuple) and len(spec) == 2:
            count, unit = spec
        else:
            raise validation.invalid(
                "rate_limit", f"must be 'N/s', 'N/m', 'N/h' or (N, 'second'), got {spec!r}"
            )
        if not isinstance(unit, str) or unit.strip() not in PERIODS:
            raise validation.invalid("rate_limit", f"the period must be second, minute or hour, got {unit!r}")
        base = ConcurrencyLimit.build(count, key, field="rate_limit", key_field="rate_limit_key")
        return cls(base.limit, base.key, PERIODS[unit.strip()])
