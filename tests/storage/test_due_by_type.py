"""``storage.reads.due_by_type`` (runnerq_status's "due now, by type"): each queue walked on its
own, every (queue, type) pair with due work once however often its queue is named, counts capped,
work not yet due and other queues left out."""

from __future__ import annotations

import uuid

from runnerq_django import storage
from runnerq_django.storage import NewActivity, reads


def test_each_pair_once_capped_and_only_what_is_due():
    first, second, other = (f"q_{uuid.uuid4().hex[:10]}" for _ in range(3))
    for queue, kind, count in (
        (first, "a", 3),
        (first, "b", 1),
        (second, "a", 2),
        (second, "c", 5),
        (other, "a", 1),
    ):
        storage.submit_many(queue, [NewActivity(activity_type=kind) for _ in range(count)])
    storage.submit(first, NewActivity(activity_type="later", delay_seconds=3600))  # not due: left out
    found = reads.due_by_type("default", [second, first, first], 60, cap=4, limit=100)
    assert found == {
        first: {"a": (3, False), "b": (1, False)},
        second: {"a": (2, False), "c": (4, False)},  # 5 due, counted up to the cap
    }
    # The pairs looked at are bounded.
    assert (
        sum(len(types) for types in reads.due_by_type("default", [first, second], 60, 4, limit=2).values())
        == 2
    )
