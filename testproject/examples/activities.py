"""Example activities, mirroring the RunnerQ SDKs' examples (runnerq-go ``examples/01..12``).

``python manage.py runworker --migrate`` runs them all once through :func:`tour` (enqueued at
worker start by ``receivers.py``); ``python manage.py run_example <name>`` runs one on its own,
with what it demonstrates printed as it goes. Each handler is plain Python: what must not repeat
on a replay is wrapped in ``ctx.step``; waits are durable (``ctx.sleep``, ``ctx.wait_for_signal``,
``ctx.wait``) and park the activity instead of holding a thread.
"""

from __future__ import annotations

import os
import time

from runnerq_django import NonRetryableError, activity, enqueue, signal
from runnerq_django.exceptions import ActivityFailed

QUEUE = "default"


def say(ctx, message: str) -> None:
    """Examples talk on stdout so the run command shows what happens, prefixed by the activity."""
    print(
        f"[example {ctx.activity_type.removeprefix('examples.')} {str(ctx.id)[:8]} attempt {ctx.attempt}] {message}",
        flush=True,
    )


# 01 -- hello workflow: steps are memoized; the handler's return value is the result -----------


@activity(name="examples.hello")
def hello(ctx, payload):
    name = payload.get("name", "world")
    greeting = ctx.step("greet", lambda: f"Hello, {name}!")
    shouted = ctx.step("shout", str.upper, greeting)
    say(ctx, shouted)
    return {"greeting": greeting, "shouted": shouted}


# 02 -- crash and resume: kill -9 the worker mid-way; the next worker resumes after the last step --


@activity(name="examples.crash_and_resume", timeout=120)
def crash_and_resume(ctx, payload):
    steps = payload.get("steps", 5)
    pause = payload.get("pause", 1.0)
    ran_in = {}
    for index in range(1, steps + 1):

        def work(index=index):
            say(ctx, f"step {index} of {steps} runs (it takes {pause}s)")
            time.sleep(pause)
            return {"attempt": ctx.attempt, "pid": os.getpid()}

        ran_in[f"step-{index}"] = ctx.step(f"step-{index}", work)
    say(ctx, f"done; each step ran exactly once: {ran_in}")
    return ran_in


# 03 -- steps and retries: a flaky step retries with backoff; steps before it are not repeated ----


@activity(name="examples.steps_and_retries", max_attempts=5, retry_delay=1)
def steps_and_retries(ctx, payload):
    order = ctx.step("reserve-stock", lambda: {"reserved": payload.get("items", 3), "attempt": ctx.attempt})

    def call_flaky_service():
        if ctx.attempt < payload.get("succeed_on_attempt", 3):
            say(ctx, "the shipping service timed out; this attempt fails and will be retried")
            raise ConnectionError("shipping service timed out")
        return {"label": "SHIP-123", "attempt": ctx.attempt}

    shipping = ctx.step("book-shipping", call_flaky_service)
    say(
        ctx, f"stock reserved in attempt {order['attempt']}, shipping booked in attempt {shipping['attempt']}"
    )
    return {"order": order, "shipping": shipping}


# 04 -- checkpointed side effects: the charge happens once, even though the attempt after it fails -


@activity(name="examples.checkpoint_side_effects", max_attempts=3, retry_delay=1)
def checkpoint_side_effects(ctx, payload):
    def charge_card():
        # Pass your provider an idempotency key too: a crash between the charge and the
        # checkpoint's commit runs the step again.
        say(ctx, f"charging {payload['amount']} with provider key charge-{ctx.id}")
        return {"charge_id": f"ch_{str(ctx.id)[:8]}", "charged_in_attempt": ctx.attempt}

    charge = ctx.step("charge-card", charge_card)
    if ctx.attempt == 1:
        say(ctx, "the receipt e-mail fails after the charge: the attempt fails, the charge is not repeated")
        raise ConnectionError("mail server unavailable")
    receipt = ctx.step("send-receipt", lambda: {"sent_in_attempt": ctx.attempt})
    return {"charge": charge, "receipt": receipt}


# 05 -- durable sleep: longer than RUNNERQ['INLINE_WAIT_SECONDS'], so the activity parks --------


@activity(name="examples.durable_sleep")
def durable_sleep(ctx, payload):
    seconds = payload.get("seconds", 5)
    started = ctx.step("started", time.time)
    say(ctx, f"sleeping {seconds}s durably (parked: no thread, no attempt used)")
    ctx.sleep("cool-off", seconds)
    woke = ctx.step("woke", time.time)
    say(ctx, f"woke after {woke - started:.1f}s")
    return {"slept_seconds": round(woke - started, 1)}


# 06 -- human approval: wait for a signal (parked), with a timeout --------------------------------


