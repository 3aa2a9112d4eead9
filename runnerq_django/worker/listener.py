"""What the dispatcher waits on between claims: ``LISTEN rq_w_<queue>`` on a dedicated connection
(``WorkListener``), or only the poll interval (``Poller``, the ``--no-listen`` mode).

The dispatcher blocks on the listening socket itself rather than on an event a listener thread
sets: a ``NOTIFY`` then wakes the thread that claims, without a thread switch in between (that
hand-off was ~0.14 ms of an idle worker's enqueue-to-start; bench/PROFILE.md). Notifications are
only a latency optimisation; the dispatcher also polls, so a lost notification or a dropped
listener delays work by at most one poll interval, never loses it.
"""

from __future__ import annotations

import logging
import threading
import time

from runnerq_django.notify import Listener
from runnerq_django.spec.constants import work_channel
from runnerq_django.worker.db import Backoff

logger = logging.getLogger("runnerq_django.worker")


class Poller:
    """No ``LISTEN``: the dispatcher waits the poll interval (or until the worker stops)."""

    def __init__(self, stop: threading.Event):
        self.stop = stop

    def wait(self, timeout: float) -> None:
        self.stop.wait(timeout)

    def drain(self) -> None:
        pass

    def close(self) -> None:
        pass


class WorkListener:
    """``LISTEN`` on the queues' channels, used from the dispatcher's thread only.

    ``wait`` returns at the first notification, at once after a (re)connection (work committed
    while nobody listened got no wake-up), or after ``timeout``. ``drain`` reads what arrived
    without waiting: the dispatcher calls it before each claim, so that notifications for work the
    claim takes do not wake it again, and so that a long backlog, when the dispatcher never waits,
    still reads its notifications (a session that stops reading holds up the server's whole
    ``NOTIFY`` queue).
    """

    def __init__(self, queues: list[str], alias: str, *, stop: threading.Event):
        self.channels = [work_channel(queue) for queue in queues]
        self.alias = alias
        self.stop = stop
        self.listener: Listener | None = None
        self.backoff = Backoff(maximum=10.0)
        self.retry_at = 0.0

    def wait(self, timeout: float) -> None:
        if self.listener is None:
            pause = self.retry_at - time.monotonic()
            if pause > 0:
                self.stop.wait(min(timeout, pause))
                return
            self._connect()  # on success: return, so the dispatcher claims what it may have missed
            return
        try:
            for _ in self.listener.wait(timeout):
                break
        except Exception as exc:
            self._lost(exc)

    def drain(self) -> None:
        if self.listener is None:
            return
        try:
            self.listener.pending()
        except Exception as exc:
            self._lost(exc)

    def _connect(self) -> None:
        try:
            self.listener = Listener(self.channels, self.alias)
        except Exception as exc:
            self._lost(exc)
            return
        if self.backoff.current:
            logger.info("runnerq.listener.reconnected", extra={"channels": self.channels})
        self.backoff.succeeded()

    def _lost(self, exc: Exception) -> None:
        self.close()
        pause = self.backoff.failed()
        self.retry_at = time.monotonic() + pause
        logger.warning("runnerq.listener.lost", extra={"error": str(exc), "retry_in_s": pause})

    def close(self) -> None:
        if self.listener is not None:
            self.listener.close()
            self.listener = None
