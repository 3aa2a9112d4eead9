import uuid

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runnerq_django.spec.keys import business_key
from runnerq_django.storage import errors
from runnerq_django.storage.types import NewActivity, OnDuplicate
from tests.storage.support import (
    claim_one,
    count_in_queue,
    event_types,
    events,
    expire_lease,
    row,
    sql_rows,
    sql_value,
    submit,
    submit_and_claim,
)


def test_submit_writes_the_row_and_its_input(queue, store):
    new = NewActivity(
        "Charge",
        payload={"amount": 42},
        priority=3,
        max_retries=5,
        timeout_seconds=60,
        retry_delay_seconds=7,
        max_retry_delay_seconds=90,
        metadata={"tenant": "acme"},
    )
    result = store.submit(queue, new)
    assert result.id == new.id and result.created
    got = row(new.id)
    assert got["status"] == "pending" and got["scheduled_at"] is None and got["current_worker_id"] is None
    assert (got["priority"], got["max_retries"], got["timeout_seconds"]) == (3, 5, 60)
    assert (got["retry_delay_seconds"], got["max_retry_delay_seconds"]) == (7, 90)
    assert got["metadata"] == {"tenant": "acme"}
    assert got["root_activity_id"] == str(new.id) and got["parent_activity_id"] is None and got["depth"] == 0
    assert sql_rows(
        "SELECT payload::text, serialization, queue_name FROM runnerq_inputs WHERE activity_id = %s", [new.id]
    ) == [('{"amount": 42}', "json-v1", queue)]
    assert event_types(new.id) == []


def test_absent_payload_is_stored_as_json_null(queue):
    activity_id = submit(queue)
    assert (
        sql_value("SELECT payload::text FROM runnerq_inputs WHERE activity_id = %s", [activity_id]) == "null"
    )


def test_delay_schedules_in_the_future(queue, store):
    activity_id = submit(queue, delay_seconds=3600)
    assert sql_value("SELECT status FROM runnerq_activities WHERE id = %s", [activity_id]) == "scheduled"
    seconds = sql_value(
        "SELECT extract(epoch FROM scheduled_at - now()) FROM runnerq_activities WHERE id = %s", [activity_id]
    )
    assert 3590 < seconds <= 3600
    assert store.claim(queue, types=["t"]) == []


def test_child_inherits_its_parents_root(queue, store):
    root = submit(queue, "parent")
    parent_claim = claim_one(queue, "parent")
    child = store.submit(queue, NewActivity("child", parent_id=root, depth=1), fence=parent_claim).id
    grandchild = store.submit(queue, NewActivity("child", parent_id=child, depth=2)).id
    assert row(child)["root_activity_id"] == str(root)
    assert row(grandchild)["root_activity_id"] == str(root)
    assert row(grandchild)["parent_activity_id"] == str(child) and row(grandchild)["depth"] == 2


def test_submit_many_is_one_statement_and_keeps_order(queue, store):
    news = [NewActivity("bulk", payload=i, priority=1 + i % 4) for i in range(50)]
    with CaptureQueriesContext(connection) as queries:
        results = store.submit_many(queue, news)
    assert len(queries) == 1
    assert [r.id for r in results] == [n.id for n in news] and all(r.created for r in results)
    assert sql_value("SELECT count(*) FROM runnerq_inputs WHERE queue_name = %s", [queue]) == 50
    assert store.submit_many(queue, []) == []


def test_submit_many_beyond_a_chunk_is_one_transaction(queue, store):
    news = [NewActivity("bulk") for _ in range(2500)]
    news[2400] = NewActivity("bulk", id=news[10].id)  # a duplicate id late in the batch
    with pytest.raises(errors.Conflict):
        store.submit_many(queue, news)
    assert count_in_queue(queue)["runnerq_activities"] == 0
    assert len(store.submit_many(queue, [NewActivity("bulk") for _ in range(2100)])) == 2100
    assert count_in_queue(queue)["runnerq_activities"] == 2100


def test_reused_id_is_a_conflict_and_writes_nothing(queue, store):
    activity_id = submit(queue)
    with pytest.raises(errors.Conflict):
        store.submit(queue, NewActivity("other", id=activity_id))
    assert count_in_queue(queue)["runnerq_activities"] == 1
    assert row(activity_id)["activity_type"] == "t"


def test_spawn_with_a_stale_fence_creates_nothing(queue, store):
    parent = submit(queue, "parent")
    old = claim_one(queue, "parent")
    expire_lease(parent)
    assert store.reap(queue, 10) == 1
    new = claim_one(queue, "parent")
    child = NewActivity("child", parent_id=parent, root_id=parent, depth=1)
    with pytest.raises(errors.ClaimLost):
        store.submit(queue, child, fence=old)
    with pytest.raises(errors.ClaimLost):
        store.submit(queue, NewActivity("child", parent_id=parent, depth=1, idempotency_key="k"), fence=old)
    assert row(child.id) is None and count_in_queue(queue)["runnerq_idempotency"] == 0
    assert store.submit(queue, child, fence=new).created
    assert row(child.id)["parent_activity_id"] == str(parent)


