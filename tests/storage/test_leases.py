import time

import psycopg
import pytest
from django.db import connection

from runnerq_django.storage import errors
from runnerq_django.storage.types import Claim, NewActivity
from tests.helpers import wait_until
from tests.storage.support import (
    claim_one,
    event_types,
    events,
    expire_lease,
    result,
    row,
    sql_rows,
    sql_value,
    submit,
    submit_and_claim,
)


class TestRenew:
    def test_extends_never_shortens_and_stops_after_completion(self, queue, store):
        claim = submit_and_claim(queue)
        first = row(claim.id)["lease_deadline_ms"]
        assert store.renew(queue, claim, 120_000)
        extended = row(claim.id)["lease_deadline_ms"]
        assert extended >= first + 85_000
        assert store.renew(queue, claim, 1_000)  # still ours: True, but the deadline stays
        assert row(claim.id)["lease_deadline_ms"] == extended
        assert event_types(claim.id) == []
        store.complete(queue, claim, 1)
        assert not store.renew(queue, claim, 120_000)
        assert row(claim.id)["lease_deadline_ms"] is None

    def test_a_stale_claim_cannot_renew(self, queue, store):
        old = submit_and_claim(queue)
        expire_lease(old.id)
        store.reap(queue, 10)
        new = claim_one(queue)
        assert not store.renew(queue, old, 60_000)
        assert store.renew(queue, new, 60_000)

    def test_renew_many_returns_the_ids_still_owned(self, queue, store):
        store.submit_many(queue, [NewActivity("t") for _ in range(4)])
        claims = [c.claim for c in store.claim(queue, limit=4)]
        store.complete(queue, claims[0], None)
        renewed = store.renew_many(queue, [*claims[:3], Claim(claims[3].id, "forged")], 60_000)
        assert renewed == {claims[1].id, claims[2].id}
        assert store.renew_many(queue, [], 60_000) == set()

    def test_renewals_are_hot_updates(self, queue, live_db_url, store):
        """A renewal changes only lease_deadline_ms, which no index mentions: Postgres updates the
        row on its own page (HOT), writing no index entries.

        A snapshot held open in another session keeps Postgres from pruning any old version
        meanwhile, as a long transaction would, and the sizes keep every new version on the
        rows' page all the same: so this proves the statement is HOT-eligible whatever else the
        server is doing. The share of HOT updates over thousands of renewals, where pruning must
        keep up, is in bench/storage.py."""
        # 4 rows, 4 claimed versions and 20 renewed versions of ~200 bytes fit in one 8 kB page.
        # A table of its own pages: the flush between tests DELETEs, which leaves earlier tests'
        # dead rows on the pages new rows would share (empty after the flush: nothing is lost).
        with connection.cursor() as cursor:
            cursor.execute("TRUNCATE runnerq_activities CASCADE")
        store.submit_many(queue, [NewActivity("t") for _ in range(4)])
        claims = [c.claim for c in store.claim(queue, limit=4)]
        pages = sql_value(
            "SELECT count(DISTINCT (ctid::text::point)[0]) FROM runnerq_activities WHERE queue_name = %s",
            [queue],
        )
        assert pages == 1
        rounds = 4

        def counters():
            with connection.cursor() as cursor:
                cursor.execute("SELECT pg_stat_force_next_flush()")
                cursor.execute("SELECT pg_stat_clear_snapshot()")
                cursor.execute(
                    "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables "
                    "WHERE relname = 'runnerq_activities'"
                )
                return cursor.fetchone()

        updates_before, hot_before = counters()
        with psycopg.connect(live_db_url) as horizon:
            horizon.execute("BEGIN ISOLATION LEVEL REPEATABLE READ")
            horizon.execute("SELECT count(*) FROM runnerq_activities")
            for step in range(rounds):
                assert len(store.renew_many(queue, claims, 60_000 + step * 1000)) == len(claims)
                assert store.renew(queue, claims[0], 70_000 + step * 1000)
            horizon.rollback()
        expected = rounds * (len(claims) + 1)

        def arrived():
            updates, hot = counters()
            return (
                (updates - updates_before, hot - hot_before) if updates - updates_before >= expected else None
            )

        updates, hot = wait_until(arrived, timeout=10, message="table statistics")
        assert updates == expected
        assert hot == expected, f"{expected - hot} of {expected} renewals were not HOT updates"


class TestRelease:
    def test_gives_claims_back_without_counting_an_attempt(self, queue, store):
        store.submit_many(queue, [NewActivity("t") for _ in range(3)])
        claims = [c.claim for c in store.claim(queue, limit=3, worker_id="w")]
        store.complete(queue, claims[2], None)
        assert store.release(queue, claims) == 2
        for claim in claims[:2]:
            got = row(claim.id)
            assert got["status"] == "pending" and got["retry_count"] == 0
            assert got["current_worker_id"] is None and got["last_worker_id"] == claim.token
            assert got["lease_deadline_ms"] is None and got["started_at"] is None
            assert event_types(claim.id) == []
        assert {c.id for c in store.claim(queue, limit=3)} == {claims[0].id, claims[1].id}
        assert store.release(queue, []) == 0


