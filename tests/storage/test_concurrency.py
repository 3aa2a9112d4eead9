"""Several worker processes claim one backlog at once: every activity is claimed exactly once."""

import subprocess
import sys

import pytest
from django.db import connection

from runnerq_django.storage.types import NewActivity
from tests.helpers import REPO, manage_env, wait_until
from tests.storage.support import sql_rows

PROCESSES = 4
ACTIVITIES = 10_000

# Each process waits for the go file (so that all of them claim at the same time, not one after
# another as they finish starting), then claims until the queue is empty and writes its ids.
CLAIMER = """
import os, sys, time
import django
django.setup()
from runnerq_django import storage
queue, go, out, worker = sys.argv[1:5]
open(out + ".ready", "w").close()
while not os.path.exists(go):
    time.sleep(0.01)
limit = int(sys.argv[5])
types = sys.argv[6].split(",") if len(sys.argv) > 6 else None
claimed = []
while batch := storage.claim(queue, types=types, limit=limit, lease_ms=60000, worker_id=worker):
    claimed.extend(f"{c.id} {c.token}" for c in batch)
with open(out, "w") as f:
    f.write("\\n".join(claimed))
"""


@pytest.fixture
def no_autoanalyze(storage_db):
    """The backlog is claimed as it was written, in a burst: autovacuum can't analyze the tables
    halfway through and change the claims' plans (the claim plans must not depend on statistics;
    test_claim_plan checks them on a never-analyzed burst)."""
    tables = ("runnerq_activities", "runnerq_inputs")
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"ALTER TABLE {table} SET (autovacuum_enabled = false)")
    yield
    with connection.cursor() as cursor:
        for table in tables:
            cursor.execute(f"ALTER TABLE {table} RESET (autovacuum_enabled)")


TEN_TYPES = ["t", "u"] + [f"absent{i}" for i in range(8)]


@pytest.mark.slow
@pytest.mark.parametrize(
    "types, limit",
    [(None, 50), (["t", "u"], 50), (TEN_TYPES, 50), (["t", "u"], 800), (TEN_TYPES, 200)],
    ids=[
        "any_type",
        "two_types_among_others",
        "ten_types_among_others",
        "two_types_merged",
        "ten_types_past_the_head",
    ],
)
def test_concurrent_claimers_take_each_activity_exactly_once(
    queue, live_db_url, tmp_path, types, limit, no_autoanalyze, store
):
    """With ``types``, the claimers take two types out of a queue where as many rows again are of
    a type they don't claim (another SDK's): a locking walk per type under contention
    (``sql.claim_each_type``), and, with types x limit past ``MAX_TYPE_WALK_ROWS``, the
    candidates read first and locked one by one: the merged per-type walks of two types
    (``sql.claim_any_of``), the head of the queue then one walk per type of ten
    (``sql.claim_many_types``)."""
    news = [
        NewActivity("t" if types is None or i % 2 else "u", priority=1 + i % 4) for i in range(ACTIVITIES)
    ]
    store.submit_many(queue, news)
    if types:
        store.submit_many(queue, [NewActivity("go", priority=1 + i % 4) for i in range(ACTIVITIES)])
    go = tmp_path / "go"
    env = manage_env(live_db_url, DJANGO_SETTINGS_MODULE="testproject.settings")
    procs = [
        subprocess.Popen(
            [
                sys.executable,
                "-c",
                CLAIMER,
                queue,
                str(go),
                str(tmp_path / f"claims{i}"),
                f"p{i}",
                str(limit),
                *([",".join(types)] if types else []),
            ],
            cwd=REPO,
            env=env,
            stdout=subprocess.PIPE,
            stderr=subprocess.STDOUT,
            text=True,
        )
        for i in range(PROCESSES)
    ]
    wait_until(
        lambda: all((tmp_path / f"claims{i}.ready").exists() for i in range(PROCESSES)),
        timeout=60,
        message="claimer processes to start",
    )
    go.touch()
    for proc in procs:
        output, _ = proc.communicate(timeout=120)
        assert proc.returncode == 0, output
    per_process = [(tmp_path / f"claims{i}").read_text().split("\n") for i in range(PROCESSES)]
    claims = [line.split(" ") for lines in per_process for line in lines if line]
    ids = [activity_id for activity_id, _ in claims]
    assert len(ids) == ACTIVITIES, f"{len(ids)} claims for {ACTIVITIES} activities"
    assert len(set(ids)) == ACTIVITIES, "an activity was claimed twice"
    assert set(ids) == {str(n.id) for n in news}, "an activity was lost"
    # They really ran side by side (one of four may be starved of CPU on a small machine).
    assert sum(1 for lines in per_process if lines != [""]) >= 2, "the claims did not overlap"
    # The database agrees: every row processing under the token its claimer got.
    rows = dict(
        sql_rows(
            "SELECT id::text, current_worker_id FROM runnerq_activities "
            "WHERE queue_name = %s AND status = 'processing'",
            [queue],
        )
    )
    assert rows == {activity_id: token for activity_id, token in claims}
    if types:
        assert sql_rows(
            "SELECT status, count(*) FROM runnerq_activities WHERE queue_name = %s "
            "AND activity_type = 'go' GROUP BY status",
            [queue],
        ) == [("pending", ACTIVITIES)]
