"""Benchmark: what the storage layer costs Postgres -- WAL bytes and disk bytes per activity.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/storage.py [--activities 5000]
    python bench/storage.py          # the embedded PostgreSQL of the test project

Creates a scratch database on the server (dropped afterwards), migrates it, and measures with
the storage operations themselves (``runnerq_django.storage``), one Django connection, autocommit:

1. **Life of an activity**: submit, claim and complete ``--activities`` activities, once with
   batches (submit_many of 500, claim of 100, complete_many of 100: what the client's bulk
   enqueue and the worker do) and once one by one (one transaction per operation). WAL bytes
   per activity per step and in total.
2. **Lease renewals**: 1,000 claimed activities renewed 10 times each, with ``renew_many`` in
   batches of 100 (the worker's heartbeat) and with ``renew`` one by one. WAL bytes per renewal
   and the share of HOT updates (``pg_stat_user_tables``).
3. **Disk**: ``pg_total_relation_size`` of every RunnerQ table and index after the batched
   life cycle, per completed activity (the empty tables' size subtracted), as the run leaves
   them and after ``VACUUM FULL`` (only live rows).

WAL is counted per backend where Postgres can (``pg_stat_get_backend_wal``, PostgreSQL 18), so
other databases on the server don't disturb the figures; elsewhere it is the server-wide
``pg_current_wal_lsn()`` difference, measured ``--runs`` times and the smallest kept (other
sessions' WAL can only add). Full-page images are counted apart: a checkpoint during a step
makes it write whole pages, which depends on timing, not on the statements.

Not a test: nothing is asserted. The Go SDK's figures (PostgreSQL 17) are 2,545 B per activity
(submit + claim + complete), 182 B per renewal and 1,354 B on disk per activity.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from dataclasses import dataclass
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO))

TABLES = (
    "runnerq_activities",
    "runnerq_inputs",
    "runnerq_results",
    "runnerq_events",
    "runnerq_idempotency",
    "runnerq_dependencies",
)
PAYLOAD = {"order_id": 0, "amount_cents": 4200, "currency": "EUR"}
RESULT = {"charged": True, "receipt": "rcpt_0000000000"}


@dataclass
class Wal:
    bytes: int
    fpi: int  # full-page images
    fpi_bytes: int | None = None  # their share of ``bytes``, when known (pg_waldump)

    def __add__(self, other: Wal) -> Wal:
        known = (
            None if self.fpi_bytes is None or other.fpi_bytes is None else self.fpi_bytes + other.fpi_bytes
        )
        return Wal(self.bytes + other.bytes, self.fpi + other.fpi, known)


class WalMeter:
    """WAL written between ``start()`` and ``stop()`` by this benchmark's own database.

    Three ways, the most exact available: PostgreSQL 18's per-backend statistics
    (``pg_stat_get_backend_wal``); on a local server whose WAL directory we can read, the records
    ``pg_waldump`` shows touching this database's relations plus the commit records of their
    transactions (exact however busy the server is); otherwise the server-wide
    ``pg_current_wal_insert_lsn()`` difference, which other sessions can only inflate.
    """

    def __init__(self, cursor, major: int):
        self.cursor = cursor
        self.major = major
        self.waldump = None
        if major >= 18:
            self.method = "per backend (pg_stat_get_backend_wal)"
        elif cursor is not None and (found := _local_waldump(cursor, major)):
            self.waldump, self.wal_dir, self.database_oid = found
            # A temporary replication slot keeps the server from recycling the WAL segments we
            # still have to read (a busy server checkpoints often); it goes with this session.
            cursor.execute(
                "SELECT pg_create_physical_replication_slot(%s, true, true)",
                [f"rq_bench_{os.getpid()}_{self.database_oid}"],
            )
            self.method = "this database's records in pg_waldump (exact on a shared server)"
        else:
            self.method = "server-wide (pg_current_wal_insert_lsn difference; smallest of the runs)"

    def _lsn(self) -> str:
        self.cursor.execute("SELECT pg_current_wal_insert_lsn()")
        return self.cursor.fetchone()[0]

    def _read(self) -> tuple[int, int]:
        if self.major >= 18:
            self.cursor.execute("SELECT pg_stat_force_next_flush()")
            self.cursor.execute("SELECT pg_stat_clear_snapshot()")
            self.cursor.execute("SELECT wal_bytes, wal_fpi FROM pg_stat_get_backend_wal(pg_backend_pid())")
            wal_bytes, fpi = self.cursor.fetchone()
            return int(wal_bytes), int(fpi)
        self.cursor.execute(
            "SELECT pg_wal_lsn_diff(pg_current_wal_insert_lsn(), '0/0'), (SELECT wal_fpi FROM pg_stat_wal)"
        )
        lsn, fpi = self.cursor.fetchone()
        return int(lsn), int(fpi)

    def start(self) -> None:
        if self.waldump:
            self.began_lsn = self._lsn()
        else:
            self.began = self._read()

    def stop(self) -> Wal:
        if self.waldump:
            # Our commits flushed our records (synchronous_commit), so the flush position covers them.
            self.cursor.execute("SELECT pg_current_wal_flush_lsn()")
            return _attributed_wal(
                self.waldump, self.wal_dir, self.database_oid, self.began_lsn, self.cursor.fetchone()[0]
            )
        ended = self._read()
        return Wal(ended[0] - self.began[0], ended[1] - self.began[1])


def _local_waldump(cursor, major: int):
    """``(pg_waldump, pg_wal directory, database oid)`` when the server's WAL is readable here."""
    import shutil

    candidates = [Path(f"/usr/lib/postgresql/{major}/bin/pg_waldump"), shutil.which("pg_waldump")]
    binary = next((str(c) for c in candidates if c and Path(c).exists()), None)
    try:
        cursor.execute(
            "SELECT current_setting('data_directory'), (SELECT oid FROM pg_database "
            "WHERE datname = current_database())"
        )
        data_dir, oid = cursor.fetchone()
    except Exception:
        return None
    wal_dir = Path(data_dir) / "pg_wal"
    if not binary or not os.access(wal_dir, os.R_OK | os.X_OK):
        return None
    import subprocess

    version = subprocess.run([binary, "--version"], capture_output=True, text=True).stdout
    if f" {major}." not in version:
        return None
    return binary, wal_dir, int(oid)