class TestReap:
    def test_requeues_expired_claims_only(self, queue, store):
        a = submit(queue)
        b = submit(queue)
        claims = {c.id: c.claim for c in store.claim(queue, limit=2, worker_id="w")}
        started_at = row(a)["started_at"]
        expire_lease(a)
        assert store.reap(queue, 10) == 1
        got = row(a)
        assert (got["status"], got["retry_count"]) == ("pending", 1)
        assert got["current_worker_id"] is None and got["last_worker_id"] == claims[a].token
        assert got["lease_deadline_ms"] is None and got["started_at"] is None and got["last_error"]
        [(event_type, worker_id, detail)] = events(a)
        assert (event_type, worker_id) == ("Requeued", claims[a].token)
        assert detail["reason"] == "lease_expired" and detail["retry_count"] == 1
        assert detail["started_at"].startswith(started_at[:19])
        assert row(b)["status"] == "processing"
        assert [c.id for c in store.claim(queue)] == [a]  # no backoff

    def test_the_last_attempt_dead_letters_and_wakes_waiters(self, queue, store):
        parent = submit_and_claim(queue, "parent")
        child = store.submit(
            queue, NewActivity("child", parent_id=parent.id, depth=1, max_retries=1), fence=parent
        ).id
        store.register_dependency(queue, parent, child)
        store.park(
            queue,
            parent,
            kind="await",
            step="child:c",
            wake_at="2099-01-01T00:00:00Z",
            result_id=child,
            producer_id=child,
        )
        child_claim = claim_one(queue, "child")
        expire_lease(child)
        assert store.reap(queue, 10) == 1
        got = row(child)
        assert (got["status"], got["retry_count"]) == ("dead_letter", 0) and got["completed_at"]
        assert result(child)["state"] == "Err" and result(child)["data"]["type"] == "dead_letter"
        [(event_type, worker_id, detail)] = events(child)
        assert (event_type, worker_id, detail["reason"]) == ("DeadLetter", child_claim.token, "lease_expired")
        assert row(parent.id)["status"] == "pending"

    def test_limit_bounds_each_call(self, queue, store):
        store.submit_many(queue, [NewActivity("t") for _ in range(3)])
        for claimed in store.claim(queue, limit=3):
            expire_lease(claimed.id)
        submit(queue + "_other")
        other = claim_one(queue + "_other")
        expire_lease(other.id)
        assert [store.reap(queue, 2), store.reap(queue, 2), store.reap(queue, 2)] == [2, 1, 0]
        assert row(other.id)["status"] == "processing"

    def test_a_live_lease_is_left_alone(self, queue, store):
        claim = submit_and_claim(queue)
        sql_rows(
            "UPDATE runnerq_activities SET lease_deadline_ms = floor(extract(epoch FROM now()) * 1000) + 5000 "
            "WHERE id = %s",
            [claim.id],
        )
        assert store.reap(queue, 10) == 0
        assert store.renew(queue, claim, 1000)


def test_lease_deadline_uses_the_database_clock(queue):
    claim = submit_and_claim(queue)
    db_ms = sql_value("SELECT floor(extract(epoch FROM clock_timestamp()) * 1000)::bigint")
    deadline = row(claim.id)["lease_deadline_ms"]
    assert 0 < deadline - db_ms <= 30_000
    assert abs(db_ms - time.time() * 1000) < 60_000


def test_renew_many_inside_the_callers_transaction_stays_in_it(queue, store):
    """Inside transaction.atomic() the renewals are one statement of the caller's transaction
    (no COMMIT of ours may end it early)."""
    from django.db import transaction

    store.submit_many(queue, [NewActivity("t") for _ in range(3)])
    claims = [c.claim for c in store.claim(queue, limit=3)]
    before = {c.id: row(c.id)["lease_deadline_ms"] for c in claims}
    with pytest.raises(RuntimeError), transaction.atomic():
        assert store.renew_many(queue, claims, 600_000) == {c.id for c in claims}
        raise RuntimeError("roll back")
    assert {c.id: row(c.id)["lease_deadline_ms"] for c in claims} == before


@pytest.mark.parametrize("call", ["renew_many", "complete_many"])
def test_a_multi_statement_call_that_fails_midway_leaves_the_connection_usable(
    queue, live_db_url, call, store
):
    """renew_many sends BEGIN; UPDATE; COMMIT; per renewal in one query, and complete_many sends
    COMPLETE; WAKE: an error partway (here a lock timeout on the second row) must not leave the
    session inside a failed transaction that Django, in autocommit, doesn't know about -- every
    later call on the connection would fail with 25P02."""
    store.submit_many(queue, [NewActivity("t") for _ in range(3)])
    claims = [c.claim for c in store.claim(queue, limit=3)]
    with psycopg.connect(live_db_url) as holder:
        holder.execute("SELECT 1 FROM runnerq_activities WHERE id = %s FOR UPDATE", [claims[1].id])
        with connection.cursor() as cursor:
            cursor.execute("SET lock_timeout = '200ms'")
        try:
            with pytest.raises(errors.Timeout) as failed:
                if call == "renew_many":
                    store.renew_many(queue, claims, 60_000)
                else:
                    store.complete_many(queue, [(c, None) for c in claims])
            assert failed.value.__cause__.sqlstate == "55P03"
            assert connection.connection.info.transaction_status == psycopg.pq.TransactionStatus.IDLE
            # The next call on the same connection works (the locked row is still locked).
            assert store.renew(queue, claims[0], 60_000)
        finally:
            with connection.cursor() as cursor:
                cursor.execute("RESET lock_timeout")
    assert store.renew_many(queue, claims, 60_000) == {c.id for c in claims}
