"""A scheduler process for the multi-process tests: ``python -m tests.scheduler.proc '<json>'``.

The JSON names the namespace, the cache URL, the jobs, the release, and either explicit tick
instants (``"ticks": [iso, ...]``) or a wall-clock run (``"run_seconds": n``). With
``"barrier": path`` the process waits until that file exists before its first tick, so several
processes tick at the same moment. ``"crash_after_enqueue": true`` kills the process (SIGKILL)
after the enqueue has committed and before the record write. One JSON line per tick on stdout.
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
        jobs, namespace=config["namespace"], cache=redis_cache(config["cache_url"]),
        release=config.get("release", 0), fencing=config.get("fencing", True),
        lease_seconds=config.get("lease_seconds", 30), max_interval=config.get("max_interval", 1),
        node=config.get("node"),
    )

    def emit(report, **extra):
        print(json.dumps({
            "node": core.node, "now": format_instant(report.now), "owner": report.owner, "writer": report.writer,
            "enqueued": {k: [format_instant(x) for x in v] for k, v in report.enqueued.items()},
            "existing": {k: [format_instant(x) for x in v] for k, v in report.existing.items()},
            "repairs": report.repairs, "written": report.written, "fenced": report.fenced,
            "db_error": report.db_error, **extra,
        }), flush=True)

    def wait_for_barrier():
        print(json.dumps({"ready": core.node}), flush=True)
        while not os.path.exists(config["barrier"]):
            time.sleep(0.0005)

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


if __name__ == "__main__":
    main(json.loads(sys.argv[1]))
