"""Each detail builder produces exactly what ``events.schema.json`` defines for its event type."""

from __future__ import annotations

import json
import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest
from jsonschema import Draft202012Validator

from runnerq_django.spec import events, keys
from tests.helpers import SPEC_DIR, format_checker

SCHEMA = json.loads((SPEC_DIR / "schema/postgres/events.schema.json").read_text())
STARTED = datetime(2026, 3, 1, 12, 0, 0, 123456, tzinfo=UTC)
LATER = STARTED + timedelta(seconds=2)
ACTIVITY = uuid.UUID("6ba7b810-9dad-11d1-80b4-00c04fd430c8")


def validate(event_type: str, detail: dict) -> None:
    schema = {**SCHEMA, "$ref": f"#/$defs/{event_type}"}
    Draft202012Validator(schema, format_checker=format_checker()).validate(detail)


# event type -> details that cover the required-only and the all-optional spellings
EXAMPLES = {
    events.RETRYING: [
        events.retrying_detail(STARTED, "boom", 1, LATER),
        events.retrying_detail(STARTED, "boom", 3, LATER, failure={"trace": ["a"]}),
    ],
    events.FAILED: [
        events.failed_detail(STARTED, "bad input"),
        events.failed_detail(STARTED, "x", failure="text"),
    ],
    events.DEAD_LETTER: [
        events.dead_letter_detail(STARTED, "boom", "attempts_exhausted"),
        events.dead_letter_detail(STARTED, "lease expired", "lease_expired", failure={"k": 1}),
    ],
    events.REQUEUED: [events.requeued_detail(STARTED, "lease expired", 1)],
    events.YIELDED: [
        events.yielded_detail("sleep", "sleep:cool-off", LATER, None, False),
        events.yielded_detail(
            "signal", "signal:approve", LATER, keys.checkpoint_id(ACTIVITY, "signal", "approve"), False
        ),
        events.yielded_detail("await", "child:k", "2026-03-01T12:00:05.000Z", str(ACTIVITY), True),
    ],
    events.SIGNALED: [
        events.signaled_detail("approve", keys.checkpoint_id(ACTIVITY, "signal", "approve"), True),
        events.signaled_detail(
            "approve", keys.checkpoint_id(ACTIVITY, "signal", "approve"), False, "cmd-1", "ops"
        ),
    ],
    events.SPAWN_LINKED: [events.spawn_linked_detail(ACTIVITY)],
    events.CANCELLED: [
        events.cancelled_detail("", "pending"),
        events.cancelled_detail("c1", "waiting", "stop"),
    ],
    events.RETRIED: [
        events.retried_detail("c1", "failed", False),
        events.retried_detail("c1", "cancelled", True, "why"),
    ],
    events.REDRIVEN: [
        events.redriven_detail("c1", "dead_letter", True),
        events.redriven_detail("", "dead_letter", False, "r"),
    ],
    events.RUN_NOW: [events.run_now_detail("c1"), events.run_now_detail("c1", "now")],
    events.RESCHEDULED: [
        events.rescheduled_detail("c1", LATER),
        events.rescheduled_detail("c1", LATER, "later"),
    ],
    events.PRIORITY_CHANGED: [
        events.priority_changed_detail("c1", 4),
        events.priority_changed_detail("c1", 1, "r"),
    ],
}


def test_every_schema_event_type_has_a_constant_and_a_builder():
    assert set(SCHEMA["$defs"]) == set(events.STORED_EVENT_TYPES) == set(EXAMPLES)


@pytest.mark.parametrize("event_type", sorted(EXAMPLES))
def test_builder_output_validates_against_its_definition(event_type):
    for detail in EXAMPLES[event_type]:
        validate(event_type, json.loads(json.dumps(detail)))


def test_optional_keys_are_left_out_when_none():
    assert events.failed_detail(STARTED, "x") == {"started_at": "2026-03-01T12:00:00.123456Z", "error": "x"}
    assert "reason" not in events.cancelled_detail("c", "pending")
    assert "command_id" not in events.signaled_detail("n", ACTIVITY, True)  # as the TypeScript SDK writes it
    assert events.signaled_detail("n", ACTIVITY, True, "cmd-1")["command_id"] == "cmd-1"


def test_sleep_result_id_is_an_explicit_null():
    assert events.yielded_detail("sleep", "sleep:s", LATER, None, False)["result_id"] is None


def test_times_are_rendered_in_utc():
    plus_two = datetime(2026, 3, 1, 14, 0, tzinfo=timezone(timedelta(hours=2)))
    assert events.rfc3339(plus_two) == "2026-03-01T12:00:00.000000Z"
    assert events.rfc3339("2026-03-01T14:00:00.5+02:00") == "2026-03-01T12:00:00.500000Z"


def test_naive_times_are_refused():
    with pytest.raises(ValueError, match="naive"):
        events.failed_detail(datetime(2026, 1, 1), "x")


@pytest.mark.parametrize(
    "bad",
    [
        lambda: events.retrying_detail(STARTED, "x", 0, LATER),
        lambda: events.requeued_detail(STARTED, "x", 0),
        lambda: events.dead_letter_detail(STARTED, "x", "tired"),
        lambda: events.yielded_detail("nap", "s", LATER, None, False),
        lambda: events.priority_changed_detail("c", 5),
        lambda: events.priority_changed_detail("c", True),
    ],
)
def test_values_the_schema_forbids_are_refused(bad):
    with pytest.raises(ValueError):
        bad()


def test_builder_output_is_rejected_by_the_schema_when_tampered():
    # The validation above could pass vacuously if the $ref did not resolve; an extra key must fail.
    from jsonschema import ValidationError

    with pytest.raises(ValidationError):
        validate(events.FAILED, {**events.failed_detail(STARTED, "x"), "extra": 1})
