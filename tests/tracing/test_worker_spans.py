"""OpenTelemetry spans across a real ``runworker`` process: the test process enqueues (producer
spans, the SDK's in-memory exporter here), the worker runs the attempts (consumer spans, the same
exporter there, dumped to a JSON-lines file the test reads). Asserts the parent/child relations
through the activity's metadata, the messaging attributes, and the error status of failures."""

from __future__ import annotations

import json
import re

import pytest
from opentelemetry import trace

from runnerq_django.observability.tracing import TRACEPARENT, TRACESTATE
from tests.helpers import wait_until
from tests.tracing.exporter import SPANS_FILE, read_spans
from tests.worker import handlers
from tests.worker.support import row_of

pytestmark = pytest.mark.slow

FAST = ("--poll-interval", "0.2", "--concurrency", "4")
# version 00, trace id, parent id, flags (sampled; the SDK also sets level 2's "random" bit).
W3C = re.compile(r"^00-([0-9a-f]{32})-([0-9a-f]{16})-0[13]$")


@pytest.fixture
def spans_path(tmp_path):
    return tmp_path / "spans.jsonl"


@pytest.fixture
def traced_worker(worker_process, spans_path, queue_name):
    def start():
        return worker_process(
            "--queue",
            queue_name,
            "--import",
            "tests.tracing.exporter",
            *FAST,
            env={SPANS_FILE: str(spans_path)},
        )

    return start


def consumer_spans(path, activity_id, count=1, timeout=30):
    """The worker's attempt spans of ``activity_id``, once there are ``count`` of them."""

    def found():
        spans = [
            s
            for s in read_spans(path)
            if s["kind"] == "CONSUMER" and s["attributes"].get("messaging.message.id") == str(activity_id)
        ]
        return spans if len(spans) >= count else None

    return wait_until(found, timeout=timeout, message=f"{count} attempt span(s) of {activity_id}")


def metadata_of(activity_id) -> dict:
    stored = row_of(activity_id)["metadata"]
    return json.loads(stored) if isinstance(stored, str) else stored


def producer_span(local, activity_id):
    [span] = [
        s
        for s in local.get_finished_spans()
        if s.kind == trace.SpanKind.PRODUCER and s.attributes["messaging.message.id"] == str(activity_id)
    ]
    return span


def hex_ids(span):
    context = span.get_span_context()
    return f"{context.trace_id:032x}", f"{context.span_id:016x}"


def test_an_enqueue_and_its_attempt_are_one_trace_through_the_metadata(
    local, traced_worker, spans_path, queue_name
):
    with trace.get_tracer("test").start_as_current_span("request") as request:
        handle = handlers.echo.enqueue({"x": 1}, queue=queue_name)
    send = producer_span(local, handle.id)
    trace_id, send_id = hex_ids(send)
    # The producer span is a child of the caller's span, and its context is what the row carries.
    assert f"{send.parent.span_id:016x}" == f"{request.get_span_context().span_id:016x}"
    assert send.name == f"send {queue_name}"
    assert send.attributes["messaging.system"] == "runnerq"
    assert send.attributes["messaging.destination.name"] == queue_name
    assert send.attributes["messaging.operation.type"] == "send"
    assert send.attributes["runnerq.created"] is True
    metadata = metadata_of(handle.id)
    assert W3C.match(metadata[TRACEPARENT]).groups() == (trace_id, send_id)

    traced_worker()
    assert handle.result(timeout=30) == {"x": 1}
    [attempt] = consumer_spans(spans_path, handle.id)
    assert attempt["name"] == f"process {queue_name}"
    assert (attempt["trace_id"], attempt["parent_id"]) == (trace_id, send_id)
    assert attempt["attributes"]["messaging.system"] == "runnerq"
    assert attempt["attributes"]["messaging.destination.name"] == queue_name
    assert attempt["attributes"]["messaging.operation.type"] == "process"
    assert attempt["attributes"]["runnerq.activity.type"] == "t.echo"
    assert attempt["attributes"]["runnerq.attempt"] == 1
    assert attempt["attributes"]["runnerq.outcome"] == "completed"
    assert attempt["status"] == "UNSET"


