"""SuperJSON envelopes (the TypeScript SDK's superjson-v1) decoded to Python's types: nested and
escaped paths, annotations inside a Map or a Set, and types refused by name."""

import copy
import json
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
        ({"json": ["-0", 0], "meta": {"values": {"0": ["number"]}}}, [-0.0, 0]),
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
        (
            {"json": {"n": "NaN"}, "meta": {"values": {"n": ["number"]}}},
            "$.n: SuperJSON number 'NaN' can't be decoded (NaN and the infinities are not JSON)",
        ),
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
        (
            {"json": [1], "meta": {"values": {"²": ["undefined"]}}},
            "$: SuperJSON annotates '²', which the value does not have",
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


def test_a_typescript_minus_zero_is_a_number_in_both_modes():
    """SuperJSON writes -0 as the string "-0" annotated ``number``: a number either way (typed
    mode refused the annotation; plain mode passed the string on)."""
    envelope = {"json": {"z": "-0", "s": "-0", "m": [["-0", "-0"]]}, "meta": {"values": {"z": ["number"]}}}
    envelope["meta"]["values"]["m"] = ["map", {"0.1": ["number"]}]
    for mode in ("plain", "typed"):
        got = handler_value(copy.deepcopy(envelope), "superjson-v1", mode)
        z = got["z"]
        assert isinstance(z, float) and z == 0 and str(z) == "-0.0", mode
        assert got["s"] == "-0", mode  # a string, not annotated, stays a string
    assert handler_value(copy.deepcopy(envelope), "superjson-v1", "plain")["m"] == [["-0", -0.0]]
    assert handler_value(copy.deepcopy(envelope), "superjson-v1", "typed")["m"] == {"-0": -0.0}
    # Plain mode applies no other annotation, and one that doesn't fit leaves the plain view.
    other = {
        "json": {"at": AT, "z": "-0"},
        "meta": {"values": {"at": ["Date"], "z": ["number"], "x": ["Date"]}},
    }
    assert handler_value(other, "superjson-v1", "plain") == {"at": AT, "z": "-0"}


def nested_maps(levels: int) -> dict:
    """A Map holding a Map ... ``levels`` deep, each level annotated inside the one above."""
    value, tree = "x", ["map"]
    for level in range(levels):
        value = [["k", value]]
        if level:
            tree = ["map", {"0.1": tree}]
    return {"json": value, "meta": {"values": tree}}


def test_annotations_too_deep_for_python_are_refused_as_such_not_a_recursion_error():
    with pytest.raises(UnsupportedValue, match=r"^nested too deep for Python$"):
        superjson.decode(nested_maps(200))
    assert superjson.plain(nested_maps(200)) == nested_maps(200)["json"]
    shallow = superjson.decode(nested_maps(3))
    assert shallow == {"k": {"k": {"k": "x"}}}


def test_a_deep_value_with_a_shallow_annotation_decodes_as_deep_as_json_reads():
    """Only the annotated path is copied: a value as deep as json.loads reads (the plain view)
    decodes in typed mode too."""
    deep = json.loads("[" * 700 + "]" * 700)
    assert superjson.decode({"json": deep, "meta": {"values": ["undefined"]}}) is None
    assert superjson.decode({"json": {"d": deep, "n": "1"}, "meta": {"values": {"n": ["bigint"]}}}) == {
        "d": deep,
        "n": 1,
    }
