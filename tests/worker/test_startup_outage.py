"""A database that is away when a process starts: ``runworker``, ``runscheduler`` and the
children of ``runworker --processes`` wait for it, one log line per attempt, and start working
when it answers; ``RUNNERQ['STARTUP_WAIT_SECONDS']`` bounds the wait (status 69, which systemd
restarts); what no restart can fix still exits 78 at once; a pool parent restarts a child killed
during an outage instead of giving up. Real processes throughout, against a real server reached
through a TCP gate of the test's own that plays the outage (docs/explanation/guarantees.md,
"While the database is away").
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import signal
import socket
import subprocess
import threading
import time
import uuid

import psycopg
import pytest
from psycopg.conninfo import conninfo_to_dict, make_conninfo

from runnerq_django.worker.supervisor import EX_CONFIG, EX_UNAVAILABLE
from tests.helpers import free_port, manage, manage_env, spawn_manage, stop_process, wait_until
from tests.worker import handlers
from tests.worker.support import wait_for_status, worker_processes
from tests.worker.test_server_crash import PrivateServer
from tests.worker.test_supervisor import _children_of

pytestmark = pytest.mark.slow  # every case starts manage.py processes

ATTEMPT = re.compile(r'reason=(?P<reason>"[^"]*"|\S+) .*next_try_s=(?P<pause>[0-9.]+)')


class Gate:
    """A TCP forwarder on 127.0.0.1 to the test's PostgreSQL that can be shut (new connections
    refused, open ones cut) and opened again on the same port: an outage as a client sees it."""

    def __init__(self, target_url: str):
        params = conninfo_to_dict(target_url)
        host = params.get("host") or ""
        if not host or host.startswith("/"):
            pytest.skip(f"the test server is reached by a Unix socket ({host!r}); the gate forwards TCP")
        self.target = (host, int(params.get("port") or 5432))
        self.port = free_port()
        self.url = make_conninfo(target_url, host="127.0.0.1", port=str(self.port))
        self._listener: socket.socket | None = None
        self._open: list[socket.socket] = []
        self._lock = threading.Lock()

    def open(self) -> None:
        listener = socket.socket()
        listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        listener.bind(("127.0.0.1", self.port))
        listener.listen(64)
        self._listener = listener
        threading.Thread(target=self._accept, args=(listener,), daemon=True).start()

    def shut(self) -> None:
        listener, self._listener = self._listener, None
        with self._lock:
            cut, self._open = self._open, []
        for sock in [*cut, *([listener] if listener else [])]:
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)  # wakes the accept() or recv() blocked on it
            sock.close()

    def _accept(self, listener: socket.socket) -> None:
        while True:
            try:
                client, _ = listener.accept()
                server = socket.create_connection(self.target)
            except OSError:
                if self._listener is not listener:
                    return
                continue
            with self._lock:
                self._open += [client, server]
            for source, sink in ((client, server), (server, client)):
                threading.Thread(target=self._pump, args=(source, sink), daemon=True).start()

    @staticmethod
    def _pump(source: socket.socket, sink: socket.socket) -> None:
        try:
            while data := source.recv(65536):
                sink.sendall(data)
        except OSError:
            pass
        for sock in (source, sink):
            with contextlib.suppress(OSError):
                sock.shutdown(socket.SHUT_RDWR)


@pytest.fixture
def gate(live_db_url):
    gate = Gate(live_db_url)  # shut: nothing listens on its port yet
    yield gate
    gate.shut()


def attempts(log: str, port: int) -> list[tuple[str, float]]:
    """(reason, next try) of each attempt line about the gate's address."""
    return [
        (found["reason"].strip('"'), float(found["pause"]))
        for line in log.splitlines()
        if "database.unreachable" in line
        and f"host=127.0.0.1 port={port} " in line
        and (found := ATTEMPT.search(line))
    ]


def test_runworker_waits_for_a_server_that_refuses_then_works_when_it_answers(gate, runs_table, tmp_path):
    with worker_processes(gate.url, tmp_path, "tests.worker.handlers") as start:
        proc = start("--poll-interval", "0.2")
        wait_until(lambda: len(attempts(proc.log(), gate.port)) >= 3, timeout=30, message="three attempts")
        assert proc.poll() is None, proc.log()
        seen = attempts(proc.log(), gate.port)
        # One line per attempt, each naming the server, the reason and the next try: 1 s doubling.
        assert seen[:3] == [
            ("Connection refused", 1.0),
            ("Connection refused", 2.0),
            ("Connection refused", 4.0),
        ]
        assert "worker.started" not in proc.log()
        gate.open()
        wait_until(lambda: "worker.started" in proc.log(), timeout=30, message="the worker to start")
        assert re.search(
            rf"database.answered database=\w+ host=127.0.0.1 port={gate.port} attempts=\d+", proc.log()
        )
        handle = handlers.echo.enqueue({"after": "the outage"})
        wait_for_status(handle.id, "completed", timeout=30)
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.log()
    assert "Traceback" not in proc.log()


