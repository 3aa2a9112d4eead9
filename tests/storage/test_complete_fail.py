from datetime import UTC, datetime

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

from runnerq_django.storage import errors
from runnerq_django.storage.types import Claim, NewActivity
from tests.storage.support import (
    claim_one,
    event_types,
    events,
    expire_lease,
    make_due,
    result,
    row,
    sql_rows,
    sql_value,
    submit,
    submit_and_claim,
)


class TestComplete:
    def test_stores_the_result_and_releases_the_claim_in_one_statement(self, queue, store):
        claim = submit_and_claim(queue)
        with CaptureQueriesContext(connection) as queries:
            store.complete(queue, claim, {"answer": 42})
        assert len(queries) == 1
        got = row(claim.id)
        assert got["status"] == "completed" and got["completed_at"] is not None
        assert got["current_worker_id"] is None and got["last_worker_id"] == claim.token
        assert got["lease_deadline_ms"] is None
        stored = result(claim.id)
        assert (stored["state"], stored["data"], stored["owner_activity_id"], stored["step"]) == (
            "Ok",
            {"answer": 42},
            str(claim.id),
            None,
        )
        assert stored["serialization"] == "json-v1" and stored["queue_name"] == queue
        assert event_types(claim.id) == []

    def test_null_is_a_result(self, queue, store):
        claim = submit_and_claim(queue)
        store.complete(queue, claim, None)
        assert (
            sql_value("SELECT data::text FROM runnerq_results WHERE activity_id = %s", [claim.id]) == "null"
        )
        assert store.get_result(queue, claim.id).data is None

    def test_repeat_with_an_equal_value_is_a_no_op(self, queue, store):
        claim = submit_and_claim(queue)
        store.complete(queue, claim, {"n": 1, "m": [1, 2]})
        completed_at = row(claim.id)["completed_at"]
        store.complete(queue, claim, {"m": [1, 2], "n": 1.0})
        assert row(claim.id)["completed_at"] == completed_at
        with pytest.raises(errors.CheckpointConflict):
            store.complete(queue, claim, {"n": 2})
        assert result(claim.id)["data"] == {"n": 1, "m": [1, 2]}

    def test_a_stale_claim_is_lost(self, queue, store):
        old = submit_and_claim(queue)
        expire_lease(old.id)
        assert store.reap(queue, 10) == 1
        new = claim_one(queue)
        with pytest.raises(errors.ClaimLost):
            store.complete(queue, old, 1)
        with pytest.raises(errors.ClaimLost):
            store.complete(queue, Claim(old.id, "forged"), 1)
        assert row(old.id)["current_worker_id"] == new.token
        store.complete(queue, new, 2)
        assert result(old.id)["data"] == 2

    def test_complete_many_returns_what_was_not_completed(self, queue, store):
        store.submit_many(queue, [NewActivity("t") for _ in range(5)])
        claims = [c.claim for c in store.claim(queue, limit=5)]
        store.complete(queue, claims[0], "first")
        stale = Claim(claims[1].id, "not-the-token")
        items = [(claims[0], "first"), (stale, 1), (claims[2], None), (claims[3], {"x": 3}), (claims[4], [4])]
        with CaptureQueriesContext(connection) as queries:
            lost = store.complete_many(queue, items)
        assert len(queries) == 1
        assert lost == [claims[1].id]
        assert result(claims[3].id)["data"] == {"x": 3} and result(claims[4].id)["data"] == [4]
        assert row(claims[1].id)["status"] == "processing"
        assert store.complete_many(queue, [(claims[0], "different")]) == [claims[0].id]
        assert store.complete_many(queue, []) == []


