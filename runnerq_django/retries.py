"""Retry policies of an activity type: which exceptions retry, and how long to wait before each retry.

Declared on ``@activity(retry_on=..., no_retry_on=..., backoff=Backoff(...))``. The decision and the
delay are made by the runnerq-django worker that ran the failed attempt; the row it writes is an
ordinary ``retrying`` row with ``scheduled_at`` set, so other SDKs read it as usual. A type without a
policy keeps the spec's backoff exactly (``spec.retry.retry_delay``: whole seconds, doubling from
twice ``retry_delay``, capped). Go and TypeScript workers claiming the same type do not apply these
policies: they use the spec's backoff from the row's own columns.
"""

from __future__ import annotations

import math
import random
from collections.abc import Iterable
from dataclasses import dataclass
from datetime import timedelta
from typing import Literal

from runnerq_django.exceptions import NonRetryableError
from runnerq_django.storage import validation

__all__ = ["JITTERS", "Backoff", "RetryPolicy"]

Jitter = Literal["none", "full", "equal"]
JITTERS: tuple[Jitter, ...] = ("none", "full", "equal")
# The longest delay a policy may ask for: the protocol's duration bound is ten years, but a retry
# further away than 30 days is a mistake in the policy rather than a plan.
MAX_DELAY_SECONDS = 30 * 86400.0
MIN_BASE_SECONDS = 0.001


def _seconds(value: object, field_name: str) -> float:
    """Seconds (int, float or ``timedelta``) within [1 ms, 30 days]; a clear error naming the field."""
    if isinstance(value, timedelta):
        value = value.total_seconds()
    return float(validation.number(field_name, value, MIN_BASE_SECONDS, MAX_DELAY_SECONDS))


@dataclass(frozen=True)
class Backoff:
    """Exponential backoff: the n-th retry (n = 1 for the first) waits ``min(cap, base * factor ** (n - 1))``
    seconds, then jitter applies.

    - ``base``: seconds before the first retry, sub-second allowed (at least 1 ms);
    - ``cap``: the longest wait, before jitter (at most 30 days);
    - ``factor``: the growth per retry (1 = a constant delay);
    - ``jitter``: ``"none"`` (exactly the delay), ``"full"`` (uniform in ``[0, delay]``) or
      ``"equal"`` (uniform in ``[delay / 2, delay]``), which spreads retries of many activities that
      failed together (an outage) so they do not all come back at the same instant.
    """

    base: float = 1.0
    cap: float = 3600.0
    factor: float = 2.0
    jitter: Jitter = "none"

    def __post_init__(self) -> None:
        object.__setattr__(self, "base", _seconds(self.base, "backoff.base"))
        object.__setattr__(self, "cap", _seconds(self.cap, "backoff.cap"))
        if self.cap < self.base:
            raise validation.invalid(
                "backoff.cap", f"must be at least the base ({self.base:g} s), got {self.cap:g} s"
            )
        object.__setattr__(self, "factor", float(validation.number("backoff.factor", self.factor, 1, 100)))
        if self.jitter not in JITTERS:
            raise validation.invalid(
                "backoff.jitter", f"must be one of {', '.join(JITTERS)}, got {self.jitter!r}"
            )

    def ceiling(self, retry: int) -> float:
        """The delay before jitter of retry number ``retry`` (1 = the first retry)."""
        if retry < 1:
            raise ValueError(f"retry numbers start at 1, got {retry}")
        if self.factor == 1:
            return self.base
        # Past this many doublings any base exceeds the cap: no need to compute factor ** 10_000.
        exponent = min(retry - 1, math.ceil(math.log(self.cap / self.base, self.factor)) + 1)
        return min(self.cap, self.base * self.factor**exponent)

    def bounds(self, retry: int) -> tuple[float, float]:
        """The smallest and largest delay jitter can give retry number ``retry``."""
        top = self.ceiling(retry)
        if self.jitter == "full":
            return 0.0, top
        if self.jitter == "equal":
            return top / 2, top
        return top, top

    def delay(self, retry: int, rng: random.Random | None = None) -> float:
        """Seconds before retry number ``retry``, jitter applied (``rng`` for repeatable tests)."""
        low, high = self.bounds(retry)
        if low == high:
            return low
        return (rng or _random).uniform(low, high)


_random = random.SystemRandom()


def _classes(value: type[BaseException] | Iterable[type[BaseException]], field_name: str) -> tuple[type, ...]:
    items = (value,) if isinstance(value, type) else tuple(value)
    for item in items:
        if not (isinstance(item, type) and issubclass(item, BaseException)):
            raise validation.invalid(field_name, f"takes exception classes, got {item!r}")
    return items


@dataclass(frozen=True)
class RetryPolicy:
    """What an activity type does when its handler raises.

    ``no_retry_on`` wins over ``retry_on``: an exception that is an instance of a ``no_retry_on``
    class fails the activity for good (``failed``). When ``retry_on`` is given, only instances of
    its classes are retried; any other exception fails for good. With neither, every exception but
    ``NonRetryableError`` is retried (the default). ``NonRetryableError`` never retries. Timeouts and
    expired leases are not handler exceptions and always retry while attempts remain.
    """

    retry_on: tuple[type[BaseException], ...] = ()
    no_retry_on: tuple[type[BaseException], ...] = ()
    backoff: Backoff | None = None  # None: the spec's backoff from the row's columns

    @classmethod
    def build(
        cls,
        *,
        retry_on: type[BaseException] | Iterable[type[BaseException]] = (),
        no_retry_on: type[BaseException] | Iterable[type[BaseException]] = (),
        backoff: Backoff | None = None,
    ) -> RetryPolicy:
        if backoff is not None and not isinstance(backoff, Backoff):
            raise validation.invalid("backoff", f"must be a runnerq_django.retries.Backoff, got {backoff!r}")
        return cls(_classes(retry_on, "retry_on"), _classes(no_retry_on, "no_retry_on"), backoff)

    def retryable(self, error: BaseException) -> bool:
        """Whether the handler's exception ``error`` may be followed by another attempt."""
        if isinstance(error, NonRetryableError):
            return False
        if self.no_retry_on and isinstance(error, self.no_retry_on):
            return False
        if self.retry_on:
            return isinstance(error, self.retry_on)
        return True

    def delay_seconds(self, retry_count: int, rng: random.Random | None = None) -> float | None:
        """Seconds before the retry that follows an attempt after ``retry_count`` earlier failures,
        or ``None`` to keep the spec's backoff."""
        if self.backoff is None:
            return None
        return self.backoff.delay(retry_count + 1, rng)


DEFAULT_POLICY = RetryPolicy()
