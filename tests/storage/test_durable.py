import threading
import time
import uuid
from datetime import UTC, datetime, timedelta

import psycopg
import pytest

from runnerq_django import storage
from runnerq_django.spec.keys import checkpoint_id
from runnerq_django.storage import errors
from runnerq_django.storage.types import Claim, NewActivity
from tests.storage.support import (
    OnOwnConnection,
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

FAR = "2099-01-01T00:00:00.000Z"


def spawn_child(queue, parent: Claim, activity_type="child", **fields) -> uuid.UUID:
    child = NewActivity(activity_type, parent_id=parent.id, depth=1, **fields)
    return storage.submit(queue, child, fence=parent).id


class TestCheckpoint:
    def test_is_immutable_owned_and_fenced(self, queue, store):
        claim = submit_and_claim(queue)
        charge = checkpoint_id(claim.id, "run", "charge")
        store.checkpoint(queue, claim, charge, state="Ok", data={"id": "ch_1"}, step="run:charge")
        store.checkpoint(queue, claim, charge, state="Ok", data={"id": "ch_1"}, step="run:charge")
        with pytest.raises(errors.CheckpointConflict):
            store.checkpoint(queue, claim, charge, state="Ok", data={"id": "ch_2"}, step="run:charge")
        with pytest.raises(errors.CheckpointConflict):
            store.checkpoint(queue, claim, charge, state="Err", data={"id": "ch_1"}, step="run:charge")
        stored = result(charge)
        assert (stored["state"], stored["data"], stored["owner_activity_id"], stored["step"]) == (
            "Ok",
            {"id": "ch_1"},
            str(claim.id),
            "run:charge",
        )
        expire_lease(claim.id)
        store.reap(queue, 10)
        claim_one(queue)
        with pytest.raises(errors.ClaimLost):
            store.checkpoint(
                queue, claim, checkpoint_id(claim.id, "run", "other"), state="Ok", data=1, step="run:other"
            )
        assert result(checkpoint_id(claim.id, "run", "other")) is None

    def test_survives_retries_and_lists_by_owner(self, queue, store):
        claim = submit_and_claim(queue, max_retries=3)
        first = checkpoint_id(claim.id, "run", "a")
        second = checkpoint_id(claim.id, "run", "b")
        store.checkpoint(queue, claim, first, state="Ok", data=1, step="run:a")
        store.checkpoint(queue, claim, second, state="Err", data={"error": "x"}, step="run:b")
        store.fail(queue, claim, "boom")
        make_due(claim.id)
        again = claim_one(queue)
        listed = store.list_checkpoints(queue, again.id)
        assert list(listed) == [first, second]
        assert listed[first].data == 1 and listed[first].step == "run:a" and listed[first].ok
        assert listed[second].state == "Err" and not listed[second].ok
        store.complete(queue, again, "done")
        assert set(store.list_checkpoints(queue, again.id)) == {first, second}  # own result excluded
        assert store.get_results(queue, [first, claim.id, uuid.uuid4()]).keys() == {first, claim.id}


class TestDependencies:
    def test_unknown_producer_is_not_found(self, queue, store):
        claim = submit_and_claim(queue)
        with pytest.raises(errors.NotFound):
            store.register_dependency(queue, claim, uuid.uuid4())
        assert sql_value("SELECT count(*) FROM runnerq_dependencies WHERE queue_name = %s", [queue]) == 0

    def test_is_fenced_and_idempotent(self, queue, store):
        producer = submit(queue, "producer")
        claim = submit_and_claim(queue)
        store.register_dependency(queue, claim, producer)
        store.register_dependency(queue, claim, producer)
        assert sql_rows(
            "SELECT waiter_activity_id, result_id, producer_activity_id FROM runnerq_dependencies "
            "WHERE queue_name = %s",
            [queue],
        ) == [(claim.id, producer, producer)]
        store.complete(queue, claim, None)
        with pytest.raises(errors.ClaimLost):
            store.register_dependency(queue, claim, producer)

    def test_many_at_once_write_the_same_rows_in_one_statement(self, queue, store):
        parent = submit_and_claim(queue, "parent")
        children = [spawn_child(queue, parent) for _ in range(5)]
        store.register_dependencies(queue, parent, children)
        store.register_dependencies(queue, parent, children[:2])  # idempotent
        assert sorted(
            sql_rows(
                "SELECT waiter_activity_id, result_id, producer_activity_id FROM runnerq_dependencies "
                "WHERE queue_name = %s",
                [queue],
            ),
            key=str,
        ) == sorted([(parent.id, c, c) for c in children], key=str)
        unknown = uuid.uuid4()
        with pytest.raises(errors.NotFound) as not_found:
            store.register_dependencies(queue, parent, [children[0], unknown])
        assert str(unknown) in str(not_found.value) and str(children[0]) not in str(not_found.value)
        with pytest.raises(errors.InvalidArgument):
            store.register_dependencies(queue, parent, [])
        store.complete(queue, parent, None)
        with pytest.raises(errors.ClaimLost):
            store.register_dependencies(queue, parent, children)


class TestPark:
    def test_sleep_waits_without_counting_an_attempt(self, queue, store):
        claim = submit_and_claim(queue)
        wake_at = datetime.now(UTC) + timedelta(hours=1)
        assert store.park(queue, claim, kind="sleep", step="sleep:cooldown", wake_at=wake_at) is True
        got = row(claim.id)
        assert (got["status"], got["retry_count"], got["current_worker_id"]) == ("waiting", 0, None)
        assert got["last_worker_id"] == claim.token and got["waiting_result_id"] is None
        assert datetime.fromisoformat(got["scheduled_at"]) == wake_at.replace(microsecond=wake_at.microsecond)
        [(event_type, worker_id, detail)] = events(claim.id)
        assert (event_type, worker_id) == ("Yielded", claim.token)
        assert detail == {
            "kind": "sleep",
            "step": "sleep:cooldown",
            "result_id": None,
            "ready": False,
            "wake_at": wake_at.strftime("%Y-%m-%dT%H:%M:%S.%fZ"),
        }
        assert store.claim(queue) == []
        make_due(claim.id)
        [again] = store.claim(queue)
        assert again.retry_count == 0

    def test_a_past_wake_at_is_runnable_at_once(self, queue, store):
        claim = submit_and_claim(queue)
        store.park(
            queue,
            claim,
            kind="sleep",
            step="sleep:s",
            wake_at=datetime.now(UTC) - timedelta(seconds=1),
        )
        assert [c.id for c in store.claim(queue)] == [claim.id]

    def test_is_idempotent_and_fenced(self, queue, store):
        claim = submit_and_claim(queue)
        assert store.park(queue, claim, kind="sleep", step="sleep:s", wake_at=FAR)
        assert store.park(queue, claim, kind="sleep", step="sleep:s", wake_at=FAR)
        assert event_types(claim.id) == ["Yielded"]
        other = submit_and_claim(queue, "other")
        expire_lease(other.id)
        store.reap(queue, 10)
        with pytest.raises(errors.ClaimLost):
            store.park(queue, other, kind="sleep", step="sleep:s", wake_at=FAR)
        assert row(other.id)["status"] == "pending"

    def test_await_waits_for_the_child_and_its_result_wakes_it(self, queue, store):
        parent = submit_and_claim(queue, "parent")
        child = spawn_child(queue, parent)
        store.register_dependency(queue, parent, child)
        assert store.park(
            queue, parent, kind="await", step="child:k", wake_at=FAR, result_id=child, producer_id=child
        )
        got = row(parent.id)
        assert got["status"] == "waiting" and got["waiting_result_id"] == str(child)
        assert (
            events(parent.id)[0][2]["result_id"] == str(child) and events(parent.id)[0][2]["ready"] is False
        )
        store.complete(queue, claim_one(queue, "child"), {"ok": True})
        got = row(parent.id)
        assert got["status"] == "pending" and got["scheduled_at"] is None
        [again] = store.claim(queue, types=["parent"])
        assert row(parent.id)["waiting_result_id"] is None and again.id == parent.id

    def test_await_on_a_stored_result_stays_runnable(self, queue, store):
        child = submit_and_claim(queue, "child")
        store.complete(queue, child, 7)
        parent = submit_and_claim(queue, "parent")
        store.register_dependency(queue, parent, child.id)
        assert (
            store.park(
                queue,
                parent,
                kind="await",
                step="child:k",
                wake_at=FAR,
                result_id=child.id,
                producer_id=child.id,
            )
            is False
        )
        got = row(parent.id)
        assert (
            got["status"] == "pending"
            and got["current_worker_id"] is None
            and got["waiting_result_id"] is None
        )
        assert events(parent.id)[0][2]["ready"] is True
        assert [c.id for c in store.claim(queue, types=["parent"])] == [parent.id]

    def test_retrying_child_keeps_the_parent_waiting(self, queue, store):
        parent = submit_and_claim(queue, "parent")
        child = spawn_child(queue, parent, max_retries=3)
        store.register_dependency(queue, parent, child)
        store.park(
            queue, parent, kind="await", step="child:k", wake_at=FAR, result_id=child, producer_id=child
        )
        assert store.fail(queue, claim_one(queue, "child"), "later") == "retrying"
        assert row(parent.id)["status"] == "waiting" and result(child) is None

    def test_every_waiter_wakes(self, queue, store):
        producer = submit(queue, "producer")
        waiters = [submit_and_claim(queue, "waiter") for _ in range(3)]
        for waiter in waiters:
            store.register_dependency(queue, waiter, producer)
            store.park(
                queue,
                waiter,
                kind="await",
                step="child:p",
                wake_at=FAR,
                result_id=producer,
                producer_id=producer,
            )
        store.complete(queue, claim_one(queue, "producer"), 1)
        assert [row(w.id)["status"] for w in waiters] == ["pending"] * 3

    def test_a_waiter_of_another_result_stays(self, queue, store):
        a = submit(queue, "producer")
        b = submit(queue, "producer")
        waiter = submit_and_claim(queue, "waiter")
        store.register_dependency(queue, waiter, a)
        store.register_dependency(queue, waiter, b)
        store.park(queue, waiter, kind="await", step="child:b", wake_at=FAR, result_id=b, producer_id=b)
        store.complete(
            queue, next(c.claim for c in store.claim(queue, types=["producer"], limit=2) if c.id == a), 1
        )
        assert row(waiter.id)["status"] == "waiting"

    def test_park_registers_the_producer_when_the_caller_did_not(self, queue, store):
        parent = submit_and_claim(queue, "parent")
        child = spawn_child(queue, parent)
        store.park(
            queue, parent, kind="await", step="child:k", wake_at=FAR, result_id=child, producer_id=child
        )
        store.complete(queue, claim_one(queue, "child"), 1)
        assert row(parent.id)["status"] == "pending"

    @pytest.mark.parametrize("ending", ["completed", "failed", "dead_letter_by_reaper", "cancelled"])
    def test_a_parent_parked_without_a_dependency_row_still_wakes(self, queue, ending, store):
        """Another SDK's park may not write runnerq_dependencies: the child's own parent is
        checked too."""
        parent = submit_and_claim(queue, "parent")
        child = spawn_child(queue, parent, max_retries=1)
        sql_rows(
            "UPDATE runnerq_activities SET status = 'waiting', waiting_result_id = %s, scheduled_at = %s, "
            "current_worker_id = NULL WHERE id = %s",
            [child, FAR, parent.id],
        )
        other_parent = submit_and_claim(queue, "other")  # its child finishes, but it waits on something else
        other_child = spawn_child(queue, other_parent, "other_child")
        sql_rows(
            "UPDATE runnerq_activities SET status = 'waiting', waiting_result_id = %s, scheduled_at = %s, "
            "current_worker_id = NULL WHERE id = %s",
            [uuid.uuid4(), FAR, other_parent.id],
        )
        store.complete(queue, claim_one(queue, "other_child"), 1)
        assert row(other_parent.id)["status"] == "waiting" and row(other_child)["status"] == "completed"
        child_claim = claim_one(queue, "child")
        if ending == "completed":
            store.complete(queue, child_claim, 1)
        elif ending == "failed":
            store.fail(queue, child_claim, "x", retryable=False)
        elif ending == "cancelled":
            from runnerq_django.storage import commands

            assert commands.cancel(queue, [child]).applied == 1
        else:
            expire_lease(child)
            assert store.reap(queue, 10) == 1
        assert row(parent.id)["status"] == "pending"

    @pytest.mark.parametrize("kind", ["signal", "await"])
    def test_a_wait_without_a_timeout_is_never_due_and_its_result_wakes_it(self, queue, kind, store):
        """wake_at is an optional timeout for signal and await: without it the row waits with no
        scheduled_at (never due) until its result is stored. The Yielded event, whose wake_at
        the events schema requires, records the last instant RFC 3339 can name."""
        claim = submit_and_claim(queue, "waiter")
        if kind == "signal":
            result_id = checkpoint_id(claim.id, "signal", "go")
            waiting = store.park(queue, claim, kind="signal", step="signal:go", result_id=result_id)
        else:
            result_id = submit(queue, "producer")
            waiting = store.park(
                queue, claim, kind="await", step="child:p", result_id=result_id, producer_id=result_id
            )
        assert waiting is True
        got = row(claim.id)
        assert (got["status"], got["scheduled_at"], got["waiting_result_id"]) == (
            "waiting",
            None,
            str(result_id),
        )
        [(_, _, detail)] = events(claim.id)
        assert detail["wake_at"] == "9999-12-31T23:59:59.999999Z" and detail["ready"] is False
        sql_rows(
            "UPDATE runnerq_activities SET created_at = created_at - interval '1 day' WHERE id = %s",
            [claim.id],
        )
        assert store.claim(queue, types=["waiter"]) == []
        if kind == "signal":
            assert store.signal(queue, claim.id, "go", 1) is True
        else:
            store.complete(queue, claim_one(queue, "producer"), 1)
        assert [c.id for c in store.claim(queue, types=["waiter"])] == [claim.id]

    def test_a_sleep_needs_wake_at(self, queue, store):
        claim = submit_and_claim(queue)
        with pytest.raises(errors.InvalidArgument) as refused:
            store.park(queue, claim, kind="sleep", step="sleep:s")
        assert refused.value.field == "wake_at"
        assert row(claim.id)["status"] == "processing"

    def test_timeout_makes_a_waiting_activity_claimable(self, queue, store):
        claim = submit_and_claim(queue)
        signal_id = checkpoint_id(claim.id, "signal", "approve")
        store.park(queue, claim, kind="signal", step="signal:approve", wake_at=FAR, result_id=signal_id)
        assert store.claim(queue) == []
        make_due(claim.id)
        assert [c.id for c in store.claim(queue)] == [claim.id]

    def test_no_lost_wake_up_when_the_result_lands_during_the_park(self, queue, live_db_url, store):
        """The child completes while the parent's park is in flight (its row locked, its result
        check not yet run): whichever commits second must see the other, so the parent ends
        runnable, never waiting on a result that is already there."""
        parent = submit_and_claim(queue, "parent")
        child = spawn_child(queue, parent)
        store.register_dependency(queue, parent, child)
        child_claim = claim_one(queue, "child")
        # Another connection stands in for a park that has locked the row but not yet looked
        # for the result (PARK_LOCK done, PARK not yet run).
        with psycopg.connect(live_db_url) as blocker:
            blocker.execute("SELECT 1 FROM runnerq_activities WHERE id = %s FOR NO KEY UPDATE", [parent.id])
            done = threading.Event()
            waker = threading.Thread(target=lambda: (store.complete(queue, child_claim, 1), done.set()))
            waker.start()
            time.sleep(0.3)
            assert not done.is_set(), "the waker must wait for the parked row"
            # The park now runs its statements in the blocker's transaction and commits.
            blocker.execute(
                """
                UPDATE runnerq_activities SET status = 'waiting', waiting_result_id = %s, scheduled_at = %s,
                       last_worker_id = current_worker_id, current_worker_id = NULL WHERE id = %s""",
                [child, FAR, parent.id],
            )
            blocker.commit()
        waker.join(10)
        assert done.is_set()
        from django.db import connections

        connections.close_all()  # the thread's connection
        assert row(parent.id)["status"] == "pending"

    def test_no_lost_wake_up_when_the_park_comes_second(self, queue, live_db_url, store):
        """The waker has completed the child and locked the parent's row (as wake_waiters does,
        producer first, then waiters); the park's result check runs after the waker committed
        and finds the result."""
        parent = submit_and_claim(queue, "parent")
        child = spawn_child(queue, parent)
        store.register_dependency(queue, parent, child)
        child_claim = claim_one(queue, "child")
        with psycopg.connect(live_db_url) as waker:
            waker.execute(
                "UPDATE runnerq_activities SET status = 'completed', completed_at = now(), "
                "current_worker_id = NULL WHERE id = %s",
                [child_claim.id],
            )
            waker.execute(
                """
                INSERT INTO runnerq_results (activity_id, queue_name, state, data, owner_activity_id)
                VALUES (%s, %s, 'Ok', '1', %s)""",
                [child, queue, child],
            )
            waker.execute("SELECT 1 FROM runnerq_activities WHERE id = %s FOR NO KEY UPDATE", [parent.id])
            parked = {}
            parker = threading.Thread(
                target=lambda: parked.setdefault(
                    "waiting",
                    store.park(
                        queue,
                        parent,
                        kind="await",
                        step="child:k",
                        wake_at=FAR,
                        result_id=child,
                        producer_id=child,
                    ),
                )
            )
            parker.start()
            time.sleep(0.3)
            assert "waiting" not in parked, "the park must wait for the waker"
            waker.commit()
        parker.join(10)
        from django.db import connections

        connections.close_all()
        assert parked == {"waiting": False}
        assert row(parent.id)["status"] == "pending"


PRODUCERS = ["unrelated", "child", "unrelated_registered"]


def producer_for(queue, parent: Claim, how: str) -> uuid.UUID:
    """An activity of type "producer" for ``parent`` to await: its child, or an activity of another
    tree; ``*_registered`` also records the dependency first (committed), as the context does."""
    producer = spawn_child(queue, parent, "producer") if how == "child" else submit(queue, "producer")
    if how.endswith("_registered"):
        storage.register_dependency(queue, parent, producer)
    return producer


class TestNoLostWakeUp:
    """A park on a result and the write of that result, racing on two connections: whichever
    commits second must see the other's write, so the parker never stays waiting on a result
    that is stored. Each test freezes one side between its statements and its commit."""

    def await_park(self, queue, parent: Claim, producer: uuid.UUID):
        return lambda: storage.park(
            queue, parent, kind="await", step="child:p", wake_at=FAR, result_id=producer, producer_id=producer
        )

    @pytest.mark.parametrize("how", PRODUCERS)
    def test_a_park_waits_for_a_completion_in_flight(self, queue, how, store):
        """The producer's completion has written its result but not committed when the parent
        parks: the park must wait for it and then find the result (it stays runnable)."""
        parent = submit_and_claim(queue, "parent")
        producer = producer_for(queue, parent, how)
        producer_claim = claim_one(queue, "producer")
        completer = OnOwnConnection(
            lambda: store.complete(queue, producer_claim, {"v": 1}), hold=True
        ).begin()
        assert completer.ran.wait(10) and completer.error is None
        parker = OnOwnConnection(self.await_park(queue, parent, producer)).begin()
        waited = parker.wait_blocked_or_done()
        completer.join_result()
        still_waiting = parker.join_result()
        assert row(producer)["status"] == "completed"
        assert row(parent.id)["status"] == "pending", (
            f"lost wake-up: the parent waits on a stored result (park waited for the completion: {waited})"
        )
        assert still_waiting is False and events(parent.id)[0][2]["ready"] is True

    @pytest.mark.parametrize("how", PRODUCERS)
    def test_a_completion_sees_a_park_in_flight(self, queue, how, store):
        """The parent's park has run (row waiting, dependency written) but not committed when the
        producer completes: the completion must wait for it and then wake the parent."""
        parent = submit_and_claim(queue, "parent")
        producer = producer_for(queue, parent, how)
        producer_claim = claim_one(queue, "producer")
        parker = OnOwnConnection(self.await_park(queue, parent, producer), hold=True).begin()
        assert parker.ran.wait(10) and parker.error is None and parker.result is True
        completer = OnOwnConnection(lambda: store.complete(queue, producer_claim, {"v": 1})).begin()
        waited = completer.wait_blocked_or_done()
        assert parker.join_result() is True
        completer.join_result()
        assert row(producer)["status"] == "completed"
        assert row(parent.id)["status"] == "pending", (
            f"lost wake-up: the parent waits on a stored result (completion waited for the park: {waited})"
        )

    @pytest.mark.parametrize("ending", ["failed", "cancelled"])
    def test_other_endings_see_a_park_in_flight(self, queue, ending, store):
        """A terminal failure and an operator cancel store the producer's result too."""
        from runnerq_django.storage import commands

        parent = submit_and_claim(queue, "parent")
        producer = submit(queue, "producer")
        producer_claim = claim_one(queue, "producer")
        parker = OnOwnConnection(self.await_park(queue, parent, producer), hold=True).begin()
        assert parker.ran.wait(10) and parker.error is None
        if ending == "failed":
            ender = OnOwnConnection(lambda: store.fail(queue, producer_claim, "no", retryable=False)).begin()
        else:
            ender = OnOwnConnection(lambda: commands.cancel(queue, [producer])).begin()
        ender.wait_blocked_or_done()
        parker.join_result()
        ender.join_result()
        assert row(producer)["status"] == ending
        assert row(parent.id)["status"] == "pending"

    def test_a_signal_sees_a_signal_park_in_flight(self, queue, store):
        """A signal park has no producer row to lock: the signal locks the target row itself (the
        only activity that parks on its signal id) before it stores the payload, so it waits for
        the park and then finds the row waiting."""
        claim = submit_and_claim(queue)
        signal_id = checkpoint_id(claim.id, "signal", "go")
        parker = OnOwnConnection(
            lambda: store.park(
                queue, claim, kind="signal", step="signal:go", wake_at=FAR, result_id=signal_id
            ),
            hold=True,
        ).begin()
        assert parker.ran.wait(10) and parker.error is None
        signaller = OnOwnConnection(lambda: store.signal(queue, claim.id, "go", {"v": 1})).begin()
        assert signaller.wait_blocked_or_done(), "the signal must wait for the parking row"
        assert parker.join_result() is True
        assert signaller.join_result() is True
        assert row(claim.id)["status"] == "pending"

    def test_a_signal_park_waits_for_a_signal_in_flight(self, queue, store):
        claim = submit_and_claim(queue)
        signal_id = checkpoint_id(claim.id, "signal", "go")
        signaller = OnOwnConnection(lambda: store.signal(queue, claim.id, "go", {"v": 1}), hold=True).begin()
        assert signaller.ran.wait(10) and signaller.error is None
        parker = OnOwnConnection(
            lambda: store.park(
                queue, claim, kind="signal", step="signal:go", wake_at=FAR, result_id=signal_id
            )
        ).begin()
        assert parker.wait_blocked_or_done(), "the park must wait for the signal holding its row"
        assert signaller.join_result() is False  # it arrived before the park: kept for it
        assert parker.join_result() is False
        assert row(claim.id)["status"] == "pending"

    @pytest.mark.slow
    @pytest.mark.parametrize("registered", [False, True])
    def test_racing_parks_and_completions_never_lose_a_wake_up_or_deadlock(self, queue, registered, store):
        """Free-running races (no forced order), many rounds: every parent ends runnable, and no
        call fails (a deadlock between the two lock orders would surface as Conflict)."""
        rounds = 40
        store.submit_many(queue, [NewActivity("parent") for _ in range(rounds)])
        store.submit_many(queue, [NewActivity("producer") for _ in range(rounds)])
        parents = [c.claim for c in store.claim(queue, types=["parent"], limit=rounds)]
        producers = [c.claim for c in store.claim(queue, types=["producer"], limit=rounds)]
        if registered:
            for parent, producer in zip(parents, producers):
                store.register_dependency(queue, parent, producer.id)
        barrier = threading.Barrier(2, timeout=30)

        def parking():
            for parent, producer in zip(parents, producers):
                barrier.wait()
                store.park(
                    queue,
                    parent,
                    kind="await",
                    step="child:p",
                    wake_at=FAR,
                    result_id=producer.id,
                    producer_id=producer.id,
                )

        def completing():
            for producer in producers:
                barrier.wait()
                store.complete(queue, producer, 1)

        threads = [OnOwnConnection(parking).begin(), OnOwnConnection(completing).begin()]
        for thread in threads:
            thread.join_result(120)
        statuses = dict(
            sql_rows(
                "SELECT status, count(*) FROM runnerq_activities WHERE queue_name = %s "
                "AND activity_type = 'parent' GROUP BY status",
                [queue],
            )
        )
        assert statuses == {"pending": rounds}


class TestSignal:
    def test_wakes_the_parked_target_and_the_last_signal_wins(self, queue, store):
        claim = submit_and_claim(queue)
        signal_id = checkpoint_id(claim.id, "signal", "approve")
        store.park(queue, claim, kind="signal", step="signal:approve", wake_at=FAR, result_id=signal_id)
        assert store.signal(queue, claim.id, "approve", {"by": "ops"}) is True
        assert row(claim.id)["status"] == "pending"
        stored = result(signal_id)
        assert (stored["state"], stored["data"], stored["owner_activity_id"], stored["step"]) == (
            "Ok",
            {"by": "ops"},
            str(claim.id),
            "signal:approve",
        )
        assert (
            store.signal(queue, claim.id, "approve", {"by": "cto"}, command_id="cmd-1", reason="urgent")
            is False
        )
        assert result(signal_id)["data"] == {"by": "cto"}
        signaled = [detail for event_type, _, detail in events(claim.id) if event_type == "Signaled"]
        assert signaled == [
            {"name": "approve", "signal_id": str(signal_id), "woke": True},
            {
                "name": "approve",
                "signal_id": str(signal_id),
                "woke": False,
                "command_id": "cmd-1",
                "reason": "urgent",
            },
        ]

    def test_an_early_signal_is_kept_for_the_park(self, queue, store):
        claim = submit_and_claim(queue)
        assert store.signal(queue, claim.id, "go", 1) is False
        assert row(claim.id)["status"] == "processing"
        assert (
            store.park(
                queue,
                claim,
                kind="signal",
                step="signal:go",
                wake_at=FAR,
                result_id=checkpoint_id(claim.id, "signal", "go"),
            )
            is False
        )
        assert row(claim.id)["status"] == "pending"

    def test_a_signal_of_another_name_does_not_wake(self, queue, store):
        claim = submit_and_claim(queue)
        store.park(
            queue,
            claim,
            kind="signal",
            step="signal:a",
            wake_at=FAR,
            result_id=checkpoint_id(claim.id, "signal", "a"),
        )
        assert store.signal(queue, claim.id, "b", None) is False
        assert row(claim.id)["status"] == "waiting"

    def test_unknown_target_is_not_found(self, queue, store):
        with pytest.raises(errors.NotFound):
            store.signal(queue, uuid.uuid4(), "approve", 1)
        other_queue_target = submit(queue + "_x")
        with pytest.raises(errors.NotFound):
            store.signal(queue, other_queue_target, "approve", 1)
        assert sql_value("SELECT count(*) FROM runnerq_results WHERE queue_name = %s", [queue]) == 0


def test_get_result_reads_what_was_stored(queue, store):
    claim = submit_and_claim(queue)
    assert store.get_result(queue, claim.id) is None
    store.complete(queue, claim, {"a": [1]})
    stored = store.get_result(queue, claim.id)
    assert (stored.state, stored.data, stored.serialization, stored.step) == (
        "Ok",
        {"a": [1]},
        "json-v1",
        None,
    )
    assert store.get_result(queue + "_other", claim.id) is None
