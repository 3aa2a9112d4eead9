"""The console on a read replica (``RUNNERQ['READ_REPLICA']``), against a real streaming replica
of a primary the test starts (``tests.pg_replica``: initdb, ``pg_basebackup -R``, one pair for
the module, about 2 s): the admin's pages and ``runnerq_status`` read the replica and say its
replay lag, while actions select and act on the primary's current state. Pausing the replica's
replay (``pg_wal_replay_pause()``) makes it lag for as long as a test needs, so "the page shows
the old state" is a certainty, not a race."""

from __future__ import annotations

import io
import json
import re
import time
from contextlib import contextmanager

import pytest
from django.conf import settings
from django.contrib.auth.models import User
from django.core.management import call_command
from django.db import connections
from django.test import override_settings

from runnerq_django import enqueue
from runnerq_django.models import Activity, Event
from runnerq_django.storage import commands
from tests.helpers import url_for
from tests.pg_replica import replicated_pair

pytestmark = pytest.mark.slow

PRIMARY, REPLICA, SAME = "rq_test_primary", "rq_test_replica", "rq_test_primary_again"
QUEUE = "replicated"
KIND = "replica.job"
CHANGELIST = "/admin/runnerq_django/activity/"
OVERVIEW = "/admin/runnerq_django/activity/overview/"
LIVE = "/admin/runnerq_django/activity/overview/live.json"
# What a page read from a replica says (replica_note.html).
NOTE = re.compile(r'id="rq-replica" data-lag-seconds="([0-9.]*)"')


def _entry(url: str) -> dict:
    from testproject.database import django_database

    entry = django_database(url)
    entry.pop("TEST")
    for key, value in {
        "ATOMIC_REQUESTS": False,
        "AUTOCOMMIT": True,
        "CONN_HEALTH_CHECKS": False,
        "TIME_ZONE": None,
        "TEST": {"MIRROR": None, "NAME": None},
    }.items():
        entry.setdefault(key, value)
    return entry


@contextmanager
def aliases(pair):
    """The pair as Django aliases (and the primary once more, as ``SAME``) while the block runs."""
    added = {PRIMARY: pair.primary.url(), REPLICA: pair.replica.url(), SAME: pair.primary.url()}
    for alias, url in added.items():
        settings.DATABASES[alias] = _entry(url)
    try:
        yield
    finally:
        for alias in added:
            connections[alias].close()
            del connections[alias]
            del settings.DATABASES[alias]


@pytest.fixture(scope="module")
def pair(django_db_setup, django_db_blocker):
    pair, why = replicated_pair()
    if pair is None:
        pytest.skip(why)
    try:
        with django_db_blocker.unblock(), aliases(pair):
            call_command("migrate", "runnerq_django", database=PRIMARY, verbosity=0)
        yield pair
    finally:
        pair.stop()


@pytest.fixture
def transactional_db(django_db_setup, django_db_blocker):
    """This module's own, in place of pytest-django's: the test database (which pytest-django
    creates for a test that asks for a fixture of this name) in autocommit, without the test case
    pytest-django's would run, which refuses connections to aliases added after it started (the
    pair's are) and would flush them (the replica is read-only). The tests clean up after
    themselves."""
    with django_db_blocker.unblock():
        yield


@pytest.fixture
def replicated(pair, transactional_db):
    """RUNNERQ on the pair's primary, reading its replica; empty and caught up at each start.
    Autocommit everywhere: the primary's rows must commit to reach the replica."""
    with aliases(pair), override_settings(RUNNERQ={"DATABASE": PRIMARY, "READ_REPLICA": REPLICA}):
        pair.wait_replayed()
        try:
            yield pair
        finally:
            pair.resume_replay()
            call_command("flush", database=PRIMARY, interactive=False, inhibit_post_migrate=True, verbosity=0)


@pytest.fixture
def operator(replicated, client):
    """A superuser logged in (in the test database, deleted afterwards with its sessions)."""
    from django.contrib.sessions.models import Session

    user = User.objects.create_superuser("replica-operator", "op@example.com", "pw")
    client.force_login(user)
    yield client
    Session.objects.all().delete()
    user.delete()


def lag_shown(page: str) -> float:
    found = NOTE.search(page)
    assert found, "the page does not say it was read from a replica"
    return float(found.group(1))


