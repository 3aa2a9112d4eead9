"""One process of the concurrent unique-while-active test: set Django up, wait for the common
start instant (argv[2], epoch seconds), enqueue ``flow.work`` with unique key argv[1], and print
``<id> <created>``."""

from __future__ import annotations

import os
import sys
import time

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")


def main() -> None:
    import django

    django.setup()
    from tests.flow import handlers

    key, start_at = sys.argv[1], float(sys.argv[2])
    # Warm the connection first, so that the enqueues race each other, not their connects.
    from django.db import connection

    connection.ensure_connection()
    time.sleep(max(0.0, start_at - time.time()))
    handle = handlers.work.enqueue({"seconds": 0}, queue=sys.argv[3], unique_key=key)
    print(handle.id, handle.created)


if __name__ == "__main__":
    main()
