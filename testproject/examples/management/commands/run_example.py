"""``manage.py run_example <name>``: run one of the examples and explain what happened.

Each example enqueues its activities and waits for the outcome. When no worker serves the
example's queue, one runs inside this command for the duration (so every example works with no
other setup); the crash, cross-process and isolation examples start real worker processes.
"""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager

from django.core.management.base import BaseCommand, CommandError

from runnerq_django import ActivityFailed, get_handle
from testproject.examples import activities as ex

EXAMPLES = {}


def example(name: str):
    def register(fn):
        EXAMPLES[name] = fn
        return fn

    return register


class Command(BaseCommand):
    help = "Run one RunnerQ example (see docs/how-to/examples.md): " + ", ".join(
        [
            "hello",
            "crash_and_resume",
            "steps_and_retries",
            "checkpoint_side_effects",
            "durable_sleep",
            "approval",
            "fan_out",
            "exactly_once_webhook",
            "cross_process",
            "dead_letter",
            "retention",
            "workload_isolation",
            "tour",
        ]
    )

    def add_arguments(self, parser):
        parser.add_argument("name", nargs="?", help="The example to run (omit with --list).")
        parser.add_argument("--list", action="store_true", help="List the examples.")
        parser.add_argument("--await-id", help=argparse_suppress())  # cross_process: the awaiting side

    def handle(self, *args, **opts):
        if opts["await_id"]:
            value = get_handle(opts["await_id"], ex.QUEUE).result(timeout=60)
            self.stdout.write(f"process {os.getpid()} awaited {opts['await_id']}: {value}")
            return
        if opts["list"] or not opts["name"]:
            for name, fn in EXAMPLES.items():
                self.stdout.write(f"{name:26} {fn.__doc__.strip().splitlines()[0]}")
            return
        fn = EXAMPLES.get(opts["name"])
        if fn is None:
            raise CommandError(f"unknown example {opts['name']!r}; known: {', '.join(EXAMPLES)}")
        os.environ["RUNNERQ_EXAMPLES"] = "0"  # an in-process worker must not start the tour too
        fn(self)

    def say(self, message: str) -> None:
        self.stdout.write(message)
        self.stdout.flush()


def argparse_suppress():
    import argparse

    return argparse.SUPPRESS


@contextmanager
def worker_for(queue: str, **options):
    """An in-process worker on ``queue`` unless a live worker already serves it."""
    from runnerq_django.logs import configure
    from runnerq_django.storage import pools
    from runnerq_django.worker.options import WorkerOptions
    from runnerq_django.worker.runtime import Worker

    if not options and pools.live_capacity(30).get(queue):
        yield None
        return
    import logging

    configure("text", logging.INFO)
    worker = Worker(
        WorkerOptions(
            queues=[queue], concurrency=options.pop("concurrency", 8), poll_interval_seconds=0.2, **options
        )
    )
    worker.start()
    try:
        yield worker
    finally:
        worker.request_stop("example done")
        worker.drain()


def spawn_worker(*args: str) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, sys.argv[0], "runworker", "--poll-interval", "0.2", *args],
        env={**os.environ, "RUNNERQ_EXAMPLES": "0"},
        start_new_session=True,
    )


def wait_for(predicate, timeout: float, what: str):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(0.1)
    raise CommandError(f"timed out waiting for {what}")


def checkpoints(activity_id) -> list[str]:
    from runnerq_django.models import Result

    return list(
        Result.objects.filter(owner_activity_id=activity_id, step__isnull=False)
        .order_by("created_at")
        .values_list("step", flat=True)
    )


def run_and_show(cmd, handler, payload, timeout=60, **options):
    handle = handler.enqueue(payload, **options)
    cmd.say(f"enqueued {handler.name} as {handle.id}")
    with worker_for(handle.queue):
        value = handle.result(timeout=timeout)
    cmd.say(f"result: {value}")
    return handle, value


@example("hello")
def hello(cmd):
    """01 A workflow of two memoized steps; the return value is the result."""
    run_and_show(cmd, ex.hello, {"name": "Django"})


@example("crash_and_resume")
def crash_and_resume(cmd):
    """02 kill -9 a worker mid-workflow; another one resumes after the last finished step."""
    queue = "examples_crash"
    handle = ex.crash_and_resume.enqueue({"steps": 5, "pause": 1.0}, queue=queue)
    first = spawn_worker("--queue", queue, "--lease", "3")
    cmd.say(f"worker {first.pid} runs {handle.id}; it will be killed after step 2")
    wait_for(lambda: "run:step-2" in checkpoints(handle.id), 60, "step 2")
    os.killpg(first.pid, signal.SIGKILL)
    first.wait()
    cmd.say(f"killed worker {first.pid} (kill -9) with steps {checkpoints(handle.id)} recorded")
    second = spawn_worker("--queue", queue, "--lease", "3")
    cmd.say(f"worker {second.pid} takes over once the 3 s lease has expired and the reaper requeued it")
    try:
        result = handle.result(timeout=90)
    finally:
        os.killpg(second.pid, signal.SIGTERM)
        second.wait()
    for step, ran in result.items():
        cmd.say(f"  {step}: attempt {ran['attempt']} in process {ran['pid']}")
    cmd.say(
        "steps 1-2 ran once, in the killed worker; the step cut short by the kill ran again (a step's "
        "result counts once it is checkpointed), and the rest ran in the second worker"
    )


@example("steps_and_retries")
def steps_and_retries(cmd):
    """03 A flaky step retries with backoff; the step before it is not repeated."""
    run_and_show(cmd, ex.steps_and_retries, {"succeed_on_attempt": 3})


@example("checkpoint_side_effects")
def checkpoint_side_effects(cmd):
    """04 A charge checkpointed before a failure is not charged again on the retry."""
    run_and_show(cmd, ex.checkpoint_side_effects, {"amount": "42.00 EUR"})


