import uuid

from runnerq_django import storage
from runnerq_django.spec.keys import checkpoint_id
from runnerq_django.storage.types import NewActivity
from tests.storage.support import (
    backdate,
    backdate_events,
    claim_one,
    event_types,
    make_due,
    row,
    sql_value,
    submit,
    submit_and_claim,
)

FAR = "2099-01-01T00:00:00Z"
HOUR = 3600


def absent(activity_id: uuid.UUID) -> bool:
    """The conformance runner's expect_absent: no row in any table mentions the id."""
    return (
        sql_value(
            """
        SELECT (SELECT count(*) FROM runnerq_activities WHERE id = %(id)s)
             + (SELECT count(*) FROM runnerq_inputs WHERE activity_id = %(id)s)
             + (SELECT count(*) FROM runnerq_events WHERE activity_id = %(id)s)
             + (SELECT count(*) FROM runnerq_results WHERE activity_id = %(id)s OR owner_activity_id = %(id)s)
    """,
            {"id": activity_id},
        )
        == 0
    )


def finish(queue, activity_type="t", outcome="completed", **fields) -> uuid.UUID:
    claim = submit_and_claim(queue, activity_type, **fields)
    if outcome == "completed":
        storage.complete(queue, claim, 1)
    else:
        assert storage.fail(queue, claim, "x", retryable=outcome == "dead_letter") == outcome
    return claim.id


def test_completed_and_failed_age_separately(queue, store):
    ok = finish(queue)
    bad = finish(queue, outcome="failed")
    dead = finish(queue, outcome="dead_letter", max_retries=1)
    for activity_id in (ok, bad, dead):
        backdate(activity_id, "completed_at", 2 * HOUR)
    assert store.cleanup(queue, completed_s=HOUR, failed_s=24 * HOUR, batch=100) == 1
    assert absent(ok) and row(bad) and row(dead)
    assert store.cleanup(queue, completed_s=HOUR, failed_s=HOUR, batch=100) == 2
    assert absent(bad) and absent(dead)


def test_cancelled_roots_age_with_the_failed_window(queue, store):
    cancelled = submit(queue)
    from tests.storage.support import sql_rows

    sql_rows(
        "UPDATE runnerq_activities SET status = 'cancelled', completed_at = now() - interval '2 hours' "
        "WHERE id = %s",
        [cancelled],
    )
    assert store.cleanup(queue, completed_s=HOUR, batch=10) == 0
    assert store.cleanup(queue, failed_s=HOUR, batch=10) == 1 and absent(cancelled)


def test_a_zero_window_turns_its_class_off(queue, store):
    ok = finish(queue)
    bad = finish(queue, outcome="failed")
    backdate(ok, "completed_at", 100 * 86400)
    backdate(bad, "completed_at", 100 * 86400)
    assert store.cleanup(queue, completed_s=0, failed_s=0, batch=10) == 0
    assert store.cleanup(queue, completed_s=HOUR, failed_s=0, batch=10) == 1
    assert row(bad) is not None


def test_young_and_unfinished_roots_stay(queue, store):
    young = finish(queue)
    running = submit_and_claim(queue).id
    assert store.cleanup(queue, completed_s=HOUR, failed_s=HOUR, batch=10) == 0
    assert row(young) and row(running)


def test_a_tree_goes_whole_with_everything_it_owns(queue, store):
    root = submit_and_claim(queue, "parent", idempotency_key="root-key")
    child = store.submit(
        queue, NewActivity("child", parent_id=root.id, depth=1, raw_idempotency_key="step-key"), fence=root
    ).id
    store.register_dependency(queue, root, child)
    store.checkpoint(queue, root, checkpoint_id(root.id, "run", "x"), state="Ok", data=1, step="run:x")
    store.signal(queue, root.id, "go", 1)
    store.park(queue, root, kind="await", step="child:c", wake_at=FAR, result_id=child, producer_id=child)
    child_claim = claim_one(queue, "child")
    store.checkpoint(queue, child_claim, checkpoint_id(child, "run", "y"), state="Ok", data=2, step="run:y")
    assert store.fail(queue, child_claim, "x") == "retrying"  # an event to delete
    make_due(child)
    store.complete(queue, claim_one(queue, "child"), "c")
    store.complete(queue, claim_one(queue, "parent"), "p")
    backdate(root.id, "completed_at", 2 * HOUR)
    unrelated = finish(queue)
    assert store.cleanup(queue, completed_s=HOUR, batch=10) == 1
    assert absent(root.id) and absent(child)
    for table in ("runnerq_dependencies", "runnerq_idempotency"):
        assert sql_value(f"SELECT count(*) FROM {table} WHERE queue_name = %s", [queue]) == 0, table
    assert row(unrelated) is not None


