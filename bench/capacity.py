"""Benchmark: a capacity model, measured. How far one database goes, and what a second adds.

    DATABASE_URL=postgres://postgres@127.0.0.1:5432/postgres python bench/capacity.py \
        [--activities 10000] [--single 1000] [--concurrency 16] [--second-server URL]

For each setup, in one run, on scratch databases (dropped afterwards), beside the raw-SQL floor
(``bench/floor.py``) measured the same way:

- **1, 2 and 4 worker processes against one database** (the server of ``DATABASE_URL``);
- **the same spread over two databases** (1 + 1 and 2 + 2 processes): one database on that
  server, one on a second server. Without ``--second-server`` the benchmark starts a second
  PostgreSQL cluster of the same major itself (``initdb`` and ``pg_ctl`` in a temporary folder,
  same machine, same disk, stopped afterwards). A worker process serves one database, set by its
  environment (``DATABASE_URL``), as a deployment with a worker fleet per database would.

and for each, over the setup's processes:

1. **Burn-down**: ``--activities`` no-ops, bulk-enqueued, split evenly over the databases, run by
   real ``manage.py runworker`` processes (``bench/throughput.py``'s starter and gate: the
   workers start behind a lock on the table, so their start-up is not timed). Rate:
   activities / (last completion - first start), over all databases.
2. **Enqueue**: as many producer processes as the setup has workers, each enqueuing
   ``--single`` activities one by one (``enqueue()``, one transaction each, as web requests do;
   the floor: a plain ``INSERT``), all released at once. Rate: all enqueues / (last one's end -
   first one's start).
3. **Per activity**: Postgres CPU (its backends serving the measured processes, from ``/proc``)
   and WAL (this database's records in ``pg_waldump``), ``bench/meter.py``, summed over the
   databases.
4. **Connections per worker process**: the most server backends the worker processes of a
   database held at once during the burn-down, divided by their number (matched by the clients'
   TCP ports, so over TCP only: a Unix-socket ``DATABASE_URL`` shows 0).

Every figure is printed with its setup; compare ratios, within one run. Not a test.
"""

from __future__ import annotations

import argparse
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
if str(REPO) not in sys.path:
    sys.path.insert(0, str(REPO))

from bench import throughput  # noqa: E402  (its handlers, its starter, its gate)
from bench.procs import stop_group  # noqa: E402

PG_BIN = Path("/usr/lib/postgresql")


# ---------------------------------------------------------------- a second server


class SecondServer:
    """A PostgreSQL cluster of the benchmark's own: ``initdb`` into a temporary folder, started
    on a free port (TCP on 127.0.0.1 and a socket in the folder), the same settings as a fresh
    Debian cluster but ``max_connections``; stopped and removed by ``stop()``."""

    def __init__(self, major: int):
        from tests.helpers import free_port

        self.bin = PG_BIN / str(major) / "bin"
        if not (self.bin / "initdb").exists():
            raise SystemExit(f"no {self.bin}/initdb: give --second-server URL")
        self.folder = Path(tempfile.mkdtemp(prefix="rq_capacity_"))
        self.port = free_port()
        self.as_user = ["runuser", "-u", "postgres", "--"] if os.geteuid() == 0 else []
        if self.as_user:
            shutil.chown(self.folder, "postgres")
        data = self.folder / "data"
        self._run("initdb", "-D", str(data), "-A", "trust", "-U", "postgres", "--no-sync")
        options = f"-p {self.port} -k {self.folder} -c listen_addresses=127.0.0.1 -c max_connections=200"
        self._run("pg_ctl", "-D", str(data), "-o", options, "-l", str(self.folder / "log"), "-w", "start")
        self.url = f"postgres://postgres@127.0.0.1:{self.port}/postgres"

    def _run(self, tool: str, *args: str) -> None:
        subprocess.run([*self.as_user, str(self.bin / tool), *args], check=True, capture_output=True)

    def stop(self) -> None:
        self._run("pg_ctl", "-D", str(self.folder / "data"), "-m", "fast", "-w", "stop")
        shutil.rmtree(self.folder, ignore_errors=True)


