"""Activities the worker and client tests run, in-process and in worker processes
(``runworker --import tests.worker.handlers``).

Side effects are recorded in the table ``rq_test_runs`` (one row per handler or step execution),
so a test can count executions across processes, restarts and crashes. In-process tests also
read the module-level ``CALLS`` counters.
"""

from __future__ import annotations

import asyncio
import json
import os
import threading
import time
from collections import Counter

from django.db import connection

from runnerq_django import NonRetryableError, activity
from runnerq_django.exceptions import ChildFailed, StepFailed

CALLS: Counter[str] = Counter()
_calls_lock = threading.Lock()
EVENTS: dict[str, threading.Event] = {}

RUNS_TABLE_SQL = """
CREATE TABLE IF NOT EXISTS rq_test_runs (
    seq bigserial PRIMARY KEY,
    activity_id uuid NOT NULL,
    what text NOT NULL,
    attempt bigint NOT NULL,  -- ctx.attempt passes 2**31 on a row whose retry_count is at the int4 maximum
    pid int NOT NULL,
    at timestamptz NOT NULL DEFAULT clock_timestamp()
)
"""


def count(name: str) -> None:
    with _calls_lock:
        CALLS[name] += 1


def record(ctx, what: str) -> None:
    """One row per execution, committed at once (autocommit), visible to the test process."""
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO rq_test_runs (activity_id, what, attempt, pid) VALUES (%s, %s, %s, %s)",
            [ctx.id, what, ctx.attempt, os.getpid()],
        )


@activity(name="t.echo")
def echo(payload):
    return payload


@activity(name="t.async_echo")
async def async_echo(payload):
    await asyncio.sleep(0.01)
    return {"async": payload}


@activity(name="t.noop")
def noop(payload):
    return None


@activity(name="t.counted")
def counted(ctx, payload):
    record(ctx, "run")
    return payload


@activity(name="t.stamped")
def stamped(ctx, payload):
    """Records when its body started (the wall clock at its first line, not when the row was
    written): a body that started after its worker was resumed from a freeze says so."""
    started = time.time()
    with connection.cursor() as cursor:
        cursor.execute(
            "INSERT INTO rq_test_runs (activity_id, what, attempt, pid, at) "
            "VALUES (%s, 'run', %s, %s, to_timestamp(%s))",
            [ctx.id, ctx.attempt, os.getpid(), started],
        )


@activity(name="t.fail_non_retryable")
def fail_non_retryable(payload):
    raise NonRetryableError("bad input: " + str(payload))


@activity(name="t.always_fails", max_attempts=2, retry_delay=0)
def always_fails(payload):
    raise RuntimeError("boom")


@activity(name="t.bad_result")
def bad_result(payload):
    return {"when": object()}


LONE_SURROGATE = json.loads('"\\ud83d"')  # valid JSON text, but no UTF-8 form


class BreakingMapping(dict):
    """A mapping that stops being serializable after ``good_reads`` reads (a lazy mapping whose
    source went away): ``json.dumps`` raises RuntimeError, not the TypeError/ValueError the JSON
    check turns into InvalidArgument -- an error nobody foresaw, in the worker's own code path."""

    def __init__(self, *args, good_reads: int = 0, **kwargs):
        super().__init__(*args, **kwargs)
        self.good_reads = good_reads

    def items(self):
        if self.good_reads <= 0:
            raise RuntimeError("the mapping's source went away")
        self.good_reads -= 1
        return super().items()


@activity(name="t.returns_too_deep", max_attempts=0)
def returns_too_deep(payload):
    value = None
    for _ in range(3000):  # json.dumps raised RecursionError near 990
        value = [value]
    return value


@activity(name="t.returns_sized", max_attempts=3)
def returns_sized(payload):
    """A string result of ``payload`` characters (its JSON text two bytes more)."""
    count("returns_sized")
    return "x" * payload


@activity(name="t.returns_lone_surrogate", max_attempts=0)
def returns_lone_surrogate(payload):
    count("returns_lone_surrogate")
    return {"text": LONE_SURROGATE}


@activity(name="t.result_breaks_the_check", max_attempts=0)
def result_breaks_the_check(payload):
    count("result_breaks_the_check")
    return BreakingMapping({"a": 1})


@activity(name="t.result_breaks_the_write", max_attempts=0)
def result_breaks_the_write(payload):
    count("result_breaks_the_write")
    return BreakingMapping({"a": 1}, good_reads=1)  # passes the check, fails when the ack is written


@activity(name="t.unstorable_error", max_attempts=1)
def unstorable_error(payload):
    raise RuntimeError("a NUL \x00 and a lone surrogate " + LONE_SURROGATE)


@activity(name="t.slow")
def slow(ctx, payload):
    """Records its start, sleeps ``seconds`` (in short slices, so interrupts land), records its end."""
    record(ctx, "start")
    deadline = time.monotonic() + payload.get("seconds", 5)
    while time.monotonic() < deadline:
        time.sleep(0.02)
    record(ctx, "end")
    return {"slept": payload.get("seconds", 5), "pid": os.getpid()}


@activity(name="t.busy_timeout", timeout=1, max_attempts=1)
def busy_timeout(ctx, payload):
    count("busy_timeout.start")
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        sum(range(200))  # pure Python: an interrupt lands at the next bytecode
    count("busy_timeout.end")


