"""The floor: the least a Postgres queue can do on this machine, to compare runnerq-django with.

Raw SQL with psycopg 3 on a table of its own in the scratch database, no spec semantics (no
lease, no result row, no waiters, no retries): a job is a row; a worker claims up to 100 with
``FOR UPDATE SKIP LOCKED`` (committed without waiting for the WAL flush, as runnerq-django's
claims are), runs a no-op for each and completes them in one durable ``UPDATE``. Workers are
processes of their own (``python -m bench.floor worker URL``), each with one connection that
``LISTEN``s for new jobs when the table is empty.

- one-by-one enqueue: a plain ``INSERT`` in autocommit from one session, i.e. the machine's
  durable single-session commit rate;
- bulk enqueue: ``COPY`` of all the rows in one transaction;
- enqueue-to-start: ``INSERT; NOTIFY`` in one transaction, the worker notes ``time.time()`` as
  the no-op starts.
"""

from __future__ import annotations

import signal
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
TABLE = "bench_floor_jobs"
CHANNEL = "bench_floor"
BATCH = 100

CREATE = f"""
CREATE TABLE {TABLE} (
    id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    status smallint NOT NULL DEFAULT 0,  -- 0 queued, 1 running, 2 done
    payload jsonb,
    claimed_at timestamptz,
    started double precision,            -- time.time() as the no-op started
    completed_at timestamptz
);
CREATE INDEX {TABLE}_queued ON {TABLE} (id) WHERE status = 0
"""
CLAIM = f"""
BEGIN; SET LOCAL synchronous_commit = off;
UPDATE {TABLE} SET status = 1, claimed_at = clock_timestamp()
WHERE id IN (SELECT id FROM {TABLE} WHERE status = 0 ORDER BY id LIMIT {BATCH} FOR UPDATE SKIP LOCKED)
RETURNING id, payload;
COMMIT
"""  # one round trip (the simple protocol takes several statements when there are no parameters)
COMPLETE = f"""
UPDATE {TABLE} SET status = 2, completed_at = clock_timestamp(), started = done.started
FROM unnest(%s::bigint[], %s::float8[]) AS done(id, started) WHERE {TABLE}.id = done.id
"""


def connect(url: str):
    import psycopg

    return psycopg.connect(url, autocommit=True)


def create(url: str) -> None:
    with connect(url) as conn:
        conn.execute(CREATE)


def reset(url: str) -> None:
    with connect(url) as conn:
        conn.execute(f"TRUNCATE {TABLE}")
        conn.execute(f"VACUUM ANALYZE {TABLE}")


def enqueue_one_by_one(conn, n: int) -> None:
    """One durable INSERT (its own transaction) at a time."""
    for i in range(n):
        conn.execute(f"INSERT INTO {TABLE} (payload) VALUES (%s)", [f'{{"i": {i}}}'])


def enqueue_copy(conn, n: int) -> None:
    """``n`` rows in one ``COPY`` and one transaction."""
    with conn.transaction(), conn.cursor().copy(f"COPY {TABLE} (payload) FROM STDIN") as copy:
        for i in range(n):
            copy.write_row((f'{{"i": {i}}}',))


SPEC_COPY_QUEUE = "bench_copy_spec"


def enqueue_copy_spec_tables(conn, n: int) -> None:
    """The schema's own floor for a bulk enqueue: ``n`` root activities and their inputs in two
    ``COPY``s, one transaction, straight into ``runnerq_activities`` and ``runnerq_inputs`` (the
    spec's tables with every index they keep; no checks, no keys, no ``NOTIFY``). The rows are
    deleted by ``delete_spec_copies``."""
    import uuid

    ids = [uuid.uuid4() for _ in range(n)]
    columns = "id, queue_name, activity_type, priority, status, max_retries, timeout_seconds, "
    columns += "retry_delay_seconds, max_retry_delay_seconds, root_activity_id, depth"
    with conn.transaction(), conn.cursor() as cursor:
        with cursor.copy(f"COPY runnerq_activities ({columns}) FROM STDIN") as copy:
            for id_ in ids:
                copy.write_row((id_, SPEC_COPY_QUEUE, "bench.noop", 1, "pending", 3, 300, 1, 0, id_, 0))
        with cursor.copy("COPY runnerq_inputs (activity_id, queue_name, payload) FROM STDIN") as copy:
            for i, id_ in enumerate(ids):
                copy.write_row((id_, SPEC_COPY_QUEUE, f'{{"i": {i}}}'))


