"""The deploy check's reads (``runnerq_deploy_check``): the unfinished work of a database by
queue, type and status, the waiting parents of children of given types, the live canvases and
the version gates live runs recorded. Statements in ``storage.sql.deploy``; read-only."""

from __future__ import annotations

import json
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from runnerq_django.storage import db
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import deploy as q

__all__ = ["LiveTypes", "live_canvases", "live_types", "live_versions", "parents_waiting_on"]

EXAMPLES = 3


@dataclass(frozen=True)
class LiveTypes:
    """Unfinished work of one type on one queue in one status: how many, and some ids."""

    queue: str
    activity_type: str
    status: str
    count: int
    examples: tuple[uuid.UUID, ...]


@db.operation
def live_types(*, examples: int = EXAMPLES, using: str | None = None) -> list[LiveTypes]:
    """Unfinished activities per queue, type and status."""
    examples = check.integer("examples", examples, 1, 100)
    rows = db.fetch_all(db.alias_for(using), q.LIVE_TYPES, {"examples": examples})
    return [LiveTypes(queue, kind, status, int(n), tuple(ids or ())) for queue, kind, status, n, ids in rows]


@db.operation
def parents_waiting_on(
    types: Sequence[str], *, examples: int = EXAMPLES, using: str | None = None
) -> list[tuple[str, str, int, tuple[uuid.UUID, ...]]]:
    """(queue, child type, waiting parents, example parent ids) for children of ``types``."""
    names = [check.text("types", name, 4096) for name in types]
    if not names:
        return []
    rows = db.fetch_all(
        db.alias_for(using),
        q.PARENTS_WAITING_ON,
        {"types": names, "examples": check.integer("examples", examples, 1, 100)},
    )
    return [(queue, kind, int(n), tuple(ids or ())) for queue, kind, n, ids in rows]


@db.operation
def live_canvases(
    canvas_type: str, *, limit: int = 10_000, using: str | None = None
) -> list[tuple[uuid.UUID, str, Any]]:
    """(id, queue, input) of unfinished canvas orchestrators, at most ``limit``."""
    canvas_type = check.text("canvas_type", canvas_type, 4096)
    limit = check.integer("limit", limit, 1, 100_000)
    rows = db.fetch_all(db.alias_for(using), q.LIVE_CANVASES, {"canvas": canvas_type, "limit": limit})
    out = []
    for activity_id, queue, payload in rows:
        try:
            value = None if payload is None else json.loads(payload)
        except ValueError:
            value = None
        out.append((activity_id, queue, value))
    return out


@db.operation
def live_versions(
    *, examples: int = EXAMPLES, using: str | None = None
) -> list[tuple[str, str, int, int, tuple[uuid.UUID, ...]]]:
    """(activity type, gate, oldest version live runs took, how many runs, example ids)."""
    rows = db.fetch_all(
        db.alias_for(using), q.LIVE_VERSIONS, {"examples": check.integer("examples", examples, 1, 100)}
    )
    return [(kind, gate, int(low), int(n), tuple(ids or ())) for kind, gate, low, n, ids in rows]
