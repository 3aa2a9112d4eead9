"""Owner fencing: a Postgres lease row per namespace, with release precedence and a fencing token.

Why this design (option D of the brief) rather than a cache lock:

- The lease must not live in the thing it protects. A lease key in Redis is evictable (any
  ``allkeys-*`` policy, a ``FLUSHALL``, a restart), and an evicted owner key must never mean
  "everyone may write". The row lives in Postgres, next to the queue.
- Expiry is judged by Postgres ``now()``, one clock for the fleet; local skew cannot make two
  processes believe they own the namespace.
- The token is checked **atomically with the enqueue**: the enqueue transaction
  (``storage.periodic.enqueue_occurrences``) takes the lease row ``FOR SHARE`` where
  ``owner = me AND token = my_token``, so a takeover (which updates the
  row) either happens before the check (the old owner's enqueue is refused) or waits until the
  old owner's enqueue has committed. A cache lock cannot be part of a Postgres transaction.
- Release precedence hands ownership to the newest deploy during a rolling deploy: a process of a
  higher ``RELEASE`` takes the lease at once, older ones demote themselves at their next renewal
  and serve a read-only view (no record flapping between two versions' declarations).
- Tokens come from a sequence, so they never repeat, even if the row is deleted.

An advisory lock (option C) is durable too but has no token to fence the enqueue with and no
notion of which release should win. With ``FENCING = False`` every scheduler enqueues (Postgres
dedupes each occurrence) and writes records (the values converge).
"""

from __future__ import annotations

import logging
import time

from runnerq_django import metrics
from runnerq_django.logs import log_event
from runnerq_django.storage import periodic as store
from runnerq_django.storage.periodic import Fence, LeaseState

logger = logging.getLogger("runnerq_django.scheduler")

# The lease moved: this process is no longer the owner (its fencing token is stale).
Fenced = store.LeaseLost


def read_lease(namespace: str, using: str) -> LeaseState:
    """The lease row as read (read-only: status pages and non-owners)."""
    state: LeaseState = store.read_lease(namespace, using=using)
    return state


class Lease:
    """This process's side of the lease. ``ensure()`` once per tick; ``fence`` goes into each
    enqueue's storage operation (checked in its transaction); ``release()`` on shutdown."""

    def __init__(self, namespace: str, node: str, release: int, *, seconds: float, using: str):
        self.namespace = namespace
        self.node = node
        self.release_number = release
        self.seconds = float(seconds)
        self.using = using
        self.token: int | None = None
        self.is_owner = False
        self._last_attempt: float | None = None
        self._announced: bool | None = None

    @property
    def fence(self) -> Fence:
        """Our credentials for a fenced write; :class:`Fenced` when we hold no token."""
        if self.token is None:
            raise Fenced(f"{self.node} does not own namespace {self.namespace!r}")
        return Fence(self.namespace, self.node, self.token)

    def ensure(self, *, force: bool = False) -> bool:
        """Acquire or renew (throttled to a third of the lease), and return whether we own it.
        A non-owner tries again only every third of the lease. Database errors propagate."""
        now = time.monotonic()
        if not force and self._last_attempt is not None and now - self._last_attempt < self.seconds / 3:
            return self.is_owner
        token = store.acquire_lease(
            self.namespace, self.node, self.release_number, self.seconds, using=self.using
        )
        self._last_attempt = now
        self._set(token)
        return self.is_owner

    def take_over(self) -> int:
        """Force ownership (operator action, e.g. a rollback to a lower release): new token."""
        token: int = store.force_lease(
            self.namespace, self.node, self.release_number, self.seconds, using=self.using
        )
        self._last_attempt = time.monotonic()
        self._set(token)
        return token

    def _set(self, token: int | None) -> None:
        self.token = token
        self.is_owner = token is not None
        metrics.gauge(
            "periodic_is_owner", 1 if self.is_owner else 0, namespace=self.namespace, node=self.node
        )
        if self._announced != self.is_owner:  # one line per transition, never one per tick
            event = "periodic.lease_acquired" if self.is_owner else "periodic.lease_not_owner"
            log_event(
                logger,
                logging.INFO,
                event,
                "This scheduler (node %(node)s) now owns the periodic jobs of %(namespace)r."
                if self.is_owner
                else "This scheduler (node %(node)s) does not own the periodic jobs of %(namespace)r: it"
                " stands by.",
                namespace=self.namespace,
                node=self.node,
                release=self.release_number,
                token=token,
            )
            self._announced = self.is_owner

    def demote(self) -> None:
        """We learned (a failed fence check) that someone else owns the namespace."""
        self._last_attempt = time.monotonic()
        self._set(None)

    def still_owner(self) -> bool:
        """Whether our token still owns the lease (before a record write)."""
        if self.token is None:
            return False
        held: bool = store.holds_lease(self.fence, using=self.using)
        return held

    def release(self) -> None:
        if self.token is None:
            return
        store.release_lease(self.fence, using=self.using)
        log_event(
            logger,
            logging.INFO,
            "periodic.lease_released",
            "This scheduler (node %(node)s) gave up the periodic jobs of %(namespace)r.",
            namespace=self.namespace,
            node=self.node,
        )
        self.token = None
        self.is_owner = False
        self._announced = False