class TestFail:
    def test_retryable_schedules_a_retry_with_backoff(self, queue, store):
        claim = submit_and_claim(queue, max_retries=3, retry_delay_seconds=1)
        assert store.fail(queue, claim, "boom", failure={"trace": ["a", "b"]}) == "retrying"
        got = row(claim.id)
        assert got["status"] == "retrying" and got["retry_count"] == 1 and got["last_error"] == "boom"
        assert got["current_worker_id"] is None and got["last_worker_id"] == claim.token
        delay = sql_value(
            "SELECT extract(epoch FROM scheduled_at - last_error_at) FROM runnerq_activities WHERE id = %s",
            [claim.id],
        )
        assert delay == 2  # base 1 s * 2 ** (retry_count + 1), retry_count 0 before the increment
        assert result(claim.id) is None
        [(event_type, worker_id, detail)] = events(claim.id)
        assert (event_type, worker_id) == ("Retrying", claim.token)
        assert (
            detail["retry_count"] == 1
            and detail["error"] == "boom"
            and detail["failure"] == {"trace": ["a", "b"]}
        )
        scheduled = datetime.fromisoformat(detail["scheduled_at"].replace("Z", "+00:00"))
        assert scheduled == datetime.fromisoformat(got["scheduled_at"]).astimezone(UTC)
        assert store.claim(queue) == []
        make_due(claim.id)
        [again] = store.claim(queue)
        assert again.retry_count == 1 and again.attempt == 2

    def test_backoff_grows_and_is_capped(self, queue, store):
        claim = submit_and_claim(queue, max_retries=0, retry_delay_seconds=10, max_retry_delay_seconds=50)
        delays = []
        for _ in range(4):
            assert store.fail(queue, claim, "again") == "retrying"
            delays.append(
                sql_value(
                    "SELECT extract(epoch FROM scheduled_at - last_error_at) FROM runnerq_activities "
                    "WHERE id = %s",
                    [claim.id],
                )
            )
            make_due(claim.id)
            claim = claim_one(queue)
        assert delays == [20, 40, 50, 50]
        assert row(claim.id)["retry_count"] == 4

    def test_the_last_attempt_dead_letters(self, queue, store):
        claim = submit_and_claim(queue, max_retries=2)
        assert store.fail(queue, claim, "first") == "retrying"
        make_due(claim.id)
        second = claim_one(queue)
        assert store.fail(queue, second, "second") == "dead_letter"
        got = row(claim.id)
        assert (got["status"], got["retry_count"], got["last_error"]) == ("dead_letter", 1, "second")
        assert got["completed_at"] is not None
        stored = result(claim.id)
        assert stored["state"] == "Err" and stored["data"] == {"error": "second", "type": "dead_letter"}
        assert event_types(claim.id) == ["Retrying", "DeadLetter"]
        assert events(claim.id)[1][2]["reason"] == "attempts_exhausted"
        assert events(claim.id)[1][1] == second.token

    def test_non_retryable_fails_at_once(self, queue, store):
        claim = submit_and_claim(queue, max_retries=3)
        assert store.fail(queue, claim, "bad input", retryable=False, failure={"code": 7}) == "failed"
        got = row(claim.id)
        assert (got["status"], got["retry_count"], got["last_error"]) == ("failed", 0, "bad input")
        assert result(claim.id)["data"] == {
            "error": "bad input",
            "type": "non_retryable",
            "failure": {"code": 7},
        }
        assert event_types(claim.id) == ["Failed"]

    @pytest.mark.parametrize(
        "retryable, max_retries, outcome",
        [
            (True, 3, "retrying"),
            (True, 1, "dead_letter"),
            (False, 3, "failed"),
        ],
    )
    def test_repeat_is_idempotent(self, queue, retryable, max_retries, outcome, store):
        claim = submit_and_claim(queue, max_retries=max_retries)
        assert store.fail(queue, claim, "boom", retryable=retryable) == outcome
        assert store.fail(queue, claim, "boom", retryable=retryable) == outcome
        assert row(claim.id)["retry_count"] == (1 if outcome == "retrying" else 0)
        assert len(events(claim.id)) == 1

    def test_stale_claim_is_lost(self, queue, store):
        old = submit_and_claim(queue)
        expire_lease(old.id)
        store.reap(queue, 10)
        claim_one(queue)
        with pytest.raises(errors.ClaimLost):
            store.fail(queue, old, "x")
        with pytest.raises(errors.ClaimLost):
            store.fail(queue, Claim(submit(queue, "unclaimed"), "nobody"), "x")
        assert row(old.id)["retry_count"] == 1  # the reaper's count only

    def test_unlimited_attempts_never_dead_letter(self, queue, store):
        claim = submit_and_claim(queue, max_retries=0, retry_delay_seconds=0)
        for _ in range(5):
            assert store.fail(queue, claim, "x") == "retrying"
            claim = claim_one(queue)  # base 0: due at once
        assert row(claim.id)["retry_count"] == 5

    def test_failure_wakes_waiters_with_the_error(self, queue, store):
        parent = submit_and_claim(queue, "parent")
        child = store.submit(
            queue, NewActivity("child", parent_id=parent.id, depth=1, max_retries=1), fence=parent
        ).id
        store.register_dependency(queue, parent, child)
        assert store.park(
            queue,
            parent,
            kind="await",
            step="child:c",
            wake_at="2099-01-01T00:00:00Z",
            result_id=child,
            producer_id=child,
        )
        assert store.fail(queue, claim_one(queue, "child"), "nope", retryable=False) == "failed"
        assert row(parent.id)["status"] == "pending" and row(parent.id)["scheduled_at"] is None
        assert store.get_result(queue, child).state == "Err"


def test_ack_refuses_a_token_of_another_activity(queue, store):
    a = submit_and_claim(queue)
    b = submit_and_claim(queue)
    with pytest.raises(errors.ClaimLost):
        store.complete(queue, Claim(a.id, b.token), 1)
    assert sql_rows("SELECT status FROM runnerq_activities WHERE id IN (%s, %s)", [a.id, b.id]) == [
        ("processing",),
        ("processing",),
    ]
