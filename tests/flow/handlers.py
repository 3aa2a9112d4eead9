"""Activities of the flow-control tests, run in-process and in worker processes
(``runworker --import tests.flow.handlers``).

Every execution writes a row to the ledger table ``rq_flow_ledger`` (start and end times from the
database clock, the worker's pid), committed at once so the test process can read overlaps and
start times across processes.
"""

from __future__ import annotations

import os
import time

from django.db import connection

from runnerq_django import activity
from runnerq_django.retries import Backoff

LEDGER_SQL = """
CREATE TABLE IF NOT EXISTS rq_flow_ledger (
    seq bigserial PRIMARY KEY,
    activity_id uuid NOT NULL,
    activity_type text NOT NULL,
    attempt int NOT NULL,
    pid int NOT NULL,
    partition text,
    started_at timestamptz NOT NULL DEFAULT clock_timestamp(),
    ended_at timestamptz
)
"""


def _start(ctx, payload) -> int:
    partition = payload.get("key") if isinstance(payload, dict) else None
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO rq_flow_ledger (activity_id, activity_type, attempt, pid, partition)"
            " VALUES (%s, %s, %s, %s, %s) RETURNING seq",
            [ctx.id, ctx.activity_type, ctx.attempt, os.getpid(), partition],
        )
        return cursor.fetchone()[0]


def _end(seq: int) -> None:
    with connection.cursor() as cursor:
        cursor.execute("UPDATE rq_flow_ledger SET ended_at = clock_timestamp() WHERE seq = %s", [seq])


def run(ctx, payload) -> dict:
    """Ledger the execution, sleep ``payload['seconds']``, then raise ``payload['raise']`` if given."""
    seq = _start(ctx, payload)
    try:
        time.sleep(float((payload or {}).get("seconds", 0)))
        error = (payload or {}).get("raise")
        if error == "connection":
            raise ConnectionError("the service hung up")
        if error == "key":
            raise KeyError("no such record")
        if error == "value":
            raise ValueError("bad value")
        return {"pid": os.getpid()}
    finally:
        _end(seq)


# retry_on / no_retry_on and a sub-second backoff: ConnectionError retries after 0.3 s then 0.6 s
# (no jitter), KeyError fails for good, ValueError (in neither list) fails for good too.
policy = activity(
    name="flow.policy",
    max_attempts=3,
    retry_on=(ConnectionError, OSError),
    no_retry_on=(KeyError,),
    backoff=Backoff(base=0.3, cap=0.6, jitter="none"),
)(run)

# The default policy: the spec's backoff (retry_delay=1 -> the first retry waits 2 s).
spec_backoff = activity(name="flow.spec_backoff", max_attempts=2)(run)

work = activity(name="flow.work", max_attempts=3)(run)
other = activity(name="flow.other", max_attempts=3)(run)

# Concurrency limits: 4 at once fleet-wide; 1 at once per payload["key"] (a lock per key).
limited = activity(name="flow.limited", max_attempts=5, concurrency=4)(run)
per_key = activity(name="flow.per_key", max_attempts=5, concurrency=1, concurrency_key="key")(run)

# A rate limit: at most 20 starts per second, fleet-wide.
rated = activity(name="flow.rated", max_attempts=3, rate_limit="20/s")(run)
