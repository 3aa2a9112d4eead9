"""Progress and events from handlers run by real ``runworker`` processes: sync (thread), async
and process-isolated handlers report while they run, and a reader in this process sees the
progress and follows the events live, to the end (by NOTIFY, and by polling through PgBouncer);
the writer coalesces a handler's reports into a few writes a second."""

from __future__ import annotations

import threading

import psycopg
import pytest

from runnerq_django.storage import progress as stored
from tests.helpers import wait_until
from tests.progress import handlers
from tests.worker.support import fetch, status_of, wait_for_workers, worker_processes

N = 20


def release(handle) -> None:
    fetch(
        "INSERT INTO rq_test_runs (activity_id, what, attempt, pid) VALUES (%s, 'release', 0, 0)",
        [handle.id],
    )


class Follower(threading.Thread):
    """Follows ``handle.events()`` in a thread of this process, as a web view would."""

    def __init__(self, handle):
        super().__init__(daemon=True)
        self.handle = handle
        self.seen: list = []
        self.error: BaseException | None = None

    def run(self) -> None:
        from django.db import connections

        try:
            for event in self.handle.events():
                self.seen.append(event)
        except BaseException as exc:
            self.error = exc
        finally:
            connections.close_all()


@pytest.fixture
def workers(live_db_url, runs_table, tmp_path):
    with worker_processes(live_db_url, tmp_path, "tests.progress.handlers") as start:
        yield start


@pytest.mark.parametrize("handler", [handlers.reports_sync, handlers.reports_async, handlers.reports_process])
def test_progress_is_seen_and_events_followed_while_the_handler_runs(workers, handler):
    proc = workers("--poll-interval", "0.2", "--concurrency", "2")
    handle = handler.enqueue({"n": N})
    follower = Follower(handle)
    follower.start()
    # Seen from this process while the handler still runs (it waits for its release).
    progress = wait_until(
        lambda: (p := handle.progress()) is not None and p.done == N and p,
        timeout=60,
        message=f"progress {N}/{N}",
    )
    assert (progress.total, progress.message) == (N, f"item {N}")
    wait_until(lambda: len(follower.seen) == N, timeout=30, message=f"{N} events followed live")
    assert status_of(handle.id) == "processing"
    assert follower.is_alive()  # still following: the activity has not ended
    release(handle)
    assert handle.result(timeout=60) == N
    follower.join(30)
    assert not follower.is_alive() and follower.error is None  # it ended with the activity
    assert [(e.seq, e.name, e.data) for e in follower.seen] == [
        *((i, "item", {"i": i}) for i in range(1, N + 1)),
        (N + 1, "done", {"n": N}),
    ]
    assert proc.poll() is None and "Traceback" not in proc.log(), proc.log()


def test_an_async_reader_follows_to_the_end(workers):
    import asyncio

    workers("--poll-interval", "0.2")
    handle = handlers.reports_async.enqueue({"n": 3})

    async def follow():
        seen = []
        async for event in handle.events():
            seen.append(event.name)
            if len(seen) == 3:
                await asyncio.to_thread(release, handle)
        return seen

    assert asyncio.run(follow()) == ["item", "item", "item", "done"]


def test_the_writer_coalesces_a_handler_hammering_progress(workers, live_db_url):
    """A handler calling progress() as fast as it can for a second: the database sees a write per
    WRITE_INTERVAL_SECONDS at most (one notification each), plus the last one at the end."""
    from runnerq_django.progress.writer import WRITE_INTERVAL_SECONDS

    workers("--poll-interval", "0.2")
    handle = handlers.hammer.enqueue({"seconds": 1.0}, queue="default")
    listener = psycopg.connect(live_db_url, autocommit=True)
    try:
        listener.execute(f'LISTEN "{stored.channel("default")}"')
        calls = handle.result(timeout=60)
        notes = [n for n in listener.notifies(timeout=1.0) if n.payload == str(handle.id)]
    finally:
        listener.close()
    assert calls > 1000  # it called progress() that often ...
    # ... and at most one write per interval went out, and the final one.
    assert 1 <= len(notes) <= 1.0 / WRITE_INTERVAL_SECONDS + 2, len(notes)
    assert handle.progress().done == calls  # the latest value won


@pytest.mark.slow
def test_events_are_followed_to_the_end_through_pgbouncer(live_db_url, runs_table, tmp_path):
    """The worker writes through PgBouncer in transaction pooling (LISTEN off there); the reader
    polls (LISTEN off) and still follows every event to the activity's end."""
    import json
    import shutil
    import tempfile

    from django.conf import settings
    from django.test import override_settings
    from psycopg.conninfo import conninfo_to_dict

    from testproject.database import database_url
    from tests import pgbouncer
    from tests.helpers import with_dbname

    if not pgbouncer.binary():
        pytest.skip("pgbouncer is not installed (Debian: apt-get install pgbouncer)")
    pooler = pgbouncer.PgBouncer.start(
        with_dbname(database_url(), "postgres"),
        tempfile.mkdtemp(prefix="rq_pgbouncer_"),
        pool_mode="transaction",
    )
    try:
        url = pooler.url(conninfo_to_dict(live_db_url)["dbname"])
        env = {
            "DJANGO_SETTINGS_MODULE": "tests.worker.settings",
            "RUNNERQ_TEST_SETTINGS": json.dumps(
                {"LISTEN": False, "PREPARED_STATEMENTS": pooler.prepared_statements}
            ),
        }
        with (
            worker_processes(url, tmp_path, "tests.progress.handlers") as start,
            override_settings(RUNNERQ={**settings.RUNNERQ, "LISTEN": False}),
        ):
            start("--poll-interval", "0.2", env=env)
            wait_for_workers("default", 1)
            handle = handlers.reports_sync.enqueue({"n": N})
            follower = Follower(handle)
            follower.start()
            wait_until(lambda: len(follower.seen) == N, timeout=60, message=f"{N} events, polled")
            release(handle)
            follower.join(60)
            assert not follower.is_alive() and follower.error is None
            assert [e.seq for e in follower.seen] == list(range(1, N + 2))
            assert follower.seen[-1].name == "done"
            assert handle.progress().done == N
    finally:
        pooler.stop()
        shutil.rmtree(pooler.folder, ignore_errors=True)
