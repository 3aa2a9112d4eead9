"""Debounce and throttle (docs/how-to/flow-control.md#debounce-and-throttle): enqueues of one key
collapse into one activity, enforced in Postgres in the enqueue's transaction; concurrent enqueues
from several processes make one activity; max_wait caps the wait; throttle drops or defers.

Times are the database's: a test moves a window's stored times back (as if its enqueues were
made earlier) instead of sleeping, and asserts the stored times exactly."""

from __future__ import annotations

import json
import subprocess
import sys
import time
from datetime import timedelta

import pytest

from runnerq_django import Debounce, Throttle, storage
from runnerq_django.storage.errors import InvalidArgument
from runnerq_django.storage.windows import sweep_windows
from tests.flow import handlers
from tests.flow.conftest import ledger_rows
from tests.helpers import REPO, manage_env
from tests.worker.support import fetch, status_of

pytestmark = pytest.mark.django_db(transaction=True)

Q = "flow_debounce"
WAIT = timedelta(seconds=30)


def debounced(n, key="doc-1", wait=WAIT, max_wait=None, **options):
    return handlers.work.enqueue(
        {"key": f"n{n}", "n": n}, queue=Q, debounce=Debounce(key=key, wait=wait, max_wait=max_wait), **options
    )


def throttled(n, key="digest-1", window=timedelta(minutes=10), on_excess="drop"):
    return handlers.work.enqueue(
        {"key": f"n{n}", "n": n}, queue=Q, throttle=Throttle(key=key, window=window, on_excess=on_excess)
    )


def window(kind: str, key: str) -> dict:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT * FROM runnerq_debounce WHERE queue_name = %s AND kind = %s AND key = %s", [Q, kind, key]
        )
        names = [c.name for c in cursor.description]
        return dict(zip(names, cursor.fetchone()))


def activity(activity_id) -> tuple:
    """status, scheduled_at, the input's payload."""
    status, scheduled_at, payload = fetch(
        "SELECT a.status, a.scheduled_at, i.payload::text FROM runnerq_activities a"
        " JOIN runnerq_inputs i ON i.activity_id = a.id WHERE a.id = %s",
        [activity_id],
    )[0]
    return status, scheduled_at, json.loads(payload)


def shift_back(kind: str, key: str, seconds: float, *, activity_too: bool = True) -> None:
    """As if the window's enqueues (and its activity's schedule) were ``seconds`` earlier."""
    row = window(kind, key)
    fetch(
        "UPDATE runnerq_debounce SET first_at = first_at - %s * interval '1 second',"
        " last_at = last_at - %s * interval '1 second', run_at = run_at - %s * interval '1 second'"
        " WHERE queue_name = %s AND kind = %s AND key = %s",
        [seconds, seconds, seconds, Q, kind, key],
    )
    if activity_too:
        fetch(
            "UPDATE runnerq_activities SET scheduled_at = scheduled_at - %s * interval '1 second'"
            " WHERE id = %s AND scheduled_at IS NOT NULL",
            [seconds, row["activity_id"]],
        )


def count(queue: str = Q) -> int:
    return fetch("SELECT count(*) FROM runnerq_activities WHERE queue_name = %s", [queue])[0][0]


# debounce ----------------------------------------------------------------------------------------


def test_enqueues_of_a_key_collapse_into_one_activity_run_wait_after_the_last_with_the_last_payload():
    first = debounced(1)
    assert first.created and status_of(first.id) == "scheduled"
    row = window("debounce", "doc-1")
    assert row["run_at"] - row["first_at"] == WAIT and row["collapsed"] == 0
    assert activity(first.id)[1] == row["run_at"]  # the spec's own scheduled_at

    shift_back("debounce", "doc-1", 10)  # the first was 10 s ago
    second = debounced(2)
    assert (second.id, second.created) == (first.id, False)
    status, scheduled_at, payload = activity(first.id)
    row = window("debounce", "doc-1")
    assert status == "scheduled" and payload == {"key": "n2", "n": 2}  # the last payload wins
    assert scheduled_at == row["run_at"] == row["last_at"] + WAIT  # wait after the last enqueue
    assert row["last_at"] - row["first_at"] >= timedelta(seconds=10)
    assert row["collapsed"] == 1 and count() == 1
    assert debounced(3).id == first.id and window("debounce", "doc-1")["collapsed"] == 2


