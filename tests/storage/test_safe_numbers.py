"""json-v1 numbers the TypeScript SDK can't read are refused where Python writes them (payloads,
results, signal payloads), naming the JSON path; RUNNERQ['ALLOW_UNSAFE_INTEGERS'] allows them."""

import pytest
from django.test import override_settings

from runnerq_django.storage.errors import InvalidArgument
from runnerq_django.storage.types import NewActivity
from tests.storage.support import count_in_queue, result, submit, submit_and_claim

SAFE = 2**53 - 1


@pytest.mark.parametrize(
    "value, where, what",
    [
        ({"big": SAFE + 1}, "$.big", "integer 9007199254740992"),
        ({"list": [0, -SAFE - 1]}, "$.list[1]", "integer -9007199254740992"),
        ([{"a": {"b": 10**30}}], "$[0].a.b", "integer 1" + "0" * 30),
        ({"f": 1e16}, "$.f", "float 1e+16 (jsonb stores it as the integer 10000000000000000)"),
        ({"f": -1e300}, "$.f", "float -1e+300"),
        # Below 1e16 Python writes them with ".0" and jsonb keeps them so, but JavaScript reads
        # 9500000000000000.0 as an unsafe integer all the same.
        ({"f": 9.5e15}, "$.f", "float 9500000000000000.0"),
        ({"f": [-float(2**53)]}, "$.f[0]", "float -9007199254740992.0"),
    ],
)
def test_a_payload_number_typescript_cannot_read_is_refused_naming_its_path(queue, value, where, what, store):
    before = count_in_queue(queue)
    with pytest.raises(InvalidArgument) as caught:
        store.submit(queue, NewActivity("t", payload=value))
    assert caught.value.field == "payload"
    assert f"payload: {what}" in str(caught.value) and f"at {where} is outside" in str(caught.value)
    assert "RUNNERQ['ALLOW_UNSAFE_INTEGERS']" in str(caught.value)
    assert count_in_queue(queue) == before  # nothing written


def test_numbers_in_the_safe_range_and_floats_that_round_trip_are_stored(queue, store):
    value = {
        "max": SAFE,
        "min": -SAFE,
        "f": float(SAFE),
        "g": 4503599627370495.5,
        "small": 1e-300,
        "half": 0.5,
        "flag": True,
    }
    activity_id = submit(queue, payload=value)
    [claimed] = store.claim(queue)
    assert claimed.id == activity_id and claimed.payload == value
    assert isinstance(claimed.payload["f"], float)  # stored as 9007199254740991.0, read back a float


def test_a_result_and_a_signal_payload_are_checked_too(queue, store):
    claim = submit_and_claim(queue)
    with pytest.raises(InvalidArgument, match=r"value: integer 9007199254740993 at \$\.n is outside"):
        store.complete(queue, claim, {"n": SAFE + 2})
    assert result(claim.id) is None
    with pytest.raises(InvalidArgument, match=r"value: float 9500000000000000\.0 at \$\.f is outside"):
        store.complete(queue, claim, {"f": 9.5e15})
    assert result(claim.id) is None
    with pytest.raises(InvalidArgument, match=r"payload: integer .* at \$ is outside"):
        store.signal(queue, claim.id, "go", SAFE + 1)
    with pytest.raises(InvalidArgument, match=r"payload: float 9007199254740992\.0 at \$ is outside"):
        store.signal(queue, claim.id, "go", float(2**53))
    store.complete(queue, claim, {"n": SAFE})
    assert result(claim.id)["data"] == {"n": SAFE}


@override_settings(RUNNERQ={"ALLOW_UNSAFE_INTEGERS": True})
def test_a_python_only_queue_may_allow_them_and_then_floats_past_1e16_read_back_as_integers(queue, store):
    submit(queue, payload={"big": SAFE + 1, "f": 1e300, "g": 9.5e15})
    [claimed] = store.claim(queue)
    assert claimed.payload == {"big": SAFE + 1, "f": 10**300, "g": 9.5e15}
    assert isinstance(claimed.payload["f"], int) and isinstance(claimed.payload["g"], float)
