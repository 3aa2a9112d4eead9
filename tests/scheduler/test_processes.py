"""Cases with more than one scheduler, in real processes: 3b (two releases alive) and 4 (two
schedulers racing on the same occurrence). Real Postgres, real Redis."""

from __future__ import annotations

import json
import subprocess
import sys
import time

import pytest

from tests.helpers import REPO, manage_env
from tests.scheduler.conftest import iso, records

pytestmark = pytest.mark.slow


def _spawn(config: dict, db_url: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "tests.scheduler.proc", json.dumps(config)],
        cwd=REPO,
        env=manage_env(db_url),
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _lines(out: str) -> list[dict]:
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_case_4_two_scheduler_processes_racing_leave_one_row_per_occurrence(
    env, live_db_url, redis_url, tmp_path
):
    barrier = tmp_path / "go"
    config = {
        "namespace": env.namespace,
        "cache_url": redis_url,
        "fencing": False,
        "barrier": str(barrier),
        "barrier_after_plan": True,
        "ticks": ["2030-01-07T12:00:01Z"],
        "jobs": [{"id": name, "every_s": 60} for name in ("a", "b", "c")],
    }
    procs = [_spawn(config, live_db_url) for _ in range(2)]
    for proc in procs:  # both have read the (empty) records and planned the same occurrences
        assert json.loads(proc.stdout.readline()).get("ready"), proc.stderr.read()
    barrier.touch()
    reports = []
    for proc in procs:
        out, err = proc.communicate(timeout=60)
        assert proc.returncode == 0, err
        reports += _lines(out)
    assert len(reports) == 2
    for name in ("a", "b", "c"):
        inserted = sum(len(r["enqueued"].get(name, [])) for r in reports)
        conflicts = sum(len(r["existing"].get(name, [])) for r in reports)
        assert (inserted, conflicts) == (1, 1), (name, reports)  # both outcomes accounted for
        assert iso(env.occurrences(name)) == ["2030-01-07T12:00:00Z"]
    # Whichever writer won, the record is the same value (apart from who wrote it).
    final = [{k: v for k, v in r["record"].items() if k != "by"} for r in reports]
    assert final[0] == final[1]
    stored = env.record("a")
    assert {k: v for k, v in stored.items() if k != "by"} == {
        **final[0],
        "job": "a",
        "sfp": stored["sfp"],
        "dfp": stored["dfp"],
    }


def test_case_3b_two_releases_alive_only_the_higher_one_writes_and_enqueues(env, live_db_url, redis_url):
    base = {"namespace": env.namespace, "cache_url": redis_url, "lease_seconds": 30, "max_interval": 0.25}
    old = _spawn(
        {**base, "release": 1, "run_seconds": 6, "jobs": [{"id": "j", "every_s": 2, "grace_s": 30}]},
        live_db_url,
    )
    time.sleep(2.5)  # the old release owns the namespace and writes its records
    new = _spawn(
        {**base, "release": 2, "run_seconds": 4, "jobs": [{"id": "j", "every_s": 3, "grace_s": 30}]},
        live_db_url,
    )
    out_new, err_new = new.communicate(timeout=60)
    out_old, err_old = old.communicate(timeout=60)
    assert new.returncode == 0 and old.returncode == 0, err_new + err_old
    new_ticks, old_ticks = _lines(out_new), _lines(out_old)
    new_node = new_ticks[0]["node"]
    takeover = min(t["now"] for t in new_ticks if t["owner"])
    # After the takeover the old release never writes or enqueues again: a read-only view.
    after = [t for t in old_ticks if t["now"] > takeover]
    assert after and not any(t["written"] or t["enqueued"] or t["writer"] for t in after[1:])
    # The new release repaired the record once (schedule_changed), then never again: no ping-pong.
    repairs = [r for t in new_ticks for r in t["repairs"]]
    assert [r[:2] for r in repairs] == [["j", "schedule_changed"]]
    assert not any(t["repairs"] for t in old_ticks if t["now"] > takeover)
    record = env.record("j")
    assert record["by"]["node"] == new_node and record["by"]["release"] == 2
    # Occurrences after the takeover are all on the new lattice (every 3 s), each exactly once.
    seen = env.occurrences("j")
    assert len(seen) == len(set(seen))
    late = [t for t in seen if records.format_instant(t) > takeover]
    assert late and all(t.timestamp() % 3 == 0 for t in late)
