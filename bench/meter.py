"""What one measured activity costs: client/worker CPU, Postgres CPU, WAL, transactions,
statements and round trips, read before and after it.

- Client/worker CPU: ``utime + stime`` in ``/proc/<pid>/stat`` of the given processes and all
  their descendants (a worker supervisor and its children).
- Postgres CPU: the same for the server's backends connected to the scratch database (found in
  ``pg_stat_activity``; readable because the server runs on this machine), except the
  benchmark's own sessions. Backends are sampled while the activity runs (``poll``), so one that
  connects and exits in between is still counted. The server's background processes
  (walwriter, checkpointer, autovacuum) are not counted, for neither side.
- WAL: ``bench.storage.WalMeter`` (this database's records in ``pg_waldump`` where the WAL
  directory is readable, so other databases on a shared server don't count).
- Transactions: ``xact_commit + xact_rollback`` of ``pg_stat_database`` for the scratch database,
  read once the measured sessions closed (so a worker's shutdown counts too).
- Statements and round trips: ``bench.counting`` (psycopg-side) in the measured processes.
"""

from __future__ import annotations

import os
import resource
import time
from dataclasses import dataclass
from pathlib import Path

from bench import counting
from bench.storage import WalMeter

TICK_MS = 1000 / os.sysconf("SC_CLK_TCK")


def process_cpu_ms(pid: int) -> float | None:
    try:
        fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    except OSError:
        return None
    return (int(fields[11]) + int(fields[12])) * TICK_MS  # utime, stime (fields 14 and 15)


def descendants(pid: int) -> set[int]:
    """``pid`` and every process below it."""
    parents: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                ppid = int((entry / "stat").read_text().rsplit(")", 1)[1].split()[1])
            except (OSError, IndexError, ValueError):
                continue
            parents.setdefault(ppid, []).append(int(entry.name))
    found, todo = set(), [pid]
    while todo:
        current = todo.pop()
        found.add(current)
        todo.extend(parents.get(current, []))
    return found


@dataclass
class Cost:
    items: int
    client_cpu_ms: float
    pg_cpu_ms: float
    wal_bytes: int
    transactions: int
    statements: int
    round_trips: int

    def per_item(self) -> dict[str, float]:
        n = max(1, self.items)
        return {
            "client_cpu_ms": self.client_cpu_ms / n,
            "pg_cpu_ms": self.pg_cpu_ms / n,
            "wal_bytes": self.wal_bytes / n,
            "transactions": self.transactions / n,
            "statements": self.statements / n,
            "round_trips": self.round_trips / n,
        }


class _CountingCursor:
    """A cursor that counts its statements (the meter's own transactions)."""

    def __init__(self, cursor):
        self.cursor, self.executed = cursor, 0

    def execute(self, *args):
        self.executed += 1
        return self.cursor.execute(*args)

    def fetchone(self):
        return self.cursor.fetchone()

    def fetchall(self):
        return self.cursor.fetchall()


class Meter:
    """Costs of one activity of the benchmark, between ``start`` and ``stop``."""

    def __init__(self, url: str, counts_dir: str):
        import psycopg

        self.conn = psycopg.connect(url, autocommit=True)
        self.cursor = _CountingCursor(self.conn.cursor())
        self.counts_dir = counts_dir
        self.cursor.execute(
            "SELECT pg_backend_pid(), current_database(), current_setting('server_version_num')::int"
        )
        self.own, self.database, version = self.cursor.fetchone()
        self.wal = WalMeter(self.cursor, version // 10000)

    def _backends(self) -> dict[int, float]:
        self.cursor.execute("SELECT pid FROM pg_stat_activity WHERE datname = %s", [self.database])
        readings = {pid: process_cpu_ms(pid) for (pid,) in self.cursor.fetchall() if pid not in self.exclude}
        return {pid: ms for pid, ms in readings.items() if ms is not None}

    def _transactions(self) -> int:
        """The database's transactions so far, less the meter's own: each of its statements is one
        (autocommit), and forcing a flush first makes the server report all of them but the read."""
        self.cursor.execute("SELECT pg_stat_force_next_flush()")
        own = self.cursor.executed
        self.cursor.execute(
            "SELECT xact_commit + xact_rollback FROM pg_stat_database WHERE datname = %s", [self.database]
        )
        return self.cursor.fetchone()[0] - own

    def _client(self) -> tuple[float, dict[str, int]]:
        if self.roots is None:
            usage = resource.getrusage(resource.RUSAGE_SELF)
            return (usage.ru_utime + usage.ru_stime) * 1000, dict(counting.counts)
        pids = set().union(*(descendants(pid) for pid in self.roots))
        self.client_pids |= pids
        cpu = sum(ms for ms in map(process_cpu_ms, pids) if ms is not None)
        return cpu, counting.read(self.counts_dir, self.client_pids)

    def start(self, roots: list[int] | None = None, exclude: set[int] = frozenset()) -> None:
        """``roots``: the measured client processes (``None``: this one); ``exclude``: backends
        of the benchmark's own sessions that don't belong to the measured activity."""
        self.roots, self.client_pids, self.exclude = roots, set(), {self.own, *exclude}
        self.began_backends = self._backends()
        self.last_backends = dict(self.began_backends)
        self.began_transactions = self._transactions()
        self.wal.start()
        self.began_client = self._client()  # last: the meter's own statements count in this process

    def poll(self) -> None:
        """Note the backends that came since ``start`` (and the CPU of those that may leave)."""
        self.last_backends.update(self._backends())

    def stop(self, items: int) -> Cost:
        cpu, calls = self._client()
        self.poll()
        pg_cpu = sum(ms - self.began_backends.get(pid, 0.0) for pid, ms in self.last_backends.items())
        wal = self.wal.stop()
        return Cost(
            items,
            cpu - self.began_client[0],
            pg_cpu,
            wal.bytes,
            0,
            calls["statements"] - self.began_client[1]["statements"],
            calls["round_trips"] - self.began_client[1]["round_trips"],
        )

    def count_transactions(self, cost: Cost, not_measured: int = 0) -> Cost:
        """Fill in ``cost.transactions``, once the measured sessions have closed: an idle backend
        may keep its counts up to 10 s before reporting them, a closing one reports them.
        ``not_measured``: transactions of the benchmark's other sessions (progress polls)."""
        time.sleep(0.5)
        cost.transactions = self._transactions() - self.began_transactions - not_measured
        return cost

    def close(self) -> None:
        self.conn.close()
