"""Handlers of the testing toolkit's tests, run both in immediate mode (in the test process) and
by a real ``runworker --import tests.testing.handlers`` process, whose stored rows are compared.

Waits are longer than nothing but short enough for a real worker: a 3 s sleep, 1 s backoffs.
"""

from __future__ import annotations

from datetime import datetime

from runnerq_django import NonRetryableError, activity


@activity(name="tt.double")
def double(payload):
    return {"doubled": payload["n"] * 2}


@activity(name="tt.steps_and_sleep")
def steps_and_sleep(ctx, payload):
    before = ctx.step("before", lambda: payload["n"] + 1)
    started = datetime.fromisoformat(ctx.step("started", lambda: ctx.now().isoformat()))
    ctx.sleep("nap", 3)
    slept = (ctx.now() - started).total_seconds() >= 3  # the activity's clock moved on by the sleep
    after = ctx.step("after", lambda: before * 10)
    return {"before": before, "after": after, "slept": slept}


@activity(name="tt.child")
def child(ctx, payload):
    return {"child_of": payload["parent"], "value": ctx.step("compute", lambda: payload["n"] ** 2)}


@activity(name="tt.parent")
def parent(ctx, payload):
    first = ctx.spawn(child, {"parent": "p", "n": payload["n"]}, step="first")
    second = ctx.spawn(child, {"parent": "p", "n": payload["n"] + 1}, step="second")
    results = ctx.wait_all([first, second])
    return {"sum": sum(r["value"] for r in results)}


@activity(name="tt.approval")
def approval(ctx, payload):
    decision = ctx.wait_for_signal("approved")
    return {"approved_by": decision["by"]}


@activity(name="tt.approval_with_timeout")
def approval_with_timeout(ctx, payload):
    return ctx.wait_for_signal("approved", timeout=3)


@activity(name="tt.flaky", max_attempts=3, retry_delay=1)
def flaky(ctx, payload):
    if ctx.attempt < 2:
        raise RuntimeError(f"flaky attempt {ctx.attempt}")
    return {"attempt": ctx.attempt}


@activity(name="tt.always_fails", max_attempts=2, retry_delay=1)
def always_fails(ctx, payload):
    raise RuntimeError("always fails")


@activity(name="tt.refuses")
def refuses(payload):
    raise NonRetryableError("bad input")


@activity(name="tt.enqueues_another")
def enqueues_another(payload):
    handle = double.enqueue({"n": payload["n"]}, queue=payload["queue"])
    return {"enqueued": str(handle.id)}


@activity(name="tt.parent_of_one")
def parent_of_one(ctx, payload):
    # One child: under runworker --concurrency 1 it can only run once the parent has parked, so
    # the stored history is deterministic (with two, whether the second finishes before the
    # parent is woken for the first depends on the worker's timing).
    return {"child": ctx.wait(ctx.spawn(child, {"parent": "p", "n": payload["n"]}, step="only"))}


@activity(name="tt.awaits_approval")
def awaits_approval(ctx, payload):
    return ctx.wait(ctx.spawn(approval, {}, step="approval"))


@activity(name="tt.greet")
def greet(ctx, name: str, *, greeting: str = "Hello"):
    """A keyword-argument handler: the payload's members arrive as its arguments."""
    return ctx.step("greet", lambda: f"{greeting}, {name}!")
