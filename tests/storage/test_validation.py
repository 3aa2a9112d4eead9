"""Bad arguments are refused before any SQL runs: InvalidArgument naming the field and the
limit, and nothing written."""

import uuid
from datetime import datetime, timedelta, timezone

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runnerq_django import storage
from runnerq_django.storage import errors
from runnerq_django.storage.types import Claim, NewActivity
from tests.storage.support import count_in_queue, submit_and_claim

NIL = uuid.UUID(int=0)
CLAIM = Claim(uuid.uuid4(), "token")
TOO_DEEP = "must be nested at most 64 arrays/objects deep (RUNNERQ['MAX_JSON_DEPTH'])"


def nested(depth: int, leaf=0):
    """``[[...[leaf]...]]``, ``depth`` arrays deep (built without recursion)."""
    value = leaf
    for level in range(depth):
        value = [value] if level % 2 else {"k": value}
    return value


@pytest.mark.parametrize(
    "fields, field, words",
    [
        ({"activity_type": ""}, "activity_type", "empty"),
        ({"activity_type": "x" * 513}, "activity_type", "512 bytes"),
        ({"activity_type": "é" * 257}, "activity_type", "512 bytes"),
        ({"activity_type": 5}, "activity_type", "string"),
        ({"priority": 0}, "priority", "1..4"),
        ({"priority": 5}, "priority", "1..4"),
        ({"priority": True}, "priority", "whole number"),
        ({"max_retries": -1}, "max_retries", "0..2147483647"),
        ({"max_retries": 2**31}, "max_retries", "0..2147483647"),
        ({"timeout_seconds": -1}, "timeout_seconds", "0..315360000"),
        ({"timeout_seconds": 315360001}, "timeout_seconds", "0..315360000"),
        ({"retry_delay_seconds": -5}, "retry_delay_seconds", "0..315360000"),
        ({"max_retry_delay_seconds": 10**12}, "max_retry_delay_seconds", "0..315360000"),
        ({"delay_seconds": -1}, "delay_seconds", "0"),
        ({"delay_seconds": float("nan")}, "delay_seconds", "number"),
        ({"depth": 32768, "parent_id": uuid.uuid4()}, "depth", "0..32767"),
        ({"depth": 1}, "depth", "root"),
        ({"parent_id": uuid.uuid4()}, "depth", "child"),
        ({"parent_id": uuid.uuid4(), "depth": 0}, "depth", "at least 1"),
        ({"id": NIL}, "id", "nil UUID"),
        ({"id": "not-a-uuid"}, "id", "UUID"),
        ({"parent_id": NIL}, "parent_id", "nil UUID"),
        ({"root_id": uuid.uuid4()}, "root_id", "own root"),
        ({"metadata": {"a": 1}}, "metadata", "strings"),
        ({"metadata": ["a"]}, "metadata", "strings"),
        ({"payload": {1, 2}}, "payload", "JSON"),
        ({"payload": float("inf")}, "payload", "JSON"),
        ({"payload": "x\x00y"}, "payload", "NUL"),
        ({"payload": "x" * (1024 * 1024)}, "payload", "1048576 bytes"),
        ({"idempotency_key": ""}, "idempotency_key", "empty"),
        ({"idempotency_key": "k" * 3000}, "idempotency_key", "1024 bytes"),
        (
            {"idempotency_key": "k" * 1950},
            "idempotency_key",
            "1024 bytes",
        ),  # 54000 (index row too big) before
        ({"idempotency_key": "\U0001f600" * 257}, "idempotency_key", "1024 bytes"),
        ({"raw_idempotency_key": "k" * 2401}, "raw_idempotency_key", "2400 bytes"),
        ({"payload": nested(65)}, "payload", TOO_DEEP),
        ({"payload": nested(3000)}, "payload", TOO_DEEP),  # RecursionError before
        ({"metadata": {"k": "v" * (1024 * 1024)}}, "metadata", "1048576 bytes"),  # 4 MiB allowed before
        ({"idempotency_key": "a", "raw_idempotency_key": "b"}, "idempotency_key", "not both"),
        ({"on_duplicate": 9, "idempotency_key": "k"}, "on_duplicate", "OnDuplicate"),
        ({"activity_type": "t\ud83d"}, "activity_type", "lone surrogate"),
        ({"idempotency_key": "k\ud83d"}, "idempotency_key", "lone surrogate"),
        ({"payload": "p\ud83d"}, "payload", "lone surrogate"),
    ],
)
def test_submit_refuses_bad_fields(queue, fields, field, words, store):
    values = {"activity_type": "t", **fields}
    with CaptureQueriesContext(connection) as queries, pytest.raises(errors.InvalidArgument) as refused:
        store.submit(queue, NewActivity(**values))
    assert refused.value.field == field and field in refused.value.message
    assert words in refused.value.message
    assert refused.value.kind == errors.ErrorKind.INVALID_ARGUMENT
    assert len(queries) == 0
    assert set(count_in_queue(queue).values()) == {0}


