"""Django signals of the worker's and the scheduler's life cycle.

- ``worker_started(sender=Worker, worker=...)``: the worker registered its pools and is about to
  claim. Receivers run in the worker process (e.g. to enqueue bootstrap work).
- ``worker_stopping(sender=Worker, worker=..., reason=...)``: a graceful stop began.
- ``worker_stopped(sender=Worker, worker=...)``: everything was drained or released.

A receiver that raises is logged and does not stop the worker.

- ``activity_enqueued(sender=None, queue=..., activity_ids=[...], using=...)``: sent in the
  enqueueing process by ``enqueue``, ``enqueue_many`` (and their async forms), a handler's
  ``enqueue`` and ``signal``/``signal_by_key`` (which may wake an activity), once the rows are
  written in the caller's transaction (which may still roll back: use
  ``transaction.on_commit`` in a receiver that acts on it). ``using`` is the queue's database
  alias. The test toolkit's immediate mode (``runnerq_django.testing``) is a
  receiver of it, as Django's test backends are of ``django.tasks.signals``. A receiver that
  raises propagates to the caller, as with any ``Signal.send``.

- ``record_repaired`` (also ``runnerq_django.scheduler.record_repaired``), for hosts that feed
  their own metrics: sent once per repaired periodic-job record, by the process that rebuilt it,
  with ``job_id``, ``reason`` (missing / unreadable / schema / schedule_changed), ``namespace``,
  ``source`` (db_evidence / declaration / memory) and ``after_outage`` (bool).
"""

from django.dispatch import Signal

worker_started = Signal()
worker_stopping = Signal()
worker_stopped = Signal()
record_repaired = Signal()
activity_enqueued = Signal()

__all__ = ["activity_enqueued", "record_repaired", "worker_started", "worker_stopped", "worker_stopping"]
