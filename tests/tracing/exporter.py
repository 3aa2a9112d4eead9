"""Installed in a ``runworker`` process with ``--import tests.tracing.exporter``: the OpenTelemetry
SDK with its in-memory exporter, each span also appended to the JSON-lines file named by
``RUNNERQ_TEST_SPANS`` as it ends, so the test process reads the worker's spans (``read_spans``).

In the test process itself, ``install()`` sets up the same SDK without the file."""

from __future__ import annotations

import json
import os
import threading
from pathlib import Path

from opentelemetry import trace
from opentelemetry.sdk.trace import ReadableSpan, TracerProvider
from opentelemetry.sdk.trace.export import SimpleSpanProcessor
from opentelemetry.sdk.trace.export.in_memory_span_exporter import InMemorySpanExporter

SPANS_FILE = "RUNNERQ_TEST_SPANS"


def as_dict(span: ReadableSpan) -> dict:
    """What a test asserts on: ids as hex, kind and status by name, attributes, event names."""
    context = span.get_span_context()
    return {
        "name": span.name,
        "trace_id": f"{context.trace_id:032x}",
        "span_id": f"{context.span_id:016x}",
        "parent_id": f"{span.parent.span_id:016x}" if span.parent is not None else None,
        "kind": span.kind.name,
        "status": span.status.status_code.name,
        "status_description": span.status.description,
        "attributes": dict(span.attributes or {}),
        "events": [{"name": e.name, "attributes": dict(e.attributes or {})} for e in span.events],
        "pid": os.getpid(),
    }


class FileExporter(InMemorySpanExporter):
    """The in-memory exporter, also writing each exported span to ``path`` as one JSON line."""

    def __init__(self, path: str | None) -> None:
        super().__init__()
        self.path = path
        self._lock = threading.Lock()

    def export(self, spans):
        result = super().export(spans)
        if self.path:
            with self._lock, open(self.path, "a") as out:
                for span in spans:
                    out.write(json.dumps(as_dict(span), default=str) + "\n")
        return result


_exporter: FileExporter | None = None
_provider: TracerProvider | None = None


def install(path: str | None = None) -> FileExporter:
    """The SDK as the process's global provider. One provider and exporter per process, however
    often it is installed: a tracer already handed out keeps sending to the provider it first
    resolved."""
    global _exporter, _provider
    if _provider is None:
        _exporter = FileExporter(path)
        _provider = TracerProvider()
        _provider.add_span_processor(SimpleSpanProcessor(_exporter))
    if trace.get_tracer_provider() is not _provider:
        trace.set_tracer_provider(_provider)
    assert _exporter is not None
    return _exporter


def uninstall() -> None:
    """No SDK again, so the tests that run after these see the API alone (no span made, no
    traceparent written into their rows). OpenTelemetry allows one global provider per process;
    this resets its two globals as its own test utilities do (``reset_trace_globals``)."""
    from opentelemetry.util._once import Once

    trace._TRACER_PROVIDER_SET_ONCE = Once()
    trace._TRACER_PROVIDER = None


def read_spans(path: Path) -> list[dict]:
    if not path.exists():
        return []
    return [json.loads(line) for line in path.read_text().splitlines() if line.strip()]


if os.environ.get(SPANS_FILE):  # imported by a worker process
    install(os.environ[SPANS_FILE])
