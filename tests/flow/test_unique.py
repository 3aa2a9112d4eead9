"""Unique while active: a second enqueue with the same key returns the activity holding it while
that one is unfinished, and creates a new one once it has finished; ordinary spec keys; correct
under concurrent enqueues from several processes."""

from __future__ import annotations

import subprocess
import sys
import time

import pytest

from runnerq_django import storage
from runnerq_django.spec.keys import business_key
from runnerq_django.storage import commands
from runnerq_django.storage.errors import InvalidArgument
from runnerq_django.storage.types import NewActivity, OnDuplicate
from tests.flow import handlers
from tests.helpers import REPO, manage_env
from tests.worker.support import status_of

pytestmark = pytest.mark.django_db(transaction=True)

Q = "flow_unique"


def enqueue(key: str = "order-1", **options):
    return handlers.work.enqueue({"seconds": 0}, queue=Q, unique_key=key, **options)


def claim_one():
    [claimed] = storage.claim(Q, types=["flow.work"], limit=1, lease_ms=60000)
    return claimed


def test_the_holder_is_returned_while_active_in_every_unfinished_status():
    first = enqueue()
    assert first.created
    assert status_of(first.id) == "pending"
    again = enqueue()
    assert (again.id, again.created) == (first.id, False)

    claimed = claim_one()  # running
    assert claimed.id == first.id
    assert enqueue().id == first.id
    assert storage.fail(Q, claimed.claim, "boom", retryable=True) == "retrying"
    assert status_of(first.id) == "retrying"
    assert enqueue().id == first.id

    delayed = enqueue("order-2", delay=3600)  # scheduled
    assert status_of(delayed.id) == "scheduled"
    assert enqueue("order-2").id == delayed.id


@pytest.mark.parametrize("finish", ["completed", "failed", "dead_letter", "cancelled"])
def test_a_new_activity_is_created_once_the_holder_has_finished(finish):
    first = enqueue(max_attempts=1)
    if finish == "cancelled":
        commands.cancel(Q, [first.id])
    else:
        claimed = claim_one()
        if finish == "completed":
            storage.complete(Q, claimed.claim, {"ok": True})
        else:
            storage.fail(Q, claimed.claim, "boom", retryable=finish == "dead_letter")
    assert status_of(first.id) == finish
    second = enqueue()
    assert second.created and second.id != first.id
    assert enqueue().id == second.id  # and that one is now the holder
    assert storage.lookup_key(Q, business_key("order-1", "flow.work")) == second.id


def test_the_key_is_an_ordinary_spec_key_other_sdks_share():
    first = enqueue("shared")
    stored = business_key("shared", "flow.work")
    assert storage.lookup_key(Q, stored) == first.id
    # Another SDK's return_existing submit of the same key gets the same activity.
    other = storage.submit(
        Q,
        NewActivity(
            activity_type="flow.work", idempotency_key="shared", on_duplicate=OnDuplicate.RETURN_EXISTING
        ),
    )
    assert (other.id, other.created) == (first.id, False)


def test_keys_are_per_type_and_per_queue():
    a = enqueue("k")
    b = handlers.other.enqueue({}, queue=Q, unique_key="k")
    c = handlers.work.enqueue({}, queue="flow_unique_2", unique_key="k")
    assert len({a.id, b.id, c.id}) == 3


def test_bad_input_is_refused_naming_the_field():
    with pytest.raises(InvalidArgument) as caught:
        enqueue("k", idempotency_key="k")
    assert caught.value.field == "unique_key"
    with pytest.raises(InvalidArgument) as caught:
        enqueue("")
    assert caught.value.field == "unique_key"
    with pytest.raises(InvalidArgument) as caught:
        enqueue("x" * 1025)
    assert caught.value.field == "unique_key" and "1024 bytes" in str(caught.value)
    with pytest.raises(InvalidArgument) as caught:
        handlers.work.enqueue_many([{}], queue=Q, unique_key="k")
    assert caught.value.field == "unique_key"


def test_ten_concurrent_enqueues_from_several_processes_make_one_activity(live_db_url):
    key = "concurrent-1"
    start_at = time.time() + 6  # every process imported Django and connected by then
    procs = [
        subprocess.Popen(
            [sys.executable, "-m", "tests.flow.unique_enqueue", key, str(start_at), Q],
            cwd=REPO,
            env=manage_env(live_db_url, RUNNERQ_EXAMPLES="0"),
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        for _ in range(10)
    ]
    outputs = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        outputs.append(out.split())
    ids = {activity_id for activity_id, _ in outputs}
    assert len(ids) == 1, outputs
    assert sorted(created for _, created in outputs) == ["False"] * 9 + ["True"]
    from runnerq_django.models import Activity

    assert Activity.objects.filter(queue_name=Q).count() == 1
    # After it completes, the next enqueue creates a new one.
    claimed = claim_one()
    storage.complete(Q, claimed.claim, None)
    fresh = enqueue(key)
    assert fresh.created and str(fresh.id) not in ids
