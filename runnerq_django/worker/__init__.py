"""The worker process (``manage.py runworker``): small parts, each testable alone, put together by
``runtime.Worker``.

Internal: not part of the public API. The command line and the ``RUNNERQ`` settings are the
interface; hook into a worker's life through ``runnerq_django.signals``.
"""
