"""Settings of the processes the several-databases tests start: the worker tests' (``RUNNERQ``
from ``RUNNERQ_TEST_SETTINGS``), with the ``second`` database at ``RUNNERQ_SECOND_DATABASE_URL``
(the test's second test database, on the embedded PostgreSQL 18), and with
``RUNNERQ_TEST_ROUTER`` set, the package's database router."""

import os

from testproject.database import django_database
from tests.worker.settings import *  # noqa: F403
from tests.worker.settings import DATABASES

DATABASES = {**DATABASES, "second": django_database(os.environ["RUNNERQ_SECOND_DATABASE_URL"])}
if os.environ.get("RUNNERQ_TEST_ROUTER"):
    DATABASE_ROUTERS = ["runnerq_django.routing.RunnerQRouter"]
