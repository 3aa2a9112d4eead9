"""``RUNNERQ['TYPES']``: settings over an ``@activity`` declaration (limits, retry policy, enqueue
defaults), the system checks' messages naming the key and the limit, and the per-enqueue partition
key (``concurrency_key=`` / ``rate_limit_key=``) with the options no enqueue may set."""

from __future__ import annotations

from decimal import Decimal

import pytest
from django.core.exceptions import ImproperlyConfigured
from django.test import override_settings

from runnerq_django import activity, client, conf
from runnerq_django.activities.registry import registry
from runnerq_django.retries import Backoff
from runnerq_django.storage import limits
from runnerq_django.storage.errors import InvalidArgument
from runnerq_django.worker.runtime import concurrency_limits, rate_limits
from tests.flow import handlers
from tests.worker.support import fetch

Q = "flow_type_settings"


class Flaky(Exception):
    """A retry_on class named by its dotted path in the settings."""


FLAKY = f"{__name__}.Flaky"


def types(**entries):
    """``override_settings`` with ``RUNNERQ['TYPES']`` set (type names with dots as keys)."""
    return override_settings(
        RUNNERQ={"TYPES": {name.replace("__", "."): entry for name, entry in entries.items()}}
    )


def problems(entries) -> list[str]:
    with override_settings(RUNNERQ={"TYPES": entries}):
        return conf.validate()


def test_a_settings_entry_replaces_the_decorators_values_key_by_key():
    declared = handlers.per_key  # concurrency=1, concurrency_key="key", max_attempts=5
    assert (declared.concurrency.limit, declared.concurrency.key, declared.options.max_attempts) == (
        1,
        "key",
        5,
    )
    entry = {
        "concurrency": 4,
        "max_attempts": 9,
        "priority": 4,
        "backoff": {"base": 0.5, "cap": 60, "jitter": "full"},
        "retry_on": [FLAKY],
    }
    with types(flow__per_key=entry):
        assert declared.concurrency.limit == 4 and declared.concurrency.key == "key"  # the key kept
        assert (declared.options.max_attempts, declared.options.priority) == (9, 4)
        assert declared.options.timeout_seconds == 300  # not given: the decorator's (the default)
        assert declared.retry_policy.backoff == Backoff(base=0.5, cap=60, jitter="full")
        assert declared.retry_policy.retryable(Flaky()) and not declared.retry_policy.retryable(ValueError())
        # The worker reads the same: its slotted claim uses the settings' limit.
        assert concurrency_limits(registry, ["flow.per_key"]) == {"flow.per_key": 4}
    # Rebuilt when RUNNERQ changes back.
    assert declared.concurrency.limit == 1 and declared.options.max_attempts == 5
    assert declared.retry_policy.backoff is None


def test_enqueue_uses_the_settings_defaults_and_enqueue_options_still_win(db):
    with types(flow__work={"max_attempts": 7, "timeout": 45, "priority": 3}):
        plain = handlers.work.enqueue({}, queue=Q)
        given = handlers.work.enqueue({}, queue=Q, max_attempts=2)
    rows = dict(
        fetch(
            "SELECT id, (max_retries, timeout_seconds, priority) FROM runnerq_activities WHERE queue_name = %s",
            [Q],
        )
    )
    assert rows[plain.id] == ("7", "45", "3")
    assert rows[given.id] == ("2", "45", "3")


def test_settings_can_switch_a_limit_and_remove_one_with_none():
    with types(flow__rated={"rate_limit": None, "concurrency": 3}):
        assert handlers.rated.rate_limit is None and handlers.rated.concurrency.limit == 3
        assert rate_limits(registry, ["flow.rated"]) == {}
    with types(flow__per_key={"concurrency": None}):  # its concurrency_key goes with it
        assert handlers.per_key.concurrency is None
    with types(flow__limited={"rate_limit": [50, "minute"], "concurrency": None, "rate_limit_key": "tenant"}):
        rate = handlers.limited.rate_limit
        assert (rate.limit, rate.period_seconds, rate.key) == (50, 60.0, "tenant")


