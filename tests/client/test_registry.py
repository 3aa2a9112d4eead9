"""The @activity decorator, the registry and autodiscovery (no database)."""

from __future__ import annotations

from datetime import timedelta

import pytest

import runnerq_django
from runnerq_django.activities.registry import ActivityDefinition, ActivityOptions, activity, registry
from runnerq_django.storage.errors import InvalidArgument


@pytest.fixture
def scratch_names():
    names = []
    yield names
    for name in names:
        registry.unregister(name)


def test_default_name_is_module_and_qualname(scratch_names):
    @activity
    def send_welcome(payload):
        return payload

    scratch_names.append(send_welcome.name)
    assert send_welcome.name == f"{__name__}.test_default_name_is_module_and_qualname.<locals>.send_welcome"
    assert registry.get(send_welcome.name) is send_welcome
    assert isinstance(send_welcome, ActivityDefinition)
    assert send_welcome({"x": 1}) == {"x": 1}  # still callable directly
    assert send_welcome.options == ActivityOptions()  # the documented defaults
    assert not send_welcome.is_async and not send_welcome.takes_context


def test_explicit_name_and_options(scratch_names):
    @activity(
        name="Billing.Charge",
        queue="payments",
        priority=4,
        max_attempts=7,
        timeout=timedelta(minutes=2),
        retry_delay=2.5,
        max_retry_delay=600,
    )
    async def charge(ctx, payload):
        return None

    scratch_names.append("Billing.Charge")
    assert charge.name == "Billing.Charge"
    assert charge.is_async and charge.takes_context
    assert charge.options == ActivityOptions(
        queue="payments",
        priority=4,
        max_attempts=7,
        timeout_seconds=120,
        retry_delay_seconds=3,
        max_retry_delay_seconds=600,
    )


@pytest.mark.parametrize(
    "kwargs, field",
    [
        ({"priority": 5}, "priority"),
        ({"queue": "has-dash"}, "queue"),
        ({"max_attempts": -1}, "max_attempts"),
        ({"timeout": 0}, "timeout"),
        ({"name": ""}, "name"),
        ({"name": "x" * 513}, "name"),
    ],
)
def test_bad_options_name_the_field(kwargs, field):
    with pytest.raises(InvalidArgument) as raised:
        activity(**kwargs)(lambda payload: None)
    assert raised.value.field == field
    assert field in str(raised.value)


@pytest.mark.parametrize(
    "handler, why",
    [
        (lambda: None, "its first parameter receives ctx"),
        (lambda *, to: None, "its first parameter receives ctx"),
        (lambda ctx, *args, to: None, r"\*args can't be filled from a JSON object"),
        (eval("lambda ctx, to, /, subject: None"), "'to' is positional-only"),
    ],
)
def test_handler_signature_is_checked(handler, why):
    with pytest.raises(
        TypeError, match=r"\(payload\), \(ctx, payload\) or \(ctx, <keyword arguments>\): " + why
    ):
        activity(name="t.bad_signature")(handler)
    assert "t.bad_signature" not in registry


def test_two_functions_cannot_share_a_type(scratch_names):
    @activity(name="t.shared_name")
    def first(payload):
        return 1

    scratch_names.append("t.shared_name")
    with pytest.raises(ValueError, match="already registered"):

        @activity(name="t.shared_name")
        def second(payload):
            return 2

    assert registry.get("t.shared_name") is first


def test_installed_apps_activities_modules_are_discovered():
    # testproject.examples.activities is imported by RunnerQConfig.ready(), not by this test.
    assert "examples.hello" in registry
    assert "examples.tour" in registry


def test_public_api_is_lazy_and_complete():
    for name in runnerq_django.__all__:
        assert getattr(runnerq_django, name) is not None
    with pytest.raises(AttributeError):
        runnerq_django.not_a_thing  # noqa: B018
