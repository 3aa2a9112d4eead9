"""Log lines: each one's message is a sentence (what Django's default logging shows), and its
event name and facts are the record's extra. Text format (runworker and runscheduler --log-format
text): a value can never start a new line or send terminal controls raw; each record stays one
line that parses back to its values."""

from __future__ import annotations

import io
import json
import logging
import shlex

import pytest

from runnerq_django.logs import JsonFormatter, TextFormatter, log_event
from tests.helpers import manage, manage_env

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


def formatted(emit, formatter: logging.Formatter | None = None) -> str:
    stream = io.StringIO()
    handler = logging.StreamHandler(stream)
    handler.setFormatter(formatter or TextFormatter())
    logger = logging.getLogger("runnerq_django.test_logs")
    logger.handlers, logger.propagate = [handler], False
    logger.setLevel(logging.INFO)
    emit(logger)
    return stream.getvalue()


@pytest.mark.parametrize("value", HOSTILE)
def test_a_hostile_value_stays_inside_its_one_line(value):
    for emit in (
        lambda logger: logger.warning("activity.failed", extra={"error": value, "queue": "q"}),
        lambda logger: log_event(
            logger,
            logging.WARNING,
            "scheduler.job_invalid",
            "Job %(job)r is invalid: %(error)s",
            error=value,
            job="j",
        ),
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


def test_a_line_is_a_sentence_with_the_event_and_facts_beside_it():
    def emit(logger):
        log_event(
            logger,
            logging.WARNING,
            "worker.thing",
            "Thing %(thing)r broke after %(n)s tries.",
            thing="x",
            n=3,
        )

    records = []

    class Keeping(TextFormatter):
        def format(self, record):
            records.append(record)
            return super().format(record)

    out = formatted(emit, Keeping())
    (record,) = records
    assert record.getMessage() == "Thing 'x' broke after 3 tries."
    assert (record.event, record.thing, record.n) == ("worker.thing", "x", 3)
    assert shlex.split(out.split(" ", 2)[2]) == ["worker.thing", "thing=x", "n=3"]  # text: unchanged
    entry = json.loads(formatted(emit, JsonFormatter()))
    assert entry["event"] == "worker.thing" and entry["message"] == "Thing 'x' broke after 3 tries."
    assert (entry["thing"], entry["n"]) == ("x", 3)


def test_a_typo_is_explained_on_djangos_default_logging(live_db_url):
    """A new project has no LOGGING: Python's last-resort handler prints the message alone, so the
    message itself names the type, the closest registered one and what happens to the activity."""
    env = manage_env(live_db_url, DJANGO_SETTINGS_MODULE="tests.default_logging_settings")
    result = manage("runnerq_enqueue", "examples.helo", "{}", env=env, timeout=60)
    assert "runnerq.enqueue.unregistered_type" not in result.stderr, result.stderr
    assert "'examples.helo'" in result.stderr and "did you mean 'examples.hello'?" in result.stderr
    assert "runs only if a worker that handles it" in result.stderr