@pytest.mark.parametrize(
    ("entries", "expected"),
    [
        (
            {"flow.limited": {"concurrency": 0}},
            "RUNNERQ['TYPES']['flow.limited']['concurrency'] must be 1..10000, got 0",
        ),
        (
            {"flow.limited": {"concurrency": "4"}},
            "RUNNERQ['TYPES']['flow.limited']['concurrency'] must be a whole number 1..10000, got '4'",
        ),
        (
            {"flow.work": {"rate_limit": "20/fortnight"}},
            "RUNNERQ['TYPES']['flow.work']['rate_limit'] the period must be second, minute or hour, got 'fortnight'",
        ),
        (
            {"flow.work": {"backoff": {"base": 0.5, "cap": 0.1}}},
            "RUNNERQ['TYPES']['flow.work']['backoff']['cap'] must be at least the base (0.5 s), got 0.1 s",
        ),
        (
            {"flow.work": {"backoff": {"bsae": 1}}},
            "RUNNERQ['TYPES']['flow.work']['backoff']['bsae'] is not a backoff field (they are base, cap, "
            "factor, jitter)",
        ),
        (
            {"flow.work": {"retry_on": ["no.such.Module"]}},
            "RUNNERQ['TYPES']['flow.work']['retry_on'] names 'no.such.Module', which cannot be imported",
        ),
        (
            {"flow.work": {"retry_on": ["runnerq_django.conf.RULES"]}},
            "RUNNERQ['TYPES']['flow.work']['retry_on'] takes dotted paths of exception classes",
        ),
        (
            {"flow.work": {"concurency": 4}},
            "RUNNERQ['TYPES']['flow.work']['concurency'] is not an option of an activity type",
        ),
        (
            {"flow.work": {"concurrency_key": "customer"}},
            "RUNNERQ['TYPES']['flow.work']['concurrency_key'] needs concurrency=N",
        ),
        (
            {"flow.work": {"concurrency": 2, "concurrency_key": lambda payload: payload}},
            "RUNNERQ['TYPES']['flow.work']['concurrency_key'] must be a dotted payload path",
        ),
        (  # with the decorator's rate_limit: the key the settings gave is the one named
            {"flow.rated": {"concurrency": 4}},
            "RUNNERQ['TYPES']['flow.rated']['concurrency'] a type takes concurrency or rate_limit, not both",
        ),
        ({"flow.work": {"max_attempts": -1}}, "RUNNERQ['TYPES']['flow.work']['max_attempts'] must be"),
        ({"flow.work": "fast"}, "RUNNERQ['TYPES']['flow.work'] must be a dict of options, got str"),
        ({"": {}}, "RUNNERQ['TYPES'][''] is not an activity type name"),
    ],
)
def test_a_bad_entry_is_a_check_error_naming_the_key_and_the_limit(entries, expected):
    found = problems(entries)
    assert len(found) == 1 and found[0].startswith(expected), found


def test_a_bad_entry_raises_when_the_type_is_resolved_rather_than_dropping_the_limit():
    with (
        types(flow__limited={"concurrency": 0}),
        pytest.raises(ImproperlyConfigured, match=r"\['flow\.limited'\]\['concurrency'\] must be 1\.\.10000"),
    ):
        handlers.limited.concurrency  # noqa: B018
    assert problems([]) == ["RUNNERQ['TYPES'] must be a dict of activity type -> dict of options, got list"]
    assert problems({"other.language.type": {"concurrency": 2, "queue": "billing"}}) == []  # no handler here


def test_isolation_process_for_an_async_handler_is_refused_in_settings():
    @activity(name="flow.settings_async")
    async def handler(payload):
        return payload

    try:
        assert problems({"flow.settings_async": {"isolation": "process"}}) == [
            "RUNNERQ['TYPES']['flow.settings_async']['isolation'] 'process' runs sync handlers; "
            "flow.settings_async is async: use isolation='thread'"
        ]
    finally:
        registry.unregister("flow.settings_async")