def test_too_many_connections_is_waited_for(live_db_url, runs_table, tmp_path):
    """A role at its connection limit gets "too many connections" (SQLSTATE 53300, like a server
    at max_connections): an outage, not a configuration error."""
    role = f"rq_limited_{uuid.uuid4().hex[:8]}"
    with psycopg.connect(live_db_url, autocommit=True) as admin:
        admin.execute(f"CREATE ROLE {role} LOGIN CONNECTION LIMIT 0")
        admin.execute(f"GRANT pg_read_all_data, pg_write_all_data TO {role}")
        try:
            url = make_conninfo(live_db_url, user=role)
            with worker_processes(url, tmp_path, "tests.worker.handlers") as start:
                proc = start("--poll-interval", "0.2", "--no-maintenance")
                wait_until(
                    lambda: len(re.findall("too many connections for role", proc.log())) >= 2,
                    timeout=30,
                    message="two attempts",
                )
                assert proc.poll() is None and "worker.started" not in proc.log(), proc.log()
                admin.execute(f"ALTER ROLE {role} CONNECTION LIMIT -1")
                wait_until(lambda: "worker.started" in proc.log(), timeout=30, message="the worker to start")
                handle = handlers.echo.enqueue({"limit": "lifted"})
                wait_for_status(handle.id, "completed", timeout=30)
                proc.send_signal(signal.SIGTERM)
                assert proc.wait(30) == 0, proc.log()
        finally:
            admin.execute("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE usename = %s", [role])
            wait_until(
                lambda: (
                    not admin.execute("SELECT 1 FROM pg_stat_activity WHERE usename = %s", [role]).fetchone()
                ),
                message=f"the sessions of {role} to end",
            )
            admin.execute(f"DROP ROLE {role}")


