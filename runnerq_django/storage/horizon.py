"""The xmin horizon: who holds back what vacuum may remove on a database (statements in
``storage.sql.horizon``), for ``runnerq_status``, the admin's overview and live console, and the
worker's ``xmin_horizon_age_*`` gauges.

While a session keeps a snapshot open (a transaction left ``idle in transaction``, a long
report, a standby's ``hot_standby_feedback`` through a replication slot, a forgotten prepared
transaction), every activity claimed since leaves a dead entry at the head of the dequeue index
that nothing can remove, and every claim walks them: the queue slows down as the holder ages.
``docs/how-to/production.md`` says how to find and end such a session, and the settings that
prevent it.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from runnerq_django.storage import db
from runnerq_django.storage import validation as check
from runnerq_django.storage.sql import horizon as q

# A holder is reported as holding the horizon back once its transaction is this old (seconds);
# a replication slot (no transaction time) when no WAL sender uses it.
HELD_SECONDS = 300.0
# The holders listed, the oldest first.
HOLDERS_LISTED = 5


@dataclass(frozen=True)
class HorizonHolder:
    """One session, replication slot or prepared transaction with a snapshot or transaction id."""

    kind: str  # "session", "replication_slot" or "prepared"
    xid_age: int  # transactions since what it holds (age(backend_xmin), the slot's age(xmin) ...)
    seconds: float | None  # the age of its transaction (None for a slot)
    pid: int | None  # the session's pid (a slot's WAL sender's while it is active)
    name: str  # application_name, the slot's name, or the prepared transaction's gid
    state: str | None  # "idle in transaction", "active" ...; a slot's "active"/"inactive"; "prepared"
    role: str | None
    backend_type: str | None  # "client backend", "walsender" ...; a slot's type

    def held(self, held_seconds: float = HELD_SECONDS) -> bool:
        """Whether it holds the horizon back: its transaction is at least ``held_seconds`` old (a
        replication slot: no WAL sender uses it)."""
        if self.seconds is None:
            return self.kind == "replication_slot" and self.state == "inactive"
        return self.seconds >= held_seconds

    def as_json(self, held_seconds: float = HELD_SECONDS) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "xid_age": self.xid_age,
            "seconds": None if self.seconds is None else round(self.seconds, 3),
            "pid": self.pid,
            "name": self.name,
            "state": self.state,
            "role": self.role,
            "backend_type": self.backend_type,
            "held": self.held(held_seconds),
        }


@dataclass(frozen=True)
class Horizon:
    """The oldest holders of a database's xmin horizon (oldest first), and the sessions whose
    snapshot this role may not see (``pg_read_all_stats`` shows them)."""

    alias: str
    holders: list[HorizonHolder]
    hidden_sessions: int
    held_seconds: float = HELD_SECONDS

    @property
    def oldest(self) -> HorizonHolder | None:
        return self.holders[0] if self.holders else None

    @property
    def held(self) -> bool:
        """Some holder holds the horizon back (``HorizonHolder.held``)."""
        return any(holder.held(self.held_seconds) for holder in self.holders)

    @property
    def age_seconds(self) -> float:
        """The oldest transaction among the holders, in seconds (0.0: none)."""
        return max((h.seconds for h in self.holders if h.seconds is not None), default=0.0)

    @property
    def age_xids(self) -> int:
        """How many transactions the horizon is behind (0: nothing holds it)."""
        return max((h.xid_age for h in self.holders), default=0)

    def as_json(self) -> dict[str, Any]:
        return {
            "database": self.alias,
            "held": self.held,
            "held_seconds": self.held_seconds,
            "age_seconds": round(self.age_seconds, 3),
            "age_xids": self.age_xids,
            "holders": [holder.as_json(self.held_seconds) for holder in self.holders],
            "hidden_sessions": self.hidden_sessions,
        }


@db.operation
def horizon(alias: str, *, limit: int = HOLDERS_LISTED, held_seconds: float = HELD_SECONDS) -> Horizon:
    """The ``limit`` oldest holders of ``alias``'s xmin horizon, read from ``pg_stat_activity``,
    ``pg_replication_slots`` and ``pg_prepared_xacts`` (this session left out). Read it on the
    primary: a replica's own horizon is not what holds back the primary's vacuum."""
    limit = check.integer("limit", limit, 1, 1000)
    held_seconds = check.number("held_seconds", held_seconds, 0, check.MAX_DURATION_SECONDS)
    rows = db.fetch_all(alias, q.HOLDERS, {"limit": limit})
    holders = [
        HorizonHolder(
            kind=str(kind),
            xid_age=int(xid_age or 0),
            seconds=None if seconds is None else max(0.0, float(seconds)),
            pid=None if pid is None else int(pid),
            name=str(name or ""),
            state=None if state is None else str(state),
            role=None if role is None else str(role),
            backend_type=None if backend_type is None else str(backend_type),
        )
        for kind, xid_age, seconds, pid, name, state, role, backend_type in rows
    ]
    ((hidden,),) = db.fetch_all(alias, q.HIDDEN_SESSIONS)
    return Horizon(alias, holders, int(hidden), float(held_seconds))
