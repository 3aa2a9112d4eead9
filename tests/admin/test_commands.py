"""The operator commands of the storage layer: row, event and ledger for each, replay, skips."""

from __future__ import annotations

import uuid
from datetime import UTC, datetime, timedelta, timezone

import pytest

from runnerq_django.storage import commands
from runnerq_django.storage.errors import Conflict, InvalidArgument
from tests.admin.factories import (
    QUEUE,
    add_dependency,
    add_event,
    add_result,
    events,
    ledger,
    make_activity,
    result_row,
    row,
)

pytestmark = pytest.mark.django_db


def test_cancel_pending_writes_row_event_result_and_ledger(assert_event_valid):
    a = make_activity("pending")
    res = commands.cancel(QUEUE, [a], command_id="c-1", reason="customer asked")
    assert res.to_dict() == {
        "matched": 1,
        "applied": 1,
        "cascaded": 0,
        "more": False,
        "results": [{"id": str(a), "outcome": "applied", "status": "cancelled"}],
    }
    r = row(a)
    assert r["status"] == "cancelled" and r["completed_at"] and r["current_worker_id"] is None
    assert r["last_error"] == "activity cancelled: customer asked"
    [(etype, detail, worker)] = events(a)
    assert etype == "Cancelled" and detail == {
        "command_id": "c-1",
        "from": "pending",
        "reason": "customer asked",
    }
    assert_event_valid(etype, detail, worker)
    res_row = result_row(a)
    assert res_row["state"] == "Err" and res_row["data"]["type"] == "cancelled" and res_row["step"] is None
    stored = ledger("c-1")
    assert stored["kind"] == "cancel" and stored["result"]["applied"] == 1
    assert stored["result"]["items"] == [{"id": str(a), "outcome": "applied", "status": "cancelled"}]


def test_cancel_fences_running_claim_cascades_and_wakes_awaiter():
    parent = make_activity("waiting")
    child = make_activity("processing", parent=parent)
    grandchild = make_activity("pending", parent=child, root=parent)
    done = make_activity("completed", parent=child, root=parent)
    awaiter = make_activity("waiting", waiting_result_id=child)
    add_dependency(awaiter, child, producer=child)
    token = row(child)["current_worker_id"]

    res = commands.cancel(QUEUE, [child], command_id="c-2")
    assert (res.matched, res.applied, res.cascaded) == (1, 1, 1)
    c = row(child)
    assert c["status"] == "cancelled" and c["current_worker_id"] is None and c["last_worker_id"] == token
    assert c["lease_deadline_ms"] is None
    assert row(grandchild)["status"] == "cancelled"
    assert events(grandchild)[0][1] == {"command_id": "c-2", "from": "pending"}
    assert events(child)[0][1] == {"command_id": "c-2", "from": "processing"}
    assert row(done)["status"] == "completed" and events(done) == []
    # The stored cancellation result wakes whoever awaited the child; the parent (not an awaiter
    # of this result) stays parked.
    assert row(awaiter)["status"] == "pending"
    assert row(parent)["status"] == "waiting"


def test_cancel_without_cascade_leaves_children():
    parent = make_activity("pending")
    child = make_activity("pending", parent=parent)
    res = commands.cancel(QUEUE, [parent], cascade=False)
    assert res.cascaded == 0 and row(child)["status"] == "pending"


def test_cancel_skips_terminal_and_unknown_with_reasons():
    done = make_activity("completed")
    ghost = uuid.uuid4()
    res = commands.cancel(QUEUE, [done, ghost], command_id="c-3")
    assert (res.matched, res.applied) == (1, 0)
    by_id = {item.id: item for item in res.results}
    assert by_id[str(done)].outcome == "skipped" and by_id[str(done)].error.code == "failed_precondition"
    assert by_id[str(done)].error.details == {"status": "completed"}
    assert by_id[str(ghost)].error.code == "not_found"
    assert events(done) == []
    stored = ledger("c-3")["result"]["items"]
    assert {item["err_kind"] for item in stored} == {1, 2}  # conflict, not_found (frozen numbers)


def test_repeated_command_id_replays_and_different_input_conflicts():
    a = make_activity("pending")
    first = commands.cancel(QUEUE, [a], command_id="c-4")
    again = commands.cancel(QUEUE, [a], command_id="c-4")
    assert again.replayed is True and again.applied == 1 and again.results == first.results
    assert len(events(a)) == 1
    b = make_activity("pending")
    with pytest.raises(Conflict):
        commands.cancel(QUEUE, [b], command_id="c-4")
    assert row(b)["status"] == "pending"