def test_runscheduler_waits_then_schedules(gate, tmp_path):
    log_path = tmp_path / "scheduler.log"
    with open(log_path, "w") as log_file:
        proc = spawn_manage(
            "runscheduler",
            "--max-interval",
            "0.5",
            env=manage_env(gate.url, RUNNERQ_EXAMPLES="0"),
            stdout=log_file,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(
            lambda: len(attempts(log_path.read_text(), gate.port)) >= 2, timeout=30, message="attempts"
        )
        assert proc.poll() is None and "Scheduler started" not in log_path.read_text()
        gate.open()
        wait_until(lambda: "Scheduler started" in log_path.read_text(), timeout=30, message="the scheduler")
        time.sleep(1.5)  # a few ticks
    finally:
        stop_process(proc)
    log = log_path.read_text()
    assert proc.returncode == 0, log
    ticks = int(re.search(r"Scheduler stopped after (\d+) tick", log)[1])
    assert ticks >= 1, log


@pytest.mark.parametrize("command", ["runworker", "runscheduler"])
def test_a_bounded_wait_exits_69_naming_the_server_and_the_setting(command):
    port = free_port()  # nothing listens there
    env = manage_env(
        f"postgres://postgres@127.0.0.1:{port}/shop",
        RUNNERQ_EXAMPLES="0",
        DJANGO_SETTINGS_MODULE="tests.worker.settings",
        RUNNERQ_TEST_SETTINGS=json.dumps({"STARTUP_WAIT_SECONDS": 2.5}),
    )
    began = time.monotonic()
    result = manage(command, check=False, timeout=60, env=env)
    assert result.returncode == EX_UNAVAILABLE, result.stderr
    assert time.monotonic() - began >= 2.5
    # 1 s, then the rest of the 2.5 s (about 1.5 s: the first attempt took a moment); the last
    # line is the error.
    seen = attempts(result.stderr, port)
    assert seen[0] == ("Connection refused", 1.0) and 1.0 < seen[1][1] <= 1.5, result.stderr
    assert all(reason == "Connection refused" for reason, _ in seen), result.stderr
    assert re.fullmatch(
        rf"CommandError: can't connect to database \"shop\" at 127\.0\.0\.1:{port} within "
        rf"RUNNERQ\['STARTUP_WAIT_SECONDS'\] \(2\.5 s, {len(seen) + 1} attempts\): Connection refused",
        result.stderr.strip().splitlines()[-1],
    ), result.stderr


@pytest.mark.parametrize("command", ["runworker", "runscheduler"])
def test_a_bad_wait_setting_is_a_configuration_error_before_any_wait(command):
    env = manage_env(
        f"postgres://postgres@127.0.0.1:{free_port()}/shop",
        RUNNERQ_EXAMPLES="0",
        DJANGO_SETTINGS_MODULE="tests.worker.settings",
        RUNNERQ_TEST_SETTINGS=json.dumps({"STARTUP_WAIT_SECONDS": "60"}),
    )
    result = manage(command, check=False, timeout=60, env=env)
    assert result.returncode == EX_CONFIG, result.stderr
    assert result.stderr.strip() == (
        "CommandError: RUNNERQ['STARTUP_WAIT_SECONDS'] must be None (no limit) or a positive number "
        "of seconds, got '60'"
    )


@pytest.mark.parametrize("command", ["runworker", "runscheduler"])
@pytest.mark.parametrize(
    "change, refusal",
    [
        ({"user": "rq_no_such_role"}, 'role "rq_no_such_role" does not exist'),
        ({"dbname": "rq_no_such_database"}, 'database "rq_no_such_database" does not exist'),
    ],
    ids=["unknown role", "unknown database"],
)
def test_what_no_restart_fixes_still_exits_78_at_once(live_db_url, command, change, refusal):
    began = time.monotonic()
    result = manage(
        command,
        check=False,
        timeout=60,
        env=manage_env(make_conninfo(live_db_url, **change), RUNNERQ_EXAMPLES="0"),
    )
    assert result.returncode == EX_CONFIG, result.stderr
    assert time.monotonic() - began < 20  # no wait: its first attempt (plus the interpreter's start)
    assert "database.unreachable" not in result.stderr
    lines = result.stderr.strip().splitlines()
    assert (
        len(lines) == 1
        and lines[0].startswith("CommandError: can't connect to database")
        and refusal in lines[0]
    )


def test_a_stop_signal_while_waiting_exits_0_at_once(gate, tmp_path):
    with worker_processes(gate.url, tmp_path, "tests.worker.handlers") as start:
        proc = start()
        wait_until(lambda: attempts(proc.log(), gate.port), timeout=30, message="the first attempt")
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(10) == 0, proc.log()
    assert "database.wait_stopped" in proc.log() and "signal=SIGTERM" in proc.log()


def test_a_pool_restarts_a_child_killed_during_an_outage(gate, runs_table, tmp_path):
    """The soak's case: the parent used to stop the whole pool (status 78) when the child it
    restarted found the database away. Now the new child waits, starts when the server is back,
    and a SIGTERM to the parent still stops a pool whose child is waiting."""
    gate.open()
    with worker_processes(gate.url, tmp_path, "tests.worker.handlers") as start:
        proc = start("--processes", "2", "--poll-interval", "0.2", "--shutdown-grace", "2")
        first = wait_until(
            lambda: len(c := _children_of(proc.pid)) == 2 and proc.log().count("worker.started") == 2 and c,
            timeout=60,
            message="two worker processes",
        )
        gate.shut()
        os.kill(first[0], signal.SIGKILL)
        wait_until(
            lambda: len(attempts(proc.log(), gate.port)) >= 3, timeout=30, message="the new child's attempts"
        )
        assert proc.poll() is None, proc.log()  # the old parent had given up by now
        assert "supervisor.gave_up" not in proc.log()
        gate.open()
        wait_until(
            lambda: proc.log().count("worker.started") == 3, timeout=30, message="the new child to start"
        )
        handle = handlers.echo.enqueue({"pool": "whole again"})
        wait_for_status(handle.id, "completed", timeout=30)

        # Again, and this time the pool is stopped while the new child is still waiting.
        children = _children_of(proc.pid)
        gate.shut()
        os.kill(children[0], signal.SIGKILL)
        before = len(attempts(proc.log(), gate.port))
        wait_until(
            lambda: len(attempts(proc.log(), gate.port)) > before, timeout=30, message="a waiting child"
        )
        proc.send_signal(signal.SIGTERM)
        assert proc.wait(30) == 0, proc.log()
    log = proc.log()
    assert "database.wait_stopped" in log and "signal=SIGTERM" in log
    assert "Traceback" not in log


@pytest.mark.direct_postgres("it restarts a private server of its own")
def test_a_scheduler_restarted_while_postgres_restarts_waits_for_it(tmp_path):
    """The soak's other case, on a real server: a scheduler killed while Postgres restarts, and
    started again before the server accepts connections. The server comes back as a standby
    with hot_standby off, which refuses every connection ("the database system is not accepting
    connections") until it is promoted: a server that is up but not yet open, held there for as
    long as the test needs."""
    server = PrivateServer()
    try:
        server.start()
        env = manage_env(server.url(), RUNNERQ_EXAMPLES="0", REDIS_URL="")
        manage("migrate", "--verbosity", "0", env=env)

        def scheduler(name: str) -> subprocess.Popen:
            log_path = tmp_path / f"{name}.log"
            with open(log_path, "w") as log_file:
                proc = spawn_manage(
                    "runscheduler",
                    "--max-interval",
                    "0.5",
                    env=env,
                    stdout=log_file,
                    stderr=subprocess.STDOUT,
                )
            proc.log = log_path.read_text
            return proc

        first = scheduler("first")
        wait_until(lambda: "Scheduler started" in first.log(), timeout=60, message="the first scheduler")
        os.kill(first.pid, signal.SIGKILL)
        first.wait(10)
        server._pg("pg_ctl", "-D", str(server.data), "-m", "fast", "-w", "stop")
        (server.data / "standby.signal").touch()
        server._pg(
            "pg_ctl",
            "-D",
            str(server.data),
            "-l",
            str(server.root / "log"),
            "-w",
            "-o",
            f"-p {server.port} -c listen_addresses=127.0.0.1 -c unix_socket_directories={server.root} "
            "-c hot_standby=off",
            "start",
        )
        second = scheduler("second")
        wait_until(
            lambda: len(attempts(second.log(), server.port)) >= 2,
            timeout=60,
            message="the second one's attempts",
        )
        assert second.poll() is None, second.log()
        assert {reason for reason, _ in attempts(second.log(), server.port)} == {
            "the database system is not accepting connections"
        }, second.log()
        server._pg("pg_ctl", "-D", str(server.data), "-w", "promote")
        wait_until(lambda: "Scheduler started" in second.log(), timeout=60, message="the second scheduler")
        time.sleep(1.5)  # a few ticks
        assert stop_process(second) is not None and second.returncode == 0, second.log()
        assert int(re.search(r"Scheduler stopped after (\d+) tick", second.log())[1]) >= 1
    finally:
        server.stop()


@pytest.mark.direct_postgres("it configures the authentication of a private server of its own")
def test_refused_authentication_exits_78_at_once():
    """A wrong password and a pg_hba.conf rule that rejects the client, on a real server: what no
    restart fixes, so status 78 at the first attempt, no wait."""
    server = PrivateServer()
    try:
        hba = server.data / "pg_hba.conf"
        hba.write_text(
            "host all rq_password 127.0.0.1/32 scram-sha-256\n"
            "host all rq_rejected 127.0.0.1/32 reject\n"
            "host all all 127.0.0.1/32 trust\n"
            "local all all trust\n"
        )
        server.start()
        with psycopg.connect(server.url(), autocommit=True) as conn:
            conn.execute("CREATE ROLE rq_password LOGIN PASSWORD 'right'")
            conn.execute("CREATE ROLE rq_rejected LOGIN")
        cases = [
            ("runworker", "rq_password:wrong", 'password authentication failed for user "rq_password"'),
            ("runscheduler", "rq_password:wrong", 'password authentication failed for user "rq_password"'),
            (
                "runworker",
                "rq_rejected",
                'pg_hba.conf rejects connection for host "127.0.0.1", user "rq_rejected"',
            ),
        ]
        for command, user, refusal in cases:
            url = f"postgres://{user}@127.0.0.1:{server.port}/postgres"
            began = time.monotonic()
            result = manage(command, check=False, timeout=60, env=manage_env(url, RUNNERQ_EXAMPLES="0"))
            assert result.returncode == EX_CONFIG, (command, user, result.stderr)
            assert time.monotonic() - began < 20
            assert "database.unreachable" not in result.stderr and refusal in result.stderr, result.stderr
    finally:
        server.stop()
