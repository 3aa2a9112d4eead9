"""The observability page and its Grafana dashboard name only metrics the package declares, and
the page lists every metric the package declares (so a new one can't go undocumented)."""

from __future__ import annotations

import json
import re
from pathlib import Path

from runnerq_django import metrics

DOCS = Path(__file__).resolve().parents[2] / "docs" / "how-to"
PAGE = DOCS / "observability.md"
DASHBOARD = DOCS / "grafana-dashboard.json"


def declared() -> dict[str, str]:
    """Prometheus name -> the name the package sends, for every declared metric."""
    names = {f"runnerq_{name}_total": name for name in metrics.COUNTERS}
    names.update({f"runnerq_{name}_seconds": name for name in metrics.DURATIONS})
    names.update({f"runnerq_{name}": name for name in metrics.GAUGES})
    return names


def test_the_dashboard_queries_only_declared_metrics_and_covers_the_queues():
    dashboard = json.loads(DASHBOARD.read_text())
    exprs = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    used = {re.sub(r"_(bucket|count|sum)$", "", m) for e in exprs for m in re.findall(r"runnerq_\w+", e)}
    assert used <= set(declared()), used - set(declared())
    for wanted in (
        "runnerq_queue_depth",
        "runnerq_queue_oldest_due_age_seconds",
        "runnerq_activity_in_flight",
        "runnerq_activity_attempts_total",
        "runnerq_activity_enqueue_to_start_seconds",
        "runnerq_activity_claim_lag_seconds",
        "runnerq_activity_lease_renewed_total",
        "runnerq_activity_requeued_total",
        "runnerq_periodic_enqueued_total",
        "runnerq_periodic_repairs_total",
    ):
        assert wanted in used
    ids = [p["id"] for p in dashboard["panels"]]
    assert len(ids) == len(set(ids))


def test_the_page_lists_every_declared_metric():
    text = PAGE.read_text()
    # Rows name a family once (`runnerq_activity_completed_total`, `_retry_total` ...).
    mentioned = set(re.findall(r"`(runnerq_\w+)`", text))
    shorthand = set(re.findall(r"`(_\w+)`", text))
    missing = []
    for full, name in declared().items():
        suffix = full[len("runnerq_") + len(name) :]
        short_forms = {f"_{part}{suffix}" for part in (name.split("_", 1)[1], name.split("_", 1)[-1])}
        if full not in mentioned and not (shorthand & short_forms):
            missing.append(full)
    assert not missing
