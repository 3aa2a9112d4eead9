"""Observability beyond logs and metrics: OpenTelemetry spans for enqueues and attempts
(``tracing``). The public hooks stay at the package root: ``runnerq_django.metrics`` (``set_sink``)
and ``runnerq_django.logs`` (``log_event``, the JSON formatter).

Internal: not part of the public API.
"""