# ---------------------------------------------------------------- the processes


def _env(url: str, counts_dir: str) -> dict:
    return throughput._worker_env(url, counts_dir)


def _migrate(url: str, counts_dir: str) -> None:
    subprocess.run(
        [sys.executable, "manage.py", "migrate", "-v", "0"], cwd=REPO, env=_env(url, counts_dir), check=True
    )


def _fill(url: str, counts_dir: str, queue: str, n: int) -> None:
    """``n`` no-ops bulk-enqueued on ``queue`` (``throughput.ours_bulk``, in a process of its own)."""
    subprocess.run(
        [sys.executable, "-m", "bench.capacity", "fill", queue, str(n)],
        cwd=REPO,
        env=_env(url, counts_dir),
        check=True,
    )


def _producer(url: str, counts_dir: str, side: str, n: int) -> subprocess.Popen:
    """A process that enqueues ``n`` activities one by one once told to (a line on its stdin),
    prints ``{"began": t0, "ended": t1}`` and exits on the next line."""
    return subprocess.Popen(
        [sys.executable, "-m", "bench.capacity", "produce", side, str(n)],
        cwd=REPO,
        env=_env(url, counts_dir),
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )


def _ready(proc: subprocess.Popen) -> None:
    line = proc.stdout.readline()
    if line.strip() != "ready":
        raise SystemExit(f"a producer did not start: {line!r}")


def _child_fill(queue: str, n: int) -> None:
    import django

    django.setup()
    throughput.ours_bulk(n, queue, keyed=False)


def _child_produce(side: str, n: int) -> None:
    """Connect, warm up (one enqueue), say ready, wait for the go, enqueue ``n`` one by one."""
    url = os.environ["DATABASE_URL"]
    if side == "floor":
        from bench import floor

        conn = floor.connect(url)
        floor.enqueue_one_by_one(conn, 1)
        run = lambda: floor.enqueue_one_by_one(conn, n)  # noqa: E731
    else:
        import django

        django.setup()
        throughput.ours_single(1)
        run = lambda: throughput.ours_single(n)  # noqa: E731
    print("ready", flush=True)
    sys.stdin.readline()
    began = time.time()
    run()
    print(json.dumps({"began": began, "ended": time.time()}), flush=True)
    sys.stdin.readline()  # stay connected until the meter has read our backend's CPU


# ---------------------------------------------------------------- one setup


@dataclass
class Database:
    url: str
    label: str
    processes: int  # worker (and producer) processes on it in this setup


@dataclass
class Result:
    rate: float = 0.0
    pg_cpu_ms: float = 0.0  # per activity, all databases
    wal_bytes: float = 0.0  # per activity, all databases
    connections: list[float] = field(default_factory=list)  # per worker process, per database


def _meters(databases: list[Database], counts_dir: str):
    from bench.meter import Meter

    return [Meter(db.url, counts_dir) for db in databases]


def _costs(meters, costs, n: int, result: Result) -> Result:
    result.pg_cpu_ms = sum(c.pg_cpu_ms for c in costs) / n
    result.wal_bytes = sum(c.wal_bytes for c in costs) / n
    for meter in meters:
        meter.close()
    return result


def _backends_of(conn, pids: set[int]):
    """The backend pids of this database whose client process is in ``pids``, matched by the
    clients' TCP ports (``/proc/<pid>/fd`` sockets against ``pg_stat_activity.client_port``)."""
    ports = _client_ports(pids)
    for pid, port in conn.execute(
        "SELECT pid, client_port FROM pg_stat_activity WHERE datname = current_database()"
    ).fetchall():
        if port in ports:
            yield pid


