"""OpenTelemetry tracing of enqueues and attempts, with the trace context carried in the activity's
metadata so a trace crosses processes, languages and parks.

- An enqueue (``enqueue``, ``enqueue_many``, ``ctx.spawn``, the scheduler's occurrences) is a
  ``send <queue>`` span of kind PRODUCER per activity; its context is written into the activity's
  metadata as the W3C keys ``traceparent`` and ``tracestate`` (the metadata column is the spec's
  string-to-string map, and those are the W3C Trace Context header names, which the Go and
  TypeScript propagators read and write as they are). A key the caller set is left as it is.
- An attempt is a ``process <queue>`` span of kind CONSUMER whose parent is the context in the
  metadata (ours, or one a Go or TypeScript producer wrote). It is the current span while the
  handler runs, so a child spawned in the handler, and the handler's own instrumented calls,
  nest under it. A workflow that parks and resumes reads the same metadata on every attempt,
  whichever worker claims it, so all its attempts are in the producer's trace.
- Inside an attempt, a durable step that runs is a ``step <name>`` span (a replayed one is an
  event), and sleeps, signal waits, child awaits and parks are events on the attempt's span.

Attributes follow the OpenTelemetry messaging conventions: ``messaging.system`` ("runnerq"),
``messaging.destination.name`` (the queue), ``messaging.message.id`` (the activity id),
``messaging.operation.type``/``messaging.operation.name``; and ours: ``runnerq.activity.type``,
``runnerq.attempt``, ``runnerq.outcome``.

Only the ``opentelemetry-api`` package is used (the ``otel`` extra); what receives the spans is the
application's SDK set-up. Without the package, or with ``RUNNERQ['TRACING']`` off, nothing is
imported and every hook is one check of a module global.

Internal: not part of the public API.
"""

from __future__ import annotations

import dataclasses
import logging
import os
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from typing import TYPE_CHECKING, Any, Protocol

from django.core.signals import setting_changed

from runnerq_django.logs import log_event

if TYPE_CHECKING:
    from opentelemetry.trace import Span, Tracer

    from runnerq_django.activities.nouns import HandlerContext
    from runnerq_django.storage.types import ClaimedActivity, NewActivity, SubmitResult

logger = logging.getLogger("runnerq_django.observability.tracing")

TRACEPARENT = "traceparent"
TRACESTATE = "tracestate"
SYSTEM = "runnerq"
INSTRUMENTATION = "runnerq_django"


class SettledAttempt(Protocol):
    """What an attempt's span reads of the worker's ``worker.attempts.Attempt`` (the worker,
    above this module, passes it): how the attempt was settled, as far as it is known."""

    @property
    def outcome(self) -> str | None: ...
    @property
    def timed_out(self) -> bool: ...
    @property
    def lost(self) -> str | None: ...


class _Otel:
    """The OpenTelemetry API, imported once tracing is on and the package is there."""

    def __init__(self) -> None:
        from opentelemetry import context, trace
        from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

        from runnerq_django._version import __version__

        self.trace = trace
        self.context = context
        self.tracer: Tracer = trace.get_tracer(INSTRUMENTATION, __version__)
        # W3C Trace Context itself, not the global propagator: the metadata keys are a contract
        # with the other SDKs, whatever propagator (B3, Jaeger ...) the application set globally.
        self.propagator = TraceContextTextMapPropagator()
        self._no_sdk = (trace.ProxyTracerProvider, trace.NoOpTracerProvider)
        # While no provider is set, get_tracer_provider() looks os.environ up on every call (for
        # a provider named there): 3% of a burn-down worker's Python, at one call an attempt.
        # The API keeps the provider in a module global, None until one is set: read it instead
        # where it is there and no provider is named in the environment.
        self._read_global = (
            hasattr(trace, "_TRACER_PROVIDER") and "OTEL_PYTHON_TRACER_PROVIDER" not in os.environ
        )
        self.producer = trace.SpanKind.PRODUCER
        self.consumer = trace.SpanKind.CONSUMER
        self.error = trace.StatusCode.ERROR

    def recording(self) -> bool:
        """False until an SDK is installed: with the API alone every span would be a no-op, so
        the hooks skip even making them (looked up on each call: the SDK may come later)."""
        if self._read_global and self.trace._TRACER_PROVIDER is None:
            return False
        return not isinstance(self.trace.get_tracer_provider(), self._no_sdk)


_UNRESOLVED: Any = object()
_otel: _Otel | None = _UNRESOLVED


