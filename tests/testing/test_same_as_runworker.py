"""Immediate mode stores what a real ``runworker`` stores: each handler of ``handlers`` runs once
in immediate mode and once under a ``runworker --concurrency 1`` process with
``INLINE_WAIT_SECONDS = 0`` (immediate mode runs one attempt at a time and never waits
in-process; with more threads, whether a child finishes before its parent parks is a race), and the trees' rows, results, checkpoints and events
are compared with ids and times normalised."""

from __future__ import annotations

import json
import subprocess

import pytest
from django.db import transaction

from runnerq_django import signal
from runnerq_django.models import Activity
from runnerq_django.spec.statuses import TERMINAL
from runnerq_django.testing import WaitsForever, immediate
from tests.helpers import manage_env, spawn_manage, stop_process, wait_until
from tests.testing import handlers
from tests.testing.support import tree_snapshot

pytestmark = pytest.mark.slow


def _signal_before(queue):
    with transaction.atomic():
        handle = handlers.approval.enqueue({}, queue=queue)
        handle.signal("approved", {"by": "ann"})
    return handle


SCENARIOS = {
    "plain": lambda q: handlers.double.enqueue({"n": 21}, queue=q),
    "steps and a sleep": lambda q: handlers.steps_and_sleep.enqueue({"n": 1}, queue=q),
    "a child awaited": lambda q: handlers.parent_of_one.enqueue({"n": 2}, queue=q),
    "signal sent before it runs": _signal_before,
    "signal wait times out": lambda q: handlers.approval_with_timeout.enqueue({}, queue=q),
    "retried then succeeds": lambda q: handlers.flaky.enqueue({}, queue=q),
    "retries spent": lambda q: handlers.always_fails.enqueue({}, queue=q),
    "non-retryable failure": lambda q: handlers.refuses.enqueue({}, queue=q),
}


def _status(activity_id):
    return Activity.objects.filter(id=activity_id).values_list("status", flat=True).first()


def test_immediate_mode_stores_what_runworker_stores(live_db_url, tmp_path):
    immediate_roots = {}
    with immediate():
        for name, start in SCENARIOS.items():
            immediate_roots[name] = start("imm").id
        with pytest.raises(WaitsForever) as caught:
            handlers.approval.enqueue({}, queue="imm")
        immediate_roots["signal sent after it waits"] = caught.value.activity_id
        signal(caught.value.activity_id, "approved", {"by": "bob"}, queue="imm")  # runs it on

    worker_roots = {name: start("real").id for name, start in SCENARIOS.items()}
    late = handlers.approval.enqueue({}, queue="real")
    worker_roots["signal sent after it waits"] = late.id
    with open(tmp_path / "worker.log", "w") as log:  # the worker has its own copy of the descriptor
        proc = spawn_manage(
            "runworker",
            "--import",
            "tests.testing.handlers",
            "--queue",
            "real",
            "--concurrency",
            "1",
            "--poll-interval",
            "0.2",
            env=manage_env(
                live_db_url,
                DJANGO_SETTINGS_MODULE="tests.worker.settings",
                RUNNERQ_EXAMPLES="0",
                RUNNERQ_TEST_SETTINGS=json.dumps({"INLINE_WAIT_SECONDS": 0}),
            ),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    try:
        wait_until(lambda: _status(late.id) == "waiting", timeout=60, message="the late approval to wait")
        late.signal("approved", {"by": "bob"})
        wait_until(
            lambda: all(_status(i) in TERMINAL for i in worker_roots.values()),
            timeout=90,
            message="runworker to finish every scenario",
        )
    finally:
        stop_process(proc)

    differ = {
        name: (tree_snapshot(immediate_roots[name]), tree_snapshot(worker_roots[name]))
        for name in worker_roots
    }
    differ = {name: pair for name, pair in differ.items() if pair[0] != pair[1]}
    assert not differ, "\n".join(
        f"{name}:\n  immediate {pair[0]}\n  runworker {pair[1]}" for name, pair in differ.items()
    )
