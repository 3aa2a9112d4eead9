"""Signals of the periodic scheduler, for hosts that feed their own metrics (Prometheus, statsd).

``record_repaired`` is sent once per repaired record, by the process that rebuilt it, with
``job_id``, ``reason`` (missing / unreadable / schema / schedule_changed), ``namespace``,
``source`` (db_evidence / declaration / memory) and ``after_outage`` (bool).
"""

from django.dispatch import Signal

record_repaired = Signal()
