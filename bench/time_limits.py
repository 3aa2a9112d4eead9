"""What ``isolation="process"`` costs per activity, against the default thread mode.

One real ``runworker`` process (``--import bench.time_limits``) on a scratch database created
(and dropped afterwards) on the server of ``DATABASE_URL``, two no-op handlers that differ only in their isolation, and two measures each:

- latency: one activity at a time (``--concurrency 1``), enqueue to result, ``--latency N`` times;
  the median and the 90th percentile;
- throughput: ``--count N`` activities enqueued in one batch, then timed from the enqueue to the
  last completion with ``--concurrency C`` handler threads (each child in process mode).

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/scratch PYTHONPATH=$PWD \\
        python bench/time_limits.py --count 300 --concurrency 4 --latency 40
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

from runnerq_django import activity

REPO = Path(__file__).resolve().parent.parent
QUEUE = "bench_time_limits"


@activity(name="bench.tl.thread", queue=QUEUE)
def in_thread(payload: int) -> int:
    return payload


@activity(name="bench.tl.process", queue=QUEUE, isolation="process")
def in_process(payload: int) -> int:
    return payload


def start_worker(concurrency: int) -> subprocess.Popen[bytes]:
    env = {**os.environ, "DJANGO_SETTINGS_MODULE": "testproject.settings", "RUNNERQ_EXAMPLES": "0"}
    env["PYTHONPATH"] = f"{REPO}{os.pathsep}{env.get('PYTHONPATH', '')}"
    return subprocess.Popen(
        [
            *(sys.executable, "manage.py", "runworker", "--import", "bench.time_limits", "--queue", QUEUE),
            *("--concurrency", str(concurrency), "--poll-interval", "0.2"),
        ],
        cwd=REPO,
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def stop(proc: subprocess.Popen[bytes]) -> None:
    proc.terminate()
    try:
        proc.wait(30)
    except subprocess.TimeoutExpired:
        proc.kill()


def latency(handler: object, times: int) -> tuple[float, float]:
    samples = []
    for n in range(times):
        began = time.perf_counter()
        handler.enqueue(n).result(timeout=60)  # type: ignore[attr-defined]
        samples.append(time.perf_counter() - began)
    samples.sort()
    return statistics.median(samples), samples[int(len(samples) * 0.9) - 1]


def throughput(handler: object, count: int) -> float:
    began = time.perf_counter()
    handles = handler.enqueue_many(range(count))  # type: ignore[attr-defined]
    for handle in handles:
        handle.result(timeout=600)
    return time.perf_counter() - began


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--count", type=int, default=300)
    parser.add_argument("--concurrency", type=int, default=4)
    parser.add_argument("--latency", type=int, default=40)
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    from testproject.database import database_url

    django.setup()
    from django.core.management import call_command
    from django.db import connection

    from bench.storage import _settings_for
    from tests.helpers import scratch_database

    print(f"python {sys.version.split()[0]}, {os.cpu_count()} cores, load average {os.getloadavg()[0]:.1f}")
    with scratch_database(database_url(), prefix="rq_bench_time_limits") as url:
        connection.close()
        connection.settings_dict.update(_settings_for(url))
        call_command("migrate", interactive=False, verbosity=0)
        os.environ["DATABASE_URL"] = url  # the worker's
        try:
            measure_modes(args)
        finally:
            connection.close()


def measure_modes(args: argparse.Namespace) -> None:
    for concurrency, measure in ((1, "latency"), (args.concurrency, "throughput")):
        worker = start_worker(concurrency)
        try:
            for handler in (in_thread, in_process):
                handler.enqueue(-1).result(timeout=60)  # warm: the worker (and forkserver) is up
                mode = handler.options.isolation
                if measure == "latency":
                    median, p90 = latency(handler, args.latency)
                    print(
                        f"{mode:8} latency (1 thread): median {median * 1000:.1f} ms, p90 {p90 * 1000:.1f} ms"
                    )
                else:
                    seconds = throughput(handler, args.count)
                    print(
                        f"{mode:8} {args.count} activities, {concurrency} threads: {seconds:.2f} s, "
                        f"{args.count / seconds:.0f}/s, {seconds / args.count * 1000 * concurrency:.1f} ms "
                        "of a thread each"
                    )
        finally:
            stop(worker)


if __name__ == "__main__":
    main()
