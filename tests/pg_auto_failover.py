"""A pg_auto_failover formation of a test's own: a monitor, a primary and a secondary.

Debian's ``postgresql-NN-auto-failover`` (its ``pg_autoctl`` and the monitor's extension), on
PostgreSQL's own binaries; ``.ci/run`` installs it. Everything lives in a temporary folder: the
three data folders, the keepers' configuration and state (``XDG_CONFIG_HOME``, ``XDG_DATA_HOME``,
``XDG_RUNTIME_DIR`` point inside it), and one log per keeper. The servers listen on 127.0.0.1,
on free ports, with trust authentication and no TLS. As root (CI) the keepers run as the
``postgres`` system user, since PostgreSQL refuses root.

By default the secondary is in the replication quorum (``synchronous_standby_names`` is
``ANY 1 (...)`` while it is healthy: a commit returns once the secondary has the WAL);
``synchronous=False`` takes it out (asynchronous streaming). The monitor's health checks and the
keepers' timeouts are shortened (``FAST_MONITOR``, ``NETWORK_PARTITION_TIMEOUT``) so a failover
takes seconds, not the defaults' half minute; docs/how-to/high-availability.md gives both.

From Python (tests, benchmarks)::

    formation = Formation().start()
    formation.url("postgres")        # postgres://postgres@127.0.0.1:P1,127.0.0.1:P2/postgres?target_session_attrs=read-write
    formation.kill("node1")          # pg_ctl stop -m immediate, then SIGKILL of its keeper
    formation.wait_primary("node2")  # the monitor promoted it and it takes writes
    formation.rejoin("node1")        # its keeper again: it rewinds and follows as the secondary
    formation.stop()
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import signal
import subprocess
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from tests.helpers import free_port

NODES = ("node1", "node2")
# The monitor's failure detection, shortened: a health check a second (1 s connect timeout, one
# retry), a node whose keeper has not reported for 2 s is unhealthy, and an unreachable primary
# gets 4 s to demote itself before the secondary takes writes. The defaults (5 s, 5 s, 2 retries,
# 20 s, 30 s) make a failover take 30 to 50 s; the test's load would then run out of time.
FAST_MONITOR = {
    "pgautofailover.health_check_period": "1000",
    "pgautofailover.health_check_timeout": "1000",
    "pgautofailover.health_check_max_retries": "1",
    "pgautofailover.health_check_retry_delay": "500",
    "pgautofailover.node_considered_unhealthy_timeout": "2000",
    "pgautofailover.primary_demote_timeout": "4000",
    "pgautofailover.startup_grace_period": "2000",
}
# Seconds after which a primary that reaches neither the monitor nor a standby demotes itself
# (default 20). Kept below primary_demote_timeout, as pg_auto_failover's own safety needs.
NETWORK_PARTITION_TIMEOUT = 2
SERVER_SETTINGS = ("fsync", "off"), ("full_page_writes", "off"), ("shared_buffers", "32MB")


def pg_autoctl() -> str | None:
    return shutil.which("pg_autoctl") or (
        "/usr/bin/pg_autoctl" if os.access("/usr/bin/pg_autoctl", os.X_OK) else None
    )


def pg_bindir() -> Path | None:
    """The newest Debian PostgreSQL whose monitor extension is installed beside it."""
    for folder in sorted(glob.glob("/usr/lib/postgresql/*/bin"), key=_major, reverse=True):
        share = Path(f"/usr/share/postgresql/{Path(folder).parent.name}/extension")
        if (Path(folder) / "pg_ctl").exists() and list(share.glob("pgautofailover*.control")):
            return Path(folder)
    return None


def _major(folder: str) -> int:
    name = Path(folder).parent.name
    return int(name) if name.isdigit() else 0


def unavailable() -> str:
    """Why a formation can't be started here ('' when it can): a skip reason."""
    if not pg_autoctl() or not pg_bindir():
        return (
            "pg_auto_failover is not installed (Debian: apt-get install postgresql-15-auto-failover; "
            ".ci/run installs it): the failover tests start a monitor, a primary and a secondary"
        )
    if os.geteuid() == 0:
        try:
            pwd.getpwnam("postgres")
        except KeyError:
            return "running as root and there is no postgres user to run PostgreSQL as"
    return ""


@dataclass
class Keeper:
    """One ``pg_autoctl`` service (the monitor's or a node's keeper) and its Postgres."""

    name: str
    port: int
    data: Path
    log: Path
    process: subprocess.Popen | None = None
    runs: int = 0

    def log_text(self) -> str:
        return self.log.read_text(errors="replace") if self.log.exists() else ""


