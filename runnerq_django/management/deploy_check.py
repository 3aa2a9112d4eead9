"""The deploy check (``manage.py runnerq_deploy_check``, and the system check
``runnerq.W030`` under ``check --deploy``): compare the code about to run -- the activity types
it registers and the version gates it declares -- with the unfinished work of the database, and
report what that code would strand:

- ``unhandled_type``: pending, scheduled, retrying, waiting or running activities of a type no
  handler registers any more (they would wait for ever);
- ``waiting_on_unhandled``: parents parked on a child of such a type;
- ``canvas_unhandled``: canvases still running whose members name such a type;
- ``version_unserved``: live runs that recorded a version of a declared gate older than the
  oldest the code serves (``runnerq_django.activities.versions``).

Each finding has counts and example ids. Types handled by workers in another language are
named with ``ignore`` (``--ignore-type``). Read-only.

Internal: not part of the public API.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from dataclasses import dataclass, field
from typing import Any

from runnerq_django import routing
from runnerq_django.activities import versions
from runnerq_django.activities.registry import ActivityRegistry
from runnerq_django.canvas import CANVAS_TYPE
from runnerq_django.storage import deploy as reads

__all__ = ["Finding", "check_database", "run"]

CANVASES_READ = 10_000


@dataclass(frozen=True)
class Finding:
    kind: str
    message: str
    database: str
    count: int
    examples: tuple[str, ...] = ()
    details: dict[str, Any] = field(default_factory=dict)

    def document(self) -> dict[str, Any]:
        return {
            "kind": self.kind,
            "message": self.message,
            "database": self.database,
            "count": self.count,
            "examples": list(self.examples),
            **self.details,
        }


def _canvas_types(node: Any) -> Iterable[str]:
    """The member types a canvas's JSON names (not looking into members' payloads or options)."""
    if isinstance(node, dict):
        kind = node.get("type")
        if isinstance(kind, str):
            yield kind
        for key, value in node.items():
            if key not in ("payload", "options", "type"):
                yield from _canvas_types(value)
    elif isinstance(node, list):
        for item in node:
            yield from _canvas_types(item)


def _ids(values: Iterable[uuid.UUID]) -> tuple[str, ...]:
    return tuple(str(v) for v in values)


def check_database(alias: str, registry: ActivityRegistry, ignore: Iterable[str] = ()) -> list[Finding]:
    """The findings of one database."""
    ignored = set(ignore)

    def handled(kind: str) -> bool:
        return kind in ignored or registry.resolve(kind) is not None

    findings: list[Finding] = []
    gone: dict[tuple[str, str], list[reads.LiveTypes]] = {}
    for live in reads.live_types(using=alias):
        if not handled(live.activity_type):
            gone.setdefault((live.queue, live.activity_type), []).append(live)
    for (queue, kind), rows in sorted(gone.items()):
        total = sum(r.count for r in rows)
        by_status = {r.status: r.count for r in rows}
        examples = tuple(i for r in rows for i in _ids(r.examples))[:3]
        findings.append(
            Finding(
                "unhandled_type",
                f"{total} unfinished {kind!r} activities on queue {queue!r} "
                f"({', '.join(f'{n} {s}' for s, n in sorted(by_status.items()))}): no handler registers the type",
                alias,
                total,
                examples,
                {"queue": queue, "type": kind, "statuses": by_status},
            )
        )
    gone_types = sorted({kind for _, kind in gone})
    for queue, kind, parents, parent_ids in reads.parents_waiting_on(gone_types, using=alias):
        findings.append(
            Finding(
                "waiting_on_unhandled",
                f"{parents} parents on queue {queue!r} wait for a child of type {kind!r}, which no handler registers",
                alias,
                parents,
                _ids(parent_ids),
                {"queue": queue, "type": kind},
            )
        )
    stranded: dict[str, list[str]] = {}
    for canvas_id, _, payload in reads.live_canvases(CANVAS_TYPE, limit=CANVASES_READ, using=alias):
        for kind in set(_canvas_types(payload.get("canvas") if isinstance(payload, dict) else None)):
            if not handled(kind):
                stranded.setdefault(kind, []).append(str(canvas_id))
    for kind, ids in sorted(stranded.items()):
        findings.append(
            Finding(
                "canvas_unhandled",
                f"{len(ids)} running canvases have members of type {kind!r}, which no handler registers",
                alias,
                len(ids),
                tuple(ids[:3]),
                {"type": kind},
            )
        )
    declared = versions.declared()
    for kind, gate_name, low, runs, run_ids in reads.live_versions(using=alias):
        gate = declared.get(kind, {}).get(gate_name)
        if gate is not None and low < gate.oldest:
            findings.append(
                Finding(
                    "version_unserved",
                    f"live {kind!r} runs recorded version {low} of gate {gate_name!r}; the code serves "
                    f"{gate.oldest}..{gate.latest}",
                    alias,
                    runs,
                    _ids(run_ids),
                    {"type": kind, "gate": gate_name, "oldest_recorded": low, "oldest_served": gate.oldest},
                )
            )
    return findings


def run(
    registry: ActivityRegistry, *, aliases: Iterable[str] | None = None, ignore: Iterable[str] = ()
) -> list[Finding]:
    """The findings of every database that hosts queues (or ``aliases``)."""
    found: list[Finding] = []
    for alias in aliases if aliases is not None else routing.databases():
        found += check_database(alias, registry, ignore)
    return found


def deploy_messages(app_configs: Any = None, databases: Any = None, **kwargs: Any) -> list[Any]:
    """``check --deploy --database ALIAS``: each finding as warning ``runnerq.W030``. As Django's
    own database checks do, only the databases the command names are read (none by default: a
    build step may have none), and one that can't be read (unreachable, not migrated) is skipped."""
    from django.core import checks
    from django.db import DatabaseError

    from runnerq_django.activities.registry import registry
    from runnerq_django.storage.errors import StorageError

    messages: list[Any] = []
    for alias in routing.databases():
        if alias not in (databases or ()):
            continue
        try:
            findings = check_database(alias, registry)
        except (DatabaseError, StorageError):
            continue
        messages += [
            checks.Warning(
                f"{finding.message} (e.g. {', '.join(finding.examples)})"
                if finding.examples
                else finding.message,
                hint="manage.py runnerq_deploy_check --json lists them; register the type again, drain or "
                "cancel that work before the deploy, or name a type other workers handle with --ignore-type.",
                id="runnerq.W030",
            )
            for finding in findings
        ]
    return messages


def register_check() -> None:
    from django.core import checks

    # Tagged "database" only: Django runs such checks for the databases `check --database` names
    # (Django 6 leaves them out otherwise; deploy_messages reads only those on 5.2 too).
    checks.register(deploy_messages, checks.Tags.database, deploy=True)