class TestIdempotency:
    def test_key_is_stored_as_a_business_key(self, queue, store):
        activity_id = submit(queue, "Charge", idempotency_key="order-42")
        assert row(activity_id)["idempotency_key"] == "rq:key:v2:ODpvcmRlci00MkNoYXJnZQ"
        assert store.lookup_key(queue, business_key("order-42", "Charge")) == activity_id

    def test_raw_key_is_stored_as_is(self, queue, store):
        activity_id = submit(queue, raw_idempotency_key="rq:step:a:b:c")
        assert row(activity_id)["idempotency_key"] == "rq:step:a:b:c"
        assert store.lookup_key(queue, "rq:step:a:b:c") == activity_id

    def test_return_existing(self, queue, store):
        first = submit(queue, idempotency_key="k")
        second = store.submit(queue, NewActivity("t", idempotency_key="k"))
        assert second.id == first and not second.created
        assert count_in_queue(queue)["runnerq_activities"] == 1

    def test_no_reuse(self, queue, store):
        submit(queue, idempotency_key="k", on_duplicate=OnDuplicate.NO_REUSE)
        duplicate = NewActivity("t", idempotency_key="k", on_duplicate=OnDuplicate.NO_REUSE)
        with pytest.raises(errors.DuplicateActivity):
            store.submit(queue, duplicate)
        assert row(duplicate.id) is None

    def test_allow_reuse_moves_the_key(self, queue, store):
        first = submit(queue, idempotency_key="k", on_duplicate=OnDuplicate.ALLOW_REUSE)
        second = store.submit(
            queue, NewActivity("t", idempotency_key="k", on_duplicate=OnDuplicate.ALLOW_REUSE)
        )
        assert second.created and second.id != first
        assert store.lookup_key(queue, business_key("k", "t")) == second.id
        assert sql_value(
            "SELECT updated_at > created_at FROM runnerq_idempotency WHERE queue_name = %s", [queue]
        )

    @pytest.mark.parametrize("ending", ["failed", "dead_letter", "cancelled"])
    def test_allow_reuse_on_failure(self, queue, ending, store):
        policy = OnDuplicate.ALLOW_REUSE_ON_FAILURE
        first = submit(queue, idempotency_key="k", on_duplicate=policy, max_retries=1)
        with pytest.raises(errors.IdempotencyConflict):
            store.submit(queue, NewActivity("t", idempotency_key="k", on_duplicate=policy))
        claim = claim_one(queue)
        if ending == "cancelled":
            sql_rows(
                "UPDATE runnerq_activities SET status = 'cancelled', completed_at = now() WHERE id = %s",
                [first],
            )
        else:
            assert store.fail(queue, claim, "x", retryable=ending == "dead_letter") == ending
        again = store.submit(queue, NewActivity("t", idempotency_key="k", on_duplicate=policy))
        assert again.created and store.lookup_key(queue, business_key("k", "t")) == again.id

    def test_allow_reuse_on_failure_refuses_while_completed(self, queue, store):
        policy = OnDuplicate.ALLOW_REUSE_ON_FAILURE
        submit(queue, idempotency_key="k", on_duplicate=policy)
        store.complete(queue, claim_one(queue), 1)
        with pytest.raises(errors.IdempotencyConflict):
            store.submit(queue, NewActivity("t", idempotency_key="k", on_duplicate=policy))

    def test_keys_are_per_type(self, queue, store):
        a = submit(queue, "x", idempotency_key="k")
        b = submit(queue, "y", idempotency_key="k")
        assert a != b
        assert store.lookup_key(queue, business_key("k", "x")) == a
        assert store.lookup_key(queue, business_key("k", "y")) == b

    def test_keys_are_per_queue(self, queue, store):
        a = submit(queue, idempotency_key="k")
        other = queue + "_b"
        b = submit(other, idempotency_key="k")
        assert a != b
        with pytest.raises(errors.NotFound):
            store.lookup_key(other + "_c", business_key("k", "t"))

    def test_same_submission_again_returns_itself_under_every_policy(self, queue, store):
        for policy in OnDuplicate:
            new = NewActivity("t", idempotency_key=f"k{int(policy)}", on_duplicate=policy)
            assert store.submit(queue, new).created
            again = store.submit(queue, new)
            assert again.id == new.id and not again.created

    def test_spawn_finding_another_trees_activity_records_spawn_linked(self, queue, store):
        existing = submit(queue, "child", raw_idempotency_key="shared")
        parent = submit(queue, "parent")
        fence = claim_one(queue, "parent")
        spawn = NewActivity("child", parent_id=parent, depth=1, raw_idempotency_key="shared")
        result = store.submit(queue, spawn, fence=fence)
        assert result.id == existing and not result.created
        assert events(existing) == [("SpawnLinked", fence.token, {"parent_activity_id": str(parent)})]
        # The same parent spawning the same step again (a replay) is not news.
        store.submit(
            queue, NewActivity("child", parent_id=parent, depth=1, raw_idempotency_key="mine"), fence=fence
        )
        again = store.submit(
            queue, NewActivity("child", parent_id=parent, depth=1, raw_idempotency_key="mine"), fence=fence
        )
        assert not again.created and event_types(again.id) == []

    def test_mixed_batch_keeps_order(self, queue, store):
        holder = submit(queue, idempotency_key="k")
        news = [NewActivity("t"), NewActivity("t", idempotency_key="k"), NewActivity("t")]
        results = store.submit_many(queue, news)
        assert [r.id for r in results] == [news[0].id, holder, news[2].id]
        assert [r.created for r in results] == [True, False, True]

    def test_unknown_key_is_not_found(self, queue, store):
        with pytest.raises(errors.NotFound):
            store.lookup_key(queue, business_key("nobody", "t"))


