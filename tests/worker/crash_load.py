"""The load of the server-crash test (``tests/worker/test_server_crash.py``).

- ``crash.ledgered``: a handler that records each execution in a ledger table on *another*
  server (``RQ_LEDGER_URL``), committed before it returns, so re-runs and losses are visible
  whatever the crashed server kept. Workers import it with ``--import tests.worker.crash_load``.
- ``python -m tests.worker.crash_load produce PATH``: a producer enqueuing ``crash.ledgered`` in
  a loop until SIGTERM, ``RQ_PRODUCE_PAUSE`` seconds apart (0.01). It appends ``ok <id>`` to PATH only after ``enqueue()`` returned, and
  ``error <kind> <class>`` for each refused enqueue (then keeps going).
- ``python -m tests.worker.crash_load slow COUNT SECONDS PATH``: enqueue COUNT activities whose
  handler sleeps SECONDS, and write their ids to PATH.
"""

from __future__ import annotations

import os
import signal
import sys
import threading
import time

from runnerq_django import activity

LEDGER_TABLE_SQL = """
CREATE TABLE IF NOT EXISTS rq_crash_ledger (
    activity_id uuid NOT NULL,
    attempt int NOT NULL,
    pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""

_local = threading.local()


def _ledger():
    import psycopg

    conn = getattr(_local, "ledger", None)
    if conn is None or conn.closed:
        conn = _local.ledger = psycopg.connect(os.environ["RQ_LEDGER_URL"], autocommit=True)
    return conn


@activity(name="crash.ledgered", max_attempts=20, retry_delay=0)
def ledgered(ctx, payload):
    _ledger().execute(
        "INSERT INTO rq_crash_ledger (activity_id, attempt, pid) VALUES (%s, %s, %s)",
        [ctx.id, ctx.attempt, os.getpid()],
    )
    time.sleep(payload.get("sleep", 0.01))  # by default, just enough to keep a few claims in flight
    return payload


def produce(path: str) -> None:
    from runnerq_django.storage.errors import StorageError

    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    pause = float(os.environ.get("RQ_PRODUCE_PAUSE", "0.01"))
    with open(path, "a", buffering=1) as out:
        n = 0
        while not stop.is_set():
            try:
                handle = ledgered.enqueue({"n": n})
            except StorageError as exc:
                out.write(f"error {exc.kind.wire_name} {type(exc).__name__}\n")
                stop.wait(0.05)
                continue
            except Exception as exc:  # not a storage error: the test reports it
                out.write(f"raw {type(exc).__module__}.{type(exc).__name__} {str(exc)[:200]!r}\n")
                stop.wait(0.05)
                continue
            out.write(f"ok {handle.id}\n")
            n += 1
            stop.wait(pause)  # paced below the two workers' rate, so the backlog drains in the test's time


def enqueue_slow(count: str, seconds: str, path: str) -> None:
    handles = ledgered.enqueue_many([{"sleep": float(seconds)}] * int(count))
    with open(path, "w") as out:
        out.writelines(f"{handle.id}\n" for handle in handles)


if __name__ == "__main__":
    import django

    django.setup()
    {"produce": produce, "slow": enqueue_slow}[sys.argv[1]](*sys.argv[2:])