def test_failures_are_error_spans_one_per_attempt(local, traced_worker, spans_path, queue_name):
    permanent = handlers.fail_non_retryable.enqueue("x", queue=queue_name)
    exhausted = handlers.always_fails.enqueue("x", queue=queue_name)  # two attempts, then dead letter
    traced_worker()
    [failed] = consumer_spans(spans_path, permanent.id)
    assert failed["status"] == "ERROR"
    assert failed["attributes"]["runnerq.outcome"] == "failed"
    assert failed["attributes"]["error.type"] == "NonRetryableError"
    assert [e["name"] for e in failed["events"]] == ["exception"]

    attempts = sorted(
        consumer_spans(spans_path, exhausted.id, count=2), key=lambda s: s["attributes"]["runnerq.attempt"]
    )
    assert [a["attributes"]["runnerq.attempt"] for a in attempts] == [1, 2]
    assert [a["attributes"]["runnerq.outcome"] for a in attempts] == ["retrying", "dead_letter"]
    assert {a["status"] for a in attempts} == {"ERROR"}
    # Every attempt continues the enqueue's trace, as a child of its producer span.
    trace_id, send_id = hex_ids(producer_span(local, exhausted.id))
    assert {(a["trace_id"], a["parent_id"]) for a in attempts} == {(trace_id, send_id)}


def test_a_workflow_that_parks_and_resumes_on_another_worker_stays_in_one_trace(
    local,
    traced_worker,
    spans_path,
    queue_name,
):
    handle = handlers.workflow.enqueue({"sleep": 3, "child_seconds": 0.2}, queue=queue_name)
    trace_id, send_id = hex_ids(producer_span(local, handle.id))
    first = traced_worker()
    [parked] = consumer_spans(spans_path, handle.id)  # the sleep (3 s > the inline wait) parks it
    assert parked["attributes"]["runnerq.outcome"] == "parked"
    [park] = [e for e in parked["events"] if e["name"] == "runnerq.park"]
    assert park["attributes"]["runnerq.park.kind"] == "sleep"
    # The step ran as a span inside the attempt.
    [begin] = [s for s in read_spans(spans_path) if s["name"] == "step begin"]
    assert (begin["trace_id"], begin["parent_id"]) == (trace_id, parked["span_id"])
    assert begin["kind"] == "INTERNAL"

    from tests.helpers import stop_process

    stop_process(first)  # the rest runs on another worker process
    second = traced_worker()
    consumer_spans(spans_path, handle.id, count=2)  # resumed, then parked on the signal
    handle.signal("approve", "yes")
    assert handle.result(timeout=60) == {"approval": "yes", "children": 2}
    spans = read_spans(spans_path)
    attempts = consumer_spans(spans_path, handle.id, count=3)
    # Every attempt, on either process, is a child of the one enqueue; parks count no attempt.
    assert {(a["trace_id"], a["parent_id"]) for a in attempts} == {(trace_id, send_id)}
    assert {a["attributes"]["runnerq.attempt"] for a in attempts} == {1}
    assert {a["pid"] for a in attempts} == {first.pid, second.pid}
    outcomes = [a["attributes"]["runnerq.outcome"] for a in attempts]
    assert outcomes.count("completed") == 1 and outcomes.count("parked") == len(attempts) - 1
    kinds = {
        e["attributes"]["runnerq.park.kind"]
        for a in attempts
        for e in a["events"]
        if e["name"] == "runnerq.park"
    }
    assert {"sleep", "signal"} <= kinds
    replayed = [e for a in attempts for e in a["events"] if e["name"] == "runnerq.step.replayed"]
    assert "begin" in {
        e["attributes"]["runnerq.step.name"] for e in replayed
    }  # a replay is an event, no span
    assert len([s for s in spans if s["name"] == "step begin"]) == 1

    # The children: spawned inside an attempt (producer spans under it), run as their own attempts.
    attempt_ids = {a["span_id"] for a in attempts}
    sends = [s for s in spans if s["kind"] == "PRODUCER"]
    assert len(sends) == 2 and {s["parent_id"] for s in sends} <= attempt_ids
    assert {s["trace_id"] for s in sends} == {trace_id}
    for send in sends:
        [child] = consumer_spans(spans_path, send["attributes"]["messaging.message.id"])
        assert (child["trace_id"], child["parent_id"]) == (trace_id, send["span_id"])
        assert child["attributes"]["runnerq.parent_id"] == str(handle.id)


def test_a_context_another_sdk_wrote_is_continued(local, traced_worker, spans_path, queue_name):
    """A Go or TypeScript producer's ``traceparent``/``tracestate`` in the metadata: our attempt
    continues that trace (and our enqueue leaves the key as the caller gave it)."""
    foreign_trace, foreign_span = "4bf92f3577b34da6a3ce929d0e0e4736", "00f067aa0ba902b7"
    given = {TRACEPARENT: f"00-{foreign_trace}-{foreign_span}-01", TRACESTATE: "go=sdk"}
    handle = handlers.echo.enqueue("hi", queue=queue_name, metadata=given)
    assert {k: metadata_of(handle.id)[k] for k in given} == given
    traced_worker()
    assert handle.result(timeout=30) == "hi"
    [attempt] = consumer_spans(spans_path, handle.id)
    assert (attempt["trace_id"], attempt["parent_id"]) == (foreign_trace, foreign_span)