def test_max_wait_caps_the_wait_at_max_wait_after_the_first_enqueue():
    first = debounced(1, wait=timedelta(seconds=10), max_wait=timedelta(seconds=15))
    shift_back("debounce", "doc-1", 8)  # the first was 8 s ago: due in 2 s, 7 s of max_wait left
    again = debounced(2, wait=timedelta(seconds=10), max_wait=timedelta(seconds=15))
    assert again.id == first.id
    row = window("debounce", "doc-1")
    scheduled_at = activity(first.id)[1]
    assert scheduled_at == row["first_at"] + timedelta(seconds=15)  # not last + 10 s
    assert scheduled_at < row["last_at"] + timedelta(seconds=10)
    # Once that deadline has passed the activity is due: the next enqueue leaves it as it is
    # (a claim may be reading it) and begins a new group.
    shift_back("debounce", "doc-1", 8)
    assert status_of(first.id) == "scheduled" and activity(first.id)[1] <= fetch("SELECT now()")[0][0]
    third = debounced(3, wait=timedelta(seconds=10), max_wait=timedelta(seconds=15))
    assert third.created and third.id != first.id
    assert activity(first.id)[2] == {"key": "n2", "n": 2}  # the due one kept its payload
    assert window("debounce", "doc-1")["activity_id"] == third.id and count() == 2


def test_a_claimed_or_finished_activity_ends_the_group():
    first = debounced(1, wait=timedelta(milliseconds=1))
    time.sleep(0.01)  # due
    [claimed] = storage.claim(Q, types=["flow.work"], limit=1, lease_ms=60000)
    assert claimed.id == first.id and claimed.payload == {"key": "n1", "n": 1}
    second = debounced(2)
    assert second.created and second.id != first.id  # not moved while it runs
    storage.complete(Q, claimed.claim, None)
    assert debounced(3).id == second.id


def test_keys_are_per_type_and_queue_and_apart_from_throttle_keys():
    a = debounced(1, key="k")
    b = handlers.other.enqueue({"n": 1}, queue=Q, debounce=Debounce(key="k", wait=WAIT))
    c = handlers.work.enqueue({"n": 1}, queue="flow_debounce_2", debounce=Debounce(key="k", wait=WAIT))
    d = throttled(1, key="k")
    assert len({a.id, b.id, c.id, d.id}) == 4


def test_a_debounced_burst_runs_once_on_a_real_worker_with_the_last_payload(flow_worker):
    handles = [debounced(n, wait=timedelta(seconds=1)) for n in range(5)]
    assert {h.id for h in handles} == {handles[0].id}
    flow_worker("--queue", Q, "--poll-interval", "0.2")
    handles[-1].result(timeout=30)
    assert [row[4] for row in ledger_rows()] == ["n4"]  # one run, with the last payload


def test_concurrent_debounced_enqueues_from_several_processes_make_one_activity(live_db_url):
    key, procs_count, each = "burst-1", 6, 15
    start_at = time.time() + 6  # every process imported Django and connected by then
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.flow.debounce_enqueue", key, str(start_at), Q, str(each)],
            cwd=REPO,
            env=manage_env(live_db_url, RUNNERQ_EXAMPLES="0"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(procs_count)
    ]
    lines = []
    for proc in procs:
        out, err = proc.communicate(timeout=120)
        assert proc.returncode == 0, err
        lines += [line.split() for line in out.splitlines()]
    assert len(lines) == procs_count * each
    assert len({activity_id for activity_id, _ in lines}) == 1, lines
    assert sorted(created for _, created in lines).count("True") == 1
    assert count() == 1
    [(activity_id,)] = fetch("SELECT id FROM runnerq_activities WHERE queue_name = %s", [Q])
    row = window("debounce", key)
    assert row["activity_id"] == activity_id and row["collapsed"] == procs_count * each - 1
    status, scheduled_at, payload = activity(activity_id)
    # The last enqueue to commit was some process's last one; the activity runs wait after it.
    assert status == "scheduled" and payload["n"] == each - 1
    assert scheduled_at == row["last_at"] + timedelta(minutes=10)


# throttle ----------------------------------------------------------------------------------------


def test_throttle_drop_returns_the_window_activity_then_opens_a_new_window():
    first = throttled(1)
    assert first.created and status_of(first.id) == "pending"  # runs at once
    second = throttled(2)
    assert (second.id, second.created) == (first.id, False)
    assert activity(first.id)[2] == {"key": "n1", "n": 1}  # dropped: nothing changed
    assert window("throttle", "digest-1")["collapsed"] == 1 and count() == 1
    shift_back("throttle", "digest-1", 601, activity_too=False)  # the window is over
    third = throttled(3)
    assert third.created and third.id != first.id and status_of(third.id) == "pending"
    assert count() == 2


