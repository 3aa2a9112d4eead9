"""The live console's data: what the overview's charts fetch every few seconds
(``activity/overview/live.json``). Everything is read from the per-minute rollups the workers'
maintenance loop keeps (``storage.console``), plus the worker pools and the claims held now, so a
refresh costs the same however many activities the table holds."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass
from datetime import datetime, timedelta
from typing import Any

from runnerq_django import conf
from runnerq_django.admin_views import guard, queries
from runnerq_django.storage import console, reads
from runnerq_django.storage.console import LATENCY_BOUNDS_MS


@dataclass(frozen=True)
class Window:
    code: str
    seconds: int
    step_seconds: int


# The charts' windows: the last hour by minute, the last day by ten minutes.
WINDOWS = {"1h": Window("1h", 3600, 60), "24h": Window("24h", 86400, 600)}
# The types table shows this many types; the rest of the window's types are folded into one
# "other" row by the query (storage.console.types), so a refresh returns a bounded answer.
TYPES_SHOWN = 50


def percentile(buckets: dict[int, int], fraction: float, max_ms: float) -> float | None:
    """The ``fraction`` quantile of a latency histogram (bucket i holds latencies from
    ``LATENCY_BOUNDS_MS[i-1]`` to ``LATENCY_BOUNDS_MS[i]``), interpolated within its bucket and
    never above the largest latency seen; ``None`` for an empty histogram."""
    total = sum(buckets.values())
    if total <= 0:
        return None
    rank = fraction * total
    seen = 0
    for index in sorted(buckets):
        count = buckets[index]
        if count <= 0:
            continue
        if seen + count >= rank:
            low = LATENCY_BOUNDS_MS[index - 1] if index > 0 else 0.0
            high = LATENCY_BOUNDS_MS[index] if index < len(LATENCY_BOUNDS_MS) else max_ms
            estimate = low + (high - low) * (rank - seen) / count
            return round(min(estimate, max_ms), 1)
        seen += count
    return round(max_ms, 1)


def _epoch(moment: datetime) -> int:
    return int(moment.timestamp())


def _bins(since: datetime, now: datetime, step: int) -> list[int]:
    """The bins' start times (epoch seconds) from ``since`` to ``now``, aligned like date_bin."""
    first = _epoch(since) - _epoch(since) % step
    return list(range(first, _epoch(now) + 1, step))


def _type_entry(row: tuple[Any, ...], *, queue: str | None, activity_type: str | None) -> dict[str, Any]:
    """One row of the types table from (completed, failed, dead-lettered, latency count, sum,
    max, histogram)."""
    done, failed, dead, count, total_ms, max_ms, buckets = row
    return {
        "queue": queue,
        "type": activity_type,
        "completed": int(done),
        "failed": int(failed),
        "dead_lettered": int(dead),
        "mean_ms": round(float(total_ms) / int(count), 1) if count else None,
        "p50_ms": percentile(buckets, 0.5, float(max_ms)),
        "p95_ms": percentile(buckets, 0.95, float(max_ms)),
        "max_ms": round(float(max_ms), 1) if count else None,
    }


