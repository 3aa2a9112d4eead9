"""A scheduler process for the multi-process tests: ``python -m tests.scheduler.proc '<json>'``.

The JSON names the namespace, the cache URL, the jobs, the release, and either explicit tick
instants (``"ticks": [iso, ...]``) or a wall-clock run (``"run_seconds": n``). With
``"barrier": path`` the process waits until that file exists before its first tick, so several
processes tick at the same moment. ``"crash_after_enqueue": true`` kills the process (SIGKILL)
after the enqueue has committed and before the record write. One JSON line per tick on stdout.
With ``"serve": true`` it runs the scheduler step by step as told on stdin (``remote.py``).
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from datetime import timedelta


def main(config: dict) -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()
    from runnerq_django.scheduler import declarations, service
    from runnerq_django.scheduler.schedules import format_instant, parse_instant
    from tests.scheduler.conftest import redis_cache

    jobs = []
    for spec in config["jobs"]:
        spec = dict(spec)
        if "every_s" in spec:
            spec["every"] = timedelta(seconds=spec.pop("every_s"))
        if "grace_s" in spec:
            spec["misfire_grace"] = timedelta(seconds=spec.pop("grace_s"))
        spec.setdefault("activity", "tests.scheduler.Tick")
        jobs.append(declarations.make_job(spec.pop("id"), origin="test", **spec))
    core = service.build_core(
        jobs,
        namespace=config["namespace"],
        cache=redis_cache(config["cache_url"], config.get("key_prefix", "")),
        release=config.get("release", 0),
        fencing=config.get("fencing", True),
        lease_seconds=config.get("lease_seconds", 30),
        max_interval=config.get("max_interval", 1),
        node=config.get("node"),
    )

    def emit(report, **extra):
        print(
            json.dumps(
                {
                    "node": core.node,
                    "now": format_instant(report.now),
                    "owner": report.owner,
                    "writer": report.writer,
                    "enqueued": {k: [format_instant(x) for x in v] for k, v in report.enqueued.items()},
                    "existing": {k: [format_instant(x) for x in v] for k, v in report.existing.items()},
                    "repairs": report.repairs,
                    "written": report.written,
                    "fenced": report.fenced,
                    "db_error": report.db_error,
                    **extra,
                }
            ),
            flush=True,
        )

    def wait_for_barrier():
        print(json.dumps({"ready": core.node}), flush=True)
        while not os.path.exists(config["barrier"]):
            time.sleep(0.0005)

    if config.get("serve"):
        return serve(core)
    if config.get("barrier_after_plan"):
        # Read the records first, then race on the enqueue: both processes plan from the same view.
        plan = core.plan(parse_instant(config["ticks"][0]))
        wait_for_barrier()
        core.enqueue(plan)
        core.advance(plan)
        emit(plan.report, record=core.cache.get(core.specs[0].key))
        return
    if config.get("barrier"):
        wait_for_barrier()
    if "ticks" in config:
        for moment in config["ticks"]:
            now = parse_instant(moment)
            if config.get("crash_after_enqueue"):
                plan = core.plan(now)
                core.enqueue(plan)
                emit(plan.report, crashing=True)
                os.kill(os.getpid(), signal.SIGKILL)
            emit(core.tick(now))
        core.close()
        return
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    threading.Timer(config["run_seconds"], stop.set).start()
    service.SchedulerService(core, on_tick=lambda report: emit(report)).run(stop)


def serve(core) -> None:
    """Run the scheduler step by step as the test says, one JSON command per stdin line, one JSON
    reply per stdout line (see tests/scheduler/remote.py). Each reply carries the log lines,
    ``record_repaired`` signals and metrics the step produced in this process."""
    import logging

    from django.db import connection, transaction

    from runnerq_django import metrics as hook
    from runnerq_django import signals
    from runnerq_django.logs import event_of, extra_fields
    from runnerq_django.scheduler.schedules import format_instant, parse_instant

    produced = {"logs": [], "signals": [], "metrics": []}

    class Collect(logging.Handler):
        def emit(self, record):
            produced["logs"].append(
                {
                    "event": event_of(record),
                    "level": record.levelname,
                    **{k: v for k, v in extra_fields(record).items()},
                }
            )

    scheduler_logger = logging.getLogger("runnerq_django.scheduler")
    scheduler_logger.setLevel(logging.DEBUG)
    scheduler_logger.addHandler(Collect())

    def on_repaired(sender, **kwargs):
        produced["signals"].append({k: kwargs[k] for k in ("job_id", "reason", "source", "after_outage")})

    signals.record_repaired.connect(on_repaired, weak=False)

    class Sink:
        def inc(self, name, value, labels):
            produced["metrics"].append([name, value, labels])

        def observe(self, name, seconds, labels):
            pass

        def gauge(self, name, value, labels):
            produced["metrics"].append([name, value, labels])

    hook.set_sink(Sink())

    def summary(report):
        return {
            "now": format_instant(report.now),
            "owner": report.owner,
            "writer": report.writer,
            "fenced": report.fenced,
            "db_error": report.db_error,
            "degraded": report.degraded,
            "enqueued": {k: [format_instant(x) for x in v] for k, v in report.enqueued.items()},
            "existing": {k: [format_instant(x) for x in v] for k, v in report.existing.items()},
            "repairs": [list(r) for r in report.repairs],
            "written": report.written,
            "stale_definitions": report.stale_definitions,
            "views": {k: [format_instant(v.last), format_instant(v.next)] for k, v in report.views.items()},
            "due": {
                job.spec.job_id: [format_instant(x) for x in job.due.keep] for job in report.jobs if job.due
            },
        }

    def reply(**fields):
        fields.update({k: list(v) for k, v in produced.items()})
        for items in produced.values():
            items.clear()
        print(json.dumps(fields, default=str), flush=True)

    with connection.cursor() as cursor:
        cursor.execute("SELECT pg_backend_pid()")
        backend_pid = cursor.fetchone()[0]
    reply(ready=True, node=core.node, backend_pid=backend_pid)
    plan = None
    held = None
    for line in sys.stdin:
        command = json.loads(line)
        op = command["op"]
        now = parse_instant(command["now"]) if command.get("now") else None
        if op == "tick":
            reply(report=summary(core.tick(now)))
        elif op == "plan":
            plan = core.plan(now)
            reply(report=summary(plan.report))
        elif op == "enqueue" and command.get("hold"):
            # Enqueue inside a transaction of ours and keep it open until "commit": the fencing
            # lock (FOR SHARE on the lease row) is held as long as an enqueue is in flight.
            held = transaction.atomic()
            held.__enter__()
            core.enqueue(plan)
            reply(report=summary(plan.report), holding=True)
        elif op == "commit":
            held.__exit__(None, None, None)
            held = None
            reply(committed=True)
        elif op == "enqueue":
            core.enqueue(plan)
            reply(report=summary(plan.report))
        elif op == "advance":
            core.advance(plan)
            reply(report=summary(plan.report))
        elif op == "take_over":
            reply(token=core.lease.take_over())
        elif op == "token":
            reply(token=core.lease.token, owner=core.lease.is_owner)
        elif op == "close":
            core.close()
            reply(closed=True)
        elif op == "exit":
            reply(bye=True)
            return
        else:
            reply(error=f"unknown op {op!r}")


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