def _resolve() -> _Otel | None:
    global _otel
    from runnerq_django import conf

    otel: _Otel | None = None
    if conf.runnerq_settings().tracing:
        try:
            otel = _Otel()
        except ImportError:  # the otel extra is not installed: tracing is off
            otel = None
    _otel = otel
    return otel


def active() -> _Otel | None:
    """The API when tracing is on and an SDK receives the spans; ``None`` (cheaply) when tracing
    is off, not installed, or nothing would record."""
    otel = _otel
    if otel is _UNRESOLVED:
        otel = _resolve()
    if otel is None or not otel.recording():
        return None
    return otel


def _reload(setting: str, **kwargs: Any) -> None:
    global _otel
    if setting == "RUNNERQ":
        _otel = _UNRESOLVED


setting_changed.connect(_reload, dispatch_uid="runnerq_django.observability.tracing")


def _messaging(operation: str, kind: str, queue: str) -> dict[str, Any]:
    return {
        "messaging.system": SYSTEM,
        "messaging.operation.type": kind,
        "messaging.operation.name": operation,
        "messaging.destination.name": queue,
    }


# --- producer ---------------------------------------------------------------------------------------


class Sending:
    """What :func:`sending` returns, a context manager around the submit: the activities to
    submit (with the trace context in their metadata when tracing is on), and :meth:`done` to
    report what the submit did. An exception marks the spans as errors and propagates."""

    __slots__ = ("_otel", "_spans", "activities")

    def __init__(
        self, activities: list[NewActivity], otel: _Otel | None = None, spans: list[Span] | None = None
    ) -> None:
        self.activities = activities
        self._otel = otel
        self._spans = spans

    def __enter__(self) -> Sending:
        return self

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if self._spans is None:
            return
        for span in self._spans:
            if exc is not None and self._otel is not None:
                _record_error(self._otel, span, exc)
            span.end()

    def done(self, results: Sequence[SubmitResult]) -> None:
        if self._spans is None:
            return
        for span, result in zip(self._spans, results):
            span.set_attribute("messaging.message.id", str(result.id))
            span.set_attribute("runnerq.created", result.created)


def sending(queue: str, activities: list[NewActivity]) -> Sending:
    """Around a submit (``with sending(queue, activities) as send``): one producer span per
    activity, its context injected into the activity's metadata."""
    otel = active()
    if otel is None:
        return Sending(activities)
    spans: list[Span] = []
    try:
        return _start_sending(otel, queue, activities, spans)
    except Exception:  # tracing never stops an enqueue: this one goes untraced
        _hook_failed()
        for span in spans:
            span.end()
        return Sending(activities)


def _start_sending(otel: _Otel, queue: str, activities: list[NewActivity], spans: list[Span]) -> Sending:
    traced: list[NewActivity] = []
    for new in activities:
        attributes = _messaging("send", "send", queue)
        attributes["messaging.message.id"] = str(new.id)
        attributes["runnerq.activity.type"] = new.activity_type
        if new.parent_id is not None:
            attributes["runnerq.parent_id"] = str(new.parent_id)
        span = otel.tracer.start_span(f"send {queue}", kind=otel.producer, attributes=attributes)
        spans.append(span)
        traced.append(_with_context(otel, new, span))
    return Sending(traced, otel, spans)


def _with_context(otel: _Otel, new: NewActivity, span: Span) -> NewActivity:
    metadata = dict(new.metadata or {})
    if TRACEPARENT in metadata:  # the caller carries a context of its own: theirs wins
        return new
    carrier: dict[str, str] = {}
    otel.propagator.inject(carrier, context=otel.trace.set_span_in_context(span))
    if not carrier:  # a non-recording span without a valid context (no SDK): nothing to carry
        return new
    metadata.update(carrier)
    return dataclasses.replace(new, metadata=metadata)


def _record_error(otel: _Otel, span: Span, exc: BaseException) -> None:
    span.record_exception(exc)
    span.set_attribute("error.type", type(exc).__qualname__)
    span.set_status(otel.error, f"{type(exc).__name__}: {exc}"[:500])


# --- consumer ---------------------------------------------------------------------------------------


def _carrier(metadata: dict[str, str] | None) -> dict[str, str] | None:
    """The W3C keys of an activity's metadata that hold strings (a row another writer left may
    hold anything); ``None`` without a ``traceparent``."""
    if not metadata or TRACEPARENT not in metadata:
        return None
    carrier = {key: value for key in (TRACEPARENT, TRACESTATE) if isinstance(value := metadata.get(key), str)}
    return carrier if TRACEPARENT in carrier else None


