"""Records the storage layer takes and returns. Frozen dataclasses, no Django import."""

from __future__ import annotations

import enum
import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from datetime import datetime
from typing import Any, TypedDict

__all__ = [
    "Claim",
    "ClaimFilters",
    "ClaimedActivity",
    "NewActivity",
    "OnDuplicate",
    "Priority",
    "StoredResult",
    "SubmitResult",
]


class ClaimFilters(TypedDict, total=False):
    """What ``claim`` (and ``claim_statement``) take after the queue, all keyword-only and optional:
    which activities, how many, and the lease and token they get."""

    types: Iterable[str] | None  # None (the default): any type; [] is refused
    limit: int  # 1 by default; at most validation.MAX_BATCH
    lease_ms: int  # 30000 by default
    worker_id: str  # "" by default: tokens are UUIDs; else "<worker_id>:<32 hex>"
    root_id: uuid.UUID | None  # that tree only (immediate mode); None by default


class OnDuplicate(enum.IntEnum):
    """Idempotency policies; the numbers are the storage protocol's ``IdempotencyBehavior``."""

    ALLOW_REUSE = 0
    RETURN_EXISTING = 1
    ALLOW_REUSE_ON_FAILURE = 2
    NO_REUSE = 3


class Priority(enum.IntEnum):
    LOW = 1
    NORMAL = 2
    HIGH = 3
    CRITICAL = 4


@dataclass(frozen=True)
class Claim:
    """The fence of one attempt: the activity and the token written to ``current_worker_id``."""

    id: uuid.UUID
    token: str


@dataclass(frozen=True)
class NewActivity:
    """One activity to submit. Validated by the storage layer (``invalid_argument`` naming the field)."""

    activity_type: str
    payload: Any = None
    id: uuid.UUID = field(default_factory=uuid.uuid4)
    priority: int = Priority.NORMAL
    max_retries: int = 3  # the attempt limit; 0 = unlimited
    timeout_seconds: int = 300
    delay_seconds: float = 0  # > 0 -> status 'scheduled' with scheduled_at = now() + delay
    retry_delay_seconds: int = 1
    max_retry_delay_seconds: int = 0  # 0 = the spec's 3600 s cap
    metadata: dict[str, str] | None = None
    idempotency_key: str | None = None  # the application key; stored as BusinessKey(key, type)
    on_duplicate: OnDuplicate = OnDuplicate.RETURN_EXISTING
    # A raw stored key (already encoded, e.g. a step key) instead of an application key.
    raw_idempotency_key: str | None = None
    parent_id: uuid.UUID | None = None
    root_id: uuid.UUID | None = None
    depth: int = 0


@dataclass(frozen=True)
class SubmitResult:
    id: uuid.UUID  # the activity that now holds the work (the existing one for return_existing)
    created: bool


@dataclass(frozen=True)
class ClaimedActivity:
    """A claimed activity with everything a handler needs, read in the claim's round trip."""

    id: uuid.UUID
    token: str
    queue_name: str
    activity_type: str
    payload: Any
    priority: int
    retry_count: int
    max_retries: int
    timeout_seconds: int
    retry_delay_seconds: int
    max_retry_delay_seconds: int
    lease_deadline_ms: int
    started_at: datetime
    created_at: datetime
    metadata: dict[str, str] | None
    idempotency_key: str | None
    parent_activity_id: uuid.UUID | None
    root_activity_id: uuid.UUID | None
    depth: int
    # When it became due (COALESCE(scheduled_at, created_at), the claim order's time).
    due_at: datetime | None = None
    # How the input was stored; ``payload`` is already decoded (a superjson-v1 envelope per
    # RUNNERQ['SUPERJSON']).
    serialization: str = "json-v1"

    @property
    def claim(self) -> Claim:
        return Claim(self.id, self.token)

    @property
    def attempt(self) -> int:
        """1-based number of this attempt (the conductor's ``attempt``)."""
        return self.retry_count + 1


@dataclass(frozen=True)
class StoredResult:
    """A row of ``runnerq_results``: an activity's result, a checkpoint or a signal."""

    state: str  # "Ok" or "Err"
    data: Any
    serialization: str = "json-v1"
    step: str | None = None

    @property
    def ok(self) -> bool:
        return self.state == "Ok"
