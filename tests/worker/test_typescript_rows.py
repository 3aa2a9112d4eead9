"""Rows in the shapes the TypeScript SDK writes, read by a real (in-process) worker: superjson-v1
inputs, signal payloads and child results, and its failure fields. The values are the spec's
``serialization/vectors/plain_json.json`` cases; the rows are written by SQL as that SDK would
(an input row, a result row with the waiter woken), not through our storage layer."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime

import pytest
from django.test import override_settings

from runnerq_django.exceptions import ChildFailed
from runnerq_django.spec.keys import checkpoint_id
from tests.helpers import SPEC_DIR
from tests.worker import handlers
from tests.worker.support import events_of, fetch, row_of, wait_for_status

VECTORS = SPEC_DIR / "serialization" / "vectors" / "plain_json.json"  # the repository's copy, not the wheel's
SUPERJSON_CASES = [
    case
    for case in json.loads(VECTORS.read_text())["cases"]
    if case["input"]["serialization"] == "superjson-v1"
]
# Each superjson case of the vectors as RUNNERQ['SUPERJSON'] = 'typed' decodes it.
TYPED = {
    "superjson without meta": {"a": 1},
    "superjson Date keeps its JSON form": {"at": datetime(2026, 10, 2, tzinfo=UTC)},
    "superjson bigint keeps its JSON form": {"n": 9007199254740993},
    "superjson Set at the top": {1, 2},
    "superjson Map at the top": {"a": 1},
    "superjson string": "text",
    "superjson null": None,
    "superjson that is not an object": [1, 2],
    "superjson without a json member": {"a": 1},
}
NO_INLINE_WAIT = {"INLINE_WAIT_SECONDS": 0}


def write_input(activity_id: uuid.UUID, data) -> None:
    """The input row as the TypeScript SDK writes it with its default serialization."""
    fetch(
        "UPDATE runnerq_inputs SET payload = %s::jsonb, serialization = 'superjson-v1' WHERE activity_id = %s",
        [json.dumps(data), activity_id],
    )


def write_result(
    result_id: uuid.UUID, owner: uuid.UUID, queue: str, state: str, data, step: str | None
) -> None:
    """A result row as the TypeScript SDK writes it, waking the activities waiting on it."""
    fetch(
        "INSERT INTO runnerq_results (activity_id, queue_name, state, data, owner_activity_id, step, serialization) "
        "VALUES (%s, %s, %s, %s::jsonb, %s, %s, 'superjson-v1')",
        [result_id, queue, state, json.dumps(data), owner, step],
    )
    fetch(
        "UPDATE runnerq_activities SET status = 'pending', scheduled_at = NULL "
        "WHERE status = 'waiting' AND waiting_result_id = %s",
        [result_id],
    )


def enqueue_with_inputs(handler, cases) -> dict[str, uuid.UUID]:
    ids = {}
    for case in cases:
        ids[case["name"]] = handler.enqueue(None).id
        write_input(ids[case["name"]], case["input"]["data"])
    return ids


def received_after_run(worker, ids: dict[str, uuid.UUID]) -> dict[str, object]:
    worker()
    for activity_id in ids.values():
        assert wait_for_status(activity_id, "completed", "failed") == "completed", row_of(activity_id)[
            "last_error"
        ]
    return {name: handlers.RECEIVED[str(activity_id)] for name, activity_id in ids.items()}


def test_a_superjson_input_is_claimed_and_read_through_the_plain_json_view_by_default(worker):
    ids = enqueue_with_inputs(handlers.keeps_input, SUPERJSON_CASES)
    got = received_after_run(worker, ids)
    assert got == {case["name"]: case["output"] for case in SUPERJSON_CASES}


@override_settings(RUNNERQ={"SUPERJSON": "typed"})
def test_a_superjson_input_is_decoded_to_python_types_when_typed(worker):
    ids = enqueue_with_inputs(handlers.keeps_input, SUPERJSON_CASES)
    got = received_after_run(worker, ids)
    assert got == TYPED
    assert got["superjson Date keeps its JSON form"]["at"].utcoffset() is not None  # aware


@override_settings(RUNNERQ={"SUPERJSON": "typed"})
def test_a_superjson_type_without_python_counterpart_fails_the_activity_once_naming_it(worker):
    regexp = handlers.keeps_input.enqueue(None).id
    write_input(regexp, {"json": {"ok": 1, "r": "/a+/g"}, "meta": {"values": {"r": ["regexp"]}}})
    object_key = handlers.keeps_input.enqueue(None).id
    write_input(object_key, {"json": {"m": [[{"k": 1}, "v"]]}, "meta": {"values": {"m": ["map"]}}})
    fine = handlers.keeps_input.enqueue(None).id
    write_input(fine, {"json": {"s": "x"}, "meta": {"values": {"s": ["undefined"]}}})
    worker()
    assert wait_for_status(regexp, "failed") == "failed"
    assert "input: $.r: SuperJSON type 'regexp' has no Python counterpart" in row_of(regexp)["last_error"]
    assert wait_for_status(object_key, "failed") == "failed"
    assert "input: $.m: SuperJSON map" in row_of(object_key)["last_error"]
    assert "unhashable" in row_of(object_key)["last_error"]
    assert events_of(regexp) == ["Failed"] and str(regexp) not in handlers.RECEIVED  # never ran
    assert wait_for_status(fine, "completed") == "completed" and handlers.RECEIVED[str(fine)] == {"s": None}


@pytest.mark.parametrize("mode", ["plain", "typed"])
def test_a_typescript_minus_zero_reaches_the_handler_as_a_number(worker, mode):
    """SuperJSON writes -0 as the string "-0" annotated ``number``: typed mode failed the
    activity (no Python counterpart), plain mode passed the string on."""
    with override_settings(RUNNERQ={"SUPERJSON": mode}):
        activity_id = handlers.keeps_input.enqueue(None).id
        write_input(activity_id, {"json": {"n": "-0", "s": "-0"}, "meta": {"values": {"n": ["number"]}}})
        got = received_after_run(worker, {"zero": activity_id})["zero"]
    assert got == {"n": 0, "s": "-0"} and isinstance(got["n"], float) and str(got["n"]) == "-0.0"


def test_metadata_another_writer_left_as_a_list_a_string_or_a_number_reads_as_no_metadata(worker):
    """ctx.metadata is a dict[str, str]: a row whose metadata column is not a JSON object gives
    ``{}``, as SQL NULL does; an object is kept."""
    stored = ['["a", "b"]', '"traceparent"', "5", "null", '{"region": "eu"}']
    ids = {}
    for text in stored:
        ids[text] = handlers.keeps_metadata.enqueue(None).id
        fetch("UPDATE runnerq_activities SET metadata = %s::jsonb WHERE id = %s", [text, ids[text]])
    got = received_after_run(worker, ids)
    assert got == {text: {"region": "eu"} if text.startswith("{") else {} for text in stored}


@pytest.mark.parametrize("mode", ["plain", "typed"])
def test_a_superjson_signal_payload_is_read_like_an_input(worker, mode):
    date_case = next(c for c in SUPERJSON_CASES if "Date" in c["name"])
    with override_settings(RUNNERQ={"SUPERJSON": mode}):
        target = handlers.keeps_signal.enqueue(None)
        write_result(
            checkpoint_id(target.id, "signal", "go"),
            target.id,
            target.queue,
            "Ok",
            date_case["input"]["data"],
            "signal:go",
        )
        got = received_after_run(worker, {"signal": target.id})["signal"]
    assert got == (TYPED[date_case["name"]] if mode == "typed" else date_case["output"])


def _child_of(parent: uuid.UUID) -> tuple[uuid.UUID, str]:
    [(child, queue)] = fetch(
        "SELECT id, queue_name FROM runnerq_activities WHERE parent_activity_id = %s", [parent]
    )
    return child, queue


def _typescript_child_ends(parent: uuid.UUID, state: str, data) -> None:
    wait_for_status(parent, "waiting")
    child, queue = _child_of(parent)
    fetch(
        "UPDATE runnerq_activities SET status = %s, completed_at = now() WHERE id = %s",
        ["completed" if state == "Ok" else "failed", child],
    )
    write_result(child, child, queue, state, data, None)


@override_settings(RUNNERQ={"SUPERJSON": "typed", **NO_INLINE_WAIT})
def test_a_python_parent_reads_a_typescript_childs_superjson_result(worker):
    worker()
    parent = handlers.awaits_typescript_child.enqueue(None).id
    set_case = next(c for c in SUPERJSON_CASES if "Set" in c["name"])
    _typescript_child_ends(parent, "Ok", set_case["input"]["data"])
    assert wait_for_status(parent, "completed") == "completed"
    assert handlers.RECEIVED[str(parent)] == {1, 2}


@override_settings(RUNNERQ=NO_INLINE_WAIT)
def test_a_python_parent_reads_a_typescript_childs_failure_fields(worker):
    worker()
    parent = handlers.awaits_typescript_child.enqueue(None).id
    stack = "TypeError: card declined\n    at charge (billing.ts:12:9)"
    failure = {
        "name": "TypeError",
        "message": "card declined",
        "stack": stack,
        "code": "E_CARD",
        "cause": {"name": "Error", "message": "gateway said no"},
    }
    _typescript_child_ends(
        parent,
        "Err",
        {"json": {"error": "TypeError: card declined", "type": "non_retryable", "failure": failure}},
    )
    assert wait_for_status(parent, "completed") == "completed"
    caught = handlers.RECEIVED[str(parent)]
    assert isinstance(caught, ChildFailed) and caught.kind == "non_retryable"
    assert caught.error == "TypeError: card declined"
    assert (caught.failure.name, caught.failure.message, caught.failure.stack) == (
        "TypeError",
        "card declined",
        stack,
    )
    assert caught.failure.code == "E_CARD" and caught.failure.cause == {
        "name": "Error",
        "message": "gateway said no",
    }


def test_a_python_failure_carries_both_sdks_fields(worker):
    worker()
    handle = handlers.fail_non_retryable.enqueue("nope")
    assert wait_for_status(handle.id, "failed") == "failed"
    [(data,)] = fetch("SELECT data FROM runnerq_results WHERE activity_id = %s", [handle.id])
    [(detail,)] = fetch(
        "SELECT detail FROM runnerq_events WHERE activity_id = %s AND event_type = 'Failed'", [handle.id]
    )
    for failure in (
        json.loads(data)["failure"] if isinstance(data, str) else data["failure"],
        (json.loads(detail) if isinstance(detail, str) else detail)["failure"],
    ):
        assert failure["language"] == "python" and failure["exception"].endswith(".NonRetryableError")
        assert failure["name"] == "NonRetryableError" and "nope" in failure["message"]
        assert failure["stack"] == failure["traceback"] and failure["stack"].startswith("Traceback")


def test_a_result_typescript_could_not_read_fails_the_activity_naming_the_path(worker):
    worker()
    handle = handlers.returns_unsafe_integer.enqueue(None)
    assert wait_for_status(handle.id, "failed", "completed") == "failed"
    assert (
        "return value can't be stored: result: integer 9007199254740992 at $.big is outside +-(2**53 - 1)"
        in row_of(handle.id)["last_error"]
    )
    with override_settings(RUNNERQ={"ALLOW_UNSAFE_INTEGERS": True}):
        allowed = handlers.returns_unsafe_integer.enqueue(None)
        assert allowed.result(timeout=15) == {"big": 2**53}


def test_a_float_result_typescript_would_read_as_an_unsafe_integer_fails_the_activity(worker):
    """9500000000000000.0 is below 1e16, so Python writes it with its ".0" and jsonb keeps it a
    float, but JavaScript reads the whole number 9500000000000000, past its safe range."""
    worker()
    handle = handlers.returns_unsafe_float.enqueue(None)
    assert wait_for_status(handle.id, "failed", "completed") == "failed"
    assert (
        "return value can't be stored: result: float 9500000000000000.0 at $.big is outside +-(2**53 - 1)"
        in row_of(handle.id)["last_error"]
    )
    with override_settings(RUNNERQ={"ALLOW_UNSAFE_INTEGERS": True}):
        assert handlers.returns_unsafe_float.enqueue(None).result(timeout=15) == {"big": 9.5e15}
