"""A scheduler in a process of its own, driven step by step by the test (``proc.py`` in serve
mode): its own Django setup, its own database session, its own memory -- what two schedulers on
two machines have. ``call`` sends a step and waits for its reply; ``send`` and ``receive`` split
that for a step that must block (a takeover waiting for the old owner's transaction)."""

from __future__ import annotations

import json
import queue
import subprocess
import sys
import threading
from datetime import datetime

from runnerq_django.scheduler.schedules import format_instant
from tests.helpers import REPO, manage_env


class Remote:
    def __init__(self, config: dict, db_url: str):
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.scheduler.proc", json.dumps({**config, "serve": True})],
            cwd=REPO,
            env=manage_env(db_url),
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=subprocess.PIPE,
            text=True,
        )
        self._lines: queue.Queue = queue.Queue()
        self.stderr: list[str] = []
        threading.Thread(target=self._pump, args=(self.proc.stdout, self._lines.put), daemon=True).start()
        threading.Thread(target=self._pump, args=(self.proc.stderr, self.stderr.append), daemon=True).start()
        self.ready: dict | None = None

    @staticmethod
    def _pump(stream, put) -> None:
        for line in iter(stream.readline, ""):
            put(line)

    def wait_ready(self, timeout: float = 60) -> Remote:
        self.ready = self.receive(timeout)
        assert self.ready.get("ready"), self.ready
        return self

    @property
    def node(self) -> str:
        return self.ready["node"]

    @property
    def backend_pid(self) -> int:
        return self.ready["backend_pid"]

    def send(self, op: str, now: datetime | None = None, **fields) -> None:
        command = {"op": op, **fields}
        if now is not None:
            command["now"] = format_instant(now)
        self.proc.stdin.write(json.dumps(command) + "\n")
        self.proc.stdin.flush()

    def receive(self, timeout: float = 30) -> dict:
        try:
            line = self._lines.get(timeout=timeout)
        except queue.Empty:
            raise AssertionError(f"no reply in {timeout}s; stderr:\n{''.join(self.stderr[-40:])}") from None
        return json.loads(line)

    def pending(self) -> bool:
        """Whether a reply is waiting (without taking it)."""
        return not self._lines.empty()

    def call(self, op: str, now: datetime | None = None, timeout: float = 30, **fields) -> dict:
        self.send(op, now, **fields)
        return self.receive(timeout)

    def tick(self, now: datetime | None = None) -> dict:
        return self.call("tick", now)

    def stop(self) -> None:
        if self.proc.poll() is None:
            try:
                self.send("exit")
                self.proc.wait(10)
            except (BrokenPipeError, subprocess.TimeoutExpired, OSError):
                self.proc.kill()
                self.proc.wait()


def start(configs: list[dict], db_url: str) -> list[Remote]:
    """Start several at once (their startups overlap), and wait until each is ready."""
    remotes = [Remote(config, db_url) for config in configs]
    for remote in remotes:
        remote.wait_ready()
    return remotes


def events(reply: dict, event: str, level: str | None = None) -> list[dict]:
    return [
        line for line in reply["logs"] if line["event"] == event and (level is None or line["level"] == level)
    ]


def job_config(job_id: str, **options) -> dict:
    """A job for ``proc.py``: ``every_s``/``grace_s`` in seconds, any other declaration option."""
    if "cron" not in options and "every_s" not in options:
        options["every_s"] = 60
    return {"id": job_id, **options}
