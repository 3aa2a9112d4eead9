"""The scheduler's enqueues are producer spans too: each occurrence it enqueues carries its
span's context, so the attempts that run it are in the occurrence's trace."""

from __future__ import annotations

import json
from datetime import timedelta

import pytest
from django.db import connection
from opentelemetry import trace

from tests.scheduler.conftest import T0, env, job, namespace, shared_cache  # noqa: F401

pytestmark = pytest.mark.redis


def test_each_occurrence_enqueued_is_a_producer_span(local, env):  # noqa: F811
    core = env.core([job("a", every=timedelta(minutes=1))])
    core.tick(T0 + timedelta(minutes=2, seconds=1))  # 12:00, 12:01 and 12:02 are due
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT id::text, metadata FROM runnerq_activities WHERE metadata->>'periodic_namespace' = %s",
            [env.namespace],
        )
        rows = {i: json.loads(m) if isinstance(m, str) else m for i, m in cursor.fetchall()}
    assert rows
    spans = {
        s.attributes["messaging.message.id"]: s
        for s in local.get_finished_spans()
        if s.kind == trace.SpanKind.PRODUCER and s.attributes.get("runnerq.created")
    }
    assert set(spans) == set(rows)
    for activity_id, metadata in rows.items():
        context = spans[activity_id].get_span_context()
        assert metadata["traceparent"].split("-")[2] == f"{context.span_id:016x}"
        assert metadata["periodic_job"] == "a"  # the scheduler's own keys stay
