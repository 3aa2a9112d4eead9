"""SIGTERM / SIGINT: the first asks for a graceful stop, a second one exits at once.

A graceful stop is what a deploy sends: stop claiming, let running handlers finish within the
grace, hand back the rest (so another worker takes them immediately instead of after a lease
expiry), then exit. An operator who presses Ctrl-C twice means "now": the process exits without
cleanup; whatever it held returns to the queue once its leases run out (the reaper of any live
worker requeues it), and the line printed says so.
"""

from __future__ import annotations

import logging
import os
import signal
import threading
from collections.abc import Callable
from types import FrameType
from typing import Any

logger = logging.getLogger("runnerq_django.worker")

SIGNALS = (signal.SIGTERM, signal.SIGINT)


class ShutdownSignals:
    def __init__(self, on_first: Callable[[str], None], on_second: Callable[[], None] | None = None):
        self.on_first = on_first
        self.on_second = on_second
        self.received: str | None = None
        # What signal.signal returns: a handler, SIG_DFL/SIG_IGN, or None (not installed from Python).
        self._previous: dict[int, Callable[[int, FrameType | None], Any] | int | signal.Handlers | None] = {}

    def install(self) -> bool:
        """Install the handlers; only possible on the main thread (False elsewhere)."""
        if threading.current_thread() is not threading.main_thread():
            return False
        for signum in SIGNALS:
            self._previous[signum] = signal.signal(signum, self._handle)
        # A supervisor starts its children with these signals blocked (so that one sent during
        # start-up can't kill them by the default action): one pending is delivered now.
        signal.pthread_sigmask(signal.SIG_UNBLOCK, SIGNALS)
        return True

    def restore(self) -> None:
        for signum, previous in self._previous.items():
            signal.signal(signum, previous)
        self._previous.clear()

    def _handle(self, signum: int, frame: FrameType | None) -> None:
        name = signal.Signals(signum).name
        if self.received is not None:
            # os.write: logging from a signal handler can deadlock on the handler's lock.
            os.write(
                2,
                f"runnerq: second signal ({name}) during shutdown: exiting now. Activities still"
                " running return to the queue when their leases run out.\n".encode(),
            )
            if self.on_second is not None:
                self.on_second()
            os._exit(128 + signum)
        self.received = name
        self.on_first(name)
