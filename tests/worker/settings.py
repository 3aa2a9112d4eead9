"""Settings of the worker processes some tests start: the test project's, with ``RUNNERQ``
entries overridden from the environment, so a test can give a process short intervals (or a
bad setting) without a settings module of its own per case.

``RUNNERQ_TEST_SETTINGS`` (JSON) applies to every process; ``RUNNERQ_TEST_CHILD_SETTINGS`` only
to the children of ``runworker --processes N`` (they have ``RUNNERQ_WORKER_INDEX`` set).
"""

import json
import os

from testproject.settings import *  # noqa: F403
from testproject.settings import RUNNERQ as _PROJECT_RUNNERQ

RUNNERQ = {**_PROJECT_RUNNERQ, **json.loads(os.environ.get("RUNNERQ_TEST_SETTINGS") or "{}")}
if os.environ.get("RUNNERQ_WORKER_INDEX") is not None:
    RUNNERQ.update(json.loads(os.environ.get("RUNNERQ_TEST_CHILD_SETTINGS") or "{}"))
