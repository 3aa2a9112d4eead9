"""Batch runs (``runnerq_batch_runs``, storage.batches): the thread that calls a batch handler
records the batch first, one row per call with its members and their attempts; the admin's
detail page of a member links the others; retention and delete_tree delete a row with the last
of its members. Real ``runworker`` processes and the testing toolkit's runner."""

from __future__ import annotations

import logging
import uuid

import pytest
from django.contrib.auth.models import User

from runnerq_django.storage import batches as stored
from tests.worker import batch_handlers as bh
from tests.worker.support import fetch, worker_processes
from tests.worker.test_batches import FAST, calls, wait_settled

CHANGELIST = "/admin/runnerq_django/activity/"


def batch_rows():
    return fetch(
        "SELECT activity_type, queue_name, member_ids::text[], member_attempts FROM runnerq_batch_runs"
        " ORDER BY started_at"
    )


@pytest.mark.slow
def test_a_batch_of_three_is_one_row_and_each_member_page_links_the_other_two(
    client, transactional_db, live_db_url, runs_table, tmp_path
):
    handles = bh.trio.enqueue_many([{"n": n} for n in range(3)])
    ids = sorted(str(h.id) for h in handles)
    with worker_processes(live_db_url, tmp_path, "tests.worker.batch_handlers") as start:
        start(*FAST, "--concurrency", "8")
        wait_settled([h.id for h in handles], "completed")
    assert [len(rows) for rows in calls().values()] == [3]  # one call of three
    rows = batch_rows()
    assert len(rows) == 1
    activity_type, queue, members, attempts = rows[0]
    assert (activity_type, queue, sorted(members), attempts) == ("tb.trio", "default", ids, [1, 1, 1])

    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    for handle in handles:
        page = client.get(f"{CHANGELIST}{handle.id}/change/").content.decode()
        assert 'id="rq-batches"' in page and "a batch of 3" in page
        for other in ids:
            link = f'href="{CHANGELIST}{other}/change/"'
            assert (link in page) == (other != str(handle.id)), (handle.id, other)


def test_a_member_page_lists_a_bounded_number_of_the_others_with_the_count(
    client, transactional_db, runs_table
):
    from runnerq_django.testing import run_until_idle

    handles = bh.trio.enqueue_many([{"n": n} for n in range(3)])
    run_until_idle(types=["tb.trio"])
    assert len(batch_rows()) == 1
    # A call of 150 members recorded beside it (the admin caps the list).
    many = [(uuid.uuid4(), 2) for _ in range(149)]
    stored.record("tb.trio", "default", [(handles[0].id, 1), *many])
    seen = stored.batches_of(handles[0].id)
    assert [c.size for c in seen] == [150, 3]
    assert len(seen[0].others) == stored.MAX_MEMBERS_SHOWN and seen[0].others_cut == 49
    assert seen[0].attempt == 1 and seen[0].others[0] == many[0]
    assert sorted(seen[1].others) == sorted((h.id, 1) for h in handles[1:])
    client.force_login(User.objects.create_superuser("ops", "ops@example.com", "pw"))
    page = client.get(f"{CHANGELIST}{handles[0].id}/change/").content.decode()
    assert "a batch of 150" in page and "and 49 more not listed" in page
    assert (
        page.count(f'href="{CHANGELIST}') >= 102
        and str(many[99][0]) in page
        and str(many[100][0]) not in page
    )
    # an activity that ran in no batch: no section
    assert stored.batches_of(uuid.uuid4()) == []


def test_delete_tree_and_retention_delete_a_row_with_its_last_member(runs_table):
    from runnerq_django import storage
    from runnerq_django.storage import commands
    from runnerq_django.testing import run_until_idle

    first = bh.trio.enqueue_many([{"n": n} for n in range(3)])
    second = bh.trio.enqueue_many([{"n": n} for n in range(3, 6)])
    run_until_idle(types=["tb.trio"])
    assert len(batch_rows()) == 2

    # delete_tree: the row stays while a member of it does, and goes with the last one.
    commands.delete_tree("default", [first[0].id, first[1].id])
    assert len(batch_rows()) == 2
    # the survivor's page still names the others (the row is not rewritten; their pages are gone)
    assert [sorted(c.others) for c in stored.batches_of(first[2].id)] == [
        sorted((h.id, 1) for h in first[:2])
    ]
    commands.delete_tree("default", [first[2].id])
    assert [sorted(r[2]) for r in batch_rows()] == [sorted(str(h.id) for h in second)]

    # retention: the three trees past the window go, with their row.
    fetch(
        "UPDATE runnerq_activities SET completed_at = now() - interval '2 days' WHERE id = ANY(%s::uuid[])",
        [[str(h.id) for h in second]],
    )
    assert storage.cleanup("default", completed_s=86400) == 3
    assert batch_rows() == []


def test_a_batch_that_can_not_be_recorded_runs_all_the_same(runs_table, caplog):
    from runnerq_django.testing import run_until_idle

    fetch("ALTER TABLE runnerq_batch_runs RENAME TO runnerq_batch_runs_away")
    try:
        handles = bh.trio.enqueue_many([{"n": n} for n in range(3)])
        with caplog.at_level(logging.WARNING, logger="runnerq_django.worker"):
            ran = run_until_idle(types=["tb.trio"])
    finally:
        fetch("ALTER TABLE runnerq_batch_runs_away RENAME TO runnerq_batch_runs")
    assert sorted((r.id, r.outcome) for r in ran) == sorted((h.id, "completed") for h in handles)
    assert [
        r.event for r in caplog.records if getattr(r, "event", None) == "runnerq.batches.record_failed"
    ] == ["runnerq.batches.record_failed"]
    assert batch_rows() == []


def test_a_failed_record_inside_a_transaction_leaves_the_transaction_usable(transactional_db):
    from django.db import transaction

    from runnerq_django.storage.errors import StorageError

    with transaction.atomic():
        fetch("ALTER TABLE runnerq_batch_runs RENAME TO runnerq_batch_runs_away")
        with pytest.raises(StorageError):
            stored.record("tb.trio", "default", [(uuid.uuid4(), 1)])
        assert fetch("SELECT 1") == [(1,)]  # a savepoint took the failure, not the transaction
        fetch("ALTER TABLE runnerq_batch_runs_away RENAME TO runnerq_batch_runs")
    assert fetch("SELECT to_regclass('runnerq_batch_runs') IS NOT NULL") == [(True,)]


def test_record_refuses_a_batch_of_no_member():
    from runnerq_django.storage.errors import InvalidArgument

    with pytest.raises(InvalidArgument, match="members"):
        stored.record("tb.trio", "default", [])
