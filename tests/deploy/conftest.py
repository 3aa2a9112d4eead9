from tests.worker.support import queue_name, runs_table, worker, worker_process  # noqa: F401