def test_the_pages_show_the_replica_while_an_action_acts_on_the_primary(replicated, operator):
    pair = replicated
    first = enqueue(KIND, {"n": 1}, queue=QUEUE)
    pair.wait_replayed()
    pair.pause_replay()
    # On the primary only: the first activity is cancelled and a second one is enqueued.
    cancelled = commands.cancel(QUEUE, [first.id], cascade=True, command_id="test:cancel", reason="test")
    assert cancelled.applied == 1
    second = enqueue(KIND, {"n": 2}, queue=QUEUE)
    time.sleep(0.5)  # the replica falls half a second behind

    listing = operator.get(f"{CHANGELIST}?queue={QUEUE}").content.decode()
    assert str(first.id) in listing and str(second.id) not in listing
    assert 'title="stored status: pending"' in listing and "stored status: cancelled" not in listing
    assert lag_shown(listing) >= 0.5 and "replay paused" in listing

    detail = operator.get(f"{CHANGELIST}{first.id}/change/").content.decode()
    assert 'id="rq-status" title="stored status: pending"' in detail
    assert lag_shown(detail) >= 0.5

    # The cancellation's event is on the primary only: neither the event list nor its own page has it.
    event = Event.objects.using(PRIMARY).get(activity_id=first.id, event_type="Cancelled")
    events = operator.get(f"/admin/runnerq_django/event/?q={first.id}").content.decode()
    assert f'title="{first.id}"' not in events  # a row of the list links its activity so
    assert operator.get(f"/admin/runnerq_django/event/{event.id}/change/").status_code == 302

    overview = operator.get(OVERVIEW).content.decode()
    assert lag_shown(overview) >= 0.5 and "actions act on the primary" in overview
    card = overview.split(f'id="queue-{QUEUE}"', 1)[1]
    assert re.search(r'rq-pending[^"]*" href="[^"]*" data-status="pending"><strong>1</strong>', card)

    live = operator.get(LIVE).json()
    assert live["replica"]["alias"] == REPLICA and live["replica"]["paused"] is True
    assert live["replica"]["lag_seconds"] >= 0.5

    # A retry of every cancelled activity of the queue: selected on the primary, where the first
    # one is cancelled (on the replica it is still pending, and nothing would be selected).
    form = {
        "action": "retry_keep_attempts",
        "select_across": "1",
        "index": "0",
        "_selected_action": [str(first.id)],
    }
    confirm = operator.post(f"{CHANGELIST}?queue={QUEUE}&status=cancelled", form).content.decode()
    assert str(first.id) in confirm and NOTE.search(confirm) is None
    done = operator.post(
        f"{CHANGELIST}?queue={QUEUE}&status=cancelled",
        {**form, "runnerq_confirm": "1", "command_id": "test:retry"},
        follow=True,
    )
    assert "Retry: applied to 1 activity" in done.content.decode()
    assert Activity.objects.using(PRIMARY).get(id=first.id).status == "pending"
    assert Event.objects.using(PRIMARY).filter(activity_id=first.id, event_type="Retried").exists()
    assert not Event.objects.using(REPLICA).filter(activity_id=first.id, event_type="Retried").exists()

    pair.resume_replay()
    pair.wait_replayed()
    caught_up = operator.get(f"{CHANGELIST}?queue={QUEUE}").content.decode()
    assert str(second.id) in caught_up and lag_shown(caught_up) == 0.0
    assert "replay paused" not in caught_up


def status_json(*args: str) -> dict:
    out = io.StringIO()
    call_command("runnerq_status", "--json", "--queue", QUEUE, *args, stdout=out)
    return json.loads(out.getvalue())


def test_runnerq_status_reads_the_replica_and_reports_its_lag(replicated):
    pair = replicated
    enqueue(KIND, {"n": 1}, queue=QUEUE)
    pair.wait_replayed()
    pair.pause_replay()
    enqueue(KIND, {"n": 2}, queue=QUEUE)
    enqueue(KIND, {"n": 3}, queue=QUEUE)
    time.sleep(0.5)

    stale = status_json()
    assert stale["database"] == REPLICA and stale["queues"][QUEUE]["counts"]["pending"] == 1
    assert stale["replica"]["paused"] is True and stale["replica"]["lag_seconds"] >= 0.5
    current = status_json("--database", PRIMARY)
    assert current["replica"] is None and current["queues"][QUEUE]["counts"]["pending"] == 3

    text = io.StringIO()
    call_command("runnerq_status", "--queue", QUEUE, stdout=text)
    line = re.search(
        rf"\(read from the replica '{REPLICA}': replay lag ([0-9.]+)(ms|s), replay paused;", text.getvalue()
    )
    assert line, text.getvalue()
    assert float(line.group(1)) / (1000 if line.group(2) == "ms" else 1) >= 0.5, text.getvalue()

    pair.resume_replay()
    pair.wait_replayed()
    caught_up = status_json()
    assert caught_up["queues"][QUEUE]["counts"]["pending"] == 3
    assert caught_up["replica"] == {**caught_up["replica"], "paused": False, "lag_seconds": 0.0}