# One activity row and its input, one statement (so one round trip and one transaction, prepared).
SPEC_INSERT = """
WITH activity AS (
    INSERT INTO runnerq_activities (id, queue_name, activity_type, priority, status, max_retries,
                                    timeout_seconds, retry_delay_seconds, max_retry_delay_seconds,
                                    root_activity_id, depth)
    VALUES (%(id)s, %(queue)s, 'bench.noop', 1, 'pending', 3, 300, 1, 0, %(id)s, 0)
)
INSERT INTO runnerq_inputs (activity_id, queue_name, payload) VALUES (%(id)s, %(queue)s, %(payload)s)
"""


def enqueue_one_by_one_spec_tables(conn, n: int) -> None:
    """The schema's own floor for a one-by-one enqueue: a root activity and its input, one
    prepared statement and one durable commit each, straight into ``runnerq_activities`` and
    ``runnerq_inputs`` (every index they keep; no checks, keys or ``NOTIFY``). The rows are
    deleted by ``delete_spec_copies``."""
    import uuid

    for i in range(n):
        params = {"id": uuid.uuid4(), "queue": SPEC_COPY_QUEUE, "payload": f'{{"i": {i}}}'}
        conn.execute(SPEC_INSERT, params, prepare=True)


def delete_spec_copies(url: str) -> None:
    with connect(url) as conn:
        conn.execute("DELETE FROM runnerq_inputs WHERE queue_name = %s", [SPEC_COPY_QUEUE])
        conn.execute("DELETE FROM runnerq_activities WHERE queue_name = %s", [SPEC_COPY_QUEUE])
        conn.execute("VACUUM ANALYZE runnerq_activities")
        conn.execute("VACUUM ANALYZE runnerq_inputs")


def enqueue_notify(conn) -> int:
    """One job and its NOTIFY, one transaction, one round trip (for the latency): its id."""
    return _rows(conn.execute(f"INSERT INTO {TABLE} (payload) VALUES (NULL) RETURNING id; NOTIFY {CHANNEL}"))[
        0
    ][0]


def start_workers(url: str, count: int, env: dict) -> list[subprocess.Popen]:
    return [
        subprocess.Popen([sys.executable, "-m", "bench.floor", "worker", url], cwd=REPO, env=env)
        for _ in range(count)
    ]


def stop_workers(workers: list[subprocess.Popen]) -> None:
    for worker in workers:
        worker.send_signal(signal.SIGTERM)
    for worker in workers:
        worker.wait(30)


def noop(payload) -> None:
    return None


def work(url: str) -> None:
    """Claim, run, complete until SIGTERM; wait for a NOTIFY when nothing is queued."""
    stopping = []
    signal.signal(signal.SIGTERM, lambda *_: stopping.append(True))
    with connect(url) as conn:
        conn.execute(f"LISTEN {CHANNEL}")
        while not stopping:
            jobs = _rows(conn.execute(CLAIM))
            if not jobs:
                for _ in conn.notifies(timeout=0.5, stop_after=1):
                    pass
                continue
            ids, started = [], []
            for job_id, payload in jobs:
                started.append(time.time())
                noop(payload)
                ids.append(job_id)
            conn.execute(COMPLETE, [ids, started])


def _rows(cursor) -> list[tuple]:
    """The rows of the one statement of a multi-statement query that returns some."""
    while not cursor.description and cursor.nextset():
        pass
    return cursor.fetchall() if cursor.description else []


def done_and_span(conn) -> tuple[int, float]:
    """Jobs done and seconds from the first claim to the last completion."""
    done, seconds = conn.execute(
        f"SELECT count(*), extract(epoch FROM max(completed_at) - min(claimed_at)) FROM {TABLE} WHERE status = 2"
    ).fetchone()
    return done, float(seconds or 0)


def wait_done(conn, job_id: int, timeout: float = 60) -> float:
    """When job ``job_id`` started (``time.time()``), once it is done."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        row = conn.execute(f"SELECT started FROM {TABLE} WHERE id = %s AND status = 2", [job_id]).fetchone()
        if row:
            return row[0]
        time.sleep(0.002)
    raise SystemExit(f"floor job {job_id} was not done within {timeout}s")


if __name__ == "__main__":
    if str(REPO) not in sys.path:
        sys.path.insert(0, str(REPO))
    from bench import counting

    counting.install_from_env()
    work(sys.argv[2])
