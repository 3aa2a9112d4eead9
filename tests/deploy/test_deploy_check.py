"""``manage.py runnerq_deploy_check`` (and ``check --deploy``'s runnerq.W030): the unfinished work
a deploy would strand, with counts and example ids, and an exit status a pipeline stops on."""

from __future__ import annotations

import json

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError

from runnerq_django import enqueue
from runnerq_django.activities import versions
from runnerq_django.canvas import chain, signature
from tests.deploy import handlers


def _check(capsys, *args) -> tuple[int, dict]:
    try:
        call_command("runnerq_deploy_check", "--json", *args)
        code = 0
    except CommandError as exc:
        code = exc.returncode
    return code, json.loads(capsys.readouterr().out)


def test_a_clean_database_passes(runnerq_worker, capsys):
    handlers.undeclared.enqueue({})
    assert _check(capsys) == (0, {"ok": True, "findings": []})  # pending, but its type is handled


def test_removed_types_waiting_parents_and_canvases_are_reported(runnerq_worker, capsys):
    removed = [enqueue("d.removed", {"n": i}) for i in range(3)]
    parent = handlers.parent.enqueue({})  # spawns a child of a removed type and parks on it
    chain(signature("d.removed_member"), signature("d.undeclared")).enqueue()
    runnerq_worker.run_until_idle(types=["d.parent", "runnerq.canvas"])
    assert parent.status() == "waiting"

    code, report = _check(capsys)
    assert code == 1 and report["ok"] is False
    by_kind = {}
    for finding in report["findings"]:
        by_kind.setdefault(finding["kind"], []).append(finding)
    unhandled = {f["type"]: f for f in by_kind["unhandled_type"]}
    assert set(unhandled) == {"d.removed", "d.removed_child", "d.removed_member"}
    assert unhandled["d.removed"]["count"] == 3 and unhandled["d.removed"]["statuses"] == {"pending": 3}
    assert set(unhandled["d.removed"]["examples"]) <= {str(h.id) for h in removed}
    assert len(unhandled["d.removed"]["examples"]) == 3
    waiting = {f["type"]: f for f in by_kind["waiting_on_unhandled"]}
    assert set(waiting) == {
        "d.removed_child",
        "d.removed_member",
    }  # the parent, and the canvas's orchestrator
    assert (waiting["d.removed_child"]["count"], waiting["d.removed_child"]["examples"]) == (
        1,
        [str(parent.id)],
    )
    (canvas,) = by_kind["canvas_unhandled"]
    assert canvas["type"] == "d.removed_member" and canvas["count"] == 1

    # Types another language's workers handle are named, and then pass.
    code, report = _check(
        capsys,
        "--ignore-type",
        "d.removed",
        "--ignore-type",
        "d.removed_child",
        "--ignore-type",
        "d.removed_member",
    )
    assert (code, report["findings"]) == (0, [])


def test_runs_on_a_version_the_code_no_longer_serves_are_reported(runnerq_worker, capsys):
    run = handlers.flow.enqueue({})  # code 1 in this process: parks on its signal
    runnerq_worker.run_until_idle()
    from runnerq_django.spec.keys import checkpoint_id
    from runnerq_django.storage.types import Claim  # noqa: F401  (the run's checkpoint is written below)
    from tests.worker.support import fetch

    # The version an older deploy's code recorded for this run (as ctx.version writes it).
    fetch(
        "INSERT INTO runnerq_results (activity_id, queue_name, state, data, owner_activity_id, step, serialization)"
        " VALUES (%s, 'default', 'Ok', '{\"version\": 1}', %s, 'version:pricing', 'json-v1')",
        [checkpoint_id(run.id, "version", "pricing"), run.id],
    )
    assert _check(capsys)[0] == 0  # no gate declared for the type: nothing to compare
    versions.declare("d.flow", pricing=(2, 3))
    try:
        code, report = _check(capsys)
    finally:
        versions._gates.pop("d.flow", None)
    assert code == 1
    (finding,) = report["findings"]
    assert (finding["kind"], finding["gate"], finding["oldest_recorded"], finding["oldest_served"]) == (
        "version_unserved",
        "pricing",
        1,
        2,
    )
    assert finding["examples"] == [str(run.id)]


def test_check_deploy_warns_with_w030(runnerq_worker):
    from django.core import checks

    enqueue("d.removed", {})

    def w030(**kwargs):
        return [
            m for m in checks.run_checks(include_deployment_checks=True, **kwargs) if m.id == "runnerq.W030"
        ]

    messages = w030(databases=["default"])
    assert len(messages) == 1 and "'d.removed'" in messages[0].msg
    # As Django's own database checks: without --database, no database is read.
    assert w030() == []


@pytest.fixture(autouse=True)
def _runs_table(runs_table):
    """The handlers record their steps."""
