"""One vocabulary of options (runnerq_django.activities.options): every place that takes activity options
(``@activity``, ``RUNNERQ['TYPES']``, an enqueue, the django.tasks backend's ``OPTIONS``) accepts
exactly the names the declaration gives it, and enforces the declared bounds with one message."""

from __future__ import annotations

import pytest
from django.test import override_settings

from runnerq_django import activity, client, conf
from runnerq_django.activities import options as vocabulary
from runnerq_django.activities import type_settings
from runnerq_django.activities.enqueue_options import OPTION_NAMES, check_option_names
from runnerq_django.activities.registry import ActivityArguments, registry
from runnerq_django.client import EnqueueOptions
from runnerq_django.storage.errors import InvalidArgument
from runnerq_django.tasks_backend import OPTIONS as BACKEND_OPTIONS
from runnerq_django.tasks_backend import InvalidTaskBackend, RunnerQTaskBackend

TYPE = "options.declared"


@activity(name=TYPE)
def declared(payload):
    return payload


def settings_problems(entry) -> list[str]:
    with override_settings(RUNNERQ={"TYPES": {TYPE: entry}}):
        return conf.validate()


def names(place: str) -> set[str]:
    return set(vocabulary.at(place))


def test_every_place_accepts_exactly_the_declared_names():
    assert set(ActivityArguments.__optional_keys__) == names(vocabulary.DECORATOR)
    assert set(type_settings.KEYS) == names(vocabulary.TYPES)
    assert set(EnqueueOptions.__optional_keys__) == names(vocabulary.ENQUEUE) == OPTION_NAMES
    backend_keys = {
        o.backend_key for o in vocabulary.OPTIONS.values() if vocabulary.TASKS_BACKEND in o.places
    }
    assert set(BACKEND_OPTIONS) == {"QUEUE_MAP"} | backend_keys
    # Every place takes something, and every option is taken somewhere.
    assert all(names(place) for place in vocabulary.PLACES)
    assert all(option.places for option in vocabulary.OPTIONS.values())


def test_the_decorator_refuses_an_undeclared_name_listing_every_declared_one():
    with pytest.raises(TypeError) as raised:
        activity(concurency=2)
    assert str(raised.value) == (
        f"unknown activity options ['concurency']; known: {sorted(vocabulary.at(vocabulary.DECORATOR))}"
    )


def test_a_settings_entry_refuses_an_undeclared_name_listing_every_declared_one():
    assert settings_problems({"name": "x"}) == [
        f"RUNNERQ['TYPES'][{TYPE!r}]['name'] is not an option of an activity type "
        f"(they are {', '.join(vocabulary.at(vocabulary.TYPES))})"
    ]


def test_an_enqueue_refuses_per_type_options_and_undeclared_names():
    per_type = vocabulary.per_type_only()
    assert per_type == names(vocabulary.TYPES) - names(vocabulary.ENQUEUE) and per_type
    for name in sorted(per_type):
        with pytest.raises(InvalidArgument) as raised:
            check_option_names({name: None})
        assert raised.value.field == name
        assert "is set per activity type, not per enqueue" in raised.value.message
    with pytest.raises(InvalidArgument) as raised:
        check_option_names({"name": "x"})
    assert raised.value.message == (
        f"name: is not an enqueue option (they are {', '.join(sorted(names(vocabulary.ENQUEUE)))})"
    )


def _checked(place: str) -> list[vocabulary.Option]:
    return [o for o in vocabulary.OPTIONS.values() if o.check is not None and place in o.places]


def _below(option: vocabulary.Option):
    """A value just out of the declared bounds, and the lowest value in them."""
    if option.check == "queue":
        return "no such-queue", "q"
    if option.choices:
        return "fork", option.choices[0]
    low = option.minimum
    return (low / 2 if option.check == "seconds" else int(low) - 1), low


def _settings_message(name: str, value) -> str:
    found = settings_problems({name: value})
    assert len(found) == 1, found
    prefix = f"RUNNERQ['TYPES'][{TYPE!r}][{name!r}] "
    assert found[0].startswith(prefix), found
    return found[0].removeprefix(prefix)


def _decorator_message(name: str, value) -> str:
    with pytest.raises(InvalidArgument) as raised:
        activity(**{name: value})
    assert raised.value.field == name
    return raised.value.message.removeprefix(f"{name}: ")


@pytest.mark.parametrize("option", _checked(vocabulary.TYPES), ids=lambda o: o.name)
def test_a_declared_bound_is_enforced_alike_by_the_decorator_and_the_settings(option):
    bad, good = _below(option)
    message = _decorator_message(option.name, bad)
    assert _settings_message(option.name, bad) == message
    assert repr(bad) in message or str(bad) in message
    # The lowest value the declaration allows is taken at both places.
    extra = {"timeout": 10} if option.name == "soft_timeout" else {}
    activity(**{option.name: good}, **extra)
    assert settings_problems({option.name: good, **extra}) == []


@pytest.mark.parametrize("option", _checked(vocabulary.ENQUEUE), ids=lambda o: o.name)
def test_a_declared_bound_is_enforced_alike_by_the_decorator_the_settings_and_an_enqueue(option):
    bad, good = _below(option)
    with pytest.raises(InvalidArgument) as raised:
        client.build_activity(declared, None, **{option.name: bad})
    assert raised.value.field == option.name
    enqueued = raised.value.message.removeprefix(f"{option.name}: ")
    assert enqueued == _decorator_message(option.name, bad) == _settings_message(option.name, bad)
    client.build_activity(declared, None, **{option.name: good})
    if option.backend_key:  # and the django.tasks backend's OPTIONS, under its own key
        with pytest.raises(InvalidTaskBackend) as backend:
            RunnerQTaskBackend("x", {"OPTIONS": {option.backend_key: bad}})
        assert str(backend.value) == f"TASKS['x']['OPTIONS'][{option.backend_key!r}]: {enqueued}"
        RunnerQTaskBackend("x", {"OPTIONS": {option.backend_key: good}})


def test_the_defaults_are_the_declared_ones():
    built = registry.get(TYPE).options
    assert (built.priority, built.max_attempts, built.timeout_seconds, built.retry_delay_seconds) == tuple(
        vocabulary.OPTIONS[name].default for name in ("priority", "max_attempts", "timeout", "retry_delay")
    )
    assert (built.isolation, built.soft_timeout_seconds, built.queue) == tuple(
        vocabulary.OPTIONS[name].default for name in ("isolation", "soft_timeout", "queue")
    )