def test_without_command_id_nothing_is_recorded():
    a = make_activity("pending")
    commands.cancel(QUEUE, [a])
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM runnerq_commands")
        assert cur.fetchone()[0] == 0


def test_dry_run_changes_nothing():
    parent = make_activity("pending")
    make_activity("pending", parent=parent)
    res = commands.cancel(QUEUE, [parent], command_id="dry", dry_run=True)
    assert res.results[0].outcome == "would_apply" and res.applied == 0 and res.cascaded == 1
    assert row(parent)["status"] == "pending" and events(parent) == [] and ledger("dry") is None


@pytest.mark.parametrize(
    "status,event_type", [("failed", "Retried"), ("cancelled", "Retried"), ("dead_letter", "Redriven")]
)
def test_retry_keeps_checkpoints_and_drops_the_result(status, event_type, assert_event_valid):
    a = make_activity(status, retry_count=2)
    add_result(a, state="Err", data={"error": "boom"})
    checkpoint = uuid.uuid4()
    add_result(checkpoint, data={"charged": True}, owner=a, step="run:charge")
    res = commands.retry(QUEUE, [a], reset_attempts=False, command_id=f"r-{status}", reason="fixed")
    assert res.results[0].status == "pending" and res.applied == 1
    r = row(a)
    assert r["status"] == "pending" and r["retry_count"] == 2 and r["completed_at"] is None
    assert result_row(a) is None and result_row(checkpoint)["data"] == {"charged": True}
    [(etype, detail, worker)] = events(a)
    assert etype == event_type
    assert detail == {"command_id": f"r-{status}", "from": status, "reset_attempts": False, "reason": "fixed"}
    assert_event_valid(etype, detail, worker)
    assert ledger(f"r-{status}")["kind"] == "retry"


def test_retry_reset_attempts_and_skips():
    a = make_activity("dead_letter", retry_count=2)
    running = make_activity("processing")
    completed = make_activity("completed")
    res = commands.retry(QUEUE, [a, running, completed], reset_attempts=True)
    assert row(a)["retry_count"] == 0 and events(a)[0][1]["reset_attempts"] is True
    outcomes = [(item.outcome, item.status) for item in res.results]
    assert outcomes == [("applied", "pending"), ("skipped", "running"), ("skipped", "completed")]


def test_redrive_only_touches_dead_letters():
    dl = make_activity("dead_letter")
    failed = make_activity("failed")
    res = commands.redrive(QUEUE, [dl, failed], command_id="rd")
    assert [item.outcome for item in res.results] == ["applied", "skipped"]
    assert row(failed)["status"] == "failed" and events(dl)[0][0] == "Redriven"


def test_run_now(assert_event_valid):
    sched = make_activity("scheduled")
    retrying = make_activity("retrying", retry_count=1)
    waiting = make_activity(
        "waiting",
        waiting_result_id=uuid.uuid4(),
        scheduled_at=datetime.now(UTC) + timedelta(hours=1),
    )
    pending = make_activity("pending")
    res = commands.run_now(QUEUE, [sched, retrying, waiting, pending], command_id="rn")
    assert [i.outcome for i in res.results] == ["applied", "applied", "applied", "skipped"]
    assert [i.status for i in res.results] == ["scheduled", "scheduled", "pending", "pending"]
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT count(*) FROM runnerq_activities WHERE id = ANY(%s) AND scheduled_at <= now()",
            [[sched, retrying]],
        )
        assert cur.fetchone()[0] == 2
    w = row(waiting)
    assert w["status"] == "pending" and w["scheduled_at"] is None and w["waiting_result_id"] is None
    for a in (sched, retrying, waiting):
        [(etype, detail, worker)] = events(a)
        assert etype == "RunNow" and detail == {"command_id": "rn"}
        assert_event_valid(etype, detail, worker)
    assert events(pending) == []
    assert ledger("rn")["result"]["applied"] == 3


def test_reschedule(assert_event_valid):
    sched = make_activity("scheduled")
    pending = make_activity("pending")
    at = datetime(2031, 10, 3, 9, 0, tzinfo=UTC)
    res = commands.reschedule(QUEUE, [sched, pending], at, command_id="rs")
    assert [i.outcome for i in res.results] == ["applied", "skipped"]
    assert row(sched)["scheduled_at"].startswith("2031-10-03T09:00:00")
    [(etype, detail, worker)] = events(sched)
    assert etype == "Rescheduled" and detail == {"command_id": "rs", "at": "2031-10-03T09:00:00.000000Z"}
    assert_event_valid(etype, detail, worker)
    assert ledger("rs")["kind"] == "reschedule"
    with pytest.raises(InvalidArgument) as err:
        commands.reschedule(QUEUE, [sched], datetime(2031, 1, 1))
    assert err.value.field == "at"