def _attributed_wal(binary: str, wal_dir: Path, database_oid: int, start: str, end: str) -> Wal:
    """Sum the records of ``pg_waldump`` that modify this database's relations, plus the commit
    and abort records of the transactions that wrote them."""
    import re
    import subprocess

    dump = subprocess.run(
        [binary, "-p", str(wal_dir), "-s", start, "-e", end], capture_output=True, text=True
    )
    if dump.returncode != 0 and "error" in dump.stderr:
        raise SystemExit(f"pg_waldump {start}..{end} failed: {dump.stderr.strip()}")
    # "len (rec/tot): 54/ 250": rec is the record without its full-page images, tot with them.
    record = re.compile(r"len \(rec/tot\):\s*(\d+)/\s*(\d+), tx:\s*(\d+),.*?desc: (.*)$")
    ours = re.compile(rf"rel \d+/{database_oid}/")
    total, images, fpi, xids, transaction_records = 0, 0, 0, set(), []
    for line in dump.stdout.splitlines():
        match = record.search(line)
        if not match:
            continue
        rec, length, xid, desc = int(match.group(1)), int(match.group(2)), int(match.group(3)), match.group(4)
        if line.startswith("rmgr: Transaction"):
            transaction_records.append((xid, length))
        elif ours.search(desc):
            total += length
            images += length - rec
            fpi += desc.count("FPW")
            if xid:
                xids.add(xid)
    total += sum(length for xid, length in transaction_records if xid in xids)
    return Wal(total, fpi, images)


def life_cycle(queue: str, n: int, meter: WalMeter, *, batched: bool) -> dict[str, Wal]:
    from runnerq_django import storage
    from runnerq_django.storage.types import NewActivity

    submit_batch, claim_batch, complete_batch = (500, 100, 100) if batched else (1, 1, 1)
    news = [
        NewActivity("Charge", payload={**PAYLOAD, "order_id": i}, max_retries=3, timeout_seconds=60)
        for i in range(n)
    ]
    costs = {}
    meter.start()
    for start in range(0, n, submit_batch):
        chunk = news[start : start + submit_batch]
        if batched:
            storage.submit_many(queue, chunk)
        else:
            storage.submit(queue, chunk[0])
    costs["submit"] = meter.stop()
    claims = []
    meter.start()
    while batch := storage.claim(
        queue, types=["Charge"], limit=claim_batch, lease_ms=60000, worker_id="bench"
    ):
        claims.extend(batch)
    costs["claim"] = meter.stop()
    assert len(claims) == n, f"claimed {len(claims)} of {n}"
    meter.start()
    for start in range(0, n, complete_batch):
        chunk = claims[start : start + complete_batch]
        if batched:
            assert storage.complete_many(queue, [(c.claim, RESULT) for c in chunk]) == []
        else:
            storage.complete(queue, chunk[0].claim, RESULT)
    costs["complete"] = meter.stop()
    return costs


