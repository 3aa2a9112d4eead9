"""Workflows the fork tests re-run from a step (``runworker --import tests.fork.handlers``).
Each step's side effect is a row in ``rq_test_runs`` (what = the step's name), so a test
counts exactly which steps ran in the original and in the fork."""

from __future__ import annotations

from runnerq_django import NonRetryableError, activity
from tests.worker.handlers import record


def _step(ctx, name: str, payload) -> int:
    record(ctx, name)
    if payload.get("fail_at") == name:
        raise NonRetryableError(f"{name} is broken")
    return payload.get("base", 0) + int(name[1:])


@activity(name="f.nine", max_attempts=1)
def nine(ctx, payload):
    return [ctx.step(f"s{i}", _step, ctx, f"s{i}", payload) for i in range(1, 10)]


@activity(name="f.child")
def child(ctx, payload):
    record(ctx, "child")
    return {"shipped": payload}


@activity(name="f.with_child", max_attempts=1)
def with_child(ctx, payload):
    first = ctx.step("s1", _step, ctx, "s1", payload)
    shipped = ctx.wait(ctx.spawn(child, first, step="ship"))
    second = ctx.step("s2", _step, ctx, "s2", payload)
    third = ctx.step("s3", _step, ctx, "s3", payload)
    return {"first": first, "shipped": shipped, "second": second, "third": third}


@activity(name="f.parks")
def parks(ctx, payload):
    ctx.step("s1", _step, ctx, "s1", payload)
    return ctx.wait_for_signal("go")
