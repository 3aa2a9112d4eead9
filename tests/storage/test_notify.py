"""LISTEN/NOTIFY: ``rq_w_<queue>`` announces runnable work, ``rq_r_<queue>`` stored results
(payload: comma-joined activity ids); both only once the writing transaction commits."""

import psycopg
import pytest
from django.db import transaction

from runnerq_django.storage.types import NewActivity
from tests.storage.support import claim_one, expire_lease, submit, submit_and_claim

FAR = "2099-01-01T00:00:00Z"


class Listener:
    def __init__(self, url: str, queue: str):
        self.conn = psycopg.connect(url, autocommit=True)
        self.work, self.results = f"rq_w_{queue}", f"rq_r_{queue}"
        self.conn.execute(f'LISTEN "{self.work}"')
        self.conn.execute(f'LISTEN "{self.results}"')

    def take(self, wait: float = 0.3) -> list[tuple[str, str]]:
        return [(n.channel, n.payload) for n in self.conn.notifies(timeout=wait)]

    def work_count(self, wait: float = 0.3) -> int:
        return sum(1 for channel, _ in self.take(wait) if channel == self.work)


@pytest.fixture
def listener(queue, live_db_url):
    listening = Listener(live_db_url, queue)
    yield listening
    listening.conn.close()


def test_submit_announces_work_unless_delayed(queue, listener, store):
    submit(queue)
    assert listener.take() == [(listener.work, "")]
    submit(queue, delay_seconds=60)
    store.submit_many(queue, [NewActivity("t", delay_seconds=60) for _ in range(3)])
    assert listener.take() == []
    store.submit_many(queue, [NewActivity("t") for _ in range(3)])
    assert listener.take() == [(listener.work, "")]  # one announcement per transaction


def test_nothing_is_heard_from_a_rolled_back_transaction(queue, listener):
    with pytest.raises(RuntimeError), transaction.atomic():
        submit(queue)
        raise RuntimeError
    assert listener.take() == []


def test_results_are_announced_with_their_ids(queue, listener, store):
    claim = submit_and_claim(queue)
    listener.take(0.1)
    store.complete(queue, claim, 1)
    assert listener.take() == [(listener.results, str(claim.id))]
    failing = submit_and_claim(queue, max_retries=3)
    listener.take(0.1)
    store.fail(queue, failing, "x")
    assert listener.take() == []  # a retry stores no result
    from tests.storage.support import make_due

    make_due(failing.id)
    store.fail(queue, claim_one(queue), "x", retryable=False)
    assert listener.take() == [(listener.results, str(failing.id))]


def test_a_large_batch_is_announced_in_payloads_postgres_accepts(queue, listener, store):
    store.submit_many(queue, [NewActivity("t") for _ in range(450)])
    claimed = store.claim(queue, limit=450) + store.claim(queue, limit=450)
    listener.take(0.1)
    assert store.complete_many(queue, [(c.claim, None) for c in claimed]) == []
    heard = listener.take()
    assert {channel for channel, _ in heard} == {listener.results}
    ids = [activity_id for _, payload in heard for activity_id in payload.split(",")]
    assert sorted(ids) == sorted(str(c.id) for c in claimed)
    assert all(len(payload) < 8000 for _, payload in heard) and len(heard) == 3


def test_wake_release_and_requeue_announce_work(queue, listener, store):
    parent = submit_and_claim(queue, "parent")
    child = store.submit(queue, NewActivity("child", parent_id=parent.id, depth=1), fence=parent).id
    store.register_dependency(queue, parent, child)
    store.park(queue, parent, kind="await", step="child:c", wake_at=FAR, result_id=child, producer_id=child)
    child_claim = claim_one(queue, "child")
    listener.take(0.1)
    store.complete(queue, child_claim, 1)
    assert sorted(listener.take()) == sorted([(listener.results, str(child)), (listener.work, "")])

    released = claim_one(queue, "parent")
    listener.take(0.1)
    assert store.release(queue, [released]) == 1
    assert listener.take() == [(listener.work, "")]

    expired = claim_one(queue, "parent")
    expire_lease(expired.id)
    listener.take(0.1)
    assert store.reap(queue, 10) == 1
    assert listener.take() == [(listener.work, "")]


def test_a_signal_that_wakes_announces_work(queue, listener, store):
    from runnerq_django.spec.keys import checkpoint_id

    claim = submit_and_claim(queue)
    store.park(
        queue,
        claim,
        kind="signal",
        step="signal:go",
        wake_at=FAR,
        result_id=checkpoint_id(claim.id, "signal", "go"),
    )
    listener.take(0.1)
    store.signal(queue, claim.id, "other", 1)
    assert listener.take() == []
    store.signal(queue, claim.id, "go", 1)
    assert listener.take() == [(listener.work, "")]
