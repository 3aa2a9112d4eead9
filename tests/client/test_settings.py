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


@pytest.mark.parametrize(
    "runnerq, expected",
    [
        ({"LISTEN": "no"}, "RUNNERQ['LISTEN'] must be True or False, got 'no'"),
        (
            {"PREPARED_STATEMENTS": "false"},
            "RUNNERQ['PREPARED_STATEMENTS'] must be True or False, got 'false'",
        ),
        ({"REQUIRE_REGISTERED_TYPES": 1}, "RUNNERQ['REQUIRE_REGISTERED_TYPES'] must be True or False, got 1"),
        (
            {"ALLOW_UNSAFE_INTEGERS": "yes"},
            "RUNNERQ['ALLOW_UNSAFE_INTEGERS'] must be True or False, got 'yes'",
        ),
        ({"SUPERJSON": "types"}, "RUNNERQ['SUPERJSON'] must be 'plain' or 'typed', got 'types'"),
        (
            {"AUTODISCOVER_MODULES": "activities"},
            "RUNNERQ['AUTODISCOVER_MODULES'] must be a list of module names such as ['activities'], got 'activities'",
        ),
        (
            {"SCHEDULER": {"AUTODISCOVER_MODULES": "periodic"}},
            "RUNNERQ['SCHEDULER']['AUTODISCOVER_MODULES'] must be a list of module names such as ['periodic']",
        ),
        ({"CONCURRENCY": 2.5}, "RUNNERQ['CONCURRENCY'] must be a whole number 1..1000, got 2.5"),
        (
            {"CONCURRENCY": 100_000_000},
            "RUNNERQ['CONCURRENCY'] must be a whole number 1..1000, got 100000000",
        ),
        (
            {"MAX_PAYLOAD_BYTES": 8 * 1024 * 1024},
            "RUNNERQ['MAX_PAYLOAD_BYTES'] must be a whole number 1..4194304",
        ),
        ({"MAX_JSON_DEPTH": 5000}, "RUNNERQ['MAX_JSON_DEPTH'] must be a whole number 1..500, got 5000"),
        (
            {"LEASE_SECONDS": float("inf")},
            "RUNNERQ['LEASE_SECONDS'] must be a positive number of seconds, got inf",
        ),
        ({"DATABASE": ["default"]}, "RUNNERQ['DATABASE'] names ['default'], which is not in DATABASES"),
        (
            {"RETENTION": {"BATCH": "500"}},
            "RUNNERQ['RETENTION']['BATCH'] must be a whole number 1..1000, got '500'",
        ),
        ({"RETENTION": []}, "RUNNERQ['RETENTION'] must be a dict, got list"),
        ({"CONCURENCY": 4}, "RUNNERQ['CONCURENCY'] is not a known setting; did you mean CONCURRENCY?"),
        ({"listen": False}, "RUNNERQ['listen'] is not a known setting; did you mean LISTEN?"),
        (
            {"RETENTION": {"BATHC": 5}},
            "RUNNERQ['RETENTION']['BATHC'] is not a known setting; did you mean BATCH?",
        ),
        (
            {"SCHEDULER": {"LEASE": 30}},
            "RUNNERQ['SCHEDULER']['LEASE'] is not a known setting; did you mean LEASE_SECONDS?",
        ),
        ({"QWERTY": 1}, "RUNNERQ['QWERTY'] is not a known setting"),
    ],
)
def test_a_setting_of_the_wrong_type_or_name_is_a_check_error(runnerq, expected):
    found = problems_of(runnerq)
    assert any(message.startswith(expected) for message in found), found


def test_no_suggestion_when_nothing_is_close():
    assert problems_of({"QWERTY": 1}) == ["RUNNERQ['QWERTY'] is not a known setting"]


def test_the_defaults_are_valid():
    assert problems_of({}) == []
    assert conf.get("MAX_JSON_DEPTH") == 64 and conf.get("REQUIRE_REGISTERED_TYPES") is False


def test_the_typed_view_is_built_from_the_setting_and_follows_override_settings():
    with override_settings(
        RUNNERQ={"CONCURRENCY": 3, "QUEUES": ["a", "b"], "SCHEDULER": {"NAMESPACE": "blue"}}
    ):
        typed = conf.runnerq_settings()
        assert (typed.concurrency, typed.queues, typed.scheduler.namespace) == (3, ("a", "b"), "blue")
        assert typed.retention.batch == 500 and conf.scheduler_settings().lease_seconds == 30  # defaults
        with pytest.raises(AttributeError):
            typed.concurrency = 4  # frozen
    assert conf.runnerq_settings().concurrency == 8 and conf.scheduler_settings().namespace == "default"