def _client_ports(pids: set[int]) -> set[int]:
    inodes: set[str] = set()
    for pid in pids:
        try:
            for fd in Path(f"/proc/{pid}/fd").iterdir():
                try:
                    target = os.readlink(fd)
                except OSError:
                    continue
                if target.startswith("socket:["):
                    inodes.add(target[8:-1])
        except OSError:
            continue
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            lines = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for line in lines:
            parts = line.split()
            if parts[9] in inodes:
                ports.add(int(parts[1].rsplit(":", 1)[1], 16))
    return ports


def burn(
    databases: list[Database], counts_dir: str, queue: str, n: int, concurrency: int, side: str
) -> Result:
    """The burn-down of ``n`` no-ops split over ``databases`` by their processes; ``side`` ours or floor."""
    from bench import floor
    from bench.meter import descendants

    share = n // len(databases)
    gates, procs, watchers, roots = [], [], [], []
    for db in databases:
        if side == "ours":
            _fill(db.url, counts_dir, queue, share)
            with floor.connect(db.url) as conn:
                conn.execute("VACUUM ANALYZE")
            gates.append(throughput.Gate(db.url, throughput.ACTIVITIES_TABLE))
            started = [throughput._start_workers(_env(db.url, counts_dir), queue, db.processes, concurrency)]
        else:
            floor.reset(db.url)
            with floor.connect(db.url) as conn:
                floor.enqueue_copy(conn, share)
                conn.execute(f"VACUUM ANALYZE {floor.TABLE}")
            gates.append(throughput.Gate(db.url, floor.TABLE))
            started = floor.start_workers(db.url, db.processes, _env(db.url, counts_dir))
        procs.append(started)
        roots.append([p.pid for p in started])
        watchers.append(floor.connect(db.url))
    meters = _meters(databases, counts_dir)
    result = Result()
    peaks = [0] * len(databases)

    def done(i: int) -> int:
        if side == "ours":
            sql = "SELECT count(*) FROM runnerq_activities WHERE queue_name = %s AND status = 'completed'"
            return watchers[i].execute(sql, [queue]).fetchone()[0]
        return floor.done_and_span(watchers[i])[0]

    try:
        for db, gate, started in zip(databases, gates, procs):
            gate.wait_for(db.processes, started)
        for i, meter in enumerate(meters):
            meter.start(roots[i], exclude={gates[i].pid, watchers[i].info.backend_pid})
        for gate in gates:
            gate.open()
        deadline = time.monotonic() + 900
        while sum(done(i) for i in range(len(databases))) < share * len(databases):
            if time.monotonic() > deadline:
                raise SystemExit("burn-down did not finish in 15 minutes")
            for i, meter in enumerate(meters):
                meter.poll()
                pids = set().union(*(descendants(pid) for pid in roots[i]))
                peaks[i] = max(peaks[i], len(list(_backends_of(watchers[i], pids))))
            time.sleep(0.25)
        costs = [meter.stop(share) for meter in meters]
    finally:
        for started in procs:
            if side == "ours":
                stop_group(started[0])
            else:
                floor.stop_workers(started)
    spans = []
    for watcher in watchers:
        if side == "ours":
            spans.append(
                watcher.execute(
                    "SELECT extract(epoch FROM min(started_at)), extract(epoch FROM max(completed_at)) "
                    "FROM runnerq_activities WHERE queue_name = %s",
                    [queue],
                ).fetchone()
            )
        else:
            spans.append(
                watcher.execute(
                    f"SELECT extract(epoch FROM min(claimed_at)), extract(epoch FROM max(completed_at)) "
                    f"FROM {floor.TABLE} WHERE status = 2"
                ).fetchone()
            )
        watcher.close()
    began, ended = min(float(s[0]) for s in spans), max(float(s[1]) for s in spans)
    result.rate = share * len(databases) / (ended - began)
    result.connections = [peak / db.processes for peak, db in zip(peaks, databases)]
    return _costs(meters, costs, share * len(databases), result)


