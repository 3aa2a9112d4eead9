"""Keyword-argument handlers of tests/client/test_keyword_arguments.py, also run by a real
``runworker --import tests.client.keyword_handlers`` process."""

from __future__ import annotations

from typing import Any, Literal

from runnerq_django import activity
from runnerq_django.worker.context import Context


@activity(name="kw.send_email")
def send_email(ctx: Context, to: str, subject: str, cc: list[str] | None = None) -> dict[str, Any]:
    return {"to": to, "subject": subject, "cc": cc, "attempt": ctx.attempt}


@activity(name="kw.scale")
async def scale(ctx: Context, *, n: int, factor: float = 2.0) -> float:
    return n * factor


@activity(name="kw.anything")
def anything(ctx: Context, first: str, **rest: Any) -> dict[str, Any]:
    return {"first": first, "rest": rest}


@activity(name="kw.level")
def level(ctx: Context, *, level: Literal["low", "high"], when: Any = None) -> str:
    return level


@activity(name="kw.single")
def single(ctx: Context, payload: dict[str, Any]) -> dict[str, Any]:
    """A single-payload handler: the dict arrives whole."""
    return {"got": payload}


@activity(name="kw.parent")
def parent(ctx: Context, *, to: str) -> dict[str, Any]:
    child = ctx.spawn(send_email, {"to": to, "subject": "from the parent"}, step="mail")
    return ctx.wait(child)


@activity(name="kw.queue_param")
def queue_param(ctx: Context, *, queue: str, delay: int) -> str:
    """Parameters named like enqueue options: they are the handler's, options go in .using()."""
    return f"{queue}:{delay}"