def test_a_bad_activity_in_a_batch_refuses_the_batch_naming_its_index(queue, store):
    with pytest.raises(errors.InvalidArgument) as refused:
        store.submit_many(queue, [NewActivity("t"), NewActivity("t", priority=9)])
    assert refused.value.field == "activities[1].priority"
    assert count_in_queue(queue)["runnerq_activities"] == 0


def test_payload_limit_follows_the_setting(queue, settings):
    settings.RUNNERQ = {**settings.RUNNERQ, "MAX_PAYLOAD_BYTES": 10}
    with pytest.raises(errors.InvalidArgument) as refused:
        storage.submit(queue, NewActivity("t", payload="0123456789"))
    assert "at most 10 bytes" in refused.value.message
    storage.submit(queue, NewActivity("t", payload="01234567"))  # 10 bytes with its quotes


@pytest.mark.parametrize("name", ["", "1abc", "a-b", "a" * 49, "q.x", "é", None, "a b"])
def test_queue_names_are_checked_everywhere(name, store):
    calls = [
        lambda: store.submit(name, NewActivity("t")),
        lambda: store.claim(name),
        lambda: store.renew(name, CLAIM, 1000),
        lambda: store.complete(name, CLAIM, 1),
        lambda: store.fail(name, CLAIM, "x"),
        lambda: store.reap(name, 1),
        lambda: store.cleanup(name, completed_s=1, batch=1),
        lambda: store.signal(name, uuid.uuid4(), "n", 1),
        lambda: store.lookup_key(name, "k"),
        lambda: store.get_result(name, uuid.uuid4()),
    ]
    for call in calls:
        with pytest.raises(errors.InvalidArgument) as refused:
            call()
        assert refused.value.field == "queue" and "1-48 characters" in refused.value.message


def test_longest_queue_name_is_accepted(queue, store):
    name = "Q" * 48
    assert store.claim(name) == []


@pytest.mark.parametrize(
    "kwargs, field, words",
    [
        ({"limit": 0}, "limit", "1..1000"),
        ({"limit": 1001}, "limit", "1..1000"),
        ({"lease_ms": 0}, "lease_ms", "1..86400000"),
        ({"lease_ms": 86_400_001}, "lease_ms", "1..86400000"),
        ({"types": []}, "types", "non-empty"),
        ({"types": "t"}, "types", "list"),
        ({"types": [""]}, "types[]", "empty"),
        ({"worker_id": "w" * 480}, "worker_id", "479 bytes"),
    ],
)
def test_claim_refuses_bad_arguments(queue, kwargs, field, words, store):
    with pytest.raises(errors.InvalidArgument) as refused:
        store.claim(queue, **kwargs)
    assert refused.value.field == field and words in refused.value.message


