"""Django signals of the worker's life cycle.

- ``worker_started(sender=Worker, worker=...)``: the worker registered its pools and is about to
  claim. Receivers run in the worker process (e.g. to enqueue bootstrap work).
- ``worker_stopping(sender=Worker, worker=..., reason=...)``: a graceful stop began.
- ``worker_stopped(sender=Worker, worker=...)``: everything was drained or released.

A receiver that raises is logged and does not stop the worker.
"""

from django.dispatch import Signal

__all__ = [
    "worker_started",
    "worker_stopped",
    "worker_stopping",
]

worker_started = Signal()
worker_stopping = Signal()
worker_stopped = Signal()
