"""Structured log lines for the worker and the scheduler: one line per state change, as ``text``
(``time LEVEL event key=value ...``) or ``json`` (one object per line, for log shippers).

Every line is logged by :func:`log_event`: its message is a sentence for people (what Django's
default logging, and any ``%(message)s`` format, shows), and the event name and the facts are the
``extra`` of the record, so both formats carry the same event and facts
(``runworker``/``runscheduler --log-format``) and a test reads ``record.event``.

Internal: not part of the public API.
"""

from __future__ import annotations

import json
import logging
import re
import sys
from datetime import UTC, datetime
from typing import Any

# Attributes every LogRecord has; anything else on a record came from ``extra``.
_STANDARD = set(vars(logging.LogRecord("", 0, "", 0, "", (), None))) | {"message", "asctime", "taskName"}


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    return {key: value for key, value in vars(record).items() if key not in _STANDARD}


def event_of(record: logging.LogRecord) -> str:
    """The event name of a record: its ``event`` extra, else (a record logged some other way) its
    message."""
    event = getattr(record, "event", None)
    return event if isinstance(event, str) else record.getMessage()


def _facts(record: logging.LogRecord) -> dict[str, Any]:
    fields = extra_fields(record)
    fields.pop("event", None)
    return fields


def _timestamp(record: logging.LogRecord) -> str:
    return (
        datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds").replace("+00:00", "Z")
    )


# Characters a value must not put in a text line as they are: line breaks (a forged second line),
# terminal controls (ESC and C1 sequences can rewrite the screen) and bidirectional overrides.
_CONTROLS = re.compile("[\x00-\x1f\x7f-\x9f\u2028\u2029\u202a-\u202e\u2066-\u2069]")
_NEEDS_QUOTES = re.compile(r'[\s"=\\]')
_SHORT = {"\n": "\\n", "\r": "\\r", "\t": "\\t"}


def _escape(text: str) -> str:
    return _CONTROLS.sub(lambda m: _SHORT.get(m.group(), f"\\u{ord(m.group()):04x}"), text)


def text_value(value: object) -> str:
    """A value as one token of a ``key=value`` line: as is when plain, else quoted with
    backslash escapes (JSON's), so a value can never end the line or reach the terminal raw."""
    text = str(value)
    if text and not _NEEDS_QUOTES.search(text) and not _CONTROLS.search(text):
        return text
    return '"' + _escape(text.replace("\\", "\\\\").replace('"', '\\"')) + '"'


class TextFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        parts = [_timestamp(record), record.levelname, _escape(event_of(record))]
        parts += [f"{key}={text_value(value)}" for key, value in _facts(record).items()]
        line = " ".join(parts)
        if record.exc_info:
            line += "\n" + self.formatException(record.exc_info)
        return line


class JsonFormatter(logging.Formatter):
    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "ts": _timestamp(record),
            "level": record.levelname.lower(),
            "logger": record.name,
            "event": event_of(record),
            "message": record.getMessage(),
            **_facts(record),
        }
        if record.exc_info:
            entry["exception"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


def log_event(
    logger: logging.Logger,
    level: int,
    event: str,
    sentence: str,
    /,
    *,
    exc_info: Any = None,
    **fields: Any,
) -> None:
    """Log ``event`` with ``fields`` as its facts and ``sentence`` as its message.

    ``sentence`` says what happened to someone reading a plain log (Django's default logging prints
    the message alone), naming the facts that matter: a ``%``-style template over the fields
    (``"no handler registers %(activity_type)r"``), filled in only when the line is written. The
    event name and the fields go as ``extra``, for the ``text`` and ``json`` formats and for
    tests (``record.event``). Instants become ISO strings (``YYYY-MM-DDTHH:MM:SSZ``), so every
    format shows the same text."""
    if logger.isEnabledFor(level):
        facts = {name: _value(value) for name, value in fields.items()}
        logger.log(
            level,
            sentence,
            *((facts,) if facts else ()),
            extra={"event": event, **facts},
            exc_info=exc_info,
            stacklevel=2,
        )


def _value(value: Any) -> Any:
    if isinstance(value, datetime):
        return value.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return value


FORMATS = {"text": TextFormatter, "json": JsonFormatter}


def configure(log_format: str, level: int) -> None:
    """Send ``runnerq_django`` logs to stderr in ``log_format``. ``django`` leaves the project's
    ``LOGGING`` alone (only the level is set)."""
    logger = logging.getLogger("runnerq_django")
    logger.setLevel(level)
    if log_format == "django":
        return
    handler = logging.StreamHandler(sys.stderr)
    handler.setFormatter(FORMATS[log_format]())
    logger.handlers = [handler]
    logger.propagate = False