@activity(name="t.async_timeout", timeout=1, max_attempts=1)
async def async_timeout(payload):
    count("async_timeout.start")
    await asyncio.sleep(10)
    count("async_timeout.end")


# durable execution ----------------------------------------------------------------------------------


@activity(name="t.steps", max_attempts=3, retry_delay=0)
def steps(ctx, payload):
    first = ctx.step("first", lambda: (count("steps.first"), ctx.attempt)[1])

    def flaky():
        count("steps.second")
        if ctx.attempt < 2:
            raise ConnectionError("try again")
        return ctx.attempt

    second = ctx.step("second", flaky)
    return {"first": first, "second": second, "attempt": ctx.attempt}


@activity(name="t.step_non_retryable", max_attempts=3, retry_delay=0)
def step_non_retryable(ctx, payload):
    def refuse():
        count("step_non_retryable.fn")
        raise NonRetryableError("card declined")

    try:
        ctx.step("charge", refuse)
    except StepFailed as failure:
        count("step_non_retryable.caught")
        if ctx.attempt == 1:
            raise ConnectionError("fail the attempt to force a replay") from failure
        return {"error": failure.error, "attempt": ctx.attempt}


@activity(name="t.sleeper")
def sleeper(ctx, payload):
    count("sleeper.before")
    ctx.sleep("nap", payload["seconds"])
    count("sleeper.after")
    return {"attempt": ctx.attempt}


@activity(name="t.swallows_park")
def swallows_park(ctx, payload):
    try:
        ctx.sleep("nap", 60)
    except BaseException:
        count("swallows_park.swallowed")
    return "should not complete"


@activity(name="t.waits_for_signal")
def waits_for_signal(ctx, payload):
    count("waits_for_signal.run")
    value = ctx.wait_for_signal("go", timeout=payload.get("timeout"))
    return {"signal": value}


@activity(name="t.parent")
def parent(ctx, payload):
    count("parent.run")
    children = [ctx.spawn(echo, {"n": n}, step=f"child-{n}") for n in range(payload.get("children", 2))]
    return {"results": ctx.wait_all(children), "ids": [str(c.id) for c in children]}


@activity(name="t.parent_of_slow")
def parent_of_slow(ctx, payload):
    """Awaits ``children`` t.slow children of ``seconds`` each with one wait_all."""
    count("parent.run")
    seconds = payload.get("seconds", 0.1)
    children = [ctx.spawn(slow, {"seconds": seconds}, step=f"child-{n}") for n in range(payload["children"])]
    return len(ctx.wait_all(children))


@activity(name="t.parent_of_failure")
def parent_of_failure(ctx, payload):
    child = ctx.spawn(fail_non_retryable, "nope", step="child")
    return ctx.wait(child)


@activity(name="t.step_loop")
def step_loop(ctx, payload):
    """Writes a checkpoint every 50 ms until stopped: shows when its claim's writes stop."""
    for index in range(payload.get("steps", 400)):
        ctx.step(f"s{index}", lambda index=index: index)
        record(ctx, f"step-{index}")
        time.sleep(0.05)
    return "finished"


@activity(name="t.workflow", timeout=120)
def workflow(ctx, payload):
    """Sleeps, waits for a signal, then awaits two children; records each phase once."""
    ctx.step("begin", record, ctx, "begin")
    ctx.sleep("pause", payload.get("sleep", 3))
    ctx.step("slept", record, ctx, "slept")
    approval = ctx.wait_for_signal("approve", timeout=120)
    ctx.step("signalled", record, ctx, "signalled")
    children = [
        ctx.spawn(slow, {"seconds": payload.get("child_seconds", 1)}, step=f"child-{n}") for n in range(2)
    ]
    results = ctx.wait_all(children)
    ctx.step("end", record, ctx, "end")
    return {"approval": approval, "children": len(results)}


# What the interop handlers received, by activity id: Python values (a datetime, a set) that a
# JSON result could not carry back to the test.
RECEIVED: dict[str, object] = {}


@activity(name="t.keeps_input", max_attempts=1)
def keeps_input(ctx, payload):
    RECEIVED[str(ctx.id)] = payload


@activity(name="t.keeps_metadata", max_attempts=1)
def keeps_metadata(ctx, payload):
    RECEIVED[str(ctx.id)] = ctx.metadata


@activity(name="t.keeps_signal", max_attempts=1)
def keeps_signal(ctx, payload):
    RECEIVED[str(ctx.id)] = ctx.wait_for_signal("go")


@activity(name="t.awaits_typescript_child", max_attempts=1)
def awaits_typescript_child(ctx, payload):
    """Awaits a child of a type only a TypeScript worker handles (the test writes its result)."""
    child = ctx.spawn("ts.child", None, step="ts")
    try:
        RECEIVED[str(ctx.id)] = ctx.wait(child)
    except ChildFailed as exc:
        RECEIVED[str(ctx.id)] = exc


@activity(name="t.returns_unsafe_integer")
def returns_unsafe_integer(payload):
    return {"big": 2**53}


@activity(name="t.returns_unsafe_float")
def returns_unsafe_float(payload):
    return {"big": 9.5e15}


@activity(name="t.counted_failure", max_attempts=0)
def counted_failure(ctx, payload):
    record(ctx, "run")
    raise RuntimeError("boom")
