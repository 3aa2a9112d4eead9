"""Tracing in one process: ``enqueue_many``'s spans, and the two ways it is off
(``RUNNERQ['TRACING'] = False``, and no ``opentelemetry`` package at all)."""

from __future__ import annotations

import json
import subprocess
import sys
import textwrap

import pytest
from django.test import override_settings
from opentelemetry import trace

from runnerq_django.observability import tracing
from tests.helpers import REPO, manage_env, wait_until
from tests.tracing.exporter import install, uninstall
from tests.worker import handlers
from tests.worker.support import row_of


def metadata_of(activity_id) -> dict | None:
    stored = row_of(activity_id)["metadata"]
    return json.loads(stored) if isinstance(stored, str) else stored


def test_enqueue_many_is_one_producer_span_per_activity(local, transactional_db, queue_name):
    handles = handlers.echo.enqueue_many([1, 2, 3], queue=queue_name, metadata={"team": "a"})
    spans = {s.attributes["messaging.message.id"]: s for s in local.get_finished_spans()}
    assert set(spans) == {str(h.id) for h in handles}
    for handle in handles:
        context = spans[str(handle.id)].get_span_context()
        metadata = metadata_of(handle.id)
        assert metadata["team"] == "a"  # the caller's keys are kept beside the context
        assert metadata["traceparent"].split("-")[1:3] == [
            f"{context.trace_id:032x}",
            f"{context.span_id:016x}",
        ]


def test_a_failed_enqueue_is_an_error_span(local, transactional_db, queue_name):
    from runnerq_django.storage import errors

    handlers.echo.enqueue(1, queue=queue_name, idempotency_key="k")
    with pytest.raises(errors.DuplicateActivity):
        handlers.echo.enqueue(1, queue=queue_name, idempotency_key="k", on_duplicate="no_reuse")
    failed = [s for s in local.get_finished_spans() if s.status.status_code == trace.StatusCode.ERROR]
    assert [s.attributes["error.type"] for s in failed] == ["DuplicateActivity"]
    assert [e.name for e in failed[0].events] == ["exception"]


def test_tracing_off_writes_no_context_and_makes_no_span(local, worker, queue_name):
    with override_settings(RUNNERQ={"TRACING": False}):
        assert tracing.active() is None
        handle = handlers.echo.enqueue("quiet", queue=queue_name)
        worker(queues=[queue_name])
        assert handle.result(timeout=15) == "quiet"
    assert metadata_of(handle.id) is None  # no metadata at all: no traceparent added
    assert local.get_finished_spans() == ()
    assert tracing.active() is not None  # back on with the setting


ABSENT = textwrap.dedent(
    """
    import sys

    class NoOpenTelemetry:  # as if the otel extra were not installed
        def find_spec(self, name, path=None, target=None):
            if name == "opentelemetry" or name.startswith("opentelemetry."):
                raise ModuleNotFoundError(f"No module named {name!r}")
            return None

    sys.meta_path.insert(0, NoOpenTelemetry())
    import django
    django.setup()
    from runnerq_django import client
    from runnerq_django.observability import tracing
    handle = client.enqueue("t.untraced", {"n": 1}, queue=sys.argv[1])
    loaded = sorted(m for m in sys.modules if m.startswith("opentelemetry"))
    print(handle.id, tracing.active(), loaded)
    """
)


def test_without_the_package_nothing_is_imported_and_enqueue_works(live_db_url, queue_name):
    env = manage_env(live_db_url, DJANGO_SETTINGS_MODULE="testproject.settings", RUNNERQ_EXAMPLES="0")
    done = subprocess.run(
        [sys.executable, "-c", ABSENT, queue_name],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    activity_id, active, loaded = done.stdout.split(maxsplit=2)
    assert (active, loaded.strip()) == ("None", "[]")
    assert metadata_of(activity_id) is None


@pytest.mark.parametrize("traceparent", ["garbage", 5, "00-" + "0" * 32 + "-" + "0" * 16 + "-01"])
def test_a_row_with_an_unreadable_traceparent_still_runs_in_a_trace_of_its_own(
    local, worker, queue_name, traceparent
):
    """A row another writer left with a malformed (or non-string, or all-zero) context: the
    attempt runs, as the root of a new trace."""
    from django.db import connection

    handle = handlers.echo.enqueue("odd", queue=queue_name)
    with connection.cursor() as cursor:
        cursor.execute(
            "UPDATE runnerq_activities SET metadata = %s::jsonb WHERE id = %s",
            [json.dumps({"traceparent": traceparent}), handle.id],
        )
    local.clear()
    worker(queues=[queue_name])
    assert handle.result(timeout=15) == "odd"
    [attempt] = wait_until(
        lambda: [s for s in local.get_finished_spans() if s.kind == trace.SpanKind.CONSUMER], timeout=10
    )
    assert attempt.parent is None
    assert attempt.attributes["runnerq.outcome"] == "completed"


def test_after_the_tracing_tests_other_tests_write_no_context(transactional_db, queue_name):
    """What the ``local`` fixture's teardown restores: without an SDK no span is made and no
    key is added to the rows other tests compare whole."""
    install()
    uninstall()
    assert tracing.active() is None
    handle = handlers.echo.enqueue(1, queue=queue_name, metadata={"tenant": "acme"})
    assert metadata_of(handle.id) == {"tenant": "acme"}


@pytest.mark.parametrize("handler", ["sync_span", "async_span"])
def test_the_attempt_span_is_current_in_sync_and_async_handlers(local, worker, queue_name, handler):
    from tests.tracing import handlers as traced

    handle = getattr(traced, handler).enqueue(None, queue=queue_name)
    worker(queues=[queue_name])
    seen = handle.result(timeout=15)
    spans = wait_until(
        lambda: [
            s
            for s in local.get_finished_spans()
            if s.kind == trace.SpanKind.CONSUMER and s.attributes["messaging.message.id"] == str(handle.id)
        ],
        timeout=10,
    )
    [attempt] = spans
    assert seen["current"] == f"{attempt.get_span_context().span_id:016x}"
    if "child" in seen:  # the child's enqueue is a span under the attempt
        [send] = [
            s
            for s in local.get_finished_spans()
            if s.kind == trace.SpanKind.PRODUCER and s.attributes["messaging.message.id"] == seen["child"]
        ]
        assert send.parent.span_id == attempt.get_span_context().span_id
