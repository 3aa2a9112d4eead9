"""A PgBouncer of the test run's own (Debian's ``pgbouncer``) in front of a PostgreSQL server.

Its configuration, socket, log and pid file live in a folder of its own, on a port of its own:
never the system service. It forwards every database name to the upstream server (``*``),
trusts the user names of ``userlist.txt`` (the upstream server does the authentication it is
configured for) and pools in ``transaction`` (the default) or ``session`` mode. PgBouncer 1.21
and newer also track protocol-level prepared statements (``max_prepared_statements``).

From Python (tests, benchmarks): ``PgBouncer.start(upstream_url, folder)`` returns the running
server, ``.url(dbname)`` a URL through it, ``.stop()`` stops it. From a shell (``.ci/run``)::

    eval "$(python3 -m tests.pgbouncer start FOLDER UPSTREAM_URL)"   # exports RUNNERQ_TEST_PGBOUNCER*
    python3 -m tests.pgbouncer stop FOLDER

``RUNNERQ_TEST_PGBOUNCER`` (the URL of the pooler, database ``postgres``) tells the test project it
runs behind it (``testproject/settings.py``: ``LISTEN`` off, prepared statements off before 1.21,
no server-side cursors) and tells the suite to create and migrate its test database past it, on
``DATABASE_URL``'s server, then run through it (``tests/conftest.py``).
"""

from __future__ import annotations

import os
import re
import shutil
import signal
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path

# The first version that keeps prepared statements across transaction pooling.
PREPARED_SINCE = (1, 21)
ENV_URL = "RUNNERQ_TEST_PGBOUNCER"
ENV_PREPARED = "RUNNERQ_TEST_PGBOUNCER_PREPARED"


def binary() -> str | None:
    """The ``pgbouncer`` executable (Debian puts it in /usr/sbin, often not on a user's PATH)."""
    found = shutil.which("pgbouncer")
    if found:
        return found
    return "/usr/sbin/pgbouncer" if os.access("/usr/sbin/pgbouncer", os.X_OK) else None


def version(executable: str) -> tuple[int, int, int]:
    out = subprocess.run([executable, "--version"], capture_output=True, text=True, check=True).stdout
    match = re.search(r"PgBouncer (\d+)\.(\d+)\.(\d+)", out)
    if not match:
        raise RuntimeError(f"cannot read the PgBouncer version from {out!r}")
    major, minor, patch = (int(part) for part in match.groups())
    return major, minor, patch


