"""Stopping the worker processes a benchmark started in a session of their own."""

from __future__ import annotations

import os
import signal
import subprocess


def stop_group(proc: subprocess.Popen) -> None:
    """SIGTERM to ``proc``'s process group (a worker and its children), SIGKILL after 60 s."""
    if proc.poll() is None:
        os.killpg(proc.pid, signal.SIGTERM)
    try:
        proc.wait(60)
    except subprocess.TimeoutExpired:
        os.killpg(proc.pid, signal.SIGKILL)
        proc.wait()
