"""Wakes the dispatcher when new work is committed: ``LISTEN rq_w_<queue>`` on a dedicated
connection. Notifications are only a latency optimisation; the dispatcher also polls, so a lost
notification or a dropped listener delays work by at most one poll interval, never loses it.
"""

from __future__ import annotations

import logging
import threading

from runnerq_django.notify import Listener
from runnerq_django.spec.constants import work_channel
from runnerq_django.worker.db import Backoff
from runnerq_django.worker.service import ThreadService

logger = logging.getLogger("runnerq_django.worker")


class WorkListener(ThreadService):
    thread_name = "runnerq-listener"

    def __init__(self, queues: list[str], alias: str, *, wake: threading.Event, stop: threading.Event):
        super().__init__()
        self.channels = [work_channel(queue) for queue in queues]
        self.alias = alias
        self.wake = wake
        self.stop = stop
        self.connected = threading.Event()

    def _loop(self) -> None:
        backoff = Backoff(maximum=10.0)
        while not self.stop.is_set():
            listener = None
            try:
                listener = Listener(self.channels, self.alias)
                self.connected.set()
                if backoff.current:
                    logger.info("runnerq.listener.reconnected", extra={"channels": self.channels})
                backoff.succeeded()
                self.wake.set()  # catch up with anything committed while not listening
                while not self.stop.is_set():
                    for _ in listener.wait(0.5):
                        self.wake.set()
            except Exception as exc:
                self.connected.clear()
                pause = backoff.failed()
                logger.warning("runnerq.listener.lost", extra={"error": str(exc), "retry_in_s": pause})
                self.stop.wait(pause)
            finally:
                if listener is not None:
                    listener.close()
