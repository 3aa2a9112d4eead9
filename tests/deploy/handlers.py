"""A workflow whose code changes between two deploys (``RQ_TEST_CODE`` 1, then 2), run by
worker processes (``runworker --import tests.deploy.handlers``): code 2 adds the version gate
``pricing``, after the workflow's wait for a signal."""

from __future__ import annotations

import os

from runnerq_django import activity
from runnerq_django.activities import versions
from tests.worker.handlers import record

CODE = int(os.environ.get("RQ_TEST_CODE", "1"))
if CODE >= 2:
    versions.declare("d.flow", pricing=2)


@activity(name="d.flow")
def flow(ctx, payload):
    ctx.step("start", record, ctx, f"start-code{CODE}")
    ctx.wait_for_signal("go")
    branch = "old"
    if CODE >= 2 and ctx.version("pricing", latest=2) >= 2:
        branch = "new"
    ctx.step(f"price-{branch}", record, ctx, f"price-{branch}")
    return {"branch": branch, "code": CODE}


@activity(name="d.parent")
def parent(ctx, payload):
    return ctx.wait(ctx.spawn("d.removed_child", payload, step="child"))


@activity(name="d.undeclared")
def undeclared(ctx, payload):
    """A gate not declared: decided when reached (the latest for a run whose attempt found
    nothing recorded, else the oldest)."""
    if payload.get("park_first"):
        ctx.sleep("pause", 60)
    taken = ctx.version("tone", latest=3)
    if payload.get("park_after"):
        ctx.sleep("after", 60)
    return taken