@pytest.mark.django_db(transaction=True)
def test_an_enqueue_can_name_the_partition_instead_of_the_payloads_key():
    first = handlers.per_key.enqueue({"key": "from-payload"}, queue=Q, concurrency_key="acme")
    [second] = handlers.per_key.enqueue_many([{"key": "x"}], queue=Q, concurrency_key=42)
    third = handlers.per_key.using(concurrency_key="acme").enqueue({}, queue=Q)  # no key in the payload
    stored = dict(
        fetch("SELECT activity_id, partition_key FROM runnerq_flow_partitions WHERE queue_name = %s", [Q])
    )
    assert (stored[first.id], stored[second.id], stored[third.id]) == ("acme", "42", "acme")
    # The claim honours it: "acme" is one partition with a limit of 1, "42" another.
    claimed = limits.claim_limited(Q, "flow.per_key", 1, limit=10, lease_ms=60000, worker_id="w")
    assert sorted(str(c.id) for c in claimed) == sorted([str(first.id), str(second.id)])


@pytest.mark.parametrize(
    ("call", "expected"),
    [
        (
            lambda: handlers.limited.enqueue({}, queue=Q, concurrency_key="acme"),
            "no partitioned concurrency limit",
        ),
        (
            lambda: handlers.work.enqueue({}, queue=Q, concurrency_key="acme"),
            "no partitioned concurrency limit",
        ),
        (
            lambda: handlers.per_key.enqueue({}, queue=Q, rate_limit_key="acme"),
            "no partitioned rate_limit limit",
        ),
        (
            lambda: client.enqueue("not.here", {}, queue=Q, concurrency_key="a"),
            "no partitioned concurrency limit",
        ),
        (
            lambda: handlers.per_key.enqueue({}, queue=Q, concurrency_key={"a": 1}),
            "must be a string or an integer",
        ),
        # Each of these used to be stored as some text of its own ("b'x'", "1E+999999") or to
        # raise a raw ValueError (an integer too long to write in decimal).
        (
            lambda: handlers.per_key.enqueue({}, queue=Q, concurrency_key=b"x"),
            "must be a string or an integer",
        ),
        (
            lambda: handlers.per_key.enqueue({}, queue=Q, concurrency_key=Decimal("1e999999")),
            "must be a string or an integer",
        ),
        (
            lambda: handlers.per_key.enqueue({}, queue=Q, concurrency_key=1.5),
            "must be a string or an integer",
        ),
        (
            lambda: handlers.per_key.enqueue({}, queue=Q, concurrency_key=10**5000),
            "within +-(2**53 - 1), got an integer of 16610 bits",
        ),
        (lambda: handlers.per_key.enqueue({}, queue=Q, concurrency_key=2**53), "within +-(2**53 - 1)"),
        (lambda: handlers.per_key.enqueue({}, queue=Q, concurrency_key="x" * 513), "512"),
        (
            lambda: handlers.limited.enqueue({}, queue=Q, concurrency=2),
            "is set per activity type, not per enqueue",
        ),
        (lambda: handlers.limited.using(backoff=None), "is set per activity type, not per enqueue"),
        (lambda: handlers.rated.enqueue({}, queue=Q, rate_limit="5/s"), "RUNNERQ['TYPES'][<type>]"),
        (
            lambda: client.build_activity(handlers.per_key, {}, concurrency_key="a"),
            "is taken by enqueue() and enqueue_many() only",
        ),
    ],
)
def test_what_an_enqueue_cannot_set_is_refused_naming_it(db, call, expected):
    with pytest.raises(InvalidArgument) as raised:
        call()
    assert expected in raised.value.message
    assert fetch("SELECT count(*) FROM runnerq_activities WHERE queue_name = %s", [Q]) == [(0,)]