@activity(name="examples.approval", timeout=60)
def approval(ctx, payload):
    say(ctx, f"waiting for signal 'approval' on activity {ctx.id}")
    decision = ctx.wait_for_signal("approval", timeout=payload.get("timeout", 3600))
    say(ctx, f"got {decision}")
    return {"approved": bool(decision and decision.get("approved")), "by": (decision or {}).get("by")}


@activity(name="examples.auto_approver")
def auto_approver(payload):
    """Stands in for the human in the tour: signals the approval workflow."""
    woke = signal(payload["approval_id"], "approval", {"approved": True, "by": "auto-approver"})
    return {"woke": woke}


# 07 -- fan-out / fan-in: children run in parallel; the parent parks until they finish -------------


@activity(name="examples.resize_image")
def resize_image(payload):
    time.sleep(0.05)
    return {"image": payload["image"], "size": len(payload["image"]) * 100}


@activity(name="examples.fan_out")
def fan_out(ctx, payload):
    images = payload.get("images", ["a.png", "bb.png", "ccc.png", "dddd.png"])
    children = [ctx.spawn(resize_image, {"image": image}, step=f"resize-{image}") for image in images]
    results = ctx.wait_all(children)
    total = sum(result["size"] for result in results)
    say(ctx, f"{len(results)} children done, total size {total}")
    return {"total": total, "children": len(results)}


# 08 -- exactly-once webhook: the provider's event id is the idempotency key ----------------------


@activity(name="examples.handle_webhook")
def handle_webhook(payload):
    return {"processed_event": payload["event_id"]}


def receive_webhook(event: dict):
    """What a Django view would do for each delivery (providers deliver at least once)."""
    return enqueue(handle_webhook, event, idempotency_key=event["event_id"])


# 09 -- cross-process results: a handle is an id and a queue; any process can await it -----------


@activity(name="examples.compute")
def compute(payload):
    time.sleep(payload.get("seconds", 0.5))
    return {"answer": payload.get("x", 6) * payload.get("y", 7), "pid": os.getpid()}


# 10 -- retries and dead letter: an activity that always fails ends in the dead letter -------------


@activity(name="examples.always_fails", max_attempts=3, retry_delay=0)
def always_fails(ctx, payload):
    say(ctx, "failing on purpose")
    raise RuntimeError(f"the upstream API said no (attempt {ctx.attempt})")


@activity(name="examples.invalid_input")
def invalid_input(payload):
    raise NonRetryableError("order 42 has no line items")  # fails at once: retrying can't fix it


# 11 -- retention: finished trees are deleted after RUNNERQ['RETENTION'] windows -----------------


@activity(name="examples.short_lived")
def short_lived(payload):
    return {"n": payload.get("n", 0)}


# 12 -- workload isolation: a slow type gets its own worker (runworker -t examples.render_report) -


@activity(name="examples.render_report", timeout=60)
def render_report(payload):
    time.sleep(payload.get("seconds", 0.5))
    return {"report": payload.get("name", "monthly"), "pid": os.getpid()}


@activity(name="examples.send_notification")
def send_notification(payload):
    return {"notified": payload.get("user", "ada"), "pid": os.getpid()}


# The tour: every example once, as children of one workflow -------------------------------------


@activity(name="examples.tour", timeout=300)
def tour(ctx, payload):
    ctx.step("announce", say, ctx, "starting the tour of the examples (replays skip this step)")
    hello_child = ctx.spawn(hello, {"name": "RunnerQ"}, step="hello")
    retries_child = ctx.spawn(steps_and_retries, {"succeed_on_attempt": 2}, step="steps-and-retries")
    charge_child = ctx.spawn(checkpoint_side_effects, {"amount": "12.00 EUR"}, step="checkpoint-side-effects")
    sleep_child = ctx.spawn(durable_sleep, {"seconds": 4}, step="durable-sleep")
    approval_child = ctx.spawn(approval, {"timeout": 120}, step="approval")
    ctx.spawn(auto_approver, {"approval_id": str(approval_child.id)}, step="auto-approver", delay=3)
    fan_child = ctx.spawn(fan_out, {}, step="fan-out")
    dead_child = ctx.spawn(always_fails, {}, step="dead-letter")
    webhook = ctx.step(
        "webhook-delivered-twice",
        lambda: [
            receive_webhook({"event_id": f"evt_{ctx.id}", "type": "invoice.paid"}).created for _ in range(2)
        ],
    )
    summary = {"webhook_enqueues_created": webhook}
    for name, child in (
        ("hello", hello_child),
        ("steps_and_retries", retries_child),
        ("checkpoint", charge_child),
        ("durable_sleep", sleep_child),
        ("approval", approval_child),
        ("fan_out", fan_child),
    ):
        summary[name] = ctx.wait(child)
    try:
        ctx.wait(dead_child)
    except ActivityFailed as failure:
        summary["always_fails"] = f"{failure.kind}: {failure.error}"
    say(ctx, "tour finished:")
    for name, value in summary.items():
        say(ctx, f"  {name}: {value}")
    return summary
