"""Benchmark: what PgBouncer changes for latency and enqueue (docs/how-to/pgbouncer.md).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/pgbouncer.py \
        [--samples 200] [--gap 0.005] [--single 500]

On a scratch database (dropped afterwards), migrated directly, in one run, each setup in a process
of its own (the benchmark's client and its worker share the setup's settings):

- **direct**: Postgres itself, ``LISTEN`` on (the default), and the same with ``LISTEN`` off;
- **PgBouncer, session pooling**: ``LISTEN`` and prepared statements on, as direct;
- **PgBouncer, transaction pooling**: the documented settings (``LISTEN`` off, prepared
  statements off before PgBouncer 1.21), ``POLL_INTERVAL_SECONDS`` at its default 1 s and at 0.1 s.

Each PgBouncer is Debian's ``pgbouncer`` started by ``tests/pgbouncer.py`` in a temporary folder.
For each setup: the enqueue-to-start latency on an idle worker (``bench/throughput.py``'s
``ours_latency``: one activity at a time, the handler notes ``time.time()`` as it starts), p50 and
p95 from the enqueue call and from its return; and the one-by-one enqueue rate from one session
(``throughput.ours_single``). Printed beside the direct, listening setup as ratios. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import throughput  # noqa: E402


def _child(samples: int, gap: float, single: int) -> None:
    """One setup, in this process: its settings come from the environment."""
    import time

    import django

    django.setup()
    env = {**os.environ, "RUNNERQ_EXAMPLES": "0", "PYTHONUNBUFFERED": "1", "PYTHONPATH": str(REPO)}
    figure = throughput.ours_latency(env, samples, gap)
    throughput.ours_single(10)  # warm
    began = time.perf_counter()
    throughput.ours_single(single)
    rate = single / (time.perf_counter() - began)
    print(json.dumps({"from_call": figure.latencies, "from_commit": figure.from_commit, "enqueue": rate}))


def _run(url: str, settings: dict, args) -> dict:
    env = {
        **os.environ,
        "DATABASE_URL": url,
        "DJANGO_SETTINGS_MODULE": "tests.worker.settings",  # the test project's, RUNNERQ from the env
        "RUNNERQ_TEST_SETTINGS": json.dumps(settings),
        "RUNNERQ_EXAMPLES": "0",
        "DJANGO_DEBUG": "0",
        "PYTHONPATH": str(REPO),
    }
    env.pop("RUNNERQ_TEST_PGBOUNCER", None)
    out = subprocess.run(
        [
            sys.executable,
            "-m",
            "bench.pgbouncer",
            "child",
            str(args.samples),
            str(args.gap),
            str(args.single),
        ],
        cwd=REPO,
        env=env,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return json.loads(out.strip().splitlines()[-1])


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--samples", type=int, default=200, help="latency samples per setup")
    parser.add_argument("--gap", type=float, default=0.005, help="seconds between latency samples")
    parser.add_argument("--single", type=int, default=500, help="one-by-one enqueues per setup")
    args = parser.parse_args()

    import platform

    import psycopg

    from testproject.database import database_url
    from tests.helpers import scratch_database, with_dbname
    from tests.pgbouncer import PgBouncer

    with scratch_database(database_url(), prefix="rq_bench_pgbouncer") as url:
        env = {**os.environ, "DATABASE_URL": url, "RUNNERQ_EXAMPLES": "0", "PYTHONPATH": str(REPO)}
        subprocess.run([sys.executable, "manage.py", "migrate", "-v", "0"], cwd=REPO, env=env, check=True)
        dbname = psycopg.conninfo.conninfo_to_dict(url)["dbname"]
        folders = [tempfile.mkdtemp(prefix="rq_pgbouncer_") for _ in range(2)]
        transaction = PgBouncer.start(with_dbname(url, "postgres"), folders[0])
        session = PgBouncer.start(with_dbname(url, "postgres"), folders[1], pool_mode="session")
        try:
            prepared = transaction.prepared_statements
            pooled = {"LISTEN": False, "PREPARED_STATEMENTS": prepared}
            setups = [
                ("direct, LISTEN on", url, {}),
                ("direct, LISTEN off, poll 1 s", url, {"LISTEN": False}),
                ("PgBouncer session pooling, LISTEN on", session.url(dbname), {}),
                ("PgBouncer transaction pooling, LISTEN off, poll 1 s", transaction.url(dbname), pooled),
                (
                    "PgBouncer transaction pooling, LISTEN off, poll 0.1 s",
                    transaction.url(dbname),
                    {**pooled, "POLL_INTERVAL_SECONDS": 0.1},
                ),
            ]
            with psycopg.connect(url) as conn:
                version, sync = conn.execute(
                    "SELECT current_setting('server_version'), current_setting('synchronous_commit')"
                ).fetchone()
            print("Enqueue-to-start and enqueue through PgBouncer, one run, one server")
            print(
                f"  machine    {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start (shared), "
                f"{platform.system()} {platform.release()}"
            )
            print(f"  postgres   {version} on this machine, synchronous_commit={sync}")
            print(
                f"  pgbouncer  {'.'.join(map(str, transaction.version))} on this machine, pool size 20; "
                f"prepared statements through transaction pooling: {'yes' if prepared else 'no (before 1.21)'}"
            )
            print(
                f"  measure    latency: 1 idle worker x 8 threads, {args.samples} samples {args.gap * 1000:.0f} ms "
                f"apart; enqueue: {args.single} enqueue() from one session"
            )
            results = [(label, settings, _run(target, settings, args)) for label, target, settings in setups]
        finally:
            transaction.stop()
            session.stop()
            for folder in folders:
                shutil.rmtree(folder, ignore_errors=True)

    p = throughput._percentile
    base = results[0][2]
    print()
    print(
        "| setup | from the enqueue call, p50 / p95 (ms) | from its return, p50 / p95 (ms) | "
        "p50 from the call / direct's | enqueue one by one (/s) | / direct's |"
    )
    print("|---|---|---|---|---|---|")
    for label, _, r in results:
        print(
            f"| {label} | {p(r['from_call'], 50):.1f} / {p(r['from_call'], 95):.1f} | "
            f"{p(r['from_commit'], 50):.1f} / {p(r['from_commit'], 95):.1f} | "
            f"{p(r['from_call'], 50) / p(base['from_call'], 50):.2f} | {r['enqueue']:,.0f} | "
            f"{r['enqueue'] / base['enqueue']:.2f} |"
        )


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "child":
        _child(int(sys.argv[2]), float(sys.argv[3]), int(sys.argv[4]))
    else:
        main()