def renewals(
    queue: str, meter: WalMeter, cursor, *, batched: bool, activities: int = 1000, rounds: int = 10
) -> tuple[Wal, int, float]:
    from runnerq_django import storage
    from runnerq_django.storage.types import NewActivity

    for start in range(0, activities, 500):
        storage.submit_many(
            queue, [NewActivity("Renew", payload=PAYLOAD) for _ in range(min(500, activities - start))]
        )
    claims = []
    while batch := storage.claim(queue, types=["Renew"], limit=100, lease_ms=60000, worker_id="bench"):
        claims.extend(c.claim for c in batch)

    def hot_counters():
        cursor.execute("SELECT pg_stat_force_next_flush()")
        cursor.execute("SELECT pg_stat_clear_snapshot()")
        cursor.execute(
            "SELECT n_tup_upd, n_tup_hot_upd FROM pg_stat_user_tables WHERE relname = 'runnerq_activities'"
        )
        return cursor.fetchone()

    updates_before, hot_before = hot_counters()
    meter.start()
    for round_ in range(rounds):
        lease = 60000 + (round_ + 1) * 1000  # each renewal moves the deadline
        if batched:
            for start in range(0, len(claims), 100):
                storage.renew_many(queue, claims[start : start + 100], lease)
        else:
            for claim in claims:
                storage.renew(queue, claim, lease)
    wal = meter.stop()
    done = len(claims) * rounds
    deadline = time.monotonic() + 10
    while True:
        updates, hot = hot_counters()
        if updates - updates_before >= done or time.monotonic() > deadline:
            break
        time.sleep(0.1)
    storage.complete_many(queue, [(c, None) for c in claims[:1000]])
    return wal, done, (hot - hot_before) / max(1, updates - updates_before)


def disk_bytes(cursor) -> int:
    cursor.execute(
        "SELECT sum(pg_total_relation_size(c.oid)) FROM pg_class c "
        "WHERE c.relkind = 'r' AND c.relname = ANY(%s)",
        [list(TABLES)],
    )
    return int(cursor.fetchone()[0])


def per(value: float, n: int) -> str:
    return f"{value / n:,.0f} B"


def images(wal: Wal, n: int) -> str:
    """Full-page images: the first change of a page after a checkpoint logs the whole page (the
    empty indexes' first pages, or every page when a checkpoint falls inside the step): timing,
    not statements."""
    if not wal.fpi:
        return "no full-page images"
    if wal.fpi_bytes is None:
        return f"{wal.fpi} full-page images included"
    return (
        f"{wal.fpi} full-page images, {per(wal.fpi_bytes, n)} of it; "
        f"{per(wal.bytes - wal.fpi_bytes, n)} without them"
    )


def fresh_database(server: str, prefix: str = "rq_bench_storage"):
    """A scratch database, migrated, then checkpointed: every page a workload writes is new, so a
    full-page image means a checkpoint fell inside the measured step (reported), not an artefact
    of earlier runs."""
    from contextlib import contextmanager

    from tests.helpers import scratch_database

    @contextmanager
    def database():
        from django.core.management import call_command
        from django.db import connection

        with scratch_database(server, prefix=prefix) as url:
            connection.close()
            connection.settings_dict.update(_settings_for(url))
            call_command("migrate", interactive=False, verbosity=0)
            cursor = connection.cursor()
            cursor.execute("CHECKPOINT")
            try:
                yield cursor
            finally:
                connection.close()

    return database()