def test_set_priority(assert_event_valid):
    a = make_activity("processing")
    done = make_activity("failed")
    res = commands.set_priority(QUEUE, [a, done], 4, command_id="sp", reason="vip")
    assert [i.outcome for i in res.results] == ["applied", "skipped"] and res.results[0].status == "running"
    assert row(a)["priority"] == 4 and row(done)["priority"] == 2
    [(etype, detail, worker)] = events(a)
    assert etype == "PriorityChanged" and detail == {"command_id": "sp", "priority": 4, "reason": "vip"}
    assert_event_valid(etype, detail, worker)
    assert ledger("sp")["kind"] == "set_priority"
    for bad in (0, 5, "3", True):
        with pytest.raises(InvalidArgument):
            commands.set_priority(QUEUE, [a], bad)


def test_delete_tree_removes_everything_and_skips_what_it_must():
    root = make_activity("completed")
    child = make_activity("completed", parent=root)
    add_result(root)
    add_result(child)
    cp = uuid.uuid4()
    add_result(cp, owner=child, step="run:x")
    add_event(child, "Failed", {"started_at": "2026-01-01T00:00:00Z", "error": "x"}, worker_id="t")
    add_dependency(root, child, producer=child)

    running_root = make_activity("completed")
    make_activity("processing", parent=running_root)
    non_root = make_activity("completed", parent=make_activity("completed"))
    pinned_root = make_activity("failed")
    live_waiter = make_activity("waiting", waiting_result_id=pinned_root)
    add_dependency(live_waiter, pinned_root, producer=pinned_root)

    res = commands.delete_tree(QUEUE, [root, running_root, non_root, pinned_root], command_id="del")
    outcomes = {uuid.UUID(i.id): i for i in res.results}
    assert outcomes[root].outcome == "applied" and outcomes[root].status is None
    assert "still running" in outcomes[running_root].error.message
    assert "not a root" in outcomes[non_root].error.message
    assert "pinned" in outcomes[pinned_root].error.message
    assert row(root) == {} and row(child) == {} and result_row(cp) is None and events(child) == []
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM runnerq_inputs WHERE activity_id = ANY(%s)", [[root, child]])
        assert cur.fetchone()[0] == 0
        cur.execute("SELECT count(*) FROM runnerq_dependencies WHERE waiter_activity_id = %s", [root])
        assert cur.fetchone()[0] == 0
    assert row(running_root) and row(pinned_root)
    assert ledger("del")["result"]["applied"] == 1


def test_bad_input_is_refused_naming_the_field():
    with pytest.raises(InvalidArgument) as err:
        commands.cancel("bad queue!", [uuid.uuid4()])
    assert err.value.field == "queue"
    with pytest.raises(InvalidArgument) as err:
        commands.cancel(QUEUE, ["not-a-uuid"])
    assert err.value.field == "ids"
    with pytest.raises(InvalidArgument):
        commands.cancel(QUEUE, [])
    with pytest.raises(InvalidArgument):
        commands.cancel(QUEUE, [uuid.uuid4() for _ in range(1001)])


OPERATOR_COMMANDS = [
    lambda target, **kw: commands.cancel(QUEUE, [target], **kw),
    lambda target, **kw: commands.retry(QUEUE, [target], **kw),
    lambda target, **kw: commands.redrive(QUEUE, [target], **kw),
    lambda target, **kw: commands.run_now(QUEUE, [target], **kw),
    lambda target, **kw: commands.reschedule(QUEUE, [target], "2030-01-01T00:00:00Z", **kw),
    lambda target, **kw: commands.set_priority(QUEUE, [target], 3, **kw),
    lambda target, **kw: commands.delete_tree(QUEUE, [target], **kw),
]


@pytest.mark.parametrize("command", OPERATOR_COMMANDS)
@pytest.mark.parametrize(
    "kwargs, field, words",
    [
        ({"reason": "a\x00b"}, "reason", "NUL"),
        ({"reason": "a\udcffb"}, "reason", "lone surrogate U+DCFF"),
        ({"reason": "r" * 4097}, "reason", "at most 4096 bytes"),
        ({"command_id": "c\x00"}, "command_id", "NUL"),
        ({"command_id": "c\ud800"}, "command_id", "lone surrogate U+D800"),
        ({"command_id": "é" * 257}, "command_id", "at most 512 bytes"),
    ],
)
def test_reason_and_command_id_are_checked_by_every_command(command, kwargs, field, words):
    activity = make_activity(status="pending")
    before = row(activity)
    with pytest.raises(InvalidArgument) as err:
        command(activity, **kwargs)
    assert err.value.field == field and words in err.value.message
    assert row(activity) == before and events(activity) == []


