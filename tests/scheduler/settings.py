"""Settings of the scheduler's process tests: the test project's, plus RUNNERQ['SCHEDULER']
overrides from the RQ_SCHEDULER_JSON environment variable (namespace, jobs, lease ...)."""

import json
import os

from testproject.settings import *  # noqa: F403
from testproject.settings import RUNNERQ

RUNNERQ = {**RUNNERQ, "SCHEDULER": json.loads(os.environ.get("RQ_SCHEDULER_JSON") or "{}")}
