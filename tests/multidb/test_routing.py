"""The routing of queues to databases without touching the second one: the setting's rule, the
one routing function, and the router's answers."""

from __future__ import annotations

import pytest
from django.test import override_settings

from runnerq_django import checks, routing


def _problems(value) -> list[str]:
    with override_settings(RUNNERQ={"QUEUE_DATABASES": value}):
        return [p for p in checks.settings_problems() if "QUEUE_DATABASES" in p]


def test_the_setting_is_judged_with_the_key_named():
    assert _problems({}) == []
    assert _problems({"billing": "default"}) == []
    assert _problems(["billing"]) == [
        "RUNNERQ['QUEUE_DATABASES'] must be a dict of queue name -> database alias, such as "
        '{"billing": "billing_db"}, got [\'billing\']'
    ]
    (missing,) = _problems({"billing": "nowhere"})
    assert missing.startswith(
        "RUNNERQ['QUEUE_DATABASES']['billing'] names 'nowhere', which is not in DATABASES"
    )
    (bad_name,) = _problems({"bad queue!": "default"})
    assert bad_name.startswith("RUNNERQ['QUEUE_DATABASES'] key 'bad queue!':")


def test_not_postgres_is_refused():
    databases = {"default": {}, "lite": {"ENGINE": "django.db.backends.sqlite3"}}
    from runnerq_django import conf

    (problem,) = conf.queue_databases_problems({"q": "lite"}, databases)
    assert "'lite', which is not a PostgreSQL database" in problem


def test_database_for_routes_by_queue_and_an_explicit_alias_wins():
    with override_settings(RUNNERQ={"DATABASE": "default", "QUEUE_DATABASES": {"billing": "other"}}):
        assert routing.database_for("billing") == "other"
        assert routing.database_for("mail") == "default"
        assert routing.database_for("billing", "default") == "default"
        assert routing.databases() == ["default", "other"]
        assert routing.databases(["mail"]) == ["default"]
        assert routing.by_database(["mail", "billing", "mail2"]) == {
            "default": ["mail", "mail2"],
            "other": ["billing"],
        }
        assert routing.by_database(["mail", "billing"], using="x") == {"x": ["mail", "billing"]}
    # A malformed mapping routes nothing elsewhere (the checks report it).
    with override_settings(RUNNERQ={"QUEUE_DATABASES": {"billing": 3}}):
        assert routing.database_for("billing") == "default"


@pytest.mark.parametrize(
    ("db", "app", "expected"),
    [
        ("default", "runnerq_django", True),
        ("other", "runnerq_django", True),
        ("analytics", "runnerq_django", False),
        ("analytics", "auth", None),
    ],
)
def test_the_router_migrates_the_schema_only_where_a_queue_lives(db, app, expected):
    with override_settings(RUNNERQ={"QUEUE_DATABASES": {"billing": "other"}}):
        assert routing.RunnerQRouter().allow_migrate(db, app) is expected
