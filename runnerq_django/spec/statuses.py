"""Activity statuses (SPEC.md section (b), ``vectors/canonical_status.json``)."""

from __future__ import annotations

PENDING = "pending"
SCHEDULED = "scheduled"
RETRYING = "retrying"
PROCESSING = "processing"
WAITING = "waiting"
COMPLETED = "completed"
FAILED = "failed"
DEAD_LETTER = "dead_letter"
CANCELLED = "cancelled"

STORED_STATUSES: tuple[str, ...] = (
    PENDING,
    SCHEDULED,
    RETRYING,
    PROCESSING,
    WAITING,
    COMPLETED,
    FAILED,
    DEAD_LETTER,
    CANCELLED,
)
# The claimable set (once due). The dequeue indexes' predicates spell exactly these, in this
# order, so queries must name them as literals for the planner to use those indexes.
RUNNABLE: tuple[str, ...] = (PENDING, SCHEDULED, RETRYING, WAITING)
TERMINAL: tuple[str, ...] = (COMPLETED, FAILED, DEAD_LETTER, CANCELLED)

# Queries, the console and the conductor report a running attempt as "running" and a retry
# backoff as "scheduled"; every other status (and any unknown one) is reported as stored.
_CANONICAL = {PROCESSING: "running", RETRYING: SCHEDULED}


def canonical_status(status: str) -> str:
    return _CANONICAL.get(status, status)


def is_terminal(status: str) -> bool:
    return status in TERMINAL
