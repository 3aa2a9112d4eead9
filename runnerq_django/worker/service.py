"""The shape every long-running part of the worker shares: a loop on a daemon thread of its own,
whose database connections are closed when the loop ends."""

from __future__ import annotations

import threading


class ThreadService:
    thread_name = "runnerq"

    def __init__(self) -> None:
        self._thread = threading.Thread(target=self._run, name=self.thread_name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def join(self, timeout: float) -> None:
        self._thread.join(timeout)

    def is_alive(self) -> bool:
        return self._thread.is_alive()

    def _run(self) -> None:
        from django.db import connections

        try:
            self._loop()
        finally:
            connections.close_all()  # this thread's connections; nobody else would close them

    def _loop(self) -> None:
        raise NotImplementedError
