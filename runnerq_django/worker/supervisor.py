"""``runworker --processes N``: N worker processes under one parent.

Threads share one interpreter lock, so CPU-bound handlers need processes. The parent starts each
child as ``runworker --processes 1`` with the same options, forwards SIGTERM/SIGINT (each child
then drains on its own), restarts a child that dies unexpectedly, and exits when all children
have. A second signal kills the children at once. The parent holds no claims.
"""

from __future__ import annotations

import logging
import os
import signal
import subprocess
import sys
import threading
import time

from runnerq_django.worker.shutdown import ShutdownSignals

logger = logging.getLogger("runnerq_django.worker")

RESTART_PAUSE = 1.0


class Supervisor:
    def __init__(self, child_args: list[list[str]], *, on_stop: threading.Event | None = None):
        self.child_args = child_args
        self.stopping = threading.Event()
        self.on_stop = on_stop
        self.children: list[subprocess.Popen | None] = [None] * len(child_args)
        self._signal_name = "SIGTERM"

    def _spawn(self, index: int) -> subprocess.Popen:
        command = [sys.executable, sys.argv[0], "runworker", *self.child_args[index], "--supervised-by", str(os.getpid())]
        # A session of its own: a terminal's Ctrl-C reaches only the parent, which forwards one
        # signal (the group-wide one would count as a child's second signal and kill it).
        child = subprocess.Popen(command, env={**os.environ, "RUNNERQ_WORKER_INDEX": str(index)}, start_new_session=True)
        logger.info("supervisor.child_started", extra={"index": index, "pid": child.pid})
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
                self.children[index] = self._spawn(index)
            while not self.stopping.is_set():
                for index, child in enumerate(self.children):
                    code = child.poll() if child is not None else None
                    if code is not None and not self.stopping.is_set():
                        logger.warning("supervisor.child_exited", extra={"index": index, "pid": child.pid, "code": code})
                        time.sleep(RESTART_PAUSE)
                        if not self.stopping.is_set():
                            self.children[index] = self._spawn(index)
                self.stopping.wait(0.5)
            return self._stop_children()
        finally:
            shutdown.restore()

    def _stop_children(self) -> int:
        signum = getattr(signal, self._signal_name, signal.SIGTERM)
        logger.info("supervisor.stopping", extra={"signal": self._signal_name, "children": len(self.children)})
        for child in self.children:
            if child is not None and child.poll() is None:
                child.send_signal(signum)
        codes = []
        for child in self.children:
            if child is not None:
                codes.append(child.wait())  # a second signal kills them instead (_kill_children)
        logger.info("supervisor.stopped", extra={"codes": ",".join(map(str, codes))})
        return 0 if all(code == 0 for code in codes) else 1