def test_a_value_that_breaks_its_rule_reads_as_the_default_and_is_a_check_error():
    with override_settings(RUNNERQ={"MAX_PAYLOAD_BYTES": "1MB"}):
        assert conf.runnerq_settings().max_payload_bytes == 1024 * 1024
    assert problems_of({"MAX_PAYLOAD_BYTES": "1MB"}) == [
        "RUNNERQ['MAX_PAYLOAD_BYTES'] must be a whole number 1..4194304, got '1MB'"
    ]


def test_the_settings_share_the_bounds_of_the_matching_command_line_options():
    """runworker refuses --lease outside 0.1..86400 (which it also applied to the setting at start):
    the check now says so for the setting, by the same rule."""
    assert problems_of({"LEASE_SECONDS": 0.05, "HEARTBEAT_SECONDS": 0.01}) == [
        "RUNNERQ['LEASE_SECONDS'] must be 0.1..86400 seconds, got 0.05"
    ]
    assert problems_of({"POLL_INTERVAL_SECONDS": 10**6}) == [
        "RUNNERQ['POLL_INTERVAL_SECONDS'] must be 0.01..86400 seconds, got 1000000"
    ]
    from django.core.management import load_command_class

    parser = load_command_class("runnerq_django", "runworker").create_parser("manage.py", "runworker")
    types = {action.dest: action.type for action in parser._actions}
    concurrency, poll = conf.rule("CONCURRENCY"), conf.rule("POLL_INTERVAL_SECONDS")
    assert types["concurrency"].__name__ == f"a whole number {concurrency.low}..{concurrency.high}"
    assert types["poll_interval_seconds"].__name__ == f"a number {poll.low:g}..{poll.high:g}"


def test_every_setting_has_a_one_line_description_and_a_typed_field():
    def walk(table):
        for rule in table.rules:
            yield rule
            yield from walk(rule)

    rules = list(walk(conf.RULES))
    assert len(rules) > 30
    for rule in rules:
        assert rule.help and "\n" not in rule.help and rule.help.endswith("."), rule.key
    assert set(conf.DEFAULTS) == {field.upper() for field in vars(conf.runnerq_settings())}


# validate() reads DATABASES only; no connection is made to the aliases below.
@pytest.mark.filterwarnings("ignore:Overriding setting DATABASES")
def test_the_read_replica_must_be_another_postgresql_alias():
    from django.conf import settings

    databases = {
        **settings.DATABASES,
        "replica": {**settings.DATABASES["default"]},
        "lite": {"ENGINE": "django.db.backends.sqlite3", "NAME": ":memory:"},
    }
    with override_settings(DATABASES=databases):
        assert problems_of({"READ_REPLICA": "replica"}) == []
        assert problems_of({"READ_REPLICA": None}) == []
        [unknown] = problems_of({"READ_REPLICA": "replia"})
        assert unknown.startswith(
            "RUNNERQ['READ_REPLICA'] names 'replia', which is not in DATABASES (it has "
        )
        assert "'replica'" in unknown
        assert problems_of({"READ_REPLICA": "lite"}) == [
            "RUNNERQ['READ_REPLICA'] 'lite' must be a PostgreSQL database (a streaming replica of RUNNERQ['DATABASE'])"
        ]
        assert problems_of({"READ_REPLICA": "default"}) == [
            "RUNNERQ['READ_REPLICA'] 'default' is RUNNERQ['DATABASE'] itself; name the replica's alias, or None"
        ]
        assert problems_of({"READ_REPLICA": ""})[0].startswith("RUNNERQ['READ_REPLICA'] names ''")


def test_the_console_reads_the_replica_and_everything_else_the_primary():
    assert conf.console_read_alias() == "default" and conf.runnerq_settings().read_replica is None
    with override_settings(RUNNERQ={"READ_REPLICA": "replica"}):
        assert conf.console_read_alias() == "replica" and conf.database_alias() == "default"
        assert conf.storage_settings().alias == "default"  # writes never go to the replica


def test_check_deploy_warns_when_immediate_mode_is_on_without_debug(settings):
    def warned(*, deploy: bool = True) -> bool:
        found = checks.run_checks(include_deployment_checks=deploy, tags=["runnerq"])
        return any(m.id == "runnerq.W002" for m in found)

    settings.DEBUG = False
    assert not warned()  # off by default
    settings.RUNNERQ = {**settings.RUNNERQ, "IMMEDIATE": True}
    assert warned() and not warned(deploy=False)  # a deployment check only
    settings.DEBUG = True
    assert not warned()  # development: immediate mode is a choice


def test_check_deploy_in_a_process_names_the_setting_and_the_risk():
    from tests.helpers import manage, manage_env

    env = manage_env(
        DJANGO_SETTINGS_MODULE="tests.worker.settings", RUNNERQ_TEST_SETTINGS='{"IMMEDIATE": true}'
    )
    env.pop("DJANGO_DEBUG", None)
    out = manage("check", "--deploy", env=env, timeout=60)
    text = out.stdout + out.stderr
    assert "runnerq.W002" in text and "inside web requests" in text
