"""The common enqueue (``handler.enqueue(payload)``, ``queue=`` at most) is planned once per handler
and queue (``client._plan``): what a later call sees must still be the settings, registry and
storage config of that call, and a bad payload is refused as the full path refuses it."""

from __future__ import annotations

import importlib
import math
import uuid

import pytest
from django.db import transaction
from django.test import override_settings

from runnerq_django import activity, enqueue
from runnerq_django.activities.registry import registry
from runnerq_django.storage import StorageConfig, config
from runnerq_django.storage.errors import Internal, InvalidArgument
from runnerq_django.storage.types import NewActivity
from tests.worker import handlers
from tests.worker.support import fetch, row_of

pytestmark = pytest.mark.django_db(transaction=True)

# The module (the package's ``submit`` is the operation of the same name).
submit_module = importlib.import_module("runnerq_django.storage.submit")


def payload_of(activity_id):
    return fetch("SELECT payload FROM runnerq_inputs WHERE activity_id = %s", [activity_id])[0][0]


def test_a_plan_is_kept_per_queue_and_reused():
    handlers.echo.enqueue(1)
    handlers.echo.enqueue(2, queue="plans_a")
    plans = handlers.echo.enqueue_plans
    first = plans[None], plans["plans_a"]
    handlers.echo.enqueue(3)
    handle = handlers.echo.enqueue(4, queue="plans_a")
    assert (plans[None], plans["plans_a"]) == first
    assert handle.queue == "plans_a" and row_of(handle.id)["queue_name"] == "plans_a"
    assert payload_of(handle.id) == "4"


def test_a_changed_setting_is_seen_by_the_next_enqueue():
    before = handlers.echo.enqueue("x")
    assert before.queue == "default" and row_of(before.id)["max_retries"] == 3
    with override_settings(
        RUNNERQ={"DEFAULT_QUEUE": "plans_default", "TYPES": {"t.echo": {"max_attempts": 7, "priority": 4}}}
    ):
        during = handlers.echo.enqueue("x")
        named = handlers.echo.enqueue("x", queue="plans_b")
    after = handlers.echo.enqueue("x")
    assert during.queue == "plans_default"
    assert (row_of(during.id)["max_retries"], row_of(during.id)["priority"]) == (7, 4)
    assert (row_of(named.id)["queue_name"], row_of(named.id)["max_retries"]) == ("plans_b", 7)
    assert after.queue == "default" and row_of(after.id)["max_retries"] == 3


def test_a_smaller_payload_limit_is_seen_by_the_next_enqueue():
    handlers.echo.enqueue("x" * 200)  # planned under the default limit
    with override_settings(RUNNERQ={"MAX_PAYLOAD_BYTES": 100}):
        with pytest.raises(InvalidArgument, match=r"^payload: JSON text must be at most 100 bytes, got 202$"):
            handlers.echo.enqueue("x" * 200)
        assert handlers.echo.enqueue("x" * 50).created


def test_prepared_statements_off_is_seen_by_the_next_enqueue():
    handlers.echo.enqueue(1)
    with override_settings(RUNNERQ={"PREPARED_STATEMENTS": False}):
        handle = handlers.echo.enqueue({"a": 1})
    assert row_of(handle.id)["status"] == "pending" and payload_of(handle.id) == '{"a": 1}'


def test_a_reregistered_type_is_seen_by_the_next_enqueue_by_name():
    name = f"t.plans_{uuid.uuid4().hex[:8]}"
    activity(name=name, queue="plans_first", max_attempts=2)(lambda payload: payload)
    try:
        first = enqueue(name, 1)
        registry.unregister(name)
        activity(name=name, queue="plans_second", max_attempts=5)(lambda payload: payload)
        second = enqueue(name, 2)
        registry.unregister(name)
        unregistered = enqueue(name, 3)  # a type name with no handler here: the defaults
    finally:
        registry.unregister(name)
    assert (first.queue, row_of(first.id)["max_retries"]) == ("plans_first", 2)
    assert (second.queue, row_of(second.id)["max_retries"]) == ("plans_second", 5)
    assert (unregistered.queue, row_of(unregistered.id)["max_retries"]) == ("default", 3)


@pytest.mark.parametrize(
    "payload, message",
    [
        (math.nan, r"^payload: nan is not JSON \(json-v1 has no NaN or Infinity\)$"),
        ({"when": object()}, r"^payload\['when'\]: object is not JSON-serializable \(json-v1\)$"),
        ("a\x00b", r"^payload: must not contain NUL characters"),
        (2**60, r"^payload: integer 1152921504606846976 at \$ is outside"),
    ],
)
def test_a_bad_payload_is_refused_after_a_plan_as_before(payload, message):
    handlers.echo.enqueue(1)
    with pytest.raises(InvalidArgument, match=message):
        handlers.echo.enqueue(payload)


def test_a_bad_queue_is_refused_as_before_and_not_planned():
    with pytest.raises(InvalidArgument, match=r"^queue: must be 1-48 characters"):
        handlers.echo.enqueue(1, queue="no-dashes")
    assert "no-dashes" not in handlers.echo.enqueue_plans


def test_a_planned_enqueue_joins_the_callers_transaction():
    handlers.echo.enqueue(1)
    with pytest.raises(RuntimeError), transaction.atomic():
        rolled_back = handlers.echo.enqueue("rolled back")
        assert row_of(rolled_back.id)["status"] == "pending"
        raise RuntimeError("the view failed")
    assert row_of(rolled_back.id) == {}


def test_submit_root_checks_again_under_another_config():
    template = submit_module.root_template("plans_c", NewActivity(activity_type="t.echo"))
    checked = submit_module.checked_payload("x" * 200)
    token = config.bind(StorageConfig(max_payload_bytes=100))
    try:
        with pytest.raises(InvalidArgument, match=r"^payload: JSON text must be at most 100 bytes, got 202$"):
            submit_module.submit_root(template, uuid.uuid4(), checked, using="default")
    finally:
        config.unbind(token)
    created = submit_module.submit_root(template, uuid.uuid4(), checked, using="default")
    assert created.created and row_of(created.id)["queue_name"] == "plans_c"


def test_only_storage_makes_what_submit_root_trusts():
    with pytest.raises(Internal):
        submit_module.CheckedPayload("x", '"x"', StorageConfig(), object())
    with pytest.raises(Internal):
        submit_module.RootTemplate("q", NewActivity(activity_type="t"), None, object())
    with pytest.raises(Internal, match="without an idempotency key"):
        submit_module.root_template("q", NewActivity(activity_type="t", idempotency_key="k"))


@pytest.mark.parametrize(
    "name, message",
    [("concurrency", "is set per activity type, not per enqueue"), ("queues", "is not an enqueue option")],
)
def test_a_keyword_that_is_not_an_option_is_refused_by_name(name, message):
    handlers.echo.enqueue(1)
    with pytest.raises(InvalidArgument, match=rf"^{name}: {message}"):
        handlers.echo.enqueue(1, **{name: 2})
