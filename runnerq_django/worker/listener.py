"""What the dispatcher waits on between claims: ``LISTEN rq_w_<queue>`` on the session it claims
on (``WorkListener``), or only the poll interval (``Poller``, the ``--no-listen`` mode).

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
from typing import TYPE_CHECKING, Any

from django.db import connections

from runnerq_django.listen.notify import listen
from runnerq_django.logs import log_event
from runnerq_django.spec.constants import work_channel
from runnerq_django.worker.db import Backoff, reset_connection

if TYPE_CHECKING:
    import psycopg

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
    """``LISTEN`` on the queues' channels on the dispatcher's own session (its thread's Django
    connection of ``alias``), used from the dispatcher's thread only.

    The claim that follows a notification then goes to the backend that has just delivered it,
    not to one idle since the last claim (a backend idle for a while answers its first statement
    more slowly: bench/PROFILE.md), and the worker needs no session of its own for listening.
    Notifications that arrive while a claim runs are kept by psycopg until the next ``drain`` or
    ``wait``.

    ``wait`` returns at the first notification; at once after it listened on a new session
    (Django reconnects after an error; work committed while nobody listened got no wake-up), or
    after ``timeout``. ``drain`` reads what arrived
    without waiting: the dispatcher calls it before each claim, so that notifications for work the
    claim takes do not wake it again, and so that a long backlog, when the dispatcher never waits,
    still reads its notifications (a session that stops reading holds up the server's whole
    ``NOTIFY`` queue).
    """

    def __init__(self, queues: list[str], alias: str, *, stop: threading.Event):
        self.channels = [work_channel(queue) for queue in queues]
        self.alias = alias
        self.stop = stop
        self.listening: psycopg.Connection[Any] | None = None  # the session that LISTENs
        self.sessions = 0  # how many sessions have listened (past the first: a reconnection)
        self.backoff = Backoff(maximum=10.0)
        self.retry_at = 0.0

    def wait(self, timeout: float) -> None:
        session = self._session()
        if session is None:
            pause = self.retry_at - time.monotonic()
            if pause > 0:
                self.stop.wait(min(timeout, pause))
                return
            self._listen()  # on success: return, so the dispatcher claims what it may have missed
            return
        try:
            for _ in session.notifies(timeout=max(0.0, timeout), stop_after=1):
                break
        except Exception as exc:
            self._lost(exc)

    def drain(self) -> None:
        session = self._session()
        if session is None:
            return
        try:
            list(session.notifies(timeout=0))
        except Exception as exc:
            self._lost(exc)

    def _session(self) -> psycopg.Connection[Any] | None:
        """The dispatcher's session if it still is the one listening (a reconnection after an
        error, or a session Django closed, listens on nothing)."""
        listening = self.listening
        if listening is None or connections[self.alias].connection is not listening or listening.closed:
            return None
        return listening

    def _listen(self) -> None:
        connection = connections[self.alias]
        try:
            connection.ensure_connection()
            raw = connection.connection
            for channel in self.channels:
                listen(raw, channel)
        except Exception as exc:
            self._lost(exc)
            return
        self.listening = raw
        self.sessions += 1
        log_event(
            logger,
            logging.INFO,
            "runnerq.listener.reconnected" if self.sessions > 1 else "runnerq.listener.listening",
            ("Listening again" if self.sessions > 1 else "Listening") + " for new work on %(channels)s.",
            channels=self.channels,
        )
        self.backoff.succeeded()

    def _lost(self, exc: Exception) -> None:
        self.listening = None
        reset_connection(self.alias)
        pause = self.backoff.failed()
        self.retry_at = time.monotonic() + pause
        log_event(
            logger,
            logging.WARNING,
            "runnerq.listener.lost",
            "Lost the LISTEN session (polling meanwhile; reconnecting in %(retry_in_s).1f s): %(error)s",
            error=str(exc),
            retry_in_s=pause,
        )

    def close(self) -> None:
        self.listening = None  # the session is the thread's: closed when the dispatcher's thread ends
