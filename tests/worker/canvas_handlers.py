"""Handlers of the canvas tests (imported by the tests and, with --import, by runworker)."""

from __future__ import annotations

import time
from typing import Any

from runnerq_django import NonRetryableError, activity
from runnerq_django.worker.context import Context
from tests.worker.handlers import record


@activity(name="cv.double")
def double(x: int) -> int:
    return x * 2


@activity(name="cv.inc")
def inc(x: int) -> int:
    return x + 1


@activity(name="cv.total")
def total(xs: list[int]) -> int:
    return sum(xs)


@activity(name="cv.mul")
def mul(payload: dict[str, int]) -> int:
    return payload["a"] * payload["b"]


@activity(name="cv.sized")
def sized(n: int) -> str:
    """A result of ``n`` characters: with a sibling's, more than one payload may carry."""
    return "x" * n


@activity(name="cv.boom")
def boom(x: Any) -> None:
    raise NonRetryableError(f"boom {x}")


@activity(name="cv.nap", max_attempts=5, retry_delay=0)
def nap(ctx: Context, payload: dict[str, Any]) -> Any:
    """Sleeps, recording each start and end (with the pid) in rq_test_runs."""
    record(ctx, "nap-start")
    time.sleep(payload["seconds"])
    record(ctx, "nap-end")
    return payload["value"]


@activity(name="cv.fanout")
def fanout(ctx: Context, n: int) -> int:
    """Dynamic fan-out from inside a handler: a group built from the payload, awaited durably."""
    results = ctx.wait(ctx.group("fan", [double.s(i) for i in range(n)]))
    return sum(results) + 1000


@activity(name="cv.many_children", timeout=600)
def many_children(ctx: Context, n: int) -> int:
    """A hand-written fan-out of more children than one results read takes (1,000)."""
    children = [ctx.spawn(double, i, step=f"c{i}") for i in range(n)]
    return sum(ctx.wait_all(children))
