"""Progress and events in the testing toolkit (run_until_idle, immediate mode), their bounds,
and their deletion with their activity (retention, delete_tree). Real Postgres; the handlers
run through the worker's Runner in this process."""

from __future__ import annotations

import asyncio

import pytest

from runnerq_django.storage import progress as stored
from tests.progress import handlers
from tests.worker.support import fetch


def _rows(activity_id) -> tuple[int, int]:
    progress = fetch("SELECT count(*) FROM runnerq_progress WHERE activity_id = %s", [activity_id])[0][0]
    events = fetch("SELECT count(*) FROM runnerq_published_events WHERE activity_id = %s", [activity_id])[0][
        0
    ]
    return progress, events


def test_run_until_idle_stores_progress_and_events_readers_see(runnerq_worker):
    handle = handlers.quick.enqueue({"events": 3, "done": 7, "total": 10, "message": "most"})
    assert handle.progress() is None and list(handle.events(follow=False)) == []
    runnerq_worker.run_until_idle()
    progress = handle.progress()
    assert (progress.done, progress.total, progress.message, progress.percent) == (7, 10, "most", 70)
    assert isinstance(progress.done, int) and progress.updated_at is not None
    events = list(handle.events())  # it ended: the iteration ends after the stored ones
    assert [(e.seq, e.name, e.data, e.attempt) for e in events] == [
        (1, "tick", {"i": 1}, 1),
        (2, "tick", {"i": 2}, 1),
        (3, "tick", {"i": 3}, 1),
    ]
    assert [e.seq for e in handle.events(after=2)] == [3]

    async def collect():
        return [e.seq async for e in handle.events(after=1)]

    assert asyncio.run(collect()) == [2, 3]


def test_immediate_mode_runs_the_handler_and_the_readers_see_it(runnerq_immediate):
    handle = handlers.quick.enqueue({"events": 2, "done": 1.5, "total": None})
    assert handle.result(timeout=0) == "ok"
    progress = handle.progress()
    assert (progress.done, progress.total, progress.message, progress.fraction) == (1.5, None, None, None)
    assert [e.data for e in handle.events()] == [{"i": 1}, {"i": 2}]


def test_a_replayed_workflow_publishes_once_per_step(runnerq_immediate):
    handle = handlers.durable.enqueue({})  # parks on its sleep; immediate mode fast-forwards it
    assert handle.result(timeout=0) == "done"
    assert [e.data["name"] for e in handle.events()] == ["first", "second"]
    assert handle.progress().message == "both steps"


def test_bad_reports_are_refused_naming_the_field_and_the_limit(runnerq_worker):
    handle = handlers.refused.enqueue({})
    runnerq_worker.run_until_idle()
    errors = handle.result(timeout=0)
    assert errors.keys() == {
        "long_name",
        "empty_name",
        "big_data",
        "not_json",
        "negative",
        "nan",
        "bool_total",
        "long_message",
    }
    assert errors["long_name"].startswith("InvalidArgument: name:") and "200" in errors["long_name"]
    assert errors["empty_name"].startswith("InvalidArgument: name:")
    assert errors["big_data"].startswith("InvalidArgument: data:") and "16384" in errors["big_data"]
    assert errors["not_json"].startswith("InvalidArgument: data:")
    assert errors["negative"].startswith("InvalidArgument: done:") and str(2**53) in errors["negative"]
    assert errors["nan"].startswith("InvalidArgument: done:")
    assert errors["bool_total"].startswith("InvalidArgument: total:")
    assert errors["long_message"].startswith("InvalidArgument: message:") and "1024" in errors["long_message"]
    assert _rows(handle.id) == (0, 0)  # nothing refused was written


def test_an_activity_keeps_its_newest_events_up_to_the_bound(runnerq_worker):
    bound = stored.MAX_EVENTS_PER_ACTIVITY
    handle = handlers.quick.enqueue({"events": bound + 25})
    runnerq_worker.run_until_idle()
    seqs = [e.seq for e in handle.events()]
    # Whatever the writer's batches were, the newest `bound` are kept, numbered as published.
    assert seqs == list(range(26, bound + 26))
    assert [e.data["i"] for e in handle.events(after=bound + 24)] == [bound + 25]


def test_retention_and_delete_tree_delete_progress_and_events(runnerq_worker):
    from runnerq_django import storage
    from runnerq_django.storage import commands

    old = handlers.quick.enqueue({"events": 2}, queue="default")
    deleted = handlers.quick.enqueue({"events": 2}, queue="default")
    kept = handlers.quick.enqueue({"events": 2}, queue="default")
    runnerq_worker.run_until_idle()
    assert _rows(old.id) == _rows(deleted.id) == _rows(kept.id) == (1, 2)
    fetch("UPDATE runnerq_activities SET completed_at = now() - interval '2 days' WHERE id = %s", [old.id])
    assert storage.cleanup("default", completed_s=86400) == 1
    assert _rows(old.id) == (0, 0)
    commands.delete_tree("default", [deleted.id])
    assert _rows(deleted.id) == (0, 0)
    assert _rows(kept.id) == (1, 2)
    assert list(old.events()) == [] and old.progress() is None  # gone: the iteration ends at once


@pytest.mark.parametrize(
    ("kwargs", "field"),
    [({"after": -1}, "after"), ({"after": "3"}, "after")],
)
def test_a_reader_refuses_a_bad_cursor(runnerq_worker, kwargs, field):
    from runnerq_django.exceptions import RunnerQError

    handle = handlers.quick.enqueue({})
    with pytest.raises(RunnerQError, match=f"^{field}:"):
        handle.events(**kwargs)


def test_an_event_keeps_its_data_as_published(runnerq_worker):
    handle = handlers.mutates.enqueue({})
    runnerq_worker.run_until_idle()
    assert handle.result(timeout=0) == {"n": 2}
    assert [e.data for e in handle.events()] == [{"n": 1}]