def _settings_for(url: str) -> dict:
    from testproject.database import django_database

    settings = django_database(url)
    return {key: settings[key] for key in ("NAME", "USER", "PASSWORD", "HOST", "PORT", "OPTIONS")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--activities", type=int, default=5000)
    parser.add_argument("--runs", type=int, default=3, help="repetitions when WAL is measured server-wide")
    args = parser.parse_args()
    n = args.activities

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ["RUNNERQ_EXAMPLES"] = "0"
    os.environ.setdefault("RUNNERQ_LOG_LEVEL", "WARNING")  # no migration log lines between the figures
    from testproject.database import database_url

    server = database_url()
    import django

    django.setup()
    from django.db import connection

    with fresh_database(server) as cursor:
        cursor.execute(
            "SELECT current_setting('server_version'), current_setting('server_version_num')::int, "
            "current_setting('wal_level'), current_setting('full_page_writes'), "
            "current_setting('checkpoint_timeout'), current_setting('max_wal_size')"
        )
        version, version_num, wal_level, fpw, checkpoint_timeout, max_wal_size = cursor.fetchone()
        host = connection.settings_dict["HOST"] or "local socket"

    print("runnerq-django storage benchmark: WAL and disk per activity")
    print(
        f"  machine      {os.cpu_count()} CPUs, {platform.system()} {platform.release()}, "
        f"Python {platform.python_version()}"
    )
    print(
        f"  postgres     {version} at {host}; wal_level {wal_level}, full_page_writes {fpw}, "
        f"checkpoint_timeout {checkpoint_timeout}, max_wal_size {max_wal_size}"
    )
    print("  schema       spec 0.8 lean schema: runnerq_activities fillfactor 85, 8 indexes + primary key")
    print(
        f"  workload     {n} activities, payload {len(str(PAYLOAD))} B of JSON, result {len(str(RESULT))} B; "
        f"one connection, autocommit; each workload in a fresh database, checkpointed first"
    )
    with fresh_database(server) as cursor:
        method = WalMeter(cursor, version_num // 10000)
    exact = method.major >= 18 or method.waldump is not None
    runs = 1 if exact else args.runs
    print(f"  WAL counted  {method.method}")

    print()
    print(
        "  1. submit + claim + complete, WAL bytes per activity"
        + ("" if runs == 1 else f" (smallest of {runs} runs)")
    )
    disk = None
    for label, batched, batches in (
        ("batched", True, "submit_many 500, claim 100, complete_many 100"),
        ("one by one", False, "one transaction per operation"),
    ):
        measured = []
        for _run in range(runs):
            with fresh_database(server) as cursor:
                empty = disk_bytes(cursor)
                measured.append(
                    life_cycle("bench", n, WalMeter(cursor, version_num // 10000), batched=batched)
                )
                if batched and disk is None:
                    after_run = disk_bytes(cursor) - empty
                    cursor.execute("VACUUM FULL")
                    compact = disk_bytes(cursor) - empty
                    cursor.execute(
                        "SELECT c.relname, pg_total_relation_size(c.oid) FROM pg_class c "
                        "WHERE c.relkind = 'r' AND c.relname = ANY(%s) ORDER BY 2 DESC",
                        [list(TABLES)],
                    )
                    disk = (after_run, compact, cursor.fetchall())
        best = min(measured, key=lambda costs: sum(w.bytes for w in costs.values()))
        total = sum(best.values(), Wal(0, 0, 0))
        steps = ", ".join(f"{step} {per(w.bytes, n)}" for step, w in best.items())
        print(f"     {label:<11} ({batches}): {per(total.bytes, n)} = {steps}; {images(total, n)}")

    print("  2. lease renewals (1,000 claimed activities x 10 rounds), WAL bytes per renewal")
    for label, batched in (("renew_many", True), ("renew", False)):
        measured = []
        for _run in range(runs):
            with fresh_database(server) as cursor:
                measured.append(
                    renewals("bench", WalMeter(cursor, version_num // 10000), cursor, batched=batched)
                )
        wal, done, hot_share = min(measured, key=lambda m: m[0].bytes)
        how = "batches of 100, one transaction per renewal in one round trip" if batched else "one call each"
        print(
            f"     {label:<11} ({how}): {per(wal.bytes, done)} per renewal; HOT updates {hot_share:.1%}; "
            f"{images(wal, done)}"
        )

    after_run, compact, sizes = disk
    print(
        f"  3. disk per completed activity (all RunnerQ tables and their indexes, batched run): "
        f"{per(after_run, n)} as the run leaves them, {per(compact, n)} after VACUUM FULL"
    )
    print(
        "     after VACUUM FULL: "
        + ", ".join(f"{name[8:]} {size / n:,.0f} B" for name, size in sizes if size > 8192 * 4)
    )


if __name__ == "__main__":
    main()
