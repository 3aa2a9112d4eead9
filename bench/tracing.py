"""What the tracing hooks cost per enqueue and per attempt, without a database: the producer hook
(``tracing.sending`` around a submit of one activity) and the consumer hooks (``attempt_started``,
``detach``, ``end``), timed over many calls in three set-ups:

- ``off``: ``RUNNERQ['TRACING'] = False`` (or no opentelemetry package): one check of a global;
- ``api``: tracing on, the API installed but no SDK (spans are non-recording, nothing injected);
- ``sdk``: tracing on with the SDK and a span processor that drops every span.

    python bench/tracing.py [--calls 20000]

Prints microseconds per call (median of 5 runs). An enqueue's round trip to Postgres is some
hundreds of microseconds (bench/PROFILE.md), an attempt's (claim, complete) more.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))


def _setup() -> None:
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    import django

    django.setup()


def _per_call(fn, calls: int) -> float:
    runs = []
    for _ in range(5):
        began = time.perf_counter()
        for _ in range(calls):
            fn()
        runs.append((time.perf_counter() - began) / calls * 1e6)
    return statistics.median(runs)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--calls", type=int, default=20000)
    args = parser.parse_args()
    _setup()
    from django.test import override_settings

    from runnerq_django.observability import tracing
    from runnerq_django.storage.types import ClaimedActivity, NewActivity, SubmitResult
    from runnerq_django.worker.attempts import Attempt
    from runnerq_django.worker.context import Context

    new = NewActivity("bench.noop", None)
    result = SubmitResult(new.id, True)
    now = datetime.now(UTC)
    claimed = ClaimedActivity(
        uuid.uuid4(), "t", "bench", "bench.noop", None, 0, 0, 3, 30, 1, 0, 0, now, now,
        {"traceparent": "00-4bf92f3577b34da6a3ce929d0e0e4736-00f067aa0ba902b7-01"}, None, None, None, 0,
    )  # fmt: skip
    attempt = Attempt(claimed, 0.0, 30.0)
    attempt.outcome = "completed"
    ctx = Context(claimed)

    def produce() -> None:
        with tracing.sending("bench", [new]) as send:
            send.done([result])

    def consume() -> None:
        traced = tracing.attempt_started(claimed)
        if traced is not None:
            traced.detach()
            traced.end(attempt, ctx, None)

    def measure(label: str) -> None:
        tracing._otel = tracing._UNRESOLVED  # re-read the setting and the provider
        print(
            f"{label:4}  enqueue hook {_per_call(produce, args.calls):7.2f} us"
            f"   attempt hooks {_per_call(consume, args.calls):7.2f} us"
        )

    with override_settings(RUNNERQ={"TRACING": False}):
        measure("off")
    measure("api")
    from opentelemetry import trace
    from opentelemetry.sdk.trace import SpanProcessor, TracerProvider

    provider = TracerProvider()
    provider.add_span_processor(SpanProcessor())  # the base class drops every span
    trace.set_tracer_provider(provider)
    measure("sdk")


if __name__ == "__main__":
    main()
