"""The rules for the scheduler's run options -- namespace, release, lease, max interval -- in one
place, for every way of giving them: ``RUNNERQ['SCHEDULER']`` and ``runscheduler``'s
``--namespace``, ``--release``, ``--lease`` and ``--max-interval``. Messages name the option the
way it was given (a settings key or a command-line flag) and the limit.

(``conf.validate()`` applies these rules to the settings; ``tests/scheduler`` checks that the
two agree value for value.)
"""

from __future__ import annotations

import math
import re
from typing import Any

NAMESPACE_PATTERN = re.compile(r"[A-Za-z0-9_.-]{1,40}")
KEYS = ("NAMESPACE", "RELEASE", "LEASE_SECONDS", "MAX_INTERVAL_SECONDS")
FLAGS = {"NAMESPACE": "--namespace", "RELEASE": "--release", "LEASE_SECONDS": "--lease",
         "MAX_INTERVAL_SECONDS": "--max-interval"}


def setting_name(key: str) -> str:
    return f"RUNNERQ['SCHEDULER'][{key!r}]"


def _seconds(value: Any) -> bool:
    return (isinstance(value, (int, float)) and not isinstance(value, bool) and math.isfinite(value)
            and value > 0)


def problems(values: dict[str, Any], names: dict[str, str] | None = None) -> list[tuple[set[str], str]]:
    """``(keys involved, message)`` for each rule ``values`` break. ``values`` holds the
    effective ``KEYS``; ``names`` says how to name each key in a message (default: the setting)."""

    def name(key: str) -> str:
        return (names or {}).get(key) or setting_name(key)

    found: list[tuple[set[str], str]] = []
    namespace = values.get("NAMESPACE")
    if not isinstance(namespace, str) or not NAMESPACE_PATTERN.fullmatch(namespace):
        found.append(({"NAMESPACE"}, f"{name('NAMESPACE')} must be 1-40 letters, digits, _ . or -; got {namespace!r}"))
    release = values.get("RELEASE")
    if isinstance(release, bool) or not isinstance(release, int) or release < 0:
        found.append(({"RELEASE"}, f"{name('RELEASE')} must be a whole number >= 0 (higher deploys win), "
                                   f"got {release!r}"))
    numbers_ok = True
    for key in ("LEASE_SECONDS", "MAX_INTERVAL_SECONDS"):
        if not _seconds(values.get(key)):
            found.append(({key}, f"{name(key)} must be a positive number of seconds, got {values.get(key)!r}"))
            numbers_ok = False
    if numbers_ok and values["MAX_INTERVAL_SECONDS"] * 3 > values["LEASE_SECONDS"]:
        lease = values["LEASE_SECONDS"]
        found.append(({"MAX_INTERVAL_SECONDS", "LEASE_SECONDS"},
                      f"{name('MAX_INTERVAL_SECONDS')} ({values['MAX_INTERVAL_SECONDS']:g} s) must be at most a third "
                      f"of {name('LEASE_SECONDS')} ({lease:g} s), i.e. at most {lease / 3:g} s, so the owner "
                      "renews its lease in time"))
    return found


def command_line_problems(given: dict[str, Any]) -> list[str]:
    """The problems that involve an option given on the command line (``given``: key -> value,
    None when not given), judged together with the settings' values for the rest. Problems of
    the settings alone are the system checks' to report."""
    from runnerq_django import conf

    settings = conf.get("SCHEDULER")
    values = {key: settings.get(key) if given.get(key) is None else given[key] for key in KEYS}
    names = {key: FLAGS[key] for key in KEYS if given.get(key) is not None}
    return [message for keys, message in problems(values, names) if keys & set(names)]


__all__ = ["FLAGS", "KEYS", "NAMESPACE_PATTERN", "command_line_problems", "problems", "setting_name"]
