import pytest

from tests.tracing.exporter import install, uninstall
from tests.worker.support import queue_name, runs_table, worker, worker_process  # noqa: F401


@pytest.fixture
def local():
    """The test process's own spans (the producers of what the test enqueues), with the SDK
    removed afterwards so later tests' rows carry no trace context."""
    exporter = install()
    exporter.clear()
    yield exporter
    exporter.clear()
    uninstall()