@pytest.mark.parametrize(
    "at", ["9999-12-31T23:59:59-14:00", datetime(9999, 12, 31, 23, 0, tzinfo=timezone(-timedelta(hours=2)))]
)
def test_reschedule_refuses_a_time_past_year_9999_in_utc(at):
    activity = make_activity(status="pending", scheduled_at=datetime.now(UTC) + timedelta(hours=1))
    with pytest.raises(InvalidArgument) as err:
        commands.reschedule(QUEUE, [activity], at)
    assert err.value.field == "at" and "9999-12-31T23:59:59.999999Z" in err.value.message
    assert events(activity) == []


@pytest.mark.parametrize("name", ["é", "queue_ü", "ä" * 48, "q" * 49, "1q", "", "q-1", None])
def test_queue_names_follow_the_storage_rule(name):
    """The storage layer's rule: 1-48 ASCII letters, digits and underscores, not starting with a
    digit. A non-ASCII name used to pass; 48 two-byte letters then made the NOTIFY channel
    longer than Postgres's 63-byte identifier limit and failed with an untyped ValueError."""
    for command in (
        lambda: commands.cancel(name, [uuid.uuid4()]),
        lambda: commands.run_now(name, [uuid.uuid4()]),
        lambda: commands.delete_tree(name, [uuid.uuid4()]),
    ):
        with pytest.raises(InvalidArgument) as err:
            command()
        assert err.value.field == "queue" and "1-48 characters" in err.value.message


def test_prune_ledger_keeps_a_day():
    a = make_activity("pending")
    commands.cancel(QUEUE, [a], command_id="old")
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "UPDATE runnerq_commands SET created_at = now() - interval '8 days' WHERE command_id = 'old'"
        )
    assert commands.prune_ledger() == 1 and ledger("old") is None
    with pytest.raises(InvalidArgument):
        commands.prune_ledger(older_than_seconds=60)


def test_cancel_fences_a_real_claim_and_its_ack_gets_claim_lost():
    from runnerq_django import storage
    from runnerq_django.storage.errors import ClaimLost
    from runnerq_django.storage.types import NewActivity

    submitted = storage.submit(QUEUE, NewActivity(activity_type="Fenced", payload={"n": 1}))
    [claimed] = storage.claim(QUEUE, types=["Fenced"], limit=1, lease_ms=30000, worker_id="w1")
    assert storage.renew(QUEUE, claimed.claim, 30000) is True  # the claim is live before the cancel
    commands.cancel(QUEUE, [submitted.id], command_id="fence")
    assert storage.renew(QUEUE, claimed.claim, 30000) is False
    with pytest.raises(ClaimLost):
        storage.complete(QUEUE, claimed.claim, {"late": True})
    assert row(submitted.id)["status"] == "cancelled" and row(submitted.id)["last_worker_id"] == claimed.token
    assert result_row(submitted.id)["data"]["type"] == "cancelled"


def test_retried_activity_is_claimable_and_completes():
    from runnerq_django import storage

    a = make_activity("dead_letter", activity_type="Again", retry_count=2, max_retries=3)
    add_result(a, state="Err", data={"error": "boom", "type": "dead_letter"})
    commands.redrive(QUEUE, [a], command_id="again")
    [claimed] = storage.claim(QUEUE, types=["Again"], limit=1, lease_ms=30000, worker_id="w1")
    assert claimed.id == a and claimed.attempt == 3
    storage.complete(QUEUE, claimed.claim, {"ok": True})
    assert row(a)["status"] == "completed" and result_row(a)["state"] == "Ok"


@pytest.mark.django_db(transaction=True)
def test_concurrent_deliveries_of_one_command_apply_once():
    import threading

    from django.db import connections

    ids = [make_activity("pending") for _ in range(20)]
    barrier = threading.Barrier(4)
    results = []

    def deliver():
        try:
            barrier.wait()
            results.append(commands.set_priority(QUEUE, ids, 4, command_id="race"))
        finally:
            connections.close_all()

    threads = [threading.Thread(target=deliver) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert len(results) == 4
    assert sorted(bool(r.replayed) for r in results) == [False, True, True, True]
    assert all(r.applied == 20 for r in results)
    assert all(len(events(a)) == 1 for a in ids)
