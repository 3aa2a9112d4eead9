"""The test project with the tutorial's app installed (docs/tutorial.md, tests/docs/test_tutorial.py).

A settings module of its own, so the tutorial's activities and periodic job stay out of every
other test's worker and scheduler.
"""

import os

from testproject.settings import *  # noqa: F403

INSTALLED_APPS = [*INSTALLED_APPS, "testproject.shop"]  # noqa: F405
# A test run's own scheduler namespace: the cache (Redis) outlives the test database, and a
# record left by an earlier run would say the job's latest occurrence already ran.
RUNNERQ = {**RUNNERQ, "SCHEDULER": {"NAMESPACE": os.environ.get("RUNNERQ_TUTORIAL_NAMESPACE", "default")}}  # noqa: F405