def test_a_replica_alias_that_is_no_standby_is_reported_as_current(replicated, operator):
    with override_settings(RUNNERQ={"DATABASE": PRIMARY, "READ_REPLICA": SAME}):
        page = operator.get(OVERVIEW).content.decode()
        assert "it is not a standby" in page
        assert status_json()["replica"]["standby"] is False


def test_the_replica_state_of_a_server_that_is_the_primary(replicated):
    from runnerq_django.storage import reads

    state = reads.replica_state(PRIMARY)
    assert (state.standby, state.lag_seconds, state.paused) == (False, None, False)
    assert url_for(connections[REPLICA].settings_dict).endswith(f":{replicated.replica.port}/postgres")


def test_a_query_the_replica_cancels_for_recovery_answers_503(replicated, operator):
    """A standby cancels a query that replay must not wait for (here: an exclusive lock taken on
    the primary, with max_standby_streaming_delay 0): the page says so instead of a 500."""
    import threading

    import psycopg
    from django.contrib import admin
    from django.http import HttpResponse
    from django.test import RequestFactory

    from runnerq_django.admin_views import guard

    pair = replicated
    with psycopg.connect(pair.replica.url(), autocommit=True) as conn:
        conn.execute("ALTER SYSTEM SET max_standby_streaming_delay = 0")
        conn.execute("SELECT pg_reload_conf()")
    request = RequestFactory().get(OVERVIEW)
    request.user = User.objects.get(username="replica-operator")

    def slow_read() -> HttpResponse:
        with connections[guard.read_alias()].cursor() as cursor:
            cursor.execute("SELECT count(*) FROM runnerq_activities, pg_sleep(10)")
        return HttpResponse("read")

    def lock_on_the_primary() -> None:
        time.sleep(0.5)
        with psycopg.connect(pair.primary.url()) as conn:
            conn.execute("LOCK TABLE runnerq_activities IN ACCESS EXCLUSIVE MODE")

    locker = threading.Thread(target=lock_on_the_primary)
    locker.start()
    try:
        started = time.monotonic()
        response = guard.run(admin.site._registry[Activity], request, slow_read)
        locker.join()
        assert response.status_code == 503 and time.monotonic() - started < 8
        page = response.render().content.decode()
        assert "The read replica cancelled the query" in page and REPLICA in page
    finally:
        locker.join()
        with psycopg.connect(pair.replica.url(), autocommit=True) as conn:
            conn.execute("ALTER SYSTEM RESET max_standby_streaming_delay")
            conn.execute("SELECT pg_reload_conf()")


def test_runnerq_status_reports_a_lag_only_for_a_standby_or_the_replica(replicated):
    """``--database`` naming another primary (SAME stands in for one) reports no replica; naming a
    standby reports its lag even when it is not RUNNERQ['READ_REPLICA']."""
    with override_settings(RUNNERQ={"DATABASE": PRIMARY}):
        assert status_json()["database"] == PRIMARY and status_json()["replica"] is None
        assert status_json("--database", SAME)["replica"] is None
        standby = status_json("--database", REPLICA)["replica"]
        assert standby["standby"] is True and standby["alias"] == REPLICA


def test_a_replica_that_does_not_answer_is_a_503_page_and_actions_still_work(replicated, operator):
    from tests.helpers import free_port

    settings.DATABASES["rq_test_nowhere"] = _entry(f"postgres://postgres@127.0.0.1:{free_port()}/postgres")
    try:
        with override_settings(RUNNERQ={"DATABASE": PRIMARY, "READ_REPLICA": "rq_test_nowhere"}):
            page = operator.get(OVERVIEW)
            assert page.status_code == 503
            assert "The read replica can&#x27;t be reached" in page.content.decode()
            assert "rq_test_nowhere" in page.content.decode()
            paused = operator.post(
                "/admin/runnerq_django/activity/flow/", {"action": "pause", "queue": QUEUE, "reason": "t"}
            )
            assert paused.status_code == 302
            from runnerq_django.storage import flow

            assert [p.queue_name for p in flow.pauses(using=PRIMARY)] == [QUEUE]
    finally:
        connections["rq_test_nowhere"].close()
        del connections["rq_test_nowhere"]
        del settings.DATABASES["rq_test_nowhere"]
