"""Key encodings beyond the vectors: decoding, round trips and refused inputs."""

from __future__ import annotations

import uuid

import pytest

from runnerq_django.spec import constants, keys


@pytest.mark.parametrize(
    ("key", "activity_type"),
    [("order-42", "Charge"), ("é", "Charge"), ("12:34", "T"), ("🙂", "Emoji"), ("a" * 300, "Type")],
)
def test_business_key_round_trips(key, activity_type):
    assert keys.decode_business_key(keys.business_key(key, activity_type)) == (key, activity_type)


@pytest.mark.parametrize(
    "stored",
    [
        "rq:key:v2:MjrDqUNoYXJnZQ==",  # padded
        "rq:key:v2:!!!",  # not base64
        "rq:key:v2:OTk6YWJj",  # length past the end
        "rq:key:v2:YWJj",  # "abc": no length prefix
        "rq:key:v2:MDU6YWJjZGVU",  # "05:abcdeT": a length with a leading zero does not re-encode
        "order-42-Charge",  # not a business key at all
    ],
)
def test_non_canonical_keys_do_not_decode(stored):
    assert keys.decode_business_key(stored) is None


@pytest.mark.parametrize(("key", "activity_type"), [("", "Charge"), ("k", "")])
def test_business_key_parts_must_not_be_empty(key, activity_type):
    with pytest.raises(ValueError):
        keys.business_key(key, activity_type)


def test_step_key_lowercases_uuids():
    root = uuid.UUID("6BA7B810-9DAD-11D1-80B4-00C04FD430C8")
    assert keys.step_key(root, str(root).upper(), "s") == f"rq:step:{root}:{root}:s"


def test_checkpoint_id_is_a_uuid_v5():
    value = keys.checkpoint_id(uuid.uuid4(), "signal", "approve")
    assert isinstance(value, uuid.UUID) and value.version == 5


def test_channels():
    assert constants.work_channel("emails") == "rq_w_emails"
    assert constants.result_channel("emails") == "rq_r_emails"
    assert len(constants.work_channel("q" * 48)) <= 63
    with pytest.raises(ValueError):
        constants.work_channel("q" * 60)


def test_constants_read_from_the_spec():
    assert constants.SCHEMA_ADVISORY_LOCK_KEY == 0x52554E4E45525121
    assert constants.DEFAULT_MAX_RETRY_DELAY_SECONDS == 3600
    assert constants.STORAGE_ERROR_KINDS["claim_lost"] == 9
    assert len(constants.STORAGE_ERROR_KINDS) == 13
