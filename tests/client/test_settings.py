"""Every RUNNERQ setting is checked by type (a string where a boolean or a list belongs is an
error, not silently truthy or iterated), and an unknown key names the closest known one."""

from __future__ import annotations

import pytest
from django.core import checks
from django.test import override_settings

from runnerq_django import conf


def problems_of(runnerq: dict) -> list[str]:
    with override_settings(RUNNERQ=runnerq):
        return [m.msg for m in checks.run_checks(tags=["runnerq"]) if m.id == "runnerq.E001"]


@pytest.mark.parametrize("runnerq, expected", [
    ({"LISTEN": "no"}, "RUNNERQ['LISTEN'] must be True or False, got 'no'"),
    ({"PREPARED_STATEMENTS": "false"}, "RUNNERQ['PREPARED_STATEMENTS'] must be True or False, got 'false'"),
    ({"REQUIRE_REGISTERED_TYPES": 1}, "RUNNERQ['REQUIRE_REGISTERED_TYPES'] must be True or False, got 1"),
    ({"ALLOW_UNSAFE_INTEGERS": "yes"}, "RUNNERQ['ALLOW_UNSAFE_INTEGERS'] must be True or False, got 'yes'"),
    ({"SUPERJSON": "types"}, "RUNNERQ['SUPERJSON'] must be 'plain' or 'typed', got 'types'"),
    ({"AUTODISCOVER_MODULES": "activities"},
     "RUNNERQ['AUTODISCOVER_MODULES'] must be a list of module names such as ['activities'], got 'activities'"),
    ({"SCHEDULER": {"AUTODISCOVER_MODULES": "periodic"}},
     "RUNNERQ['SCHEDULER']['AUTODISCOVER_MODULES'] must be a list of module names such as ['periodic']"),
    ({"CONCURRENCY": 2.5}, "RUNNERQ['CONCURRENCY'] must be a whole number 1..1000, got 2.5"),
    ({"CONCURRENCY": 100_000_000}, "RUNNERQ['CONCURRENCY'] must be a whole number 1..1000, got 100000000"),
    ({"MAX_PAYLOAD_BYTES": 8 * 1024 * 1024}, "RUNNERQ['MAX_PAYLOAD_BYTES'] must be a whole number 1..4194304"),
    ({"MAX_JSON_DEPTH": 5000}, "RUNNERQ['MAX_JSON_DEPTH'] must be a whole number 1..500, got 5000"),
    ({"LEASE_SECONDS": float("inf")}, "RUNNERQ['LEASE_SECONDS'] must be a positive number of seconds, got inf"),
    ({"DATABASE": ["default"]}, "RUNNERQ['DATABASE'] names ['default'], which is not in DATABASES"),
    ({"RETENTION": {"BATCH": "500"}}, "RUNNERQ['RETENTION']['BATCH'] must be a whole number 1..1000, got '500'"),
    ({"RETENTION": []}, "RUNNERQ['RETENTION'] must be a dict, got list"),
    ({"CONCURENCY": 4}, "RUNNERQ['CONCURENCY'] is not a known setting; did you mean CONCURRENCY?"),
    ({"listen": False}, "RUNNERQ['listen'] is not a known setting; did you mean LISTEN?"),
    ({"RETENTION": {"BATHC": 5}}, "RUNNERQ['RETENTION']['BATHC'] is not a known setting; did you mean BATCH?"),
    ({"SCHEDULER": {"LEASE": 30}}, "RUNNERQ['SCHEDULER']['LEASE'] is not a known setting; did you mean LEASE_SECONDS?"),
    ({"QWERTY": 1}, "RUNNERQ['QWERTY'] is not a known setting"),
])
def test_a_setting_of_the_wrong_type_or_name_is_a_check_error(runnerq, expected):
    found = problems_of(runnerq)
    assert any(message.startswith(expected) for message in found), found


def test_no_suggestion_when_nothing_is_close():
    assert problems_of({"QWERTY": 1}) == ["RUNNERQ['QWERTY'] is not a known setting"]


def test_the_defaults_are_valid():
    assert problems_of({}) == []
    assert conf.get("MAX_JSON_DEPTH") == 64 and conf.get("REQUIRE_REGISTERED_TYPES") is False
