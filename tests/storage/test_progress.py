"""The progress and published-events operations (``storage.progress``) through the ``store``
fixture: the write is fenced by the claim, numbers events per activity, keeps the newest
``MAX_EVENTS_PER_ACTIVITY``, notifies, and the reads say when the activity has ended."""

from __future__ import annotations

import uuid

import psycopg
import pytest

from runnerq_django.storage import errors
from runnerq_django.storage import progress as stored
from runnerq_django.storage.types import Claim
from tests.storage.support import submit_and_claim


def test_a_write_is_fenced_and_numbers_events_per_activity(store, queue):
    claim = submit_and_claim(queue)
    assert store.write_progress(queue, claim, attempt=1, progress=(1, 4, "one"), events=[("a", 1)]) == 1
    assert store.write_progress(queue, claim, attempt=1, events=[("b", {"x": [1]}), ("c", None)]) == 3
    progress = store.get_progress(queue, claim.id)
    assert (progress.done, progress.total, progress.message) == (1, 4, "one")  # kept without a new value
    events, ended = store.read_events(queue, claim.id)
    assert [(e.seq, e.name, e.data, e.attempt) for e in events] == [
        (1, "a", 1, 1),
        (2, "b", {"x": [1]}, 1),
        (3, "c", None, 1),
    ]
    assert ended is False
    assert [e.seq for e in store.read_events(queue, claim.id, after=1, limit=1)[0]] == [2]
    assert store.latest_event(queue, claim.id, "b") == {"x": [1]}
    stale = Claim(claim.id, "not-the-token")
    assert store.write_progress(queue, stale, attempt=1, progress=(4, 4, None), events=[("d", 1)]) is None
    assert store.get_progress(queue, claim.id).done == 1  # nothing written
    store.complete(queue, claim, "done")
    assert store.read_events(queue, claim.id, after=3) == ([], True)  # ended
    assert store.write_progress(queue, claim, attempt=1, progress=(2, 4, None)) is None  # finished: fenced


def test_an_activity_keeps_its_newest_events(store, queue):
    claim = submit_and_claim(queue)
    bound = stored.MAX_EVENTS_PER_ACTIVITY
    store.write_progress(queue, claim, attempt=1, events=[("e", i) for i in range(bound - 10)])
    # More than the bound in one write: the ones it would trim at once are never inserted.
    assert (
        store.write_progress(queue, claim, attempt=1, events=[("e", i) for i in range(bound + 5)])
        == 2 * bound - 5
    )
    seqs = [e.seq for e in store.read_events(queue, claim.id, limit=1000)[0]]
    assert seqs == list(range(bound - 4, 2 * bound - 4))


def test_a_write_notifies_the_queues_progress_channel(store, queue, live_db_url):
    claim = submit_and_claim(queue)
    with psycopg.connect(live_db_url, autocommit=True) as listener:
        listener.execute(f'LISTEN "{stored.channel(queue)}"')
        store.write_progress(queue, claim, attempt=1, progress=(1, None, None))
        notes = list(listener.notifies(timeout=5, stop_after=1))
    assert [n.payload for n in notes] == [str(claim.id)]


def test_a_long_queue_name_gets_a_channel_within_postgres_limit():
    assert len(stored.channel("q" * 200).encode()) <= 63
    assert stored.channel("q" * 200) != stored.channel("q" * 199)
    assert stored.channel("default") == "runnerq_progress_default"


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [
        ({"progress": (float("inf"), None, None)}, "done"),
        ({"progress": (1, -2, None)}, "total"),
        ({"progress": (1, 2, 3)}, "message"),
        ({"events": [("", 1)]}, "name"),
        ({"events": [("n", object())]}, "data"),
        ({"attempt": -1}, "attempt"),
    ],
)
def test_bad_arguments_are_refused_before_any_sql(store, queue, kwargs, field):
    claim = Claim(uuid.uuid4(), "token")
    with pytest.raises(errors.InvalidArgument) as refused:
        store.write_progress(queue, claim, **{"attempt": 1, **kwargs})
    assert refused.value.field == field
