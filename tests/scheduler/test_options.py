"""runscheduler's --namespace, --release, --lease and --max-interval follow the same rules as
RUNNERQ['SCHEDULER'] (one implementation, conf's table of rules), with errors naming the option and
the limit, before anything starts."""

from __future__ import annotations

import itertools

import pytest
from django.core.management import call_command
from django.core.management.base import CommandError
from django.test import override_settings

from runnerq_django import conf


@pytest.mark.parametrize(
    "argv, expected",
    [
        ({"namespace": "bad ns!"}, "--namespace must be 1-40 letters, digits, _ . or -; got 'bad ns!'"),
        ({"namespace": ""}, "--namespace must be 1-40 letters"),
        ({"namespace": "n" * 41}, "--namespace must be 1-40 letters"),
        ({"max_interval": -3.0}, "--max-interval must be a positive number of seconds, got -3.0"),
        ({"max_interval": float("nan")}, "--max-interval must be a positive number of seconds, got nan"),
        ({"lease_seconds": 0.0}, "--lease must be a positive number of seconds, got 0.0"),
        ({"release": -1}, "--release must be a whole number >= 0"),
        (
            {"lease_seconds": 6.0},
            "RUNNERQ['SCHEDULER']['MAX_INTERVAL_SECONDS'] (5 s) must be at most a third of --lease "
            "(6 s), i.e. at most 2 s",
        ),
        (
            {"max_interval": 11.0},
            "--max-interval (11 s) must be at most a third of RUNNERQ['SCHEDULER']['LEASE_SECONDS'] "
            "(30 s), i.e. at most 10 s",
        ),
        (
            {"lease_seconds": 9.0, "max_interval": 4.0},
            "--max-interval (4 s) must be at most a third of --lease (9 s)",
        ),
    ],
)
def test_bad_command_line_options_are_refused_naming_the_option_and_the_limit(argv, expected):
    with pytest.raises(CommandError) as refused:
        call_command("runscheduler", once=True, **argv)
    assert expected in str(refused.value)


def test_the_settings_and_the_command_line_follow_the_same_rules():
    """conf.scheduler_run_problems states the rules conf.validate() applies to the settings: same verdict
    for every combination (finite numbers; conf does not look at NaN or infinity)."""
    namespaces = ["ok-ns_1.x", "bad ns!", "", "n" * 40, "n" * 41, 7]
    releases = [0, 3, -1, True, 1.5]
    seconds = [(30, 5), (30, 10), (30, 11), (6, 5), (0, 5), (30, -3), (2.5, 0.5)]
    for namespace, release, (lease, interval) in itertools.product(namespaces, releases, seconds):
        values = {
            "NAMESPACE": namespace,
            "RELEASE": release,
            "LEASE_SECONDS": lease,
            "MAX_INTERVAL_SECONDS": interval,
        }
        ours = {frozenset(keys) for keys, _ in conf.scheduler_run_problems(values)}
        with override_settings(RUNNERQ={"SCHEDULER": values}):
            theirs = conf.validate()
        for keys in ({"NAMESPACE"}, {"RELEASE"}, {"LEASE_SECONDS"}, {"MAX_INTERVAL_SECONDS"}):
            (key,) = keys
            mentioned = any(
                f"[{key!r}] must be" in message and "a third of" not in message for message in theirs
            )
            assert (frozenset(keys) in ours) == mentioned, (values, theirs)
        third = any("a third of" in message for message in theirs)
        assert (frozenset({"MAX_INTERVAL_SECONDS", "LEASE_SECONDS"}) in ours) == third, (values, theirs)


def test_good_command_line_options_pass():
    assert (
        conf.scheduler_command_line_problems(
            {"NAMESPACE": "blue-2", "RELEASE": 4, "LEASE_SECONDS": 12.0, "MAX_INTERVAL_SECONDS": 4.0}
        )
        == []
    )
    assert (
        conf.scheduler_command_line_problems(
            {"NAMESPACE": None, "RELEASE": None, "LEASE_SECONDS": None, "MAX_INTERVAL_SECONDS": None}
        )
        == []
    )
