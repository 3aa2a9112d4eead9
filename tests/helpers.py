"""Helpers the tests share: database URLs, scratch databases, running manage.py in a process."""

from __future__ import annotations

import ast
import os
import signal
import socket
import subprocess
import sys
import time
import uuid
from contextlib import contextmanager
from pathlib import Path
from urllib.parse import quote

REPO = Path(__file__).resolve().parent.parent
# The repository's own copy of the spec data (tests/spec/test_spec_copy.py checks it).
SPEC_DIR = REPO / "runnerq_django" / "spec" / "data"


def url_for(settings_dict: dict, name: str | None = None) -> str:
    """A libpq URL for a Django DATABASES entry (Unix sockets included)."""
    user = quote(settings_dict.get("USER") or "postgres")
    password = settings_dict.get("PASSWORD") or ""
    auth = f"{user}:{quote(password)}@" if password else f"{user}@"
    host = settings_dict.get("HOST") or ""
    port = settings_dict.get("PORT") or ""
    dbname = name or settings_dict["NAME"]
    if host.startswith("/") or not host:
        query = f"?host={quote(host)}" if host else ""
        if port:
            query += ("&" if query else "?") + f"port={port}"
        return f"postgres://{auth}/{dbname}{query}"
    return f"postgres://{auth}{host}:{port or 5432}/{dbname}"


def with_dbname(url: str, dbname: str) -> str:
    from psycopg.conninfo import conninfo_to_dict, make_conninfo

    params = conninfo_to_dict(url)
    params["dbname"] = dbname
    return make_conninfo(**params)


def server_major(url: str) -> int:
    import psycopg

    with psycopg.connect(url, autocommit=True) as conn:
        return conn.info.server_version // 10000


@contextmanager
def scratch_database(server_url: str, prefix: str = "rq_scratch"):
    """A new empty database on the server of ``server_url``; dropped afterwards."""
    import psycopg

    name = f"{prefix}_{uuid.uuid4().hex[:12]}"
    with psycopg.connect(server_url, autocommit=True) as conn:
        conn.execute(f'CREATE DATABASE "{name}"')
    try:
        yield with_dbname(server_url, name)
    finally:
        with psycopg.connect(server_url, autocommit=True) as conn:
            conn.execute(f'DROP DATABASE IF EXISTS "{name}" WITH (FORCE)')


def manage_env(db_url: str | None = None, **extra: str) -> dict[str, str]:
    env = dict(os.environ)
    env.pop("PGHOST", None)
    if db_url:
        env["DATABASE_URL"] = db_url
    env.setdefault("PYTHONUNBUFFERED", "1")
    env.update(extra)
    return env


def manage(
    *args: str, db_url: str | None = None, timeout: float = 120, check: bool = True, env: dict | None = None
) -> subprocess.CompletedProcess:
    """Run ``python manage.py *args`` in a new process against ``db_url``."""
    result = subprocess.run(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env or manage_env(db_url),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    if check and result.returncode != 0:
        raise AssertionError(
            f"manage.py {' '.join(args)} exited {result.returncode}\n{result.stdout}\n{result.stderr}"
        )
    return result


def spawn_manage(*args: str, db_url: str | None = None, env: dict | None = None, **popen) -> subprocess.Popen:
    """Start ``python manage.py *args`` in its own process group (so a test can kill -9 it)."""
    popen.setdefault("stdout", subprocess.PIPE)
    popen.setdefault("stderr", subprocess.STDOUT)
    return subprocess.Popen(
        [sys.executable, "manage.py", *args],
        cwd=REPO,
        env=env or manage_env(db_url),
        text=True,
        start_new_session=True,
        **popen,
    )


def stop_process(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout: float = 30) -> str:
    """Signal a process started by spawn_manage, wait for it, and return what it printed."""
    if proc.poll() is None:
        os.killpg(proc.pid, sig)
    try:
        out, _ = proc.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        out, _ = proc.communicate()
    return out or ""


def wait_until(predicate, timeout: float = 30, interval: float = 0.05, message: str = "condition"):
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        value = predicate()
        if value:
            return value
        time.sleep(interval)
    raise AssertionError(f"timed out after {timeout}s waiting for {message}")


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def redis_reachable(url: str) -> bool:
    import redis

    try:
        return bool(redis.Redis.from_url(url, socket_connect_timeout=1).ping())
    except Exception:
        return False


def start_redis_server(binary: str, port: int, data_dir, *options: str) -> subprocess.Popen:
    """A redis-server of a test's own on 127.0.0.1:``port`` that keeps nothing on disk, once it
    answers (killed, and RuntimeError, when it does not within 10 s)."""
    proc = subprocess.Popen(
        [
            *(binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no"),
            *options,
            *("--dir", str(data_dir)),
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    deadline = time.monotonic() + 10
    while not redis_reachable(f"redis://127.0.0.1:{port}/0"):
        if time.monotonic() > deadline:
            proc.kill()
            proc.wait()
            raise RuntimeError(f"redis-server on port {port} did not start")
        time.sleep(0.02)
    return proc


def format_checker():
    """jsonschema's FormatChecker, refusing to run without the "date-time" check: jsonschema skips
    formats whose optional validator is missing, which would let bad event details pass."""
    from jsonschema import FormatChecker

    checker = FormatChecker()
    missing = {"date-time", "uuid"} - set(checker.checkers)
    assert not missing, f"jsonschema cannot check {sorted(missing)}: install rfc3339-validator (dev extra)"
    return checker


def docstring_ids(tree: ast.AST) -> set[int]:
    """The ``id()`` of every docstring node of a parsed module (prose, not code: source scans skip them)."""
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and node.body:
            first = node.body[0]
            if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant):
                found.add(id(first.value))
    return found