@example("durable_sleep")
def durable_sleep(cmd):
    """05 A 5 s durable sleep parks the activity (status 'waiting', no thread, no attempt)."""
    handle = ex.durable_sleep.enqueue({"seconds": 5})
    with worker_for(handle.queue):
        wait_for(lambda: handle.status() == "waiting", 30, "the park")
        cmd.say(f"{handle.id} is '{handle.status()}': parked until its timer is due")
        cmd.say(f"result: {handle.result(timeout=60)}")


@example("approval")
def approval(cmd):
    """06 A workflow waits for a human's signal (parked), then continues."""
    handle = ex.approval.enqueue({"timeout": 600})
    with worker_for(handle.queue):
        wait_for(lambda: handle.status() == "waiting", 30, "the wait for the signal")
        if sys.stdin.isatty():
            answer = input(f"approve {handle.id}? [y/N] ").strip().lower() == "y"
        else:
            answer = True
            cmd.say("(stdin is not a terminal: approving automatically)")
        woke = handle.signal("approval", {"approved": answer, "by": os.environ.get("USER", "someone")})
        cmd.say(f"signal sent (woke it: {woke})")
        cmd.say(f"result: {handle.result(timeout=60)}")


@example("fan_out")
def fan_out(cmd):
    """07 Spawn children in parallel and wait for all of them."""
    run_and_show(cmd, ex.fan_out, {"images": [f"img-{n}.png" for n in range(8)]})


@example("exactly_once_webhook")
def exactly_once_webhook(cmd):
    """08 The same webhook delivered three times is processed once (idempotency key)."""
    event = {"event_id": f"evt_{uuid.uuid4().hex[:10]}", "type": "invoice.paid"}
    handles = [ex.receive_webhook(event) for _ in range(3)]
    cmd.say(
        f"3 deliveries of {event['event_id']}: created={[h.created for h in handles]}, "
        f"one activity: {len({h.id for h in handles}) == 1}"
    )
    with worker_for(handles[0].queue):
        cmd.say(f"result: {handles[0].result(timeout=30)}")


@example("cross_process")
def cross_process(cmd):
    """09 Enqueue here, await the result in another process from the id alone."""
    handle = ex.compute.enqueue({"x": 6, "y": 7, "seconds": 1})
    cmd.say(f"process {os.getpid()} enqueued {handle.id}; another process awaits it")
    with worker_for(handle.queue):
        out = subprocess.run(
            [sys.executable, sys.argv[0], "run_example", "--await-id", str(handle.id)],
            capture_output=True,
            text=True,
            timeout=90,
            env={**os.environ},
        )
    cmd.say(out.stdout.strip() or out.stderr.strip())


@example("dead_letter")
def dead_letter(cmd):
    """10 Retries end in the dead letter; a NonRetryableError fails at once."""
    from runnerq_django.models import Event

    for handler in (ex.always_fails, ex.invalid_input):
        handle = handler.enqueue({})
        with worker_for(handle.queue):
            try:
                handle.result(timeout=60)
            except ActivityFailed as failure:
                events = list(
                    Event.objects.filter(activity_id=handle.id)
                    .order_by("id")
                    .values_list("event_type", flat=True)
                )
                cmd.say(f"{handler.name}: {failure.kind} after events {events}: {failure.error}")


@example("retention")
def retention(cmd):
    """11 Finished trees are deleted once older than the RUNNERQ['RETENTION'] windows."""
    from runnerq_django import conf, storage
    from runnerq_django.models import Activity

    queue = "examples_retention"
    cmd.say(
        f"RUNNERQ['RETENTION'] = {conf.get('RETENTION')} (workers sweep every INTERVAL_SECONDS, one at a time)"
    )
    handles = ex.short_lived.enqueue_many([{"n": n} for n in range(5)], queue=queue)
    with worker_for(queue):
        for handle in handles:
            handle.result(timeout=30)
    cmd.say(f"{Activity.objects.filter(queue_name=queue).count()} finished activities in {queue}")
    time.sleep(1.5)
    deleted = storage.cleanup(queue, completed_s=1, failed_s=1, events_s=0, batch=100)
    cmd.say(
        f"a sweep with a 1 s window deleted {deleted} trees (rows, inputs, results, events); "
        f"{Activity.objects.filter(queue_name=queue).count()} left"
    )


@example("workload_isolation")
def workload_isolation(cmd):
    """12 Slow reports get a worker of their own, so notifications never queue behind them."""
    queue = "examples_isolation"
    reports = spawn_worker(
        "--queue", queue, "--activity-type", "examples.render_report", "--concurrency", "1"
    )
    notifications = spawn_worker("--queue", queue, "--activity-type", "examples.send_notification")
    try:
        report_handles = ex.render_report.enqueue_many(
            [{"name": f"r{n}", "seconds": 1} for n in range(3)], queue=queue
        )
        began = time.monotonic()
        notes = ex.send_notification.enqueue_many([{"user": f"u{n}"} for n in range(20)], queue=queue)
        note_pids = {h.result(timeout=60)["pid"] for h in notes}
        cmd.say(f"20 notifications done in {time.monotonic() - began:.1f}s by process(es) {note_pids}")
        report_pids = {h.result(timeout=60)["pid"] for h in report_handles}
        cmd.say(f"3 one-second reports done in {time.monotonic() - began:.1f}s by process(es) {report_pids}")
    finally:
        for proc in (reports, notifications):
            os.killpg(proc.pid, signal.SIGTERM)
            proc.wait()


@example("tour")
def tour(cmd):
    """All of the above that need no extra processes, as children of one workflow."""
    run_and_show(cmd, ex.tour, {}, timeout=120)
