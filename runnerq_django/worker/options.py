"""What one worker process does: which queues and types, how many threads, lease and grace."""

from __future__ import annotations

import os
import socket
import uuid
from dataclasses import dataclass, field

from runnerq_django import conf


def default_worker_id() -> str:
    """``host:pid:short-random``: recognisable in ``current_worker_id`` and unique per process."""
    return f"{socket.gethostname()[:64]}:{os.getpid()}:{uuid.uuid4().hex[:8]}"


@dataclass
class WorkerOptions:
    queues: list[str] = field(default_factory=lambda: list(conf.runnerq_settings().queues))
    # None: the types registered in this process (so a Python worker never claims work only a Go
    # or TypeScript worker can run).
    activity_types: list[str] | None = None
    concurrency: int = field(default_factory=lambda: conf.runnerq_settings().concurrency)
    lease_seconds: float = field(default_factory=lambda: float(conf.runnerq_settings().lease_seconds))
    heartbeat_seconds: float = field(default_factory=lambda: float(conf.runnerq_settings().heartbeat_seconds))
    shutdown_grace_seconds: float = field(
        default_factory=lambda: float(conf.runnerq_settings().shutdown_grace_seconds)
    )
    poll_interval_seconds: float = field(
        default_factory=lambda: float(conf.runnerq_settings().poll_interval_seconds)
    )
    listen: bool = field(default_factory=lambda: conf.runnerq_settings().listen)
    # Recycling (worker/recycle.py): after this many claims, or past this much resident memory,
    # the process drains and exits with EX_TEMPFAIL. None: no limit.
    max_activities: int | None = field(
        default_factory=lambda: conf.runnerq_settings().max_activities_per_process
    )
    max_memory_mb: int | None = field(
        default_factory=lambda: conf.runnerq_settings().max_memory_per_process_mb
    )
    maintenance: bool = True  # take part in reaping and retention
    scheduler: bool = False  # also run the periodic-job scheduler in this process
    until_idle: bool = False  # stop once nothing in the queues is due or running (runworker --until-idle)
    # None: each queue on its own database (runnerq_django.routing); an alias: every queue on it.
    database: str | None = None
    worker_id: str = field(default_factory=default_worker_id)

    @property
    def lease_ms(self) -> int:
        return int(self.lease_seconds * 1000)

    @property
    def effective_heartbeat(self) -> float:
        """Renew at least three times per lease, whatever the setting says, so one slow or
        failed renewal never costs the claim."""
        return min(self.heartbeat_seconds, self.lease_seconds / 3)
