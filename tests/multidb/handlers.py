"""Activities of the several-databases tests, in-process and in ``runworker`` processes
(``runworker --import tests.multidb.handlers``)."""

from __future__ import annotations

import os
import time

from runnerq_django import activity


@activity(name="multidb.where")
def where(ctx, payload):
    """Which database the attempt ran on, and in which process."""
    return {"database": ctx.using, "pid": os.getpid(), "payload": payload}


@activity(name="multidb.spawn_elsewhere", max_attempts=3)
def spawn_elsewhere(ctx, payload):
    """Spawns a child into another database than its own: refused (CrossDatabaseError)."""
    ctx.spawn("multidb.where", {"child": True}, step="elsewhere", using=payload["into"])
    return "spawned"


@activity(name="multidb.spawn_home")
def spawn_home(ctx, payload):
    """Spawns a child on its own database (naming it, which is allowed) and awaits it."""
    child = ctx.spawn("multidb.where", {"child": True}, step="home", using=ctx.using)
    return ctx.wait(child)


@activity(name="multidb.sleep")
def sleep(payload):
    time.sleep(float(payload["seconds"]))
    return "slept"