def test_a_finished_root_stays_while_a_descendant_runs(queue, store):
    root = submit_and_claim(queue, "parent")
    child = store.submit(queue, NewActivity("child", parent_id=root.id, depth=1), fence=root).id
    grandchild = store.submit(queue, NewActivity("child", parent_id=child, depth=2)).id
    store.complete(queue, root, None)
    backdate(root.id, "completed_at", 2 * HOUR)
    assert store.cleanup(queue, completed_s=HOUR, batch=10) == 0
    for claimed in store.claim(queue, types=["child"], limit=2):
        store.complete(queue, claimed.claim, None)
    assert row(grandchild)["status"] == "completed"
    assert store.cleanup(queue, completed_s=HOUR, batch=10) == 1
    assert absent(root.id) and absent(child) and absent(grandchild)


def test_a_tree_awaited_from_outside_is_pinned(queue, store):
    producer = finish(queue, "producer")
    waiter = submit_and_claim(queue, "waiter")
    store.register_dependency(queue, waiter, producer)
    backdate(producer, "completed_at", 2 * HOUR)
    assert store.cleanup(queue, completed_s=HOUR, batch=10) == 0
    store.complete(queue, waiter, None)
    assert store.cleanup(queue, completed_s=HOUR, batch=10) == 1 and absent(producer)
    # The finished waiter's own row goes with its tree later; its dependency row pointed into
    # the deleted tree and went with it.
    assert sql_value("SELECT count(*) FROM runnerq_dependencies WHERE queue_name = %s", [queue]) == 0


def test_batch_bounds_each_call_oldest_first(queue, store):
    ids = [finish(queue) for _ in range(5)]
    for age, activity_id in enumerate(ids):
        backdate(activity_id, "completed_at", 2 * HOUR + age)
    assert store.cleanup(queue, completed_s=HOUR, batch=2) == 2
    assert absent(ids[4]) and absent(ids[3]) and row(ids[2])
    assert store.cleanup(queue, completed_s=HOUR, batch=2) == 2
    assert store.cleanup(queue, completed_s=HOUR, batch=2) == 1
    assert store.cleanup(queue, completed_s=HOUR, batch=2) == 0


def test_other_queues_are_not_touched(queue, store):
    other = finish(queue + "_b")
    backdate(other, "completed_at", 2 * HOUR)
    assert store.cleanup(queue, completed_s=HOUR, batch=10) == 0
    assert row(other) is not None


def test_events_window_trims_events_of_finished_activities(queue, store):
    done = submit_and_claim(queue, max_retries=3)
    store.fail(queue, done, "x")
    make_due(done.id)
    store.complete(queue, claim_one(queue), 1)
    retry = submit_and_claim(queue, max_retries=3)
    store.fail(queue, retry, "x")
    sleeper = submit_and_claim(queue)
    store.park(queue, sleeper, kind="sleep", step="sleep:long", wake_at=FAR)
    fresh = finish(queue, outcome="failed")
    for activity_id in (done.id, retry.id, sleeper.id):
        backdate_events(activity_id, 2 * HOUR)
    assert store.cleanup(queue, events_s=HOUR, batch=100) == 0
    assert event_types(done.id) == [] and row(done.id)["status"] == "completed"
    assert event_types(retry.id) == ["Retrying"]
    assert event_types(sleeper.id) == ["Yielded"]
    assert event_types(fresh) == ["Failed"]


def test_events_window_off_keeps_events(queue, store):
    failed = finish(queue, outcome="failed")
    backdate_events(failed, 86400)
    assert store.cleanup(queue, completed_s=HOUR, failed_s=2 * 86400, batch=100) == 0
    assert event_types(failed) == ["Failed"]
