"""Test modes as Django's ``django.tasks`` has them: the client sends ``activity_enqueued``, immediate
mode is a receiver of it, and the app's start-up imports nothing of the testing package unless
``RUNNERQ['IMMEDIATE']`` names the mode."""

from __future__ import annotations

import json

from runnerq_django import enqueue, enqueue_many, get_handle, signal
from runnerq_django.signals import activity_enqueued
from tests.helpers import manage, manage_env
from tests.testing import handlers


class _Received:
    def __init__(self) -> None:
        self.calls: list[dict] = []

    def __call__(self, sender, **kwargs):
        self.calls.append({"sender": sender, **kwargs})


def test_a_receiver_gets_the_queue_the_ids_and_the_alias_of_each_enqueue_and_signal(transactional_db):
    received = _Received()
    activity_enqueued.connect(received)
    try:
        one = enqueue(handlers.double, {"n": 1}, queue="sig_q")
        many = enqueue_many(handlers.double, [{"n": 2}, {"n": 3}], queue="sig_q")
        signal(get_handle(one.id, queue="sig_q"), "poke", {"x": 1})
    finally:
        activity_enqueued.disconnect(received)
    enqueue(handlers.double, {"n": 4}, queue="sig_q")  # disconnected: not received
    got = [(c["sender"], c["queue"], c["activity_ids"], c["using"]) for c in received.calls]
    assert got == [
        (None, "sig_q", [one.id], "default"),
        (None, "sig_q", [h.id for h in many], "default"),
        (None, "sig_q", [one.id], "default"),  # a signal may wake it: immediate mode runs it on
    ]


_PROBE = (
    "import json, sys; from runnerq_django.signals import activity_enqueued; "
    "print(json.dumps([sorted(m for m in sys.modules if m.startswith('runnerq_django.testing')), "
    "len(activity_enqueued.receivers)]))"
)


def _start_up(runnerq: dict) -> tuple[list[str], int]:
    env = manage_env(
        DJANGO_SETTINGS_MODULE="tests.worker.settings", RUNNERQ_TEST_SETTINGS=json.dumps(runnerq)
    )
    out = manage("shell", "--no-imports", "-c", _PROBE, env=env, timeout=60)
    loaded, receivers = json.loads(out.stdout.strip().splitlines()[-1])
    return loaded, receivers


def test_start_up_imports_nothing_of_the_testing_package():
    assert _start_up({}) == ([], 0)


def test_the_immediate_setting_at_start_up_loads_the_mode_as_a_receiver():
    loaded, receivers = _start_up({"IMMEDIATE": True})
    assert "runnerq_django.testing.immediate_mode" in loaded and receivers == 1
