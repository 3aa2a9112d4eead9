"""``manage.py runnerq_schedule`` verbs on runtime schedules, in real processes, with ``--json``:
they go through the API (same validation, same history) and join nothing of their own."""

from __future__ import annotations

import json

import pytest

from runnerq_django.scheduler import runtime_schedules as schedules
from tests.helpers import manage

pytestmark = pytest.mark.slow
ACTIVITY = "tests.scheduler.Tick"


def run(db_url: str, *args: str, check: bool = True):
    return manage("runnerq_schedule", *args, db_url=db_url, check=check)


def test_the_verbs_with_json(live_db_url):
    created = json.loads(
        run(
            live_db_url,
            "create",
            "cli.one",
            "--activity",
            ACTIVITY,
            "--cron",
            "0 6 * * *",
            "--tz",
            "Europe/Paris",
            "--payload",
            '{"c": 1}',
            "--by",
            "ops",
            "--json",
        ).stdout
    )
    assert (created["id"], created["revision"], created["payload"], created["created_by"]) == (
        "cli.one",
        1,
        {"c": 1},
        "ops",
    )
    assert created["schedule"].startswith("cron '0 6 * * *' in Europe/Paris from ") and created["next"]
    refused = run(
        live_db_url, "create", "cli.two", "--activity", ACTIVITY, "--cron", "61 * * * *", check=False
    )
    assert refused.returncode != 0 and "cron: not a valid cron expression: '61 * * * *'" in refused.stderr
    updated = json.loads(run(live_db_url, "update", "cli.one", "--every", "300", "--json").stdout)
    assert (updated["kind"], updated["every_seconds"], updated["revision"]) == ("interval", 300, 2)
    stale = run(live_db_url, "update", "cli.one", "--jitter", "5", "--expected-revision", "1", check=False)
    assert stale.returncode != 0 and "revision 2, not 1" in stale.stderr
    paused = json.loads(run(live_db_url, "pause", "cli.one", "--reason", "maintenance", "--json").stdout)
    assert paused["enabled"] is False and paused["next"] is None
    listed = [json.loads(line) for line in run(live_db_url, "list", "--json").stdout.splitlines()]
    assert [row["id"] for row in listed] == ["cli.one"]
    ran = json.loads(run(live_db_url, "run", "cli.one", "--json").stdout)
    assert ran["created"] is True
    history = [
        json.loads(line) for line in run(live_db_url, "history", "cli.one", "--json").stdout.splitlines()
    ]
    assert [h["action"] for h in history] == ["run_now", "paused", "updated", "created"]
    assert history[1]["reason"] == "maintenance" and history[0]["activity_id"] == ran["activity_id"]
    assert json.loads(run(live_db_url, "delete", "cli.one", "--json").stdout) == {
        "id": "cli.one",
        "deleted": True,
    }
    assert schedules.list() == []
    missing = run(live_db_url, "get", "cli.one", check=False)
    assert missing.returncode != 0 and "no schedule 'cli.one'" in missing.stderr
