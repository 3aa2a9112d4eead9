"""Django signals of the worker's and the scheduler's life cycle.

- ``worker_started(sender=Worker, worker=...)``: the worker registered its pools and is about to
  claim. Receivers run in the worker process (e.g. to enqueue bootstrap work).
- ``worker_stopping(sender=Worker, worker=..., reason=...)``: a graceful stop began.
- ``worker_stopped(sender=Worker, worker=...)``: everything was drained or released.

A receiver that raises is logged and does not stop the worker.

- ``record_repaired`` (also ``runnerq_django.scheduler.record_repaired``), for hosts that feed
  their own metrics: sent once per repaired periodic-job record, by the process that rebuilt it,
  with ``job_id``, ``reason`` (missing / unreadable / schema / schedule_changed), ``namespace``,
  ``source`` (db_evidence / declaration / memory) and ``after_outage`` (bool).
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
record_repaired = Signal()

__all__ = ["record_repaired", "worker_started", "worker_stopped", "worker_stopping"]
