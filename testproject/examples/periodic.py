"""Periodic jobs of the example project (found by autodiscovery, like admin.py).

Each job enqueues one activity per occurrence: here, handlers that live in activities.py. The
usual spelling stacks ``@periodic`` on the ``@activity`` function itself; for a handler defined
elsewhere, ``periodic(...)(handler)`` is the same declaration.
"""

from datetime import timedelta

from runnerq_django import periodic
from testproject.examples.activities import compute, hello

# A cron job in a time zone: 04:00 Paris time every day (DST handled by the documented policy).
periodic(
    id="examples.nightly_hello",
    cron="0 4 * * *",
    tz="Europe/Paris",
    payload={"name": "night owl"},
    misfire_grace=timedelta(hours=2),
)(hello)

# An anchored interval: every 15 minutes on the quarter hours, the same instants in every process.
periodic(
    id="examples.quarter_hour_compute",
    every=timedelta(minutes=15),
    anchor="2024-01-01T00:00:00Z",
    payload={"x": 6, "y": 7, "seconds": 0},
    coalesce=True,
)(compute)
