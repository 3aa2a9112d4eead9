"""The reader's side of progress and events: ``handle.progress()`` and ``handle.events()``.

:class:`EventStream` iterates an activity's published events, oldest first, as a sync and an
async iterator. Following (the default), it waits for new ones between reads: woken by this
process's shared ``LISTEN`` session (``result_notices``) on the queue's progress channel
(``storage.progress.channel``, notified by each write) and its result channel (the activity's
end), with a poll as the fallback for a lost notification, and as the only mechanism when
``RUNNERQ['LISTEN']`` is off (PgBouncer in transaction pooling). It ends when the activity ends
(finished or deleted): its events commit before its outcome, and the read that finds it ended
reads them in the same snapshot. Between reads a sync reader's connection is closed (outside a
transaction), and an async reader holds no thread.

Internal: not part of the public API.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Iterator
from typing import Any

from asgiref.sync import sync_to_async

from runnerq_django import conf, routing
from runnerq_django.activities.nouns import ActivityHandle, ProgressFunctions, install_progress_functions
from runnerq_django.listen import result_notices
from runnerq_django.spec.constants import result_channel
from runnerq_django.storage import progress as stored
from runnerq_django.storage.progress import Progress, PublishedEvent
from runnerq_django.storage.validation import integer

__all__ = ["EventStream", "get_progress"]

# A pause shorter than this keeps the reader's connection: reconnecting would cost more.
_RELEASE_FOR_PAUSES_FROM = 0.1


def get_progress(handle: ActivityHandle[Any]) -> Progress | None:
    alias = routing.database_for(handle.queue, handle.using)
    return stored.get_progress(handle.queue, handle.id, using=alias)


class EventStream:
    """The published events of one activity after sequence number ``after``, oldest first;
    ``follow``: wait for more until the activity ends. Iterate it (``for`` or ``async for``)
    once; each iteration starts from ``after``."""

    def __init__(self, handle: ActivityHandle[Any], after: int | None = None, follow: bool = True):
        self.handle = handle
        self.after = 0 if after is None else integer("after", after, 0, 2**63 - 1)
        self.follow = follow
        self.alias = routing.database_for(handle.queue, handle.using)

    def __repr__(self) -> str:
        return f"<EventStream of {self.handle.id} after {self.after}>"

    def _read(self, after: int) -> tuple[list[PublishedEvent], bool]:
        return stored.read_events(self.handle.queue, self.handle.id, after=after, using=self.alias)

    def _over(self, events: list[PublishedEvent], ended: bool) -> bool:
        """Whether the iteration ends after ``events``: a short page (nothing more stored) read
        when the activity had ended, or when not following."""
        return len(events) < stored.MAX_EVENTS_PER_READ and (ended or not self.follow)

    # sync -------------------------------------------------------------------------------------------

    def __iter__(self) -> Iterator[PublishedEvent]:
        after = self.after
        notices: result_notices.ResultNotices | None = None
        waits: list[result_notices.Wait] = []
        poll = conf.runnerq_settings().poll_interval_seconds
        backoff = 0.01
        try:
            while True:
                events, ended = self._read(after)
                for event in events:
                    after = event.seq
                    yield event
                if self._over(events, ended):
                    return
                if events:
                    backoff = 0.01
                    continue  # a full page, or new events: read on before waiting
                if notices is None and conf.runnerq_settings().listen:
                    notices = result_notices.for_alias(self.alias)
                    waits = self._register(notices)
                    continue  # read again once listening: a write before it announced itself to nobody
                wait = waits[0] if waits and not any(w.lost for w in waits) else None
                if wait is not None:
                    _release_connection(self.alias, poll)
                    wait.event.wait(poll)
                    wait.event.clear()
                else:
                    backoff = min(backoff * 2, poll)
                    _release_connection(self.alias, backoff)
                    time.sleep(backoff)
        finally:
            if notices is not None:
                for wait in waits:
                    notices.unregister(wait)

    def _register(self, notices: result_notices.ResultNotices) -> list[result_notices.Wait]:
        """Waits on the progress channel and the result channel: a notification on either that
        names the activity wakes both (they are waits for the same id)."""
        waits = []
        for channel in (stored.channel(self.handle.queue), result_channel(self.handle.queue)):
            wait = notices.register(channel, str(self.handle.id))
            if wait is None:
                break
            waits.append(wait)
        return waits

    # async ------------------------------------------------------------------------------------------

    async def __aiter__(self) -> AsyncIterator[PublishedEvent]:
        loop = asyncio.get_running_loop()
        read = sync_to_async(self._read_and_release, thread_sensitive=False)
        after = self.after
        notices: result_notices.ResultNotices | None = None
        waits: list[result_notices.Wait] = []
        poll = conf.runnerq_settings().poll_interval_seconds
        backoff = 0.01
        try:
            while True:
                events, ended = await read(after)
                for event in events:
                    after = event.seq
                    yield event
                if self._over(events, ended):
                    return
                if events:
                    backoff = 0.01
                    continue
                if notices is None and conf.runnerq_settings().listen:
                    notices = result_notices.for_alias(self.alias)
                    waits = [
                        notices.register_async(channel, str(self.handle.id), loop)
                        for channel in (stored.channel(self.handle.queue), result_channel(self.handle.queue))
                    ]
                    continue  # read again: woken again once the channels are listened on
                wait = waits[0] if waits and not any(w.lost for w in waits) else None
                if wait is not None and wait.async_event is not None:
                    with contextlib.suppress(TimeoutError):
                        await asyncio.wait_for(wait.async_event.wait(), poll)
                    wait.async_event.clear()
                else:
                    backoff = min(backoff * 2, poll)
                    await asyncio.sleep(backoff)
        finally:
            if notices is not None:
                for wait in waits:
                    notices.unregister(wait, join=False)

    def _read_and_release(self, after: int) -> tuple[list[PublishedEvent], bool]:
        from django.db import connections

        try:
            return self._read(after)
        finally:
            connections[self.alias].close()  # the executor's threads are everyone's


def _release_connection(alias: str, pause: float) -> None:
    """Close this thread's connection of ``alias`` before a pause of ``pause`` seconds (not
    inside a transaction), as a result wait does (``client._release_connection``)."""
    from django.db import connections

    conn = connections[alias]
    if (
        pause >= _RELEASE_FOR_PAUSES_FROM
        and conn.connection is not None
        and not conn.in_atomic_block
        and conn.get_autocommit()
    ):
        conn.close()


def _events(handle: ActivityHandle[Any], after: int | None, follow: bool) -> EventStream:
    return EventStream(handle, after, follow)


install_progress_functions(ProgressFunctions(get_progress, _events))
