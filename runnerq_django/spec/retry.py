"""Retry decision and backoff (SPEC.md section (d), ``vectors/attempts_remain.json``, ``retry_delay.json``)."""

from __future__ import annotations

from runnerq_django.spec.constants import DEFAULT_MAX_RETRY_DELAY_SECONDS

__all__ = ["DEFAULT_MAX_RETRY_DELAY_SECONDS", "attempts_remain", "retry_delay"]


def attempts_remain(retry_count: int, max_retries: int) -> bool:
    """Whether the attempt that just failed may be followed by another.

    ``retry_count`` counts failures before that attempt (so it was attempt ``retry_count + 1``);
    ``max_retries`` is the attempt limit, 0 meaning unlimited.
    """
    return max_retries == 0 or retry_count + 1 < max_retries


def retry_delay(retry_count: int, retry_delay_seconds: int, max_retry_delay_seconds: int) -> int:
    """Whole seconds before the retry that follows attempt ``retry_count + 1``.

    ``retry_delay_seconds * 2 ** (retry_count + 1)`` capped at ``max_retry_delay_seconds`` (0 means
    3600). Python integers don't overflow, so a huge ``retry_count`` simply reaches the cap; the
    exponent is bounded first so that the product stays small to compute.
    """
    cap = max_retry_delay_seconds or DEFAULT_MAX_RETRY_DELAY_SECONDS
    if retry_delay_seconds <= 0:
        return 0
    # Past cap.bit_length() doublings any positive base exceeds the cap: no need for 2**1000.
    exponent = min(retry_count + 1, cap.bit_length() + 1)
    delay: int = retry_delay_seconds * 2**exponent  # int ** int types as Any: the exponent may be < 0
    return min(delay, cap)