def live_data(window_code: str, queue: str | None) -> dict[str, Any]:
    window = WINDOWS[window_code]
    alias = guard.read_alias()
    now = reads.database_now(alias)
    since = now - timedelta(seconds=window.seconds)
    step = window.step_seconds
    bins = _bins(since, now, step)
    series_rows, queue_rows = console.outcomes(alias, since, step, queue)
    type_rows, folded = console.types(alias, since, step, queue, TYPES_SHOWN)
    outcomes = {_epoch(r[0]): r for r in series_rows}
    depth = {_epoch(r[0]): r for r in console.depth(alias, since, step, queue)}

    series: dict[str, list[Any]] = {
        k: [] for k in ("t", "completed", "failed", "dead_lettered", "p50", "p95", "p99")
    }
    depth_series: dict[str, list[Any]] = {k: [] for k in ("t", "due", "scheduled", "processing")}
    for t in bins:
        row = outcomes.get(t)
        series["t"].append(t)
        for i, key in enumerate(("completed", "failed", "dead_lettered"), start=1):
            series[key].append(int(row[i]) if row else 0)
        for key, fraction in (("p50", 0.5), ("p95", 0.95), ("p99", 0.99)):
            series[key].append(percentile(row[7], fraction, float(row[6])) if row else None)
        sample = depth.get(t)
        depth_series["t"].append(t)
        for i, key in enumerate(("due", "scheduled", "processing"), start=1):
            depth_series[key].append(int(sample[i]) if sample else None)

    types = [_type_entry(row[2:], queue=row[0], activity_type=row[1]) for row in type_rows]
    other = None
    if folded is not None:
        # Its histogram is what the window's totals hold beyond the shown types'.
        buckets = Counter[int]()
        for row in series_rows:
            buckets.update(row[7])
        for row in type_rows:
            buckets.subtract(row[8])
        other = _type_entry((*folded[1:], +buckets), queue=None, activity_type=None)
        other["types"] = int(folded[0])
    # The failing types first (most failures), then the slowest (95th percentile).
    types.sort(
        key=lambda e: (-(e["failed"] + e["dead_lettered"]), -(e["p95_ms"] or 0), e["queue"], e["type"])
    )
    per_queue: dict[str, dict[str, Any]] = {
        name: {"queue": name, "completed": int(done), "failed": int(failed), "dead_lettered": int(dead)}
        for name, done, failed, dead, *_ in queue_rows
    }

    alive_seconds = max(30.0, 3 * float(conf.get("HEARTBEAT_SECONDS") or 10))
    pools = []
    for pool in queries.worker_pools(alive_seconds):
        if queue is not None and pool["queue_name"] != queue:
            continue
        seen = pool["last_seen_at"]
        pools.append(
            {
                "pool_id": str(pool["pool_id"]),
                "queue": pool["queue_name"],
                "slots": pool["max_workers"],
                # Its first types (each cut) and how many it has: a type list of megabytes
                # would otherwise travel with every refresh.
                "types": list(pool["activity_types"] or []),
                "type_count": pool["type_count"],
                "alive": bool(pool["alive"]),
                "heartbeat_age_s": round((now - seen).total_seconds(), 1) if seen else None,
            }
        )
        if pool["alive"]:
            summary = per_queue.setdefault(
                pool["queue_name"],
                {"queue": pool["queue_name"], "completed": 0, "failed": 0, "dead_lettered": 0},
            )
            summary["capacity"] = summary.get("capacity", 0) + pool["max_workers"]
    claims = []
    for name, worker, held, oldest in console.live_claims(alias):
        if queue is not None and name != queue:
            continue
        claims.append(
            {
                "queue": name,
                "worker": worker,
                "claims": int(held),
                "oldest_claim_age_s": round((now - oldest).total_seconds(), 1) if oldest else None,
            }
        )
        summary = per_queue.setdefault(name, {"queue": name, "completed": 0, "failed": 0, "dead_lettered": 0})
        summary["in_use"] = summary.get("in_use", 0) + int(held)
    for summary in per_queue.values():
        summary.setdefault("capacity", 0)
        summary.setdefault("in_use", 0)
    return {
        "window": window.code,
        "step_seconds": step,
        "now": now.isoformat(),
        "rollup_seconds": float(conf.get("CONSOLE_ROLLUP_SECONDS") or 0),
        "series": series,
        "depth": depth_series,
        "types": types,
        # The window's other types, summed (None when every type is shown).
        "other": other,
        "hidden_types": 0 if other is None else other["types"],
        "queues": sorted(per_queue.values(), key=lambda s: s["queue"]),
        "pools": pools,
        "claims": claims,
        # Read from a replica: how stale this answer may be (None: read from the primary).
        "replica": None if (replica := queries.replica_state()) is None else replica.as_json(),
        # What holds back vacuum on the page's database (storage.horizon): "held" once a holder
        # is older than held_seconds.
        "horizon": queries.horizon().as_json(),
    }
