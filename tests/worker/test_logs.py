"""Text-format logs (runworker and runscheduler --log-format text): a value can never start a new
line or send terminal controls raw; each record stays one line that parses back to its values."""

from __future__ import annotations

import io
import json
import logging
import shlex

import pytest

from runnerq_django.logs import TextFormatter, log_event

HOSTILE = [
    "boom\n2026-01-01T00:00:00.000Z ERROR activity.forged id=1",
    "cr\rover",
    "\x1b[2J\x1b[31mred",
    "\x9b2J",  # a C1 control sequence introducer
    "\u202egnp.exe",  # a right-to-left override
    "line\u2028separator",
    'quote " and back\\slash',
    "a=b",
]


def formatted(emit) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(TextFormatter())
    logger = logging.getLogger("runnerq_django.test_logs")
    logger.handlers, logger.propagate = [handler], False
    logger.setLevel(logging.INFO)
    emit(logger)
    return stream.getvalue()


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_value_stays_inside_its_one_line(value):
    for emit in (
        lambda logger: logger.warning("activity.failed", extra={"error": value, "queue": "q"}),
        lambda logger: log_event(logger, logging.WARNING, "scheduler.job_invalid", error=value, job="j"),
    ):
        out = formatted(emit)
        assert out.count("\n") == 1 and out.endswith("\n"), out
        line = out[:-1]
        assert not any(ord(ch) < 0x20 or 0x7F <= ord(ch) <= 0x9F or ch in "\u202e\u2028" for ch in line), line
        token = line.split(" error=", 1)[1].rsplit(" ", 1)[0]
        assert json.loads(token) == value  # quoted with JSON's escapes: it reads back exactly


def test_plain_values_stay_unquoted():
    out = formatted(
        lambda logger: logger.info("worker.started", extra={"queues": "default", "concurrency": 8})
    )
    assert shlex.split(out.split(" ", 2)[2]) == ["worker.started", "queues=default", "concurrency=8"]