def _free_port() -> int:
    import socket

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@dataclass
class PgBouncer:
    folder: Path
    port: int
    user: str
    version: tuple[int, int, int]
    pool_mode: str

    @property
    def prepared_statements(self) -> bool:
        """Whether prepared statements work through it (always in session pooling)."""
        return self.pool_mode == "session" or self.version[:2] >= PREPARED_SINCE

    def url(self, dbname: str = "postgres") -> str:
        return f"postgres://{self.user}@127.0.0.1:{self.port}/{dbname}"

    @classmethod
    def start(
        cls,
        upstream_url: str,
        folder: str | os.PathLike,
        *,
        pool_mode: str = "transaction",
        pool_size: int = 20,
        port: int | None = None,
    ) -> PgBouncer:
        """Write the configuration into ``folder`` and start PgBouncer there, once it answers
        (RuntimeError with its log when it does not within 10 s). As root, PgBouncer runs as the
        ``postgres`` user, who gets ``folder`` and must be able to reach it (``tempfile.mkdtemp()``
        is fine, a folder inside another private one is not)."""
        from psycopg.conninfo import conninfo_to_dict

        executable = binary()
        if not executable:
            raise RuntimeError("pgbouncer is not installed (apt-get install pgbouncer)")
        upstream = conninfo_to_dict(upstream_url)
        user = upstream.get("user") or "postgres"
        host = upstream.get("host") or "127.0.0.1"
        target = f"host={host} port={upstream.get('port') or 5432} user={user}"
        if upstream.get("password"):
            target += f" password={upstream['password']}"
        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        found = version(executable)
        port = port or _free_port()
        (folder / "userlist.txt").write_text(f'"{user}" ""\n')
        settings = {
            "listen_addr": "127.0.0.1",
            "listen_port": port,
            "unix_socket_dir": "",
            "auth_type": "trust",
            "auth_file": folder / "userlist.txt",
            "admin_users": user,
            "pool_mode": pool_mode,
            "default_pool_size": pool_size,
            "max_client_conn": 500,
            # Django and psycopg send no startup options the suite needs; tolerate libpq's usual one.
            "ignore_startup_parameters": "extra_float_digits",
            "logfile": folder / "pgbouncer.log",
            "pidfile": folder / "pgbouncer.pid",
            # A dropped test database must not be held open by idle server connections for long.
            "server_idle_timeout": 10,
        }
        if found[:2] >= PREPARED_SINCE:
            settings["max_prepared_statements"] = 200
        lines = ["[databases]", f"* = {target}", "", "[pgbouncer]"]
        lines += [f"{key} = {value}" for key, value in settings.items()]
        ini = folder / "pgbouncer.ini"
        ini.write_text("\n".join(lines) + "\n")
        # -d: daemonise (the pid file says which process to stop); as root, it must drop to a user.
        command = [executable, "-d", "-q", str(ini)]
        if os.geteuid() == 0:
            command[1:1] = ["-u", "postgres"]
            shutil.chown(folder, "postgres")
            for path in folder.iterdir():
                shutil.chown(path, "postgres")
        started = subprocess.run(command, capture_output=True, text=True)
        if started.returncode != 0:
            raise RuntimeError(
                f"pgbouncer did not start ({' '.join(command)}): {started.stderr or started.stdout}"
                + (
                    " (as root it runs as the postgres user, who must reach the folder)"
                    if os.geteuid() == 0
                    else ""
                )
            )
        bouncer = cls(folder, port, user, found, pool_mode)
        deadline = time.monotonic() + 10
        while not bouncer.answers():
            if time.monotonic() > deadline:
                log = (folder / "pgbouncer.log").read_text() if (folder / "pgbouncer.log").exists() else ""
                bouncer.stop()
                raise RuntimeError(f"pgbouncer on port {port} did not start:\n{log}")
            time.sleep(0.05)
        return bouncer

    def answers(self) -> bool:
        import psycopg

        try:
            with psycopg.connect(self.url(), connect_timeout=1, autocommit=True) as conn:
                conn.execute("SELECT 1")
            return True
        except psycopg.Error:
            return False

    def admin(self, command: str) -> list[tuple]:
        """A command on PgBouncer's admin console (``SHOW POOLS``, ``KILL db``...)."""
        import psycopg

        with psycopg.connect(self.url("pgbouncer"), autocommit=True, prepare_threshold=None) as conn:
            cursor = conn.cursor()
            cursor.execute(command, prepare=False)
            return cursor.fetchall() if cursor.description else []

    def stop(self) -> None:
        stop(self.folder)


def stop(folder: str | os.PathLike) -> None:
    """Stop the PgBouncer whose pid file is in ``folder`` (nothing when none runs)."""
    pidfile = Path(folder) / "pgbouncer.pid"
    try:
        pid = int(pidfile.read_text().strip())
    except (OSError, ValueError):
        return
    try:
        os.kill(pid, signal.SIGTERM)  # SIGTERM: shut down at once, connections closed
    except ProcessLookupError:
        return
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline:
        try:
            os.kill(pid, 0)
        except ProcessLookupError:
            return
        time.sleep(0.05)
    os.kill(pid, signal.SIGKILL)


def main(argv: list[str]) -> int:
    if len(argv) == 3 and argv[0] == "start":
        bouncer = PgBouncer.start(argv[2], argv[1])
        print(f"export {ENV_URL}={bouncer.url()}")
        print(f"export {ENV_PREPARED}={int(bouncer.prepared_statements)}")
        print(
            f"# PgBouncer {'.'.join(map(str, bouncer.version))}, {bouncer.pool_mode} pooling, port {bouncer.port}"
        )
        return 0
    if len(argv) == 2 and argv[0] == "stop":
        stop(argv[1])
        return 0
    print("usage: python -m tests.pgbouncer start FOLDER UPSTREAM_URL | stop FOLDER", file=sys.stderr)
    return 2


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
