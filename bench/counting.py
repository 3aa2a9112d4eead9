"""Statements and round trips counted inside a process, at psycopg's level.

The shared server has no ``pg_stat_statements`` (it needs ``shared_preload_libraries``), so the
benchmark counts on the client side, below Django, so every path is seen (Django cursors and the
storage layer's own psycopg cursors alike):

- a **round trip** is one ``Connection.wait()`` on a query (waiting for notifications is not
  one), plus the ``BEGIN`` psycopg sends ahead of the first statement of a transaction; in
  pipeline mode, one Sync (or fetch) that waits for the results of what was sent before it;
- a **statement** is one result the server sent back (each statement of a multi-statement
  query has its own), plus each ``BEGIN``, ``COMMIT`` and ``ROLLBACK``.

Not counted: the extra round trip of a statement's first preparation on a connection.

A process started with ``RQ_BENCH_COUNTS=<dir>`` in its environment writes its counts to
``<dir>/<pid>.json`` every 0.2 s (workers are stopped by a signal, so an exit hook could miss them).
"""

from __future__ import annotations

import json
import os
import threading
import time
from pathlib import Path

counts = {"statements": 0, "round_trips": 0}
_installed = False
_NOT_A_ROUND_TRIP = (
    "notifies",
    "_set_autocommit_gen",
    "_set_isolation_level_gen",
    "_set_read_only_gen",
    "_set_deferrable_gen",
)
_TRANSACTION_END = ("_commit_gen", "_rollback_gen")
_PIPELINE_ROUND_TRIPS = ("BasePipeline._sync_gen", "BasePipeline._exit_gen", "BasePipeline._fetch_gen")
_PIPELINE_TRANSACTION_CONTROL = ("BaseTransaction._enter_gen", "BaseTransaction._exit_gen")


def install() -> None:
    """Wrap psycopg's connection wait, result handling and transaction start (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    from psycopg import _connection_base, _cursor_base, connection, pq

    wait = connection.Connection.wait

    def counting_wait(self, gen, *args, **kwargs):
        name = getattr(gen, "__name__", "")
        if self._pipeline is not None:
            # Pipeline mode: a statement's wait only sends it; the round trip is the Sync (or a
            # fetch) that waits for the results. The BEGIN and COMMIT of a transaction block
            # in the pipeline travel with the statements.
            qualname = getattr(gen, "__qualname__", "")
            if qualname in _PIPELINE_ROUND_TRIPS:
                counts["round_trips"] += 1
            elif qualname in _PIPELINE_TRANSACTION_CONTROL:
                counts["statements"] += 1
            return wait(self, gen, *args, **kwargs)
        if name not in _NOT_A_ROUND_TRIP:
            counts["round_trips"] += 1
        if name == "execute":  # libpq-level, no cursor (storage.db.fetch_value_in_autocommit): one statement
            counts["statements"] += 1
        if name in _TRANSACTION_END:
            counts["statements"] += 1
        return wait(self, gen, *args, **kwargs)

    set_results = _cursor_base.BaseCursor._set_results

    def counting_set_results(self, results):
        counts["statements"] += len(results)
        return set_results(self, results)

    start_query = _connection_base.BaseConnection._start_query

    def counting_start_query(self):
        if (
            not self._autocommit
            and not self._pipeline
            and self.pgconn.transaction_status == pq.TransactionStatus.IDLE
        ):
            counts["round_trips"] += 1  # psycopg sends BEGIN first, and waits for it
            counts["statements"] += 1
        return (yield from start_query(self))

    connection.Connection.wait = counting_wait
    _cursor_base.BaseCursor._set_results = counting_set_results
    _connection_base.BaseConnection._start_query = counting_start_query


def install_from_env() -> None:
    """In a process the benchmark started: count, and write the counts where it reads them."""
    folder = os.environ.get("RQ_BENCH_COUNTS")
    if not folder:
        return
    install()
    path = Path(folder) / f"{os.getpid()}.json"

    def dump() -> None:
        while True:
            path.with_suffix(".tmp").write_text(json.dumps(counts))
            path.with_suffix(".tmp").replace(path)
            time.sleep(0.2)

    threading.Thread(target=dump, name="rq-bench-counts", daemon=True).start()


def read(folder: str | Path, pids: set[int]) -> dict[str, int]:
    """The summed counts the processes ``pids`` last wrote to ``folder`` (missing ones count 0)."""
    total = {"statements": 0, "round_trips": 0}
    for pid in pids:
        try:
            written = json.loads((Path(folder) / f"{pid}.json").read_text())
        except (OSError, ValueError):
            continue
        for key in total:
            total[key] += written[key]
    return total
