"""Handlers that report the span current while they run (imported by the tests that use them)."""

from __future__ import annotations

from opentelemetry import trace

from runnerq_django import activity
from tests.worker import handlers


def _current_span_id() -> str:
    return f"{trace.get_current_span().get_span_context().span_id:016x}"


@activity(name="tr.sync_span")
def sync_span(ctx, payload):
    child = ctx.spawn(handlers.echo, "child", step="child")
    return {"current": _current_span_id(), "child": str(child.id)}


@activity(name="tr.async_span")
async def async_span(payload):
    return {"current": _current_span_id()}
