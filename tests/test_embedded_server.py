"""The test project's embedded PostgreSQL (``testproject.database``) stops when the last process
using it exits, even after another one died without its ``atexit`` hook (the wheel's own list
of handles then names a process that is gone, and it would never stop the server)."""

from __future__ import annotations

import os
import subprocess
import sys
import time

import psutil
import pytest

from tests.helpers import REPO

pytestmark = pytest.mark.slow  # an initdb of its own, in its own data folder

JOIN = (
    "import os, sys; from testproject.database import embedded_url; embedded_url();"
    " print(open(os.path.join(os.environ['RUNNERQ_EMBEDDED_PGDATA'], 'postmaster.pid')).readline().strip(),"
    " flush=True); {exit}"
)


def _join(data_dir, exit_statement: str) -> int:
    """A process that starts or joins the server, then leaves by ``exit_statement``; the
    postmaster's pid."""
    env = {k: v for k, v in os.environ.items() if k not in ("DATABASE_URL", "PGHOST", "XDG_RUNTIME_DIR")}
    env["RUNNERQ_EMBEDDED_PGDATA"] = str(data_dir)
    proc = subprocess.run(
        [sys.executable, "-c", JOIN.format(exit=exit_statement)],
        cwd=REPO,
        env=env,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert proc.returncode == 0, proc.stdout + proc.stderr
    return int(proc.stdout.split()[0])


def _stopped(pid: int, within: float = 30.0) -> bool:
    deadline = time.monotonic() + within
    while time.monotonic() < deadline:
        if not psutil.pid_exists(pid) or psutil.Process(pid).status() == psutil.STATUS_ZOMBIE:
            return True
        time.sleep(0.1)
    return False


def test_the_last_process_stops_the_server_after_one_died_without_its_exit_hooks(tmp_path):
    data_dir = tmp_path / "pgdata"
    postmaster = _join(data_dir, "os._exit(0)")  # no atexit: it stays on the list of handles
    try:
        assert psutil.pid_exists(postmaster)  # nobody stopped it
        assert _join(data_dir, "sys.exit(0)") == postmaster  # joins the running server, exits cleanly
        assert _stopped(postmaster), "the last process to exit left the embedded server running"
        assert not (data_dir / "postmaster.pid").exists()
    finally:
        if psutil.pid_exists(postmaster):
            psutil.Process(postmaster).kill()