def test_throttle_defer_makes_one_activity_for_the_next_window():
    first = throttled(1, on_excess="defer")
    opened = window("throttle", "digest-1")["run_at"]
    second = throttled(2, on_excess="defer")
    assert second.created and second.id != first.id
    status, scheduled_at, _ = activity(second.id)
    assert status == "scheduled" and scheduled_at == opened + timedelta(minutes=10)  # the next window
    third = throttled(3, on_excess="defer")  # before that window: the deferred one covers it
    assert (third.id, third.created) == (second.id, False)
    assert activity(second.id)[2] == {"key": "n2", "n": 2}
    row = window("throttle", "digest-1")
    assert row["activity_id"] == second.id and row["run_at"] == scheduled_at and row["collapsed"] == 1
    assert count() == 2


# the rules ----------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "make, field, words",
    [
        (lambda: Debounce(key="", wait=1), "debounce.key", "must not be empty"),
        (lambda: Debounce(key="x" * 1025, wait=1), "debounce.key", "at most 1024 bytes"),
        (lambda: Debounce(key="k", wait=0), "debounce.wait", "must be 0.001..315360000"),
        (lambda: Debounce(key="k", wait=timedelta(days=4000)), "debounce.wait", "0.001..315360000"),
        (
            lambda: Debounce(key="k", wait=10, max_wait=5),
            "debounce.max_wait",
            "at least debounce.wait (10 s)",
        ),
        (lambda: Throttle(key="k", window=-1), "throttle.window", "must be 0.001..315360000"),
        (lambda: Throttle(key="k", window=1, on_excess="queue"), "throttle.on_excess", "'drop' or 'defer'"),
    ],
)
def test_bad_windows_are_refused_naming_the_field_and_the_limit(make, field, words):
    with pytest.raises(InvalidArgument) as caught:
        make()
    assert caught.value.field == field and words in str(caught.value)


@pytest.mark.parametrize(
    "options, field, words",
    [
        ({"debounce": Debounce(key="k", wait=1), "unique_key": "k"}, "debounce", "unique_key"),
        ({"debounce": Debounce(key="k", wait=1), "delay": 5}, "debounce", "delay"),
        ({"throttle": Throttle(key="k", window=1), "idempotency_key": "k"}, "throttle", "idempotency_key"),
        (
            {"debounce": Debounce(key="k", wait=1), "throttle": Throttle(key="k", window=1)},
            "throttle",
            "not both",
        ),
        ({"debounce": {"key": "k", "wait": 1}}, "debounce", "must be a Debounce(...), got dict"),
    ],
)
def test_an_enqueue_refuses_what_a_window_cannot_combine_with(options, field, words):
    with pytest.raises(InvalidArgument) as caught:
        handlers.work.enqueue({}, queue=Q, **options)
    assert caught.value.field == field and words in str(caught.value)
    with pytest.raises(InvalidArgument) as caught:
        handlers.work.enqueue_many([{}], queue=Q, debounce=Debounce(key="k", wait=1))
    assert caught.value.field == "debounce"
    assert count() == 0


def test_retention_sweeps_windows_that_ended_and_keeps_one_whose_activity_waits():
    debounced(1, key="waiting")
    throttled(1, key="done")
    shift_back("throttle", "done", 2 * 86400, activity_too=False)
    shift_back("debounce", "waiting", 2 * 86400, activity_too=False)  # its activity still scheduled
    assert sweep_windows(older_than_seconds=86400) == 1
    assert fetch("SELECT kind, key FROM runnerq_debounce WHERE queue_name = %s", [Q]) == [
        ("debounce", "waiting")
    ]


def test_the_workers_maintenance_sweeps_windows_a_day_after_they_ended():
    import threading

    from runnerq_django import conf
    from runnerq_django.worker.maintenance import Maintenance

    throttled(1, key="old")
    throttled(1, key="recent")
    shift_back("throttle", "old", 2 * 86400, activity_too=False)
    maintenance = Maintenance(
        [Q],
        "default",
        reaper_interval=5,
        reaper_batch=10,
        retention=conf.get("RETENTION"),
        pool_stale_seconds=60,
        stop=threading.Event(),
    )
    assert maintenance.sweep_windows() == 1
    assert fetch("SELECT key FROM runnerq_debounce WHERE queue_name = %s", [Q]) == [("recent",)]


def test_the_testing_toolkit_runs_a_debounced_burst_once_and_each_immediate_enqueue_at_once(ledger):
    from runnerq_django.testing import immediate, run_until_idle

    handles = [debounced(n, key="tk") for n in range(3)]
    ran = run_until_idle(queues=[Q], fast_forward=True)
    assert [r.id for r in ran] == [handles[0].id] and ran[0].outcome == "completed"
    assert [row[4] for row in ledger_rows()] == ["n2"]  # the last payload
    with immediate():  # each enqueue runs as it is made: nothing is pending to collapse into
        again = [debounced(n, key="tk-immediate") for n in range(2)]
    assert again[0].id != again[1].id and all(h.created for h in again)
    assert [row[4] for row in ledger_rows()] == ["n2", "n0", "n1"]
