"""Concurrency limits in the storage layer and at enqueue: slots taken by the claim, given back by
every way an attempt ends, partitions, and bad declarations."""

from __future__ import annotations

import pytest

from runnerq_django import activity, storage
from runnerq_django.activities.registry import registry
from runnerq_django.storage import commands, limits
from runnerq_django.storage.errors import InvalidArgument
from tests.flow import handlers
from tests.worker.support import fetch

pytestmark = pytest.mark.django_db(transaction=True)

Q = "flow_limits"


def claim(activity_type="flow.limited", max_running=2, limit=10):
    return limits.claim_limited(Q, activity_type, max_running, limit=limit, lease_ms=60000, worker_id="w")


def put(n, definition=handlers.limited, **payload):
    return [definition.enqueue({"seconds": 0, **payload}, queue=Q, retry_delay=0) for _ in range(n)]


def test_at_most_the_limit_is_claimed_and_each_way_out_gives_the_slot_back():
    put(8)
    first = claim()
    assert len(first) == 2 and claim() == []  # both slots taken; the rest stays pending
    assert fetch(
        "SELECT count(*) FROM runnerq_activities WHERE queue_name = %s AND status = 'pending'", [Q]
    ) == [(6,)]
    storage.complete(Q, first[0].claim, None)  # complete
    [second] = claim()
    assert claim() == []
    storage.fail(Q, first[1].claim, "boom", retryable=True)  # fail (retrying)
    [third] = claim()
    storage.release(Q, [second.claim])  # release (graceful shutdown)
    [fourth] = claim()
    commands.cancel(Q, [third.id])  # cancel
    [fifth] = claim()
    assert claim() == []
    # Slots in use: the two running now.
    [use] = [u for u in limits.slots_in_use() if u.queue_name == Q]
    assert use.running == 2 and use.activity_type == "flow.limited"
    del fourth, fifth


def test_an_expired_lease_gives_its_slot_back_once_reaped():
    put(3)
    held = limits.claim_limited(Q, "flow.limited", 1, limit=5, lease_ms=1, worker_id="dead")
    assert len(held) == 1
    assert claim(max_running=1) == []  # the dead worker's lease ran out, but it is not reaped yet
    assert storage.reap(Q, 10) == 1
    assert len(claim(max_running=1)) == 1


def test_partitions_each_get_their_own_slots():
    for key in ["a", "a", "a", "b", "b", "c"]:
        put(1, handlers.per_key, key=key)
    got = limits.claim_limited(Q, "flow.per_key", 1, limit=10, lease_ms=60000)
    assert sorted(str(a.payload["key"]) for a in got) == ["a", "b", "c"]
    assert limits.claim_limited(Q, "flow.per_key", 1, limit=10, lease_ms=60000) == []
    storage.complete(Q, next(a for a in got if a.payload["key"] == "a").claim, None)
    [next_a] = limits.claim_limited(Q, "flow.per_key", 1, limit=10, lease_ms=60000)
    assert next_a.payload["key"] == "a"


def test_the_partition_key_is_stored_at_enqueue_and_a_missing_one_is_refused():
    handle = handlers.per_key.enqueue({"key": 42}, queue=Q)
    assert fetch("SELECT partition_key FROM runnerq_flow_partitions WHERE activity_id = %s", [handle.id]) == [
        ("42",)
    ]
    many = handlers.per_key.enqueue_many([{"key": "x"}, {"key": "y"}], queue=Q)
    assert sorted(
        r[0]
        for r in fetch(
            "SELECT partition_key FROM runnerq_flow_partitions WHERE activity_id = ANY(%s)",
            [[h.id for h in many]],
        )
    ) == ["x", "y"]
    with pytest.raises(InvalidArgument) as caught:
        handlers.per_key.enqueue({"other": 1}, queue=Q)
    assert caught.value.field == "payload" and "'key'" in str(caught.value)
    with pytest.raises(InvalidArgument):
        handlers.per_key.enqueue_many([{"key": "ok"}, {"nokey": 1}], queue=Q)
    assert fetch("SELECT count(*) FROM runnerq_activities WHERE queue_name = %s", [Q]) == [
        (3,)
    ]  # nothing else


def test_a_callable_key_and_bad_declarations():
    try:

        @activity(name="flow.t.callable_key", concurrency=2, concurrency_key=lambda p: p["tenant"].upper())
        def callable_key(payload):
            return None

        handle = callable_key.enqueue({"tenant": "acme"}, queue=Q)
        assert fetch(
            "SELECT partition_key FROM runnerq_flow_partitions WHERE activity_id = %s", [handle.id]
        ) == [("ACME",)]
    finally:
        registry.unregister("flow.t.callable_key")
    for kwargs, field in [
        ({"concurrency": 0}, "concurrency"),
        ({"concurrency": 10_001}, "concurrency"),
        ({"concurrency_key": "key"}, "concurrency_key"),
        ({"concurrency": 1, "concurrency_key": "a..b"}, "concurrency_key"),
        ({"concurrency": 1, "concurrency_key": 5}, "concurrency_key"),
    ]:
        with pytest.raises(InvalidArgument) as caught:
            activity(name="flow.t.bad", **kwargs)(lambda payload: None)
        assert caught.value.field == field, kwargs
    assert registry.get("flow.t.bad") is None


def test_a_limited_claim_is_one_round_trip():
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    put(3)
    with CaptureQueriesContext(connection) as queries:
        assert len(claim(max_running=2)) == 2
    assert len(queries.captured_queries) == 1


def test_runnerq_status_and_the_admin_show_the_slots_in_use(client):
    import io
    import json

    from django.contrib.auth.models import Permission, User
    from django.core.management import call_command

    put(3)
    claim(max_running=2)
    out = io.StringIO()
    call_command("runnerq_status", "--json", stdout=out)
    assert json.loads(out.getvalue())["queues"][Q]["limited"] == {"flow.limited": 2}
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_activity"))
    client.force_login(user)
    page = client.get("/admin/runnerq_django/activity/overview/").content.decode()
    assert 'id="rq-slots"' in page and "flow.limited" in page


def test_a_paused_limited_or_rated_type_is_not_claimed():
    from runnerq_django.storage import flow

    put(3)
    handlers.rated.enqueue_many([{}] * 3, queue=Q)
    flow.pause(Q, "flow.limited", actor="test")
    flow.pause(Q, "flow.rated", actor="test")
    assert claim() == []
    assert limits.claim_rated(Q, "flow.rated", 10, 1.0, limit=10, lease_ms=60000) == []
    flow.resume(Q, "flow.limited", actor="test")
    flow.resume(Q, "flow.rated", actor="test")
    flow.pause(Q, actor="test")  # the whole queue
    assert claim() == []
    assert limits.claim_rated(Q, "flow.rated", 10, 1.0, limit=10, lease_ms=60000) == []
    flow.resume(Q, actor="test")
    assert len(claim()) == 2
    assert len(limits.claim_rated(Q, "flow.rated", 10, 1.0, limit=10, lease_ms=60000)) == 3
