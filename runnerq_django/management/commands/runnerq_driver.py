"""``manage.py runnerq_driver``: the RunnerQ conformance driver on stdin/stdout (SPEC.md section (g))."""

from __future__ import annotations

import io
import logging
import os
import sys
from typing import Any, TextIO

from django.core.management.base import CommandParser

from runnerq_django.conformance.driver import Driver, serve
from runnerq_django.logs import log_event
from runnerq_django.management.base import RunnerQCommand


class Command(RunnerQCommand):
    help = (
        "Speak the RunnerQ conformance driver protocol on stdin/stdout: one JSON request per line "
        '({"op": ..., "args": {...}}), one reply line each ({"ok": {...}} or {"error": {"kind", "message"}}). '
        "Start with an open {dsn, queue} request; the driver migrates that database if needed and "
        "uses the queue until the next open. Logs go to stderr; stdout carries protocol lines only."
    )
    requires_system_checks: list[str] = []  # the database comes from the first open, not from the settings
    requires_migrations_checks = False

    def add_arguments(self, parser: CommandParser) -> None:
        parser.add_argument(
            "--database",
            default=None,
            help="Django database alias to point at each open's DSN (default: RUNNERQ['DATABASE']).",
        )

    def handle(self, *args: Any, **options: Any) -> None:
        # Requests end at "\n" only: a bare "\r" is JSON whitespace inside a request, and
        # universal newlines would split the request there (every later reply off by one).
        replies = _claim_stdout()
        _log_to_stderr(options.get("verbosity", 1))
        served = serve(
            io.TextIOWrapper(sys.stdin.buffer, encoding="utf-8", errors="replace", newline="\n"),
            replies,
            Driver(using=options.get("database")),
        )
        log_event(
            logging.getLogger("runnerq_django.driver"),
            logging.INFO,
            "runnerq.driver.eof",
            "The conformance driver's input ended after %(served)s requests.",
            served=served,
        )


def _claim_stdout() -> TextIO:
    """Keep file descriptor 1 for protocol lines and send everything else (print(), libraries,
    C extensions writing to fd 1) to stderr, so nothing can corrupt the reply stream."""
    sys.stdout.flush()
    replies = os.fdopen(os.dup(1), "w", encoding="utf-8", buffering=1, newline="\n")
    os.dup2(2, 1)
    sys.stdout = sys.stderr
    return replies


def _log_to_stderr(verbosity: int) -> None:
    level = logging.DEBUG if verbosity >= 2 else logging.INFO if verbosity == 1 else logging.WARNING
    logger = logging.getLogger("runnerq_django")
    if not any(isinstance(h, logging.StreamHandler) for h in logger.handlers):
        handler = logging.StreamHandler(sys.stderr)
        handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s %(message)s"))
        logger.addHandler(handler)
    logger.setLevel(level)
