"""The storage operations the testing toolkit adds: claiming one tree, and fast-forwarding."""

from __future__ import annotations

import uuid

import pytest

from runnerq_django import InvalidArgument, storage
from runnerq_django.models import Activity
from runnerq_django.storage import fast_forward
from tests.testing import handlers


def test_a_claim_by_root_takes_only_that_tree(transactional_db):
    other = handlers.double.enqueue({"n": 1})
    mine = handlers.double.enqueue({"n": 2})
    assert (
        storage.claim("default", root_id=mine.id, types=["tt.child"]) == []
    )  # of the tree, not of that type
    [claimed] = storage.claim("default", root_id=mine.id, limit=10)
    assert claimed.id == mine.id and other.status() == "pending"
    with pytest.raises(InvalidArgument) as caught:
        storage.claim("default", root_id="not-a-uuid")
    assert caught.value.field == "root_id"


def test_only_runnable_work_due_later_is_listed_and_made_due(transactional_db):
    now = handlers.double.enqueue({"n": 1})
    later = handlers.double.enqueue({"n": 2}, delay=600)
    other_type = handlers.refuses.enqueue({}, delay=600)
    listed = fast_forward.due_later("default", types=["tt.double"])
    assert [(row.id, row.status, row.awaits_result) for row in listed] == [(later.id, "scheduled", False)]
    assert fast_forward.due_later("default", root_id=now.id) == []
    assert fast_forward.make_due("default", [now.id, later.id]) == [later.id]  # `now` was due already
    assert fast_forward.make_due("default", [later.id]) == []
    assert [a.id for a in storage.claim("default", limit=10)] == [now.id, later.id]
    assert Activity.objects.get(id=other_type.id).status == "scheduled"
    with pytest.raises(InvalidArgument) as caught:
        fast_forward.make_due("default", [uuid.uuid4(), 7])
    assert caught.value.field == "ids"