def test_submit_joins_the_callers_transaction(queue, store):
    from django.db import transaction

    activity_id = uuid.uuid4()
    with pytest.raises(RuntimeError), transaction.atomic():
        store.submit(queue, NewActivity("t", id=activity_id))
        assert row(activity_id) is not None
        raise RuntimeError("roll back")
    assert row(activity_id) is None


def test_submit_and_claim_round_trip_the_payload(queue, store):
    payload = {"nested": [1, 2.5, "é", None, {"deep": True}]}
    submit(queue, payload=payload)
    assert store.claim(queue, types=["t"])[0].payload == payload


def test_spawn_fence_must_be_live_even_for_a_plain_child(queue, store):
    parent_claim = submit_and_claim(queue, "parent")
    store.complete(queue, parent_claim, None)
    with pytest.raises(errors.ClaimLost):
        store.submit(queue, NewActivity("child", parent_id=parent_claim.id, depth=1), fence=parent_claim)


class TestTreeLinks:
    """A child names its parent: a spawn can only be its fencing claim's own child, a child is at
    depth 1 or more, and its parent must exist in the queue (else the child's root would be a
    ghost id that never finishes, and retention would keep the child forever)."""

    def test_a_spawn_fenced_by_one_claim_cannot_name_another_parent(self, queue, store):
        a = submit_and_claim(queue, "parent")
        b = submit(queue, "parent")
        before = count_in_queue(queue)
        for activity in (
            NewActivity("child", parent_id=b, depth=1),
            NewActivity("child", parent_id=b, depth=1, raw_idempotency_key="step"),
        ):
            with pytest.raises(errors.InvalidArgument) as refused:
                store.submit(queue, activity, fence=a)
            assert refused.value.field == "parent_id" and str(a.id) in refused.value.message
        with pytest.raises(errors.InvalidArgument) as refused:
            store.submit_many(
                queue,
                [NewActivity("child", parent_id=a.id, depth=1), NewActivity("child", parent_id=b, depth=1)],
                fence=a,
            )
        assert refused.value.field == "activities[1].parent_id"
        with pytest.raises(errors.InvalidArgument) as refused:
            store.submit(queue, NewActivity("loose"), fence=a)  # a fence is for spawning children
        assert refused.value.field == "parent_id"
        assert count_in_queue(queue) == before
        assert store.submit(queue, NewActivity("child", parent_id=a.id, depth=1), fence=a).created

    def test_a_child_of_an_unknown_parent_is_not_found(self, queue, store):
        ghost = uuid.uuid4()
        with pytest.raises(errors.NotFound) as refused:
            store.submit(queue, NewActivity("child", parent_id=ghost, depth=1))
        assert str(ghost) in refused.value.message
        other_queue_parent = submit(queue + "_x", "parent")
        with pytest.raises(errors.NotFound):
            store.submit_many(
                queue, [NewActivity("t"), NewActivity("child", parent_id=other_queue_parent, depth=1)]
            )
        with pytest.raises(errors.NotFound):
            store.submit(queue, NewActivity("child", parent_id=ghost, depth=1, idempotency_key="k"))
        assert set(count_in_queue(queue).values()) == {0}

    def test_a_parent_in_the_same_batch_counts(self, queue, store):
        parent = NewActivity("parent")
        child = NewActivity("child", parent_id=parent.id, depth=1)
        store.submit_many(queue, [parent, child])
        assert row(child.id)["root_activity_id"] == str(parent.id) and row(child.id)["depth"] == 1