@dataclass
class Formation:
    synchronous: bool = True
    root: Path = field(default_factory=lambda: Path(tempfile.mkdtemp(prefix="rq_pgaf_")))

    def __post_init__(self) -> None:
        self.user = "postgres" if os.geteuid() == 0 else None
        self.bin = pg_bindir()
        self.autoctl = pg_autoctl()
        os.chmod(self.root, 0o755)
        for sub in ("config", "share", "run", "logs"):
            (self.root / sub).mkdir(mode=0o700 if sub == "run" else 0o755)
        if self.user:
            for path in [self.root, *self.root.iterdir()]:
                shutil.chown(path, self.user)
        self.monitor = self._keeper("monitor")
        self.nodes = {name: self._keeper(name) for name in NODES}

    def _keeper(self, name: str) -> Keeper:
        return Keeper(name, free_port(), self.root / name, self.root / "logs" / f"{name}.log")

    # -- processes -------------------------------------------------------------------------

    def _env(self) -> dict[str, str]:
        env = {key: value for key, value in os.environ.items() if not key.startswith("PG")}
        env.update(
            HOME=str(self.root),
            XDG_CONFIG_HOME=str(self.root / "config"),
            XDG_DATA_HOME=str(self.root / "share"),
            XDG_RUNTIME_DIR=str(self.root / "run"),
            PG_CONFIG=str(self.bin / "pg_config"),
        )
        return env

    def _run(self, *args: str, timeout: float = 120) -> str:
        done = subprocess.run(
            [self.autoctl, *args],
            user=self.user,
            env=self._env(),
            cwd=self.root,
            capture_output=True,
            text=True,
            timeout=timeout,
        )
        if done.returncode != 0:
            raise RuntimeError(
                f"pg_autoctl {' '.join(args)} exited {done.returncode}:\n{done.stderr[-3000:]}"
            )
        return done.stdout

    def _spawn(self, keeper: Keeper, *args: str) -> None:
        with open(keeper.log, "a") as log:
            keeper.process = subprocess.Popen(
                [self.autoctl, *args],
                user=self.user,
                env=self._env(),
                cwd=self.root,
                stdout=log,
                stderr=subprocess.STDOUT,
                start_new_session=True,
            )
        keeper.runs += 1

    def _common(self, keeper: Keeper) -> list[str]:
        return [
            *("--pgdata", str(keeper.data), "--pgport", str(keeper.port)),
            *("--pgctl", str(self.bin / "pg_ctl"), "--hostname", "127.0.0.1"),
            *("--auth", "trust", "--no-ssl"),
        ]

    # -- life cycle ------------------------------------------------------------------------

    def start(self, timeout: float = 90) -> Formation:
        try:
            self._start(timeout)
        except BaseException:
            self.stop()
            raise
        return self

    def _start(self, timeout: float) -> None:
        self._run("create", "monitor", *self._common(self.monitor))
        self._server_settings(self.monitor, FAST_MONITOR)
        self._spawn(self.monitor, "run", "--pgdata", str(self.monitor.data))
        self._wait(lambda: self._monitor_answers(), timeout, "the monitor to answer", self.monitor)
        for index, name in enumerate(NODES):
            node = self.nodes[name]
            # Created (initdb, or pg_basebackup of the primary) and registered, then run: the
            # keeper's timeouts are set in between, in its configuration file.
            self._run(
                "create",
                "postgres",
                *self._common(node),
                *("--listen", "127.0.0.1", "--name", name, "--monitor", self.monitor_url()),
                *("--dbname", "postgres", "--username", "postgres"),
                *("--replication-quorum", "true" if self.synchronous or index == 0 else "false"),
                timeout=timeout,
            )
            self._run(
                "config",
                "set",
                "--pgdata",
                str(node.data),
                "timeout.network_partition_timeout",
                str(NETWORK_PARTITION_TIMEOUT),
            )
            self._server_settings(node, dict(SERVER_SETTINGS))
            self._spawn(node, "run", "--pgdata", str(node.data))
        self.wait_states({"node1": "primary", "node2": "secondary"}, timeout)

    def _server_settings(self, keeper: Keeper, settings: dict[str, str]) -> None:
        """Appended to postgresql.conf before the keeper's first start."""
        with open(keeper.data / "postgresql.conf", "a") as conf:
            conf.write("\n# rq test formation\n")
            conf.writelines(f"{key} = '{value}'\n" for key, value in settings.items())

    def stop(self) -> None:
        """Stop every keeper and server (SIGTERM, then SIGKILL and ``pg_ctl -m immediate``) and
        remove the folder."""
        keepers = [*self.nodes.values(), self.monitor]
        for keeper in keepers:
            if keeper.process and keeper.process.poll() is None:
                with contextlib.suppress(ProcessLookupError):
                    keeper.process.send_signal(signal.SIGTERM)
        for keeper in keepers:
            if keeper.process:
                try:
                    keeper.process.wait(timeout=20)
                except subprocess.TimeoutExpired:
                    with contextlib.suppress(ProcessLookupError):
                        os.killpg(keeper.process.pid, signal.SIGKILL)
                    keeper.process.wait()
            if (keeper.data / "postmaster.pid").exists():
                with contextlib.suppress(Exception):
                    self._pg_ctl(keeper, "-m", "immediate", "-w", "stop")
        shutil.rmtree(self.root, ignore_errors=True)

    def _pg_ctl(self, keeper: Keeper, *args: str) -> None:
        subprocess.run(
            [str(self.bin / "pg_ctl"), "-D", str(keeper.data), *args],
            user=self.user,
            check=True,
            timeout=60,
            capture_output=True,
        )

    # -- the failure ----------------------------------------------------------------------

    def kill(self, name: str) -> float:
        """Crash node ``name`` for good: freeze its keeper (so it can't restart Postgres), stop
        its Postgres with ``pg_ctl stop -m immediate``, then SIGKILL the keeper's processes.
        Returns the wall-clock time of the stop (``time.time()``)."""
        node = self.nodes[name]
        assert node.process is not None, f"{name} is not running"
        keepers = [pid for pid in _group(node.process.pid) if _comm(pid) == "pg_autoctl"]
        for pid in keepers:
            os.kill(pid, signal.SIGSTOP)
        self._pg_ctl(node, "-m", "immediate", "-w", "stop")
        killed_at = time.time()
        for pid in keepers:
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, signal.SIGKILL)
        node.process.wait(timeout=10)
        return killed_at

    def rejoin(self, name: str, timeout: float = 60) -> None:
        """Start node ``name``'s keeper again and wait until it follows as the secondary."""
        self._spawn(self.nodes[name], "run", "--pgdata", str(self.nodes[name].data))
        other = next(n for n in NODES if n != name)
        self.wait_states({other: "primary", name: "secondary"}, timeout)

    # -- what the monitor says ------------------------------------------------------------

    def monitor_url(self) -> str:
        return f"postgres://autoctl_node@127.0.0.1:{self.monitor.port}/pg_auto_failover?sslmode=disable"

    def _monitor_answers(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.monitor_url(), connect_timeout=1) as conn:
                conn.execute("SELECT 1 FROM pgautofailover.node LIMIT 1")
            return True
        except psycopg.Error:
            return False

    def states(self) -> dict[str, tuple[str, str]]:
        """Each node's (reported state, assigned state), as the monitor has them."""
        import psycopg

        with psycopg.connect(self.monitor_url(), connect_timeout=2) as conn:
            rows = conn.execute(
                "SELECT nodename, reportedstate, goalstate FROM pgautofailover.node"
            ).fetchall()
        return {name: (reported, goal) for name, reported, goal in rows}

    def wait_states(self, wanted: dict[str, str], timeout: float = 60) -> None:
        def reached() -> bool:
            try:
                states = self.states()
            except Exception:
                return False
            return all(states.get(name) == (state, state) for name, state in wanted.items())

        self._wait(reached, timeout, f"the states {wanted}", *self.nodes.values())

    def writable(self, name: str) -> bool:
        """Whether node ``name`` accepts a write now (promoted and out of read-only)."""
        import psycopg

        try:
            with psycopg.connect(self.node_url(name), connect_timeout=1, autocommit=True) as conn:
                row = conn.execute(
                    "SELECT NOT pg_is_in_recovery() AND current_setting('transaction_read_only') = 'off'"
                ).fetchone()
                return bool(row and row[0])
        except psycopg.Error:
            return False

    def _wait(self, predicate, timeout: float, what: str, *keepers: Keeper) -> None:
        deadline = time.monotonic() + timeout
        while not predicate():
            if time.monotonic() > deadline:
                logs = "\n".join(f"== {k.name}\n{k.log_text()[-2500:]}" for k in keepers)
                try:
                    states = self.states()
                except Exception as exc:
                    states = {"monitor": (repr(exc), "")}
                raise RuntimeError(
                    f"timed out after {timeout}s waiting for {what}; monitor: {states}\n{logs}"
                )
            time.sleep(0.1)

    # -- URLs ------------------------------------------------------------------------------

    def url(self, dbname: str = "postgres", **params: str) -> str:
        """The formation's multi-host URL (as ``pg_autoctl show uri`` gives it): libpq tries
        each node in turn and keeps the one that takes writes."""
        hosts = ",".join(f"127.0.0.1:{self.nodes[name].port}" for name in NODES)
        query = "&".join(f"{k}={v}" for k, v in {"target_session_attrs": "read-write", **params}.items())
        return f"postgres://postgres@{hosts}/{dbname}?{query}"

    def node_url(self, name: str, dbname: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.nodes[name].port}/{dbname}"


def _group(pgid: int) -> list[int]:
    """The processes of process group ``pgid``."""
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                stat = (entry / "stat").read_text()
            except OSError:
                continue
            # pid (comm) state ppid pgrp ...: comm may hold spaces and parentheses.
            fields = stat.rpartition(")")[2].split()
            if int(fields[2]) == pgid:
                found.append(int(entry.name))
    return found


def _comm(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/comm").read_text().strip()
    except OSError:
        return ""
