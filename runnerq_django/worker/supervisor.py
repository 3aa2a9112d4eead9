"""``runworker --processes N``: N worker processes under one parent.

Threads share one interpreter lock, so CPU-bound handlers need processes. The parent starts each
child as ``runworker --processes 1`` with the same options, forwards SIGTERM/SIGINT (each child
then drains on its own), restarts a child that dies unexpectedly, and exits when all children
have. A second signal kills the children at once. The parent holds no claims. Children start
with SIGTERM and SIGINT blocked and unblock them once their handlers are installed (runworker
does, in ``ShutdownSignals.install``), so a stop sent while one starts up is a graceful stop.

A child is restarted whatever its exit status (a crash, a kill, a database that stayed away
past ``RUNNERQ['STARTUP_WAIT_SECONDS']``), with backoff: 1 s doubling to 30 s while it keeps
dying within ``STABLE_SECONDS`` of its start. An outage must never stop a pool for good, and a
child that starts during one waits for the database itself. Restarting stops only when it can't
help: a child that reports a usage or configuration error (exit status 2 or 78). The parent then
stops the other children and exits with status 78, so the process manager above it (systemd,
Kubernetes ...) sees the failure instead of a parent restarting into the same error.

A child that recycled itself (``--max-activities-per-process``, ``--max-memory-per-process``:
exit status 75, after a drain) is replaced at once, without backoff, and its backoff starts over.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

from runnerq_django.logs import log_event
from runnerq_django.worker.exit_status import EX_CONFIG, EX_TEMPFAIL, EX_UNAVAILABLE, EX_USAGE
from runnerq_django.worker.shutdown import SIGNALS, ShutdownSignals

logger = logging.getLogger("runnerq_django.worker")

# The exit statuses are exit_status's, named here too where callers have always found them.
__all__ = ["EX_CONFIG", "EX_TEMPFAIL", "EX_UNAVAILABLE", "EX_USAGE", "NOT_RESTARTED", "Supervisor"]
NOT_RESTARTED = {EX_USAGE: "a usage error", EX_CONFIG: "a configuration error"}

FIRST_BACKOFF = 1.0
MAX_BACKOFF = 30.0
STABLE_SECONDS = 30.0  # a child that ran this long is healthy: its backoff starts over


class Supervisor:
    def __init__(
        self,
        child_args: list[list[str]],
        *,
        on_stop: threading.Event | None = None,
        program: list[str] | None = None,
        first_backoff: float = FIRST_BACKOFF,
        max_backoff: float = MAX_BACKOFF,
        stable_seconds: float = STABLE_SECONDS,
    ):
        self.child_args = child_args
        # What each child runs, before its own arguments: this manage.py's runworker.
        self.program = program or [sys.executable, sys.argv[0], "runworker"]
        self.stopping = threading.Event()
        self.on_stop = on_stop
        self.first_backoff = first_backoff
        self.max_backoff = max_backoff
        self.stable_seconds = stable_seconds
        count = len(child_args)
        self.children: list[subprocess.Popen[bytes] | None] = [None] * count
        self.started_at = [0.0] * count
        self.restart_at: list[float | None] = [None] * count
        self.quick_exits = [0] * count
        self.gave_up: str | None = None  # why restarting stopped (None: it never did)
        self._signal_name = "SIGTERM"

    def _spawn(self, index: int) -> subprocess.Popen[bytes]:
        command = [*self.program, *self.child_args[index], "--supervised-by", str(os.getpid())]
        # A session of its own: a terminal's Ctrl-C reaches only the parent, which forwards one
        # signal (the group-wide one would count as a child's second signal and kill it).
        # The stop signals start blocked in the child (it inherits this thread's mask) until its
        # handlers are installed (ShutdownSignals.install): a stop forwarded while it is still
        # starting up waits for them instead of killing it by the default action.
        previous = signal.pthread_sigmask(signal.SIG_BLOCK, SIGNALS)
        try:
            child = subprocess.Popen(
                command, env={**os.environ, "RUNNERQ_WORKER_INDEX": str(index)}, start_new_session=True
            )
        finally:
            signal.pthread_sigmask(signal.SIG_SETMASK, previous)
        self.children[index] = child
        self.started_at[index] = time.monotonic()
        self.restart_at[index] = None
        log_event(
            logger,
            logging.INFO,
            "supervisor.child_started",
            "Started worker process %(index)s (pid %(pid)s).",
            index=index,
            pid=child.pid,
        )
        return child

    def _request_stop(self, name: str) -> None:
        self._signal_name = name
        self.stopping.set()
        if self.on_stop is not None:
            self.on_stop.set()

    def _kill_children(self) -> None:
        for child in self.children:
            if child is not None and child.poll() is None:
                child.kill()

    def run(self) -> int:
        shutdown = ShutdownSignals(self._request_stop, on_second=self._kill_children)
        shutdown.install()
        try:
            for index in range(len(self.children)):
                self._spawn(index)
            while not self.stopping.is_set():
                for index in range(len(self.children)):
                    if self.stopping.is_set():
                        break
                    self._watch(index)
                self.stopping.wait(0.2)
            return self._stop_children()
        finally:
            shutdown.restore()

    def _watch(self, index: int) -> None:
        now = time.monotonic()
        restart_at = self.restart_at[index]
        if restart_at is not None:
            if now >= restart_at:
                self._spawn(index)
            return
        child = self.children[index]
        code = child.poll() if child is not None else None
        if child is None or code is None:
            return
        lived = now - self.started_at[index]
        if code == EX_TEMPFAIL:
            self._recycled(index, child, lived)
            return
        self.quick_exits[index] = self.quick_exits[index] + 1 if lived < self.stable_seconds else 0
        if code in NOT_RESTARTED:
            self._give_up(index, child, f"it exited with {NOT_RESTARTED[code]} (status {code})")
            return
        pause = min(self.max_backoff, self.first_backoff * 2 ** max(0, self.quick_exits[index] - 1))
        log_event(
            logger,
            logging.WARNING,
            "supervisor.child_exited",
            "Worker process %(index)s (pid %(pid)s) exited with status %(code)s after %(lived_s)s s;"
            " restarting it in %(restart_in_s)s s.",
            index=index,
            pid=child.pid,
            code=code,
            lived_s=round(lived, 3),
            restart_in_s=pause,
        )
        self.restart_at[index] = now + pause

    def _recycled(self, index: int, child: subprocess.Popen[bytes], lived: float) -> None:
        """The child drained and exited to be replaced (its own log line says why): a new one now."""
        self.quick_exits[index] = 0
        log_event(
            logger,
            logging.INFO,
            "supervisor.child_recycled",
            "Worker process %(index)s (pid %(pid)s) recycled itself after %(lived_s)s s; starting a"
            " fresh one now.",
            index=index,
            pid=child.pid,
            code=EX_TEMPFAIL,
            lived_s=round(lived, 3),
        )
        self._spawn(index)

    def _give_up(self, index: int, child: subprocess.Popen[bytes], reason: str) -> None:
        self.gave_up = f"worker process {index} (pid {child.pid}) is not restarted: {reason}"
        log_event(
            logger,
            logging.ERROR,
            "supervisor.gave_up",
            "Worker process %(index)s (pid %(pid)s) is not restarted, and the others stop: %(reason)s.",
            index=index,
            pid=child.pid,
            reason=reason,
        )
        self.stopping.set()
        if self.on_stop is not None:
            self.on_stop.set()

    def _stop_children(self) -> int:
        signum = getattr(signal, self._signal_name, signal.SIGTERM)
        log_event(
            logger,
            logging.INFO,
            "supervisor.stopping",
            "Stopping %(children)s worker processes: passing %(signal)s on to each.",
            signal=self._signal_name,
            children=len(self.children),
        )
        for child in self.children:
            if child is not None and child.poll() is None:
                child.send_signal(signum)
        codes = []
        for index, child in enumerate(self.children):
            # A child waiting for its restart has exited already, and that exit was dealt with
            # (logged, a restart planned): the stop itself went well if the running ones stop well.
            if child is not None and self.restart_at[index] is None:
                codes.append(child.wait())  # a second signal kills them instead (_kill_children)
        log_event(
            logger,
            logging.INFO,
            "supervisor.stopped",
            "Every worker process stopped (exit statuses %(codes)s).",
            codes=",".join(map(str, codes)),
        )
        if self.gave_up is not None:
            return EX_CONFIG
        # A child that recycled itself as the stop came drained as well.
        return 0 if all(code in (0, EX_TEMPFAIL) for code in codes) else 1