@pytest.mark.parametrize(
    "kwargs, field",
    [({"limit": True}, "limit"), ({"lease_ms": 30000.0}, "lease_ms"), ({"types": ["t", 1]}, "types[]")],
)
def test_a_bad_argument_equal_to_a_good_one_is_still_refused(queue, kwargs, field, store):
    """Claims with the same plain arguments share their checked statement (a worker claims with
    the same ones every time): True == 1, but the one refused stays refused after the other."""
    store.claim(queue, limit=1, lease_ms=30000, types=["t"])
    with pytest.raises(errors.InvalidArgument) as refused:
        store.claim(queue, **{"limit": 1, "lease_ms": 30000, "types": ["t"], **kwargs})
    assert refused.value.field == field


def test_claim_statement_gives_each_caller_parameters_of_its_own(queue):
    statement, params = storage.claim_statement(queue, types=["t"], limit=5)
    params["queue"] = "changed"
    again, fresh = storage.claim_statement(queue, types=["t"], limit=5)
    assert again == statement and fresh["queue"] == queue
    assert storage.claim_statement(queue, types={"t"}, limit=5)[1]["type"] == "t"  # a set, as before


def test_longest_worker_id_makes_a_512_byte_token(queue, store):
    store.submit(queue, NewActivity("t"))
    [claimed] = store.claim(queue, worker_id="w" * 479)
    assert len(claimed.token.encode()) == 512


@pytest.mark.parametrize(
    "call, field",
    [
        (lambda q: storage.renew(q, CLAIM, 0), "lease_ms"),
        (lambda q: storage.renew(q, Claim(NIL, "t"), 1000), "claim.id"),
        (lambda q: storage.renew(q, Claim(uuid.uuid4(), ""), 1000), "claim.token"),
        (lambda q: storage.renew(q, Claim(uuid.uuid4(), "t" * 513), 1000), "claim.token"),
        (lambda q: storage.renew(q, ("id", "token"), 1000), "claim"),
        (lambda q: storage.renew_many(q, [CLAIM] * 1001, 1000), "claims"),
        (lambda q: storage.release(q, [CLAIM, Claim(NIL, "t")]), "claims[1].id"),
        (lambda q: storage.complete(q, CLAIM, {1, 2}), "value"),
        (lambda q: storage.complete_many(q, [(CLAIM, 1), (CLAIM, object())]), "value[1]"),
        (lambda q: storage.fail(q, CLAIM, None), "reason"),
        (lambda q: storage.fail(q, CLAIM, "x", retryable="yes"), "retryable"),
        (lambda q: storage.fail(q, CLAIM, "x", failure=object()), "failure"),
        (lambda q: storage.checkpoint(q, CLAIM, uuid.uuid4(), state="ok", data=1, step="s"), "state"),
        (lambda q: storage.checkpoint(q, CLAIM, NIL, state="Ok", data=1, step="s"), "result_id"),
        (lambda q: storage.checkpoint(q, CLAIM, uuid.uuid4(), state="Ok", data=1, step=""), "step"),
        (lambda q: storage.register_dependency(q, CLAIM, NIL), "producer_id"),
        (
            lambda q: storage.park(q, CLAIM, kind="nap", step="s", wake_at=datetime(2099, 1, 1).astimezone()),
            "kind",
        ),
        (lambda q: storage.park(q, CLAIM, kind="sleep", step="s", wake_at=datetime(2099, 1, 1)), "wake_at"),
        (lambda q: storage.park(q, CLAIM, kind="sleep", step="s", wake_at="soon"), "wake_at"),
        (
            lambda q: storage.park(q, CLAIM, kind="await", step="s", wake_at="2099-01-01T00:00:00Z"),
            "result_id",
        ),
        (
            lambda q: storage.park(
                q, CLAIM, kind="sleep", step="s", wake_at="2099-01-01T00:00:00Z", result_id=uuid.uuid4()
            ),
            "result_id",
        ),
        (lambda q: storage.signal(q, NIL, "n", 1), "target_id"),
        (lambda q: storage.signal(q, uuid.uuid4(), "", 1), "name"),
        (lambda q: storage.signal(q, uuid.uuid4(), "n", float("nan")), "payload"),
        (lambda q: storage.signal(q, uuid.uuid4(), "n", nested(2000)), "payload"),
        (lambda q: storage.complete(q, CLAIM, nested(2000)), "value"),
        (lambda q: storage.complete_many(q, [(CLAIM, 1), (CLAIM, nested(65))]), "value[1]"),
        (lambda q: storage.fail(q, CLAIM, "x", failure=nested(2000)), "failure"),
        (
            lambda q: storage.checkpoint(q, CLAIM, uuid.uuid4(), state="Ok", data=nested(2000), step="s"),
            "data",
        ),
        (
            lambda q: storage.park(q, CLAIM, kind="sleep", step="s", wake_at="9999-12-31T23:59:59-14:00"),
            "wake_at",
        ),
        (
            lambda q: storage.park(
                q,
                CLAIM,
                kind="signal",
                step="s",
                wake_at=datetime(9999, 12, 31, 23, 59, tzinfo=timezone(-timedelta(hours=1))),
            ),
            "wake_at",
        ),
        (lambda q: storage.reap(q, 0), "limit"),
        (lambda q: storage.reap(q, 1001), "limit"),
        (lambda q: storage.cleanup(q, completed_s=-1, batch=10), "completed_s"),
        (lambda q: storage.cleanup(q, events_s=1.5, batch=10), "events_s"),
        (lambda q: storage.cleanup(q, completed_s=1, batch=0), "batch"),
        (lambda q: storage.cleanup(q, completed_s=1, batch=1001), "batch"),
        (lambda q: storage.lookup_key(q, ""), "business_key"),
        (lambda q: storage.get_results(q, [uuid.uuid4(), "nope"]), "ids[1]"),
        (lambda q: storage.list_checkpoints(q, NIL), "owner_id"),
    ],
)
def test_operations_refuse_bad_arguments_and_write_nothing(queue, call, field, store):
    claim = submit_and_claim(queue)
    before = count_in_queue(queue)
    with pytest.raises(errors.InvalidArgument) as refused:
        call(queue)
    assert refused.value.field == field, refused.value.message
    assert refused.value.message.startswith(field + ":")
    assert count_in_queue(queue) == before
    assert store.renew(queue, claim, 1000)  # the claim was not disturbed


