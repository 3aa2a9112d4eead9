"""``tests.worker.handlers.counted`` behind a concurrency limit and a rate limit, so that a worker
claims them with the slotted claims (``storage.limits``), for the hostile-row tests
(``runworker --import tests.worker.slotted_handlers``; kept apart so that the other worker
tests' processes don't run those claims on every poll)."""

from __future__ import annotations

from runnerq_django import activity
from tests.worker.handlers import counted

counted_limited = activity(name="t.counted_limited", concurrency=4)(counted.func)
counted_rated = activity(name="t.counted_rated", rate_limit="1000/s")(counted.func)
