"""One LISTEN session per process and database for the ``result()`` calls that wait at once.

A wait for a result listens on its queue's result channel, so that a worker's ``NOTIFY`` wakes
it at once instead of at its next poll. With a session of its own per wait, a web process whose
requests wait on results held one more Postgres connection per waiting request. Here the waits
of one database alias share one session, owned by one thread: it listens on each queue's
channel the first time a wait needs it and sets the event of every wait whose activity id a
notification names. When the last wait leaves, the session closes (so nothing stays connected
after the work: a test database can be dropped, a pooler's server connection goes back).

An async wait (``aresult()``) registers without blocking (:meth:`ResultNotices.register_async`)
and is woken on its event loop: it holds no thread while it waits, and it is woken once more
when its channel is listened on, to read again then.

A wait wakes the thread through a socket pair (a new channel is listened on at once), and still polls
every ``RUNNERQ['POLL_INTERVAL_SECONDS']``: a notification lost with the session (a restart,
``pg_terminate_backend``) costs at most one poll interval. A lost session wakes every wait (each
re-reads, then polls); the next wait to come opens a new one. A forked child starts with none.

Internal: not part of the public API.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import os
import selectors
import socket
import threading
import time
from collections.abc import Iterator
from typing import Any

import psycopg
from django.core.signals import setting_changed

from runnerq_django.listen import notify
from runnerq_django.logs import log_event

logger = logging.getLogger("runnerq_django.results")

LISTEN_TIMEOUT_SECONDS = 5.0  # for the session to listen on a new channel; then the wait polls


class Wait:
    """One ``result()`` wait: ``event`` is set when a notification names the activity, or when
    the session is lost (``lost``); the waiter re-reads the result either way. An async wait's
    ``async_event`` is set too, on its ``loop``."""

    __slots__ = ("activity_id", "async_event", "channel", "event", "loop", "lost")

    def __init__(
        self, activity_id: str, channel: str = "", loop: asyncio.AbstractEventLoop | None = None
    ) -> None:
        self.activity_id = activity_id
        self.channel = channel
        self.event = threading.Event()
        self.lost = False
        self.loop = loop
        self.async_event = asyncio.Event() if loop is not None else None

    def wake(self) -> None:
        self.event.set()
        if self.loop is not None and self.async_event is not None:
            with contextlib.suppress(RuntimeError):  # the loop is closed: nobody waits there
                self.loop.call_soon_threadsafe(self.async_event.set)


class ResultNotices:
    """The result notifications of one database alias in this process (:func:`for_alias`).

    The lock guards all of it: the waits by activity id, the channels asked for and those the
    current session listens on, the current thread and the socket that wakes it. A thread that
    is no longer ``_thread`` (retired) stops at its next look and closes its session."""

    def __init__(self, alias: str):
        self.alias = alias
        self._lock = threading.Lock()
        self._changed = threading.Condition(self._lock)  # a channel listened on, a session gone
        self._waits: dict[str, list[Wait]] = {}
        self._registering = 0  # waits waiting for their channel
        self._wanted: set[str] = set()
        self._listening: set[str] = set()
        self._thread: threading.Thread | None = None
        self._waker: socket.socket | None = None
        self._failed = False  # the last session was lost or never came

    def register(self, channel: str, activity_id: str, within: float | None = None) -> Wait | None:
        """A wait for ``activity_id`` once the session listens on ``channel`` (a result
        committed after this returns is announced to it); ``None`` when it can't listen within
        ``within`` seconds, at most ``LISTEN_TIMEOUT_SECONDS`` (the caller polls)."""
        with self._lock:
            if channel not in self._listening:
                self._wanted.add(channel)
                self._failed = False
                self._registering += 1
                try:
                    patience = (
                        LISTEN_TIMEOUT_SECONDS if within is None else min(within, LISTEN_TIMEOUT_SECONDS)
                    )
                    deadline = time.monotonic() + patience
                    while channel not in self._listening and not self._failed:
                        if self._thread is None:
                            self._start()
                        else:
                            self._wake()
                        remaining = deadline - time.monotonic()
                        if remaining <= 0:
                            break
                        self._changed.wait(remaining)
                finally:
                    self._registering -= 1
                if channel not in self._listening:
                    if not self._waits and not self._registering:
                        self._retire()  # not joined: it may be stuck in a connect
                    return None
            wait = Wait(activity_id)
            self._waits.setdefault(activity_id, []).append(wait)
            return wait

    def register_async(self, channel: str, activity_id: str, loop: asyncio.AbstractEventLoop) -> Wait:
        """:meth:`register` for a wait on ``loop``, without blocking: the wait counts at once (it
        keeps the session), and is woken when the session listens on ``channel`` (a result
        committed before that announced itself to nobody: the waiter reads again then)."""
        with self._lock:
            wait = Wait(activity_id, channel, loop)
            self._waits.setdefault(activity_id, []).append(wait)
            if channel not in self._listening:
                self._wanted.add(channel)
                self._failed = False
                if self._thread is None:
                    self._start()
                else:
                    self._wake()
            return wait

    def unregister(self, wait: Wait, *, join: bool = True) -> None:
        """The wait is over; the last one closes the session (and waits for that, unless not
        ``join``: an event loop must not block on it)."""
        with self._lock:
            waits = self._waits.get(wait.activity_id)
            if waits is not None:
                with contextlib.suppress(ValueError):
                    waits.remove(wait)
                if not waits:
                    del self._waits[wait.activity_id]
            thread = self._retire() if not self._waits and not self._registering else None
        if thread is not None and join:
            thread.join(5)

    def close(self) -> None:
        """Close the session whatever waits (the settings changed: they go on polling)."""
        with self._lock:
            thread = self._retire()
            self._lose_waits()
        if thread is not None:
            thread.join(5)

    def _start(self) -> None:
        # A socket pair, not a pipe: selectable on every platform, whatever the descriptor number.
        wake_r, self._waker = socket.socketpair()
        self._waker.setblocking(False)  # a waker never blocks: one byte pending is enough
        self._thread = threading.Thread(
            target=self._run, args=(wake_r, self._waker), name=f"runnerq-results-{self.alias}", daemon=True
        )
        self._thread.start()

    def _retire(self) -> threading.Thread | None:
        """Make the current thread stop (it closes its session) and forget its state."""
        thread = self._thread
        self._wake()
        self._thread, self._waker = None, None
        self._wanted.clear()
        self._listening.clear()
        self._changed.notify_all()
        return thread

    def _lose_waits(self) -> None:
        """Wake every wait to poll from now on: its session is gone."""
        for waits in self._waits.values():
            for wait in waits:
                wait.lost = True
                wait.wake()

    def _wake(self) -> None:
        if self._waker is not None:
            with contextlib.suppress(OSError):  # BlockingIOError: a byte is pending already
                self._waker.send(b"x")

    # --- the thread ----------------------------------------------------------------------------

    def _run(self, wake_r: socket.socket, waker: socket.socket) -> None:
        conn: psycopg.Connection[Any] | None = None
        try:
            conn = notify.connect(self.alias)
            self._serve(conn, wake_r)
        except Exception:  # the session is lost or never came: the waits poll
            log_event(
                logger,
                logging.WARNING,
                "runnerq.results.listen_lost",
                "Lost the LISTEN session for results on %(database)r: waits for results poll meanwhile.",
                exc_info=True,
                database=self.alias,
            )
        finally:
            if conn is not None:
                with contextlib.suppress(Exception):
                    conn.close()
            with self._lock:
                # _serve returns only once this thread is retired: still current, it was lost.
                if self._thread is threading.current_thread():
                    self._retire()
                    self._failed = True
                    self._lose_waits()
                wake_r.close()  # under the lock: no waker sends to a closed socket
                waker.close()

    def _serve(self, conn: psycopg.Connection[Any], wake_r: socket.socket) -> None:
        me = threading.current_thread()
        with selectors.DefaultSelector() as selector:
            selector.register(conn.fileno(), selectors.EVENT_READ, "session")
            selector.register(wake_r, selectors.EVENT_READ, "wake")
            while self._listen_and_wait(conn, wake_r, selector, me):
                pass

    def _listen_and_wait(
        self,
        conn: psycopg.Connection[Any],
        wake_r: socket.socket,
        selector: selectors.BaseSelector,
        me: threading.Thread,
    ) -> bool:
        """One turn: listen on the channels asked for, hand out the notifications, wait for more
        or for a wake-up. False when this thread is to stop."""
        with self._lock:
            if self._thread is not me:
                return False
            if not self._waits and not self._registering:
                self._retire()  # every wait left while this one was connecting
                return False
            new = self._wanted - self._listening
        for channel in sorted(new):
            notify.listen(conn, channel)
        if new:
            with self._lock:
                if self._thread is not me:
                    return False
                self._listening |= new
                self._changed.notify_all()
                for waits in self._waits.values():  # async waits registered before the LISTEN
                    for wait in waits:
                        if wait.loop is not None and wait.channel in new:
                            wait.wake()
        self._dispatch(conn.notifies(timeout=0))  # any that came in with the LISTEN
        for key, _ in selector.select(timeout=60.0):
            if key.data == "wake":
                wake_r.recv(4096)
            else:
                self._dispatch(conn.notifies(timeout=0))
        return True

    def _dispatch(self, notices: Iterator[psycopg.Notify]) -> None:
        for notice in notices:
            ids = notice.payload.split(",")
            with self._lock:
                for activity_id in ids:
                    for wait in self._waits.get(activity_id, ()):
                        wait.wake()


_notices: dict[str, ResultNotices] = {}
_notices_lock = threading.Lock()


def for_alias(alias: str) -> ResultNotices:
    """This process's :class:`ResultNotices` of ``alias``."""
    with _notices_lock:
        found = _notices.get(alias)
        if found is None:
            found = _notices[alias] = ResultNotices(alias)
        return found


def close_all() -> None:
    """Close this process's sessions; the next wait opens one with the settings then."""
    with _notices_lock:
        current = list(_notices.values())
        _notices.clear()
    for notices in current:
        notices.close()


def _forget_after_fork() -> None:
    """In a forked child: the parent's sessions and threads are not ours (closing a session
    would end the parent's, whose socket the child shares), and a lock another of the parent's
    threads held at the fork would never be released here."""
    global _notices_lock
    _notices_lock = threading.Lock()
    _notices.clear()


if hasattr(os, "register_at_fork"):  # no fork, no hook (Windows)
    os.register_at_fork(after_in_child=_forget_after_fork)


def _reload(setting: str, **kwargs: Any) -> None:
    if setting == "DATABASES":  # the sessions' connection parameters
        close_all()


setting_changed.connect(_reload, dispatch_uid="runnerq_django.listen.result_notices")
