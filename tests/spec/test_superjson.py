"""SuperJSON envelopes (the TypeScript SDK's superjson-v1) decoded to Python's types: nested and
escaped paths, annotations inside a Map or a Set, and types refused by name."""

import copy
from datetime import UTC, datetime

import pytest

from runnerq_django.exceptions import NonRetryableError, UnsupportedValue
from runnerq_django.spec import superjson
from runnerq_django.spec.serialization import handler_value

AT = "2026-10-02T00:00:00.000Z"
DATE = datetime(2026, 10, 2, tzinfo=UTC)


@pytest.mark.parametrize(
    "envelope, expected",
    [
        ({"json": {"a": {"b": [1, AT]}}, "meta": {"values": {"a.b.1": ["Date"]}}}, {"a": {"b": [1, DATE]}}),
        (
            {
                "json": {"a.b": "1", "x\\y": None},
                "meta": {"values": {"a\\.b": ["bigint"], "x\\\\y": ["undefined"]}},
            },
            {"a.b": 1, "x\\y": None},
        ),
        (
            {
                "json": [[1, AT], ["k", "5"]],
                "meta": {"values": ["map", {"0.1": ["Date"], "1.1": ["bigint"]}]},
            },
            {1: DATE, "k": 5},
        ),
        ({"json": {"s": [AT]}, "meta": {"values": {"s": ["set", {"0": ["Date"]}]}}}, {"s": {DATE}}),
        ({"json": "2026-10-02T00:00:00.000Z", "meta": {"values": ["Date"]}}, DATE),
        ({"json": {"a": 1}, "meta": {}}, {"a": 1}),
    ],
)
def test_typed_values_are_decoded_children_first(envelope, expected):
    stored = copy.deepcopy(envelope)
    assert superjson.decode(stored) == expected
    assert stored == envelope and superjson.decode(stored) == expected  # the envelope is left alone


@pytest.mark.parametrize(
    "envelope, message",
    [
        (
            {"json": {"e": {}}, "meta": {"values": {"e": ["Error"]}}},
            "$.e: SuperJSON type 'Error' has no Python",
        ),
        (
            {"json": {"c": {}}, "meta": {"values": {"c": [["class", "Money"]]}}},
            "$.c: SuperJSON type 'class/Money'",
        ),
        ({"json": {"n": "NaN"}, "meta": {"values": {"n": ["number"]}}}, "$.n: SuperJSON type 'number'"),
        (
            {"json": [[1], [2]], "meta": {"values": ["set"]}},
            "$: SuperJSON set [[1], [2]] can't be decoded (unhashable",
        ),
        (
            {"json": {"d": "soon"}, "meta": {"values": {"d": ["Date"]}}},
            "$.d: SuperJSON Date 'soon' can't be decoded",
        ),
        (
            {"json": {"a": 1}, "meta": {"values": {"b": ["Date"]}}},
            "$: SuperJSON annotates 'b', which the value does not have",
        ),
    ],
)
def test_anything_else_is_refused_naming_the_type_and_path(envelope, message):
    with pytest.raises(UnsupportedValue) as caught:
        superjson.decode(envelope)
    assert message in str(caught.value)
    assert isinstance(caught.value, NonRetryableError)  # the same on every attempt


def test_only_superjson_in_typed_mode_is_type_decoded():
    envelope = {"json": {"at": AT}, "meta": {"values": {"at": ["Date"]}}}
    assert handler_value(copy.deepcopy(envelope), "superjson-v1", "plain") == {"at": AT}
    assert handler_value(copy.deepcopy(envelope), "json-v1", "typed") == envelope
    assert handler_value(copy.deepcopy(envelope), "superjson-v1", "typed") == {"at": DATE}
