"""One process of the concurrent debounce test: set Django up, wait for the common start instant
(argv[2], epoch seconds), enqueue ``flow.work`` debounced by key argv[1] argv[4] times (payload
``{"key": "<pid>-<n>", "n": n}``) into queue argv[3], and print ``<id> <created>`` per enqueue."""

from __future__ import annotations

import os
import sys
import time
from datetime import timedelta

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")


def main() -> None:
    import django

    django.setup()
    from runnerq_django import Debounce
    from tests.flow import handlers

    key, start_at, queue, count = sys.argv[1], float(sys.argv[2]), sys.argv[3], int(sys.argv[4])
    # Warm the connection first, so that the enqueues race each other, not their connects.
    from django.db import connection

    connection.ensure_connection()
    time.sleep(max(0.0, start_at - time.time()))
    debounce = Debounce(key=key, wait=timedelta(minutes=10))
    for n in range(count):
        handle = handlers.work.enqueue({"key": f"{os.getpid()}-{n}", "n": n}, queue=queue, debounce=debounce)
        print(handle.id, handle.created, flush=True)


if __name__ == "__main__":
    main()