def enqueue(databases: list[Database], counts_dir: str, n: int, side: str) -> Result:
    """``n`` one-by-one enqueues in each of the setup's producer processes, released at once.
    A ``VACUUM`` first, so that autovacuum's WAL for the burn-down's rows isn't counted here."""
    from bench import floor

    for db in databases:
        with floor.connect(db.url) as conn:
            conn.execute("VACUUM")
    producers = [
        (i, _producer(db.url, counts_dir, side, n))
        for i, db in enumerate(databases)
        for _ in range(db.processes)
    ]
    for _, proc in producers:
        _ready(proc)
    meters = _meters(databases, counts_dir)
    for i, meter in enumerate(meters):
        meter.start([proc.pid for j, proc in producers if j == i])
    for _, proc in producers:
        proc.stdin.write("go\n")
        proc.stdin.flush()
    spans = []
    for _, proc in producers:
        spans.append(json.loads(proc.stdout.readline()))
    counts = [n * db.processes for db in databases]
    costs = [meter.stop(count) for meter, count in zip(meters, counts)]
    for _, proc in producers:
        proc.stdin.write("bye\n")
        proc.stdin.flush()
        proc.wait(60)
    total = sum(counts)
    result = Result(rate=total / (max(s["ended"] for s in spans) - min(s["began"] for s in spans)))
    return _costs(meters, costs, total, result)


# ---------------------------------------------------------------- the report


def print_setup(args, servers: list[tuple[str, str]], wal_method: str) -> None:
    import platform

    import django
    import psycopg

    print("Capacity: runnerq-django beside the raw-SQL floor (bench/floor.py), one run")
    print(
        f"  machine    {os.cpu_count()} CPUs, load average {os.getloadavg()[0]:.1f} at the start (shared: "
        f"other sessions run beside it), {platform.system()} {platform.release()}"
    )
    print(
        f"  software   Python {platform.python_version()}, Django {django.get_version()}, psycopg {psycopg.__version__}"
    )
    for label, url in servers:
        with psycopg.connect(url) as conn:
            version, sync, maxconn = conn.execute(
                "SELECT current_setting('server_version'), current_setting('synchronous_commit'), "
                "current_setting('max_connections')"
            ).fetchone()
        print(f"  {label:<10} PostgreSQL {version}, synchronous_commit={sync}, max_connections={maxconn}")
    print("  servers    on this machine, sharing its CPUs and its disk")
    print(
        f"  workers    runworker --processes P --concurrency {args.concurrency} per database (floor: P processes "
        f"x 1 connection, batches of 100); burn-down of {args.activities:,} no-ops split over the databases"
    )
    print(
        f"  enqueue    P producer processes per database, {args.single:,} enqueue() each, one transaction each "
        "(floor: INSERT in autocommit)"
    )
    print(f"  costs      Postgres CPU from /proc (the measured processes' backends); WAL: {wal_method}")


def _ratio(ours: float, floor: float) -> str:
    return f"{ours / floor:.2f}" if floor else "-"


