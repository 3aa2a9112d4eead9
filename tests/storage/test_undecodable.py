"""Rows holding a value Python can't read (another SDK may write one): each fails alone, at once
and for good, naming the value and the reason; every other row of the claim batch is returned."""

from __future__ import annotations

import pytest

from runnerq_django import storage
from runnerq_django.storage import errors
from runnerq_django.storage.types import NewActivity
from tests.storage.support import (
    POISONS,
    event_types,
    events,
    expire_lease,
    poison,
    result,
    row,
    sql_rows,
    submit,
)


@pytest.mark.parametrize("types", [None, ["t"], ["t", "u"]])  # the three claim statements
def test_undecodable_rows_fail_alone_and_the_rest_of_the_batch_is_claimed(queue, types):
    good = [submit(queue, payload={"n": n}, metadata={"k": "v"}) for n in range(3)]
    bad = {kind: submit(queue) for kind in POISONS}
    reasons = {kind: poison(activity_id, kind) for kind, activity_id in bad.items()}

    claimed = storage.claim(queue, types=types, limit=20, worker_id="w1")

    assert sorted(c.id for c in claimed) == sorted(good)
    assert sorted(c.payload["n"] for c in claimed) == [0, 1, 2]
    for c in claimed:
        assert row(c.id)["status"] == "processing" and c.metadata == {"k": "v"} and c.due_at is not None
    for kind, activity_id in bad.items():
        [(status, retry_count, error)] = sql_rows(
            "SELECT status, retry_count, last_error FROM runnerq_activities WHERE id = %s", [activity_id]
        )
        assert status == "failed" and retry_count == 0, kind
        assert error.startswith(reasons[kind]), (kind, error)
        [(event_type, worker_id, detail)] = events(activity_id)
        assert event_type == "Failed" and worker_id.startswith("w1:") and detail["error"] == error
        stored = result(activity_id)
        assert stored["state"] == "Err" and stored["data"] == {"error": error, "type": "non_retryable"}
    assert storage.claim(queue, types=types, limit=20) == []  # nothing left behind, nothing claimed twice


def test_a_waiting_parent_wakes_when_its_undecodable_child_fails(queue):
    parent = submit(queue, "p")
    [parent_claim] = storage.claim(queue, types=["p"], worker_id="w1")
    [child] = [
        r.id
        for r in storage.submit_many(
            queue, [NewActivity("t", parent_id=parent, depth=1)], fence=parent_claim.claim
        )
    ]
    storage.park(queue, parent_claim.claim, kind="await", step="child", result_id=child, producer_id=child)
    poison(child, "big_number")
    assert storage.claim(queue, types=["t"], limit=5) == []
    assert row(child)["status"] == "failed" and row(parent)["status"] == "pending"


def test_a_result_python_cannot_read_is_a_serialization_error_naming_it(queue):
    ok, bad = submit(queue), submit(queue)
    for _ in (ok, bad):
        [claimed] = storage.claim(queue, types=["t"])
        storage.complete(queue, claimed.claim, {"v": 1})
    sql_rows("UPDATE runnerq_results SET data = '1e5000'::jsonb WHERE activity_id = %s", [bad])
    with pytest.raises(errors.SerializationError, match=f"result {bad}: number out of range for Python"):
        storage.get_results(queue, [ok, bad])
    assert storage.get_result(queue, ok).data == {"v": 1}


def test_the_reaper_reaps_a_row_whose_started_at_python_cannot_read(queue):
    """Another SDK's claim wrote started_at: an infinite one must not stop reaping the queue."""
    ids = [submit(queue), submit(queue)]
    storage.claim(queue, types=["t"], limit=2, lease_ms=60000, worker_id="gone")
    for activity_id in ids:
        expire_lease(activity_id)
    sql_rows("UPDATE runnerq_activities SET started_at = 'infinity' WHERE id = %s", [ids[0]])
    assert sorted(storage.reap_ids(queue, 10)) == sorted(ids)
    for activity_id in ids:
        assert row(activity_id)["status"] == "pending" and event_types(activity_id) == ["Requeued"]
