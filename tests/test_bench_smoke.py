"""The benchmarks still run: each of bench/'s main scripts, at a tiny size, on the test server
(a scratch database of its own, dropped afterwards), prints its tables. Nothing here measures
speed (figures on a test run mean nothing); it keeps the scripts from rotting between the runs
that are quoted (bench/canvas.py failed for weeks on a function that had moved)."""

from __future__ import annotations

import re
import subprocess
import sys

import pytest

from testproject.database import database_url
from tests.helpers import REPO, manage_env

pytestmark = pytest.mark.slow

RUNS = {
    "throughput": (
        [
            "bench/throughput.py",
            "--activities",
            "200",
            "--single",
            "20",
            "--rounds",
            "2",
            "--latency-samples",
            "5",
            "--no-celery",
        ],
        [
            r"\| enqueue one by one, 1 session, 2 x 20 in turn \(/s\) \| [\d,]+ .*\| [\d,]+ \| [\d.]+ \|",
            r"One by one, each round \(ours / floor, in turn\): [\d.]+, [\d.]+; pooled [\d.]+\.",
            r"\| burn-down of 200 no-ops \(/s\) \| [\d,]+ .*\| [\d,]+ \| [\d.]+ \|",
            r"\| burn-down of 200 no-ops, workers claiming one type \(/s\) \| [\d,]+ .*\| [\d,]+ \| [\d.]+ \|",
            r"\| enqueue-to-start, idle worker, from the enqueue call, p50 \(ms\) \| [\d.]+ \| [\d.]+ \|",
            r"Celery skipped: --no-celery",
        ],
    ),
    "canvas": (
        ["bench/canvas.py", "--members", "50", "--hand-written", "20"],
        [
            r"\| canvas spawn \(bulk\) \| 50 \| \d+ \| \d+ \|",
            r"\| chord\(map\(item\), total\) canvas \| 50 \|",
        ],
    ),
    "hotpath replay": (
        ["bench/hotpath.py", "replay", "--activities", "300", "--types", "2"],
        [
            r"replay: [\d,]+ activities, 2 types",
            r"per activity: Postgres CPU [\d.]+ ms, client CPU [\d.]+ ms",
        ],
    ),
    "hotpath explain": (
        ["bench/hotpath.py", "explain", "--activities", "200", "--runs", "1"],
        [
            r"## claim of 32, statement 1 \(prepared by the product\): planning [\d.]+ ms, execution [\d.]+ ms",
            r"## complete_many of 32, statement 2 \(prepared by the product\)",  # WAKE, after COMPLETE
            r"## enqueue\(\) one, no key, statement 1",
        ],
    ),
    "long transaction": (
        [
            "bench/long_transaction.py",
            "--minutes",
            "1",
            "--minute-seconds",
            "4",
            "--sample-every",
            "0.5",
            "--vacuum-every",
            "2",
            "--backlog",
            "200",
        ],
        [
            r"\| 0 \| [\d,]+ \| [\d.]+ \| [\d.]+ \| [\d.na]+ \| [\d,]+ \|",
            r"\| 1 \| [\d,]+ \| [\d.]+ \| [\d.]+ \| [\d.na]+ \| [\d,]+ \|",
            r"last minute / minute 0 \(no transaction held\) throughput: [\d.]+",
        ],
    ),
    "backlog": (
        [
            "bench/backlog.py",
            "--count",
            "400",
            "--small",
            "100",
            "--bulk",
            "200",
            "--rounds",
            "1",
            "--fresh",
            "200",
        ],
        [
            r"\| enqueue_many \| [\d,]+ \| [\d.]+ \| [\d,-]+ \|",
            r"\| claim of 16, 20 types, ms \(median\) \| [\d.]+ \| [\d.]+ \| [\d.]+ \|",
            r"\| admin overview, ms \(median / worst\) \|",
            r"retention: [\d,]+ trees of [\d,]+ finished",
        ],
    ),
    "hand-off": (
        ["bench/handoff.py", "--attempts", "400", "--runs", "1"],
        [
            r"\| queue wake \(before 3\.13\) \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d.]+ \| [\d,]+ \|",
            r"\| watched \| [\d.]+ \| [\d.]+ \|",
        ],
    ),
    "flow burn-down": (
        ["bench/flow_burndown.py", "--activities", "300", "--latency-samples", "5"],
        [r"limited / unlimited p50: [\d.]+"],
    ),
    "runtime schedules": (
        ["bench/schedules.py", "--rows", "60", "--repeat", "1"],
        [
            r"\| steady tick, nothing due \(median of 1\) \| [\d,.]+ \|",
            r"\| admin list, 100 a page \(median / worst of 1\) \| [\d,.]+ / [\d,.]+ \|",
            r"Steady tick / floor: [\d.]+\. Records: 60,",
        ],
    ),
    "batches": (
        ["bench/batches.py", "--activities", "200", "--processes", "1", "--no-floor"],
        [
            r"\| one at a time \| [\d,]+ \| 1\.00 \| - \|",
            r"\| batch of up to 100 \| [\d,]+ \| [\d.]+ \| - \|",
        ],
    ),
}


@pytest.mark.parametrize("name", RUNS)
def test_the_benchmark_runs_and_prints_its_tables(name):
    command, expected = RUNS[name]
    result = subprocess.run(
        [sys.executable, *command],
        cwd=REPO,
        env=manage_env(database_url()),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-3000:]
    for pattern in expected:
        assert re.search(pattern, result.stdout), (pattern, result.stdout[-3000:])
