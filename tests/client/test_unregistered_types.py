"""Enqueueing a type no handler of this process registers: allowed (another SDK may run it), but
the first enqueue of each such type logs a warning naming the closest registered type, and
RUNNERQ['REQUIRE_REGISTERED_TYPES'] makes it an InvalidArgument with nothing written."""

from __future__ import annotations

import io
import logging
import uuid

import pytest
from django.core.management import call_command

from runnerq_django import enqueue
from runnerq_django.activities.registry import activity, registry
from runnerq_django.logs import event_of
from runnerq_django.storage.errors import InvalidArgument
from tests.tasks_backend import tasks
from tests.worker.support import row_of

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def greet():
    name = f"shop.greet_{uuid.uuid4().hex[:6]}"

    @activity(name=name)
    def handler(payload):
        return payload

    yield name
    registry.unregister(name)


def warnings_of(caplog) -> list[logging.LogRecord]:
    return [r for r in caplog.records if event_of(r) == "runnerq.enqueue.unregistered_type"]


def test_a_typo_is_enqueued_but_warned_about_once_naming_the_closest_type(greet, caplog):
    caplog.set_level(logging.WARNING, logger="runnerq_django")
    typo = greet.replace("greet", "gret")
    first = enqueue(typo, {"n": 1})
    enqueue(typo, {"n": 2})
    call_command("runnerq_enqueue", typo, "3", stdout=io.StringIO())
    assert row_of(first.id)["status"] == "pending"  # still allowed: a Go worker may handle it
    (warning,) = warnings_of(caplog)
    assert warning.activity_type == typo and warning.closest == greet
    assert f"Enqueued {typo!r}, a type no handler in this process registers; did you mean {greet!r}?" in (
        warning.getMessage()
    )


def test_registered_handlers_tasks_and_distinct_types_each_warn_at_most_once(greet, caplog):
    caplog.set_level(logging.WARNING, logger="runnerq_django")
    enqueue(greet, None)
    tasks.add.enqueue(1, 2)  # a django task: known to the tasks resolver, no warning
    other = f"billing.Go_{uuid.uuid4().hex[:6]}"
    enqueue(other, None)
    enqueue(other, None)
    assert [r.activity_type for r in warnings_of(caplog)] == [other]


def test_the_opt_in_setting_refuses_unregistered_types(greet, settings):
    settings.RUNNERQ = {**settings.RUNNERQ, "REQUIRE_REGISTERED_TYPES": True}
    typo = greet.replace("greet", "gret")
    for _ in range(2):  # refused every time, not only the first
        with pytest.raises(InvalidArgument) as refused:
            enqueue(typo, None)
        assert refused.value.field == "activity"
        assert f"did you mean {greet!r}?" in refused.value.message
        assert "REQUIRE_REGISTERED_TYPES" in refused.value.message
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT count(*) FROM runnerq_activities WHERE activity_type = %s", [typo])
        assert cursor.fetchone()[0] == 0
    assert enqueue(greet, None).created and tasks.add.enqueue(1, 2).id
