"""What every RunnerQ management command shares: command-line text UTF-8 can carry, and numeric
options with bounds, both refused with a message naming the option (a ``CommandError``)."""

from __future__ import annotations

import argparse
import logging
import math
from collections.abc import Callable
from typing import Any, NoReturn

from django.core.management.base import BaseCommand, CommandError, OutputWrapper

from runnerq_django import conf

# The options Django hands to ``handle()``/``execute()``: argparse's namespace as a dict.
Options = dict[str, Any]


def bounded(kind: type, low: float, high: float) -> Callable[[str], Any]:
    """An argparse ``type`` for a number ``low..high``: ``-c 100000000`` is refused at once with
    ``argument -c/--concurrency: must be a whole number 1..1000, got 100000000``."""
    what = "a whole number" if kind is int else "a number"
    limits = f"{_show(low)}..{_show(high)}"

    def parse(text: str) -> Any:
        try:
            value = kind(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be {what} {limits}, got {text!r}") from None
        if not math.isfinite(value) or not low <= value <= high:
            raise argparse.ArgumentTypeError(f"must be {what} {limits}, got {text}")
        return value

    parse.__name__ = f"{what} {limits}"
    return parse


def limits(rule: conf.Rule, *, low: float | None = None, high: float | None = None) -> tuple[float, float]:
    """The range of setting ``rule`` (``low``/``high`` instead of its own where given: a
    command-line value may mean something the setting cannot, like a grace of 0)."""
    low = rule.low if low is None else low
    high = rule.high if high is None else high
    if low is None or high is None:
        raise ValueError(f"setting {rule.key} has no {'low' if low is None else 'high'} bound")
    return low, high


def within(
    kind: type, rule: conf.Rule, *, low: float | None = None, high: float | None = None
) -> Callable[[str], Any]:
    """``bounded`` by the range of setting ``rule`` (see ``limits``)."""
    return bounded(kind, *limits(rule, low=low, high=high))


def _show(number: float) -> str:
    return str(int(number)) if float(number).is_integer() else f"{number:g}"


def undecodable(value: str) -> str | None:
    """Why ``value`` cannot be UTF-8, or None. Python decodes a command line that is not UTF-8
    with ``surrogateescape``: byte 0xFF arrives as U+DCFF, which no database column can store."""
    try:
        value.encode()
    except UnicodeEncodeError as exc:
        code = ord(value[exc.start])
        if 0xDC80 <= code <= 0xDCFF:
            return f"is not valid UTF-8 (byte 0x{code - 0xDC00:02X} at character {exc.start}); give it as UTF-8 text"
        return f"contains the lone surrogate U+{code:04X}, which UTF-8 cannot carry"
    return None


class RunnerQCommand(BaseCommand):
    def execute(self, *args: Any, **options: Any) -> str | None:
        if options.get("stdout"):  # what BaseCommand.execute does, so --json errors go there too
            self.stdout = OutputWrapper(options["stdout"])
        for name, value in [("argument", arg) for arg in args] + list(options.items()):
            for text in value if isinstance(value, (list, tuple)) else [value]:
                if isinstance(text, str) and (problem := undecodable(text)):
                    self.fail(options, f"{self._option_name(name)} {problem}", field=name)
        return super().execute(*args, **options)

    def fail(
        self, options: Options, message: str, *, code: str = "invalid_argument", field: str | None = None
    ) -> NoReturn:
        raise CommandError(message)

    def _option_name(self, dest: str) -> str:
        """``--command-id`` for dest ``command_id``; a positional argument by its metavar."""
        parser = self.create_parser("manage.py", self.__module__.rsplit(".", 1)[-1])
        for action in parser._actions:
            if action.dest == dest:
                metavar = action.metavar if isinstance(action.metavar, str) else None
                return max(action.option_strings, key=len, default=None) or metavar or dest
        return dest


class ServiceCommand(RunnerQCommand):
    """A long-running command (runworker, runscheduler): it configures its own logging, may
    apply migrations first, and runs the system checks itself once they have run."""

    requires_system_checks: list[str] = []  # checked in handle(), after --migrate has had its chance

    def start_logging(self, opts: Options) -> None:
        from runnerq_django.logs import configure

        verbosity = opts["verbosity"]
        configure(
            opts["log_format"],
            logging.DEBUG if verbosity >= 2 else logging.WARNING if verbosity == 0 else logging.INFO,
        )

    def migrate_if_asked(self, opts: Options) -> None:
        if opts["migrate"]:
            from django.core.management import call_command

            from runnerq_django import routing

            # Django's default database, as before, then every one that hosts a queue
            # (RUNNERQ['QUEUE_DATABASES']) and --database's.
            given = [opts["database"]] if opts.get("database") else []
            for alias in dict.fromkeys(["default", *routing.databases(), *given]):
                call_command(
                    "migrate", database=alias, interactive=False, verbosity=max(0, opts["verbosity"] - 1)
                )
