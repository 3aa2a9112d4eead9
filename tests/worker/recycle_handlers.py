"""Handlers of the recycling tests (``runworker --import tests.worker.recycle_handlers``): one that
keeps the memory it allocates (a leak), in a thread and in a process-mode child, and one that
reports how much resident memory its process has.

Each records its run in ``rq_test_runs`` (``tests.worker.handlers.record``) with its pid."""

from __future__ import annotations

import os
import time

from runnerq_django import activity
from runnerq_django.worker.recycle import resident_mb
from tests.worker.handlers import record

HOARD: list[bytes] = []  # what the leaking handler keeps, for the life of its process


@activity(name="t.hoard")
def hoard(ctx, payload):
    """Allocates ``mb`` MiB, touches every page (so it is resident) and keeps it."""
    record(ctx, "run")
    HOARD.append(b"\x01" * (payload["mb"] * 2**20))
    time.sleep(payload.get("seconds", 0))
    return {"pid": os.getpid(), "resident_mb": round(resident_mb(), 1)}


@activity(name="t.hoard_in_child", isolation="process")
def hoard_in_child(ctx, payload):
    """The same leak in a process-mode child: it ends with the child."""
    record(ctx, "run")
    HOARD.append(b"\x01" * (payload["mb"] * 2**20))
    return {"pid": os.getpid()}


@activity(name="t.resident")
def resident(ctx, payload):
    """How much resident memory the worker process has (to set a limit above an idle worker's)."""
    return {"pid": os.getpid(), "resident_mb": resident_mb()}