class AttemptSpan:
    """The consumer span of one attempt: current on the handler's thread between
    :meth:`attach` and :meth:`detach`, ended by :meth:`end` once the outcome is known."""

    __slots__ = ("_otel", "_token", "span")

    def __init__(self, otel: _Otel, span: Span) -> None:
        self._otel = otel
        self.span = span
        self._token: object | None = None

    def attach(self) -> None:
        self._token = self._otel.context.attach(self._otel.trace.set_span_in_context(self.span))

    def detach(self) -> None:
        if self._token is not None:
            self._otel.context.detach(self._token)
            self._token = None

    def end(self, attempt: SettledAttempt, ctx: HandlerContext | None, error: BaseException | None) -> None:
        try:
            self._describe(attempt, ctx, error)
        except Exception:
            _hook_failed()
        self.span.end()

    def _describe(
        self, attempt: SettledAttempt, ctx: HandlerContext | None, error: BaseException | None
    ) -> None:
        from runnerq_django.exceptions import ActivityTimedOut, AttemptLost

        span = self.span
        outcome = attempt.outcome
        if outcome is None:  # settled by another thread that has not written it yet
            if attempt.timed_out or isinstance(error, ActivityTimedOut):
                outcome = "timeout"
            elif attempt.lost is not None or isinstance(error, AttemptLost):
                outcome = "claim_lost"
            elif ctx is not None and ctx.park_request is not None:
                outcome = "parked"
            else:
                outcome = "completed" if error is None else "failed"
        span.set_attribute("runnerq.outcome", outcome)
        if attempt.timed_out or isinstance(error, ActivityTimedOut):
            span.set_attribute("error.type", "timeout")
            span.set_status(self._otel.error, "the attempt ran longer than its timeout")
        elif outcome == "claim_lost":
            span.set_attribute("error.type", "claim_lost")
            span.set_status(self._otel.error, attempt.lost or "the claim was lost")
        elif outcome in ("retrying", "failed", "dead_letter") and (ctx is None or ctx.park_request is None):
            if error is not None:
                _record_error(self._otel, span, error)
            else:
                span.set_attribute("error.type", "failed")
                span.set_status(self._otel.error, outcome)


def attempt_started(activity: ClaimedActivity) -> AttemptSpan | None:
    """The attempt's consumer span, child of the context in the activity's metadata (a root span
    when there is none). ``None`` when tracing is off."""
    otel = active()
    if otel is None:
        return None
    try:
        return _start_attempt(otel, activity)
    except Exception:  # tracing never stops an attempt (a foreign row's odd metadata, an SDK bug)
        _hook_failed()
        return None


def _start_attempt(otel: _Otel, activity: ClaimedActivity) -> AttemptSpan:
    carrier = _carrier(activity.metadata)
    # A malformed context extracts as none: the attempt starts a trace of its own.
    parent = otel.propagator.extract(carrier) if carrier is not None else None
    queue = activity.queue_name
    attributes = _messaging("process", "process", queue)
    attributes["messaging.message.id"] = str(activity.id)
    attributes["runnerq.activity.type"] = activity.activity_type
    attributes["runnerq.attempt"] = activity.attempt
    if activity.parent_activity_id is not None:
        attributes["runnerq.parent_id"] = str(activity.parent_activity_id)
    if activity.root_activity_id is not None:
        attributes["runnerq.root_id"] = str(activity.root_activity_id)
    span = otel.tracer.start_span(
        f"process {queue}", context=parent, kind=otel.consumer, attributes=attributes
    )
    traced = AttemptSpan(otel, span)
    traced.attach()
    return traced


# --- inside an attempt ------------------------------------------------------------------------------


@contextmanager
def step(name: str) -> Iterator[None]:
    """A durable step that runs (not one replayed from its checkpoint): a child span of the
    attempt. A failure marks it as an error and propagates."""
    otel = active()
    if otel is None:
        yield
        return
    with otel.tracer.start_as_current_span(
        f"step {name}",
        attributes={"runnerq.step.name": name},
        record_exception=True,
        set_status_on_exception=True,
    ):
        yield


def event(name: str, attributes: Mapping[str, str | int | float | bool]) -> None:
    """An event on the current span (the attempt's, or a step's)."""
    otel = active()
    if otel is None:
        return
    span = otel.trace.get_current_span()
    if span.is_recording():
        span.add_event(name, attributes)


def _hook_failed() -> None:
    """Tracing never stops the work it traces: a failing hook is logged at debug, and the work
    goes on untraced."""
    log_event(
        logger,
        logging.DEBUG,
        "runnerq.tracing.failed",
        "A tracing hook failed; the work goes on untraced.",
        exc_info=True,
    )
