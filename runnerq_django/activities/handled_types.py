"""Types nobody handles. Enqueueing a type no handler of this process registers: allowed (a Go or
TypeScript worker, or another Python process, may handle it), but a typo such as
``enqueue("shop.gret")`` would leave an activity pending forever without a word. So the first
enqueue of such a type in a process logs a warning naming the closest registered type;
``RUNNERQ['REQUIRE_REGISTERED_TYPES']`` makes it an ``InvalidArgument`` instead, and nothing is
written. And work already due that no live worker handles (:func:`unhandled_due`), which the
worker logs and ``runnerq_status`` marks.

Internal: not part of the public API.
"""

from __future__ import annotations

import difflib
import logging
import threading

from runnerq_django import conf
from runnerq_django.activities.registry import registry
from runnerq_django.logs import log_event
from runnerq_django.storage.validation import invalid

logger = logging.getLogger("runnerq_django.client")

_warned: set[str] = set()
_lock = threading.Lock()


# How many (queue, type) pairs of runnable work due_types looks at.
TYPES_LIMIT = 200


def due_types(
    alias: str, queues: list[str], alive_seconds: float, cap: int
) -> dict[str, dict[str, tuple[int, bool]]]:
    """Per queue of ``queues``, each type with work due now: how much (counted up to ``cap``)
    and whether a live worker on that queue (a pool row seen in the last ``alive_seconds``, of
    any SDK) handles the type."""
    from runnerq_django.storage import reads

    return reads.due_by_type(alias, queues, alive_seconds, cap, TYPES_LIMIT)


def unhandled_due(alias: str, queues: list[str], alive_seconds: float, cap: int) -> dict[str, dict[str, int]]:
    """Per queue of ``queues``, the types with work due now that no live worker handles, and how
    much (counted up to ``cap``): work that waits, without an error anywhere, until such a
    worker starts."""
    found = {
        queue: {kind: due for kind, (due, handled) in types.items() if not handled}
        for queue, types in due_types(alias, queues, alive_seconds, cap).items()
    }
    return {queue: types for queue, types in found.items() if types}


def check(activity_type: str) -> None:
    if registry.handles(activity_type):
        return
    required = conf.runnerq_settings().require_registered_types
    if activity_type in _warned and not required:
        return
    close = difflib.get_close_matches(activity_type, registry.handled_names(), n=1)
    hint = f"; did you mean {close[0]!r}?" if close else ""
    if required:
        raise invalid(
            "activity",
            f"no handler in this process registers {activity_type!r}{hint} "
            "(RUNNERQ['REQUIRE_REGISTERED_TYPES'] is on)",
        )
    with _lock:
        if activity_type in _warned:
            return
        _warned.add(activity_type)
    log_event(
        logger,
        logging.WARNING,
        "runnerq.enqueue.unregistered_type",
        "Enqueued %(activity_type)r, a type no handler in this process registers"
        + ("; did you mean %(closest)r?" if close else ".")
        + " It runs only if a worker that handles it (another process, Go or TypeScript) serves its"
        " queue. Logged once per type; RUNNERQ['REQUIRE_REGISTERED_TYPES'] refuses such types.",
        activity_type=activity_type,
        closest=close[0] if close else None,
    )
