"""Activities the progress and events tests run, in worker processes (``runworker --import
tests.progress.handlers``) and in-process (``run_until_idle``, immediate mode).

A handler that reports and then waits holds its claim until the test releases it (a row
``release`` in ``rq_test_runs``), so a test can read its progress while it runs.
"""

from __future__ import annotations

import asyncio
import time

from asgiref.sync import sync_to_async
from django.db import connection

from runnerq_django import activity
from tests.worker.handlers import record


def released(activity_id) -> bool:
    with connection.cursor() as cursor:
        cursor.execute(
            "SELECT EXISTS (SELECT 1 FROM rq_test_runs WHERE activity_id = %s AND what = 'release')",
            [activity_id],
        )
        return bool(cursor.fetchone()[0])


def wait_for_release(ctx, timeout: float = 60) -> None:
    deadline = time.monotonic() + timeout
    while not released(ctx.id):
        if time.monotonic() > deadline:
            raise TimeoutError("never released")
        time.sleep(0.05)


def _report(ctx, n: int) -> None:
    for i in range(1, n + 1):
        ctx.progress(i, n, f"item {i}")
        ctx.publish("item", {"i": i})


@activity(name="p.sync", timeout=120)
def reports_sync(ctx, payload):
    _report(ctx, payload["n"])
    wait_for_release(ctx)
    ctx.publish("done", {"n": payload["n"]})
    return payload["n"]


@activity(name="p.async", timeout=120)
async def reports_async(ctx, payload):
    _report(ctx, payload["n"])
    while not await sync_to_async(released, thread_sensitive=False)(ctx.id):
        await asyncio.sleep(0.05)
    ctx.publish("done", {"n": payload["n"]})
    return payload["n"]


@activity(name="p.process", timeout=120, isolation="process")
def reports_process(ctx, payload):
    _report(ctx, payload["n"])
    wait_for_release(ctx)
    ctx.publish("done", {"n": payload["n"]})
    return payload["n"]


@activity(name="p.hammer", timeout=120)
def hammer(ctx, payload):
    """Reports progress as fast as it can for ``seconds``: the database sees a few writes a
    second. Returns how many times it called progress()."""
    calls = 0
    end = time.monotonic() + payload["seconds"]
    while time.monotonic() < end:
        calls += 1
        ctx.progress(calls, None, "hammering")
    record(ctx, "hammered")
    return calls


@activity(name="p.quick")
def quick(ctx, payload):
    """Reports and publishes without waiting (for testing mode and the bounds)."""
    for i in range(1, payload.get("events", 3) + 1):
        ctx.publish("tick", {"i": i})
    ctx.progress(payload.get("done", 3), payload.get("total", 3), payload.get("message"))
    return "ok"


@activity(name="p.refused")
def refused(ctx, payload):
    """Returns the error each bad report raises, by its kind."""
    cases = {
        "long_name": lambda: ctx.publish("n" * 201, 1),
        "empty_name": lambda: ctx.publish("", 1),
        "big_data": lambda: ctx.publish("big", "x" * (16 * 1024)),
        "not_json": lambda: ctx.publish("bad", {1, 2}),
        "negative": lambda: ctx.progress(-1),
        "nan": lambda: ctx.progress(float("nan")),
        "bool_total": lambda: ctx.progress(1, True),
        "long_message": lambda: ctx.progress(1, 2, "m" * 1025),
    }
    errors = {}
    for kind, call in cases.items():
        try:
            call()
        except Exception as exc:
            errors[kind] = f"{type(exc).__name__}: {exc}"
    return errors


@activity(name="p.durable")
def durable(ctx, payload):
    """Publishes once per step: a replay after the sleep does not publish again."""
    ctx.step("first", lambda: ctx.publish("step", {"name": "first"}))
    ctx.sleep("pause", 30)
    ctx.step("second", lambda: ctx.publish("step", {"name": "second"}))
    ctx.progress(2, 2, "both steps")
    return "done"


@activity(name="p.silent")
def silent(ctx, payload):
    """Reports nothing."""
    return None


@activity(name="p.mutates")
def mutates(ctx, payload):
    """Publishes a dict and changes it afterwards: the event keeps what was published."""
    data = {"n": 1}
    ctx.publish("snapshot", data)
    data["n"] = 2
    return data
