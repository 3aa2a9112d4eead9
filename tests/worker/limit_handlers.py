"""Handlers of the time-limit tests (``runworker --import tests.worker.limit_handlers``): soft
limits in threads, tasks and child processes, and hard limits on handlers blocked where no
exception can reach them (a C call, a ``select`` on a socket that never answers).

Every handler records what it reached in ``rq_test_runs`` (``tests.worker.handlers.record``), with
its pid, so a test can see which process ran it and whether that process is still alive.
"""

from __future__ import annotations

import asyncio
import ctypes
import select
import socket
import time

from runnerq_django import SoftTimeLimitExceeded, activity
from tests.worker.handlers import record

LIBC = ctypes.CDLL(None)
_LISTENERS: list[socket.socket] = []  # kept open (and never accepted from) while their clients wait


def c_sleep(seconds: int) -> None:
    """libc ``sleep()`` through ctypes: C code that never runs a Python bytecode until it returns."""
    LIBC.sleep(seconds)


def silent_socket() -> socket.socket:
    """A connected TCP socket whose peer never sends: a listener on localhost that nobody
    accepts from (the kernel completes the handshake through the backlog)."""
    listener = socket.socket()
    listener.bind(("127.0.0.1", 0))
    listener.listen(1)
    _LISTENERS.append(listener)
    return socket.create_connection(listener.getsockname())


def wait_on_silence(seconds: float) -> None:
    client = silent_socket()
    readable, _, _ = select.select([client], [], [], seconds)
    assert not readable, "the silent peer sent something"


# soft limits -----------------------------------------------------------------------------------


@activity(name="t.soft_python", soft_timeout=1, timeout=8, max_attempts=1)
def soft_python(ctx, payload):
    """Pure Python past its soft limit: told at the next bytecode, cleans up and returns."""
    record(ctx, "start")
    try:
        deadline = time.monotonic() + 7
        while time.monotonic() < deadline:
            sum(range(200))
    except SoftTimeLimitExceeded:
        record(ctx, "cleanup")
        return {"cleaned": True}
    record(ctx, "end")
    return {"cleaned": False}


@activity(name="t.soft_reraise", soft_timeout=1, timeout=8, max_attempts=1)
def soft_reraise(ctx, payload):
    """Cleans up and lets the soft limit propagate: a retryable timeout (dead letter, 1 attempt)."""
    record(ctx, "start")
    try:
        deadline = time.monotonic() + 7
        while time.monotonic() < deadline:
            sum(range(200))
    except SoftTimeLimitExceeded:
        record(ctx, "cleanup")
        raise
    record(ctx, "end")


@activity(name="t.soft_thread_c_call", soft_timeout=1, timeout=8, max_attempts=1)
def soft_thread_c_call(ctx, payload):
    """A thread's soft limit waits for a C call to return: the exception lands after it."""
    record(ctx, "start")
    try:
        c_sleep(3)
        record(ctx, "after_c_call")  # never: the exception lands at the first bytecode after the call
        while True:
            sum(range(200))
    except SoftTimeLimitExceeded:
        record(ctx, "cleanup")
        return {"cleaned": True}


@activity(name="t.soft_async", soft_timeout=1, timeout=8, max_attempts=1)
async def soft_async(payload):
    from runnerq_django import current_context

    ctx = current_context()
    try:
        await asyncio.sleep(7)
    except asyncio.CancelledError:
        from asgiref.sync import sync_to_async

        await sync_to_async(record)(ctx, "cleanup")
        raise


@activity(name="t.soft_process_select", soft_timeout=2, timeout=8, max_attempts=1, isolation="process")
def soft_process_select(ctx, payload):
    """In a child process the soft limit is a signal: it ends a select() on a silent socket."""
    record(ctx, "start")
    try:
        wait_on_silence(7)
    except SoftTimeLimitExceeded:
        record(ctx, "cleanup")
        return {"cleaned": True}
    record(ctx, "end")
    return {"cleaned": False}


# hard limits -----------------------------------------------------------------------------------


@activity(name="t.hard_c_sleep", timeout=2, max_attempts=2, retry_delay=0, isolation="process")
def hard_c_sleep(ctx, payload):
    """The first attempt blocks in C for 15 s and is killed at 2 s; the retry returns."""
    record(ctx, "start")
    if ctx.attempt == 1:
        c_sleep(15)
        record(ctx, "end")
    return {"attempt": ctx.attempt}


@activity(name="t.hard_select", timeout=2, max_attempts=1, isolation="process")
def hard_select(ctx, payload):
    """select() on a socket that never answers, past the timeout: killed."""
    record(ctx, "start")
    wait_on_silence(15)
    record(ctx, "end")


@activity(name="t.hard_ignores_soft", soft_timeout=2, timeout=4, max_attempts=1, isolation="process")
def hard_ignores_soft(ctx, payload):
    """Swallows its soft limit and blocks again: the hard limit kills it anyway."""
    record(ctx, "start")
    try:
        wait_on_silence(15)
    except SoftTimeLimitExceeded:
        record(ctx, "ignored")
    c_sleep(15)
    record(ctx, "end")


@activity(name="t.thread_c_sleep", timeout=2, max_attempts=2, retry_delay=0)
def thread_c_sleep(ctx, payload):
    """hard_c_sleep in a thread: timed out at 2 s, but the C call keeps its thread for 4 s."""
    record(ctx, "start")
    if ctx.attempt == 1:
        c_sleep(4)
        record(ctx, "end")
    return {"attempt": ctx.attempt}


@activity(name="t.process_echo", isolation="process")
def process_echo(ctx, payload):
    record(ctx, "run")
    return {"echo": payload, "step": ctx.step("double", lambda: payload * 2)}


@activity(name="t.process_fails", max_attempts=1, isolation="process")
def process_fails(payload):
    raise ValueError(f"bad {payload}")


@activity(name="t.process_sleeps", isolation="process")
def process_sleeps(ctx, payload):
    """A durable sleep in a child parks the activity (the worker parks it, the child exits)."""
    record(ctx, "run")
    ctx.sleep("nap", 3)
    return {"woke": True}


@activity(name="t.process_blocks", timeout=120, isolation="process")
def process_blocks(ctx, payload):
    """Blocks in C far longer than any test: only a kill ends it early."""
    record(ctx, "start")
    c_sleep(60)
    record(ctx, "end")