def test_json_nested_up_to_the_limit_is_stored(queue, store):
    result = store.submit(queue, NewActivity("t", payload=nested(64), metadata={"k": "v"}))
    assert result.created


def test_metadata_limit_follows_the_payload_setting(queue, settings):
    settings.RUNNERQ = {**settings.RUNNERQ, "MAX_PAYLOAD_BYTES": 20}
    with pytest.raises(errors.InvalidArgument) as refused:
        storage.submit(queue, NewActivity("t", metadata={"key": "0123456789abcdef"}))
    assert refused.value.field == "metadata" and "at most 20 bytes" in refused.value.message


def test_depth_limit_follows_the_setting(queue, settings):
    settings.RUNNERQ = {**settings.RUNNERQ, "MAX_JSON_DEPTH": 3}
    storage.submit(queue, NewActivity("t", payload=nested(3)))
    with pytest.raises(errors.InvalidArgument) as refused:
        storage.submit(queue, NewActivity("t", payload=nested(4)))
    assert "at most 3 arrays/objects deep" in refused.value.message


@pytest.mark.parametrize("key", ["k" * 1024, "\U0001f600" * 256, "random"])
def test_every_key_inside_the_limit_fits_the_index_with_the_longest_type(queue, key, store):
    """The stored key (base64 of "<n>:<key><type>") of the longest key and type still fits the
    btree entry of runnerq_idempotency's primary key; random text defeats compression."""
    import random

    rng = random.Random(7)
    letters = "abcdefghijklmnopqrstuvwxyz0123456789"
    activity_type = "".join(rng.choice(letters) for _ in range(512))
    if key == "random":
        key = "".join(rng.choice(letters) for _ in range(1024))
    first = store.submit(queue, NewActivity(activity_type, idempotency_key=key, on_duplicate=1))
    again = store.submit(queue, NewActivity(activity_type, idempotency_key=key, on_duplicate=1))
    assert first.created and not again.created and again.id == first.id