def print_table(rows: list[tuple[str, dict[str, Result]]]) -> None:
    print()
    print(
        "| setup | burn-down /s (floor) | ratio | enqueue /s (floor) | ratio | Postgres CPU ms per activity, "
        "burn-down (floor) | WAL B per activity, burn-down (floor) | Postgres CPU ms per enqueue (floor) "
        "| WAL B per enqueue (floor) | connections per worker process |"
    )
    print("|---|---|---|---|---|---|---|---|---|---|")
    for label, r in rows:
        ob, fb, oe, fe = r["burn ours"], r["burn floor"], r["enqueue ours"], r["enqueue floor"]
        connections = " + ".join(f"{c:.1f}" for c in ob.connections)
        print(
            f"| {label} | {ob.rate:,.0f} ({fb.rate:,.0f}) | {_ratio(ob.rate, fb.rate)} | {oe.rate:,.0f} "
            f"({fe.rate:,.0f}) | {_ratio(oe.rate, fe.rate)} | {ob.pg_cpu_ms:.3f} ({fb.pg_cpu_ms:.3f}) | "
            f"{ob.wal_bytes:,.0f} ({fb.wal_bytes:,.0f}) | {oe.pg_cpu_ms:.3f} ({fe.pg_cpu_ms:.3f}) | "
            f"{oe.wal_bytes:,.0f} ({fe.wal_bytes:,.0f}) | {connections} |"
        )
    base = rows[0][1]
    print()
    print("Scaling, each setup's rate over the first one's (ours; the floor's in brackets):")
    print()
    print("| setup | burn-down | enqueue |")
    print("|---|---|---|")
    for label, r in rows:
        print(
            f"| {label} | {r['burn ours'].rate / base['burn ours'].rate:.2f} "
            f"({r['burn floor'].rate / base['burn floor'].rate:.2f}) | "
            f"{r['enqueue ours'].rate / base['enqueue ours'].rate:.2f} "
            f"({r['enqueue floor'].rate / base['enqueue floor'].rate:.2f}) |"
        )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--activities", type=int, default=10000, help="burnt down in each setup")
    parser.add_argument("--single", type=int, default=1000, help="one-by-one enqueues per producer process")
    parser.add_argument("--concurrency", type=int, default=16)
    parser.add_argument(
        "--second-server", metavar="URL", help="the second database's server (default: start one)"
    )
    parser.add_argument("--processes", default="1,2,4", help="worker processes per setup on one database")
    args = parser.parse_args()

    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "testproject.settings")
    os.environ["RUNNERQ_EXAMPLES"] = "0"
    os.environ["DJANGO_DEBUG"] = "0"
    from contextlib import ExitStack

    import psycopg

    from bench import floor
    from bench.meter import Meter
    from testproject.database import database_url
    from tests.helpers import scratch_database

    first_server = database_url()
    with psycopg.connect(first_server) as conn:
        major = conn.info.server_version // 10000
    with ExitStack() as stack, tempfile.TemporaryDirectory() as counts_dir:
        if args.second_server:
            second_server = args.second_server
        else:
            second = SecondServer(major)
            stack.callback(second.stop)
            second_server = second.url
        one = stack.enter_context(scratch_database(first_server, prefix="rq_capacity"))
        two = stack.enter_context(scratch_database(second_server, prefix="rq_capacity"))
        for url in (one, two):
            _migrate(url, counts_dir)
            floor.create(url)
        probe = Meter(one, counts_dir)
        print_setup(args, [("database 1", one), ("database 2", two)], probe.wal.method)
        probe.close()

        setups = [
            (f"1 database, {p} worker process{'es' if p > 1 else ''}", [Database(one, "1", p)])
            for p in map(int, args.processes.split(","))
        ]
        setups += [
            ("2 databases, 1 + 1 processes", [Database(one, "1", 1), Database(two, "2", 1)]),
            ("2 databases, 2 + 2 processes", [Database(one, "1", 2), Database(two, "2", 2)]),
        ]
        rows = []
        for index, (label, databases) in enumerate(setups):
            queue = f"bench_capacity_{index}"
            measured = {
                "burn floor": burn(databases, counts_dir, queue, args.activities, args.concurrency, "floor"),
                "burn ours": burn(databases, counts_dir, queue, args.activities, args.concurrency, "ours"),
                "enqueue floor": enqueue(databases, counts_dir, args.single, "floor"),
                "enqueue ours": enqueue(databases, counts_dir, args.single, "ours"),
            }
            rows.append((label, measured))
            print(
                f"  measured {label}: burn-down {measured['burn ours'].rate:,.0f}/s, "
                f"enqueue {measured['enqueue ours'].rate:,.0f}/s",
                flush=True,
            )
        print_table(rows)


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "fill":
        _child_fill(sys.argv[2], int(sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "produce":
        _child_produce(sys.argv[2], int(sys.argv[3]))
    else:
        main()
