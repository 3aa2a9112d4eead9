"""The admin as the editor of runtime schedules: list, create (refused with the declared jobs'
messages), edit, clone, pause and resume, run now (recorded, once per form), delete, the preview
in the schedule's zone, the last occurrences and the history; a view-only user sees and cannot
change or run. Real Postgres, Django's test client."""

from __future__ import annotations

import pytest
from django.contrib.admin.models import LogEntry
from django.contrib.auth.models import Permission, User
from django.test import Client
from django.urls import reverse

from runnerq_django.models import Activity, ScheduleChange
from runnerq_django.scheduler import runtime_schedules as schedules

ACTIVITY = "tests.scheduler.Tick"
LIST = "admin:runnerq_django_runtimeschedule_changelist"
ADD = "admin:runnerq_django_runtimeschedule_add"
CHANGE = "admin:runnerq_django_runtimeschedule_change"
OPERATE = "admin:runnerq_django_runtimeschedule_operate"
PREVIEW = "admin:runnerq_django_runtimeschedule_preview"


def form_data(**overrides) -> dict:
    data = {
        "id": "reports.acme",
        "activity": ACTIVITY,
        "payload": '{"customer": "acme"}',
        "queue": "",
        "priority": "",
        "kind": "cron",
        "cron": "0 6 * * *",
        "tz": "Europe/Paris",
        "every_seconds": "",
        "enabled": "on",
        "misfire_grace_seconds": "3600",
        "coalesce": "on",
        "max_catch_up": "10",
        "catch_up_after_repair": "on",
        "jitter_seconds": "0",
        "max_occurrences": "",
        "description": "daily report",
    }
    data.update(overrides)
    return data


@pytest.fixture
def admin_client(db) -> Client:
    user = User.objects.create_superuser("boss", "boss@example.com", "pw")
    client = Client()
    client.force_login(user)
    return client


@pytest.fixture
def viewer_client(db) -> Client:
    user = User.objects.create_user("viewer", "viewer@example.com", "pw", is_staff=True)
    user.user_permissions.add(Permission.objects.get(codename="view_runtimeschedule"))
    client = Client()
    client.force_login(user)
    return client


@pytest.mark.django_db
def test_create_edit_pause_resume_and_delete_from_the_admin(admin_client):
    response = admin_client.post(reverse(ADD), form_data(cron="61 * * * *"))
    assert response.status_code == 200  # refused, with the message a declaration gets
    assert "cron: not a valid cron expression: &#x27;61 * * * *&#x27;" in response.content.decode()
    response = admin_client.post(reverse(ADD), form_data())
    assert response.status_code == 302, response.content.decode()[:2000]
    row = schedules.get("reports.acme")
    assert (row.revision, row.payload, row.created_by) == (1, {"customer": "acme"}, "admin boss")
    page = admin_client.get(reverse(LIST)).content.decode()
    assert "reports.acme" in page and "cron &#x27;0 6 * * *&#x27; in Europe/Paris" in page
    response = admin_client.post(reverse(CHANGE, args=["reports.acme"]), form_data(cron="0 7 * * *"))
    assert response.status_code == 302
    assert schedules.get("reports.acme").revision == 2
    admin_client.post(reverse(OPERATE, args=["reports.acme"]), {"operation": "pause"})
    assert schedules.get("reports.acme").enabled is False
    admin_client.post(reverse(OPERATE, args=["reports.acme"]), {"operation": "resume"})
    assert schedules.get("reports.acme").enabled is True
    page = admin_client.get(reverse(CHANGE, args=["reports.acme"])).content.decode()
    # The history: who changed what, when.
    assert "admin boss" in page and "0 6 * * *" in page and "0 7 * * *" in page
    assert [c.action for c in schedules.history("reports.acme")] == [
        "resumed",
        "paused",
        "updated",
        "created",
    ]
    assert LogEntry.objects.filter(object_id="reports.acme").count() >= 4
    response = admin_client.post(
        reverse("admin:runnerq_django_runtimeschedule_delete", args=["reports.acme"]), {"post": "yes"}
    )
    assert response.status_code == 302
    assert schedules.list() == []
    assert ScheduleChange.objects.filter(schedule_id="reports.acme", action="deleted").exists()


@pytest.mark.django_db
def test_clone_prefills_the_add_form(admin_client):
    schedules.create("orig", activity=ACTIVITY, every=300, payload={"x": 1}, description="to copy")
    response = admin_client.get(reverse("admin:runnerq_django_runtimeschedule_clone", args=["orig"]))
    assert response.status_code == 302
    page = admin_client.get(response["Location"]).content.decode()
    assert 'value="orig-copy"' in page and "to copy" in page and 'value="300"' in page


@pytest.mark.django_db(transaction=True)
def test_run_now_enqueues_once_per_form_and_is_recorded(admin_client):
    schedules.create("runme", activity=ACTIVITY, every=3600, payload={"n": 1})
    data = {"operation": "run", "command_id": "form-1"}
    admin_client.post(reverse(OPERATE, args=["runme"]), data)
    admin_client.post(reverse(OPERATE, args=["runme"]), data)  # the same form, submitted twice
    runs = ScheduleChange.objects.filter(schedule_id="runme", action="run_now")
    assert runs.count() == 1 and runs[0].actor == "admin boss"
    assert Activity.objects.filter(pk=runs[0].activity_id).exists()
    page = admin_client.get(reverse(CHANGE, args=["runme"])).content.decode()
    assert str(runs[0].activity_id) in page  # linked from the history
    admin_client.post(reverse(OPERATE, args=["runme"]), {"operation": "run", "command_id": "form-2"})
    assert ScheduleChange.objects.filter(schedule_id="runme", action="run_now").count() == 2


@pytest.mark.django_db
def test_preview_in_the_schedule_zone(admin_client):
    answer = admin_client.get(
        reverse(PREVIEW), {"kind": "cron", "cron": "30 2 * * *", "tz": "Asia/Tokyo"}
    ).json()
    assert answer["zone"] == "Asia/Tokyo" and len(answer["next"]) == 5
    assert all(line.startswith(tuple("0123456789")) and " 02:30:00 JST" in line for line in answer["next"])
    answer = admin_client.get(
        reverse(PREVIEW), {"kind": "cron", "cron": "0 4 * * *", "tz": "Nowhere/City"}
    ).json()
    assert answer["errors"] == {"tz": ["tz: unknown time zone 'Nowhere/City'"]}


@pytest.mark.django_db
def test_a_view_only_user_sees_but_cannot_change_or_run(viewer_client):
    schedules.create("look", activity=ACTIVITY, every=60)
    assert viewer_client.get(reverse(LIST)).status_code == 200
    page = viewer_client.get(reverse(CHANGE, args=["look"])).content.decode()
    assert "look" in page and 'id="rq-run-now"' not in page and 'id="rq-pause"' not in page
    assert viewer_client.post(reverse(OPERATE, args=["look"]), {"operation": "run"}).status_code == 403
    assert viewer_client.post(reverse(OPERATE, args=["look"]), {"operation": "pause"}).status_code == 403
    assert viewer_client.post(reverse(CHANGE, args=["look"]), form_data(id="look")).status_code == 403
    assert viewer_client.get(reverse(PREVIEW), {"cron": "* * * * *"}).status_code == 403
    assert (
        schedules.get("look").enabled is True and not ScheduleChange.objects.filter(action="run_now").exists()
    )


@pytest.mark.django_db(transaction=True)
def test_the_list_actions_pause_resume_and_run_the_selected_schedules(admin_client):
    for name in ("one", "two", "three"):
        schedules.create(name, activity=ACTIVITY, every=600)
    selected = {"_selected_action": ["one", "two"]}
    admin_client.post(reverse(LIST), {"action": "pause_selected", **selected})
    assert [row.id for row in schedules.list(enabled=False)] == ["one", "two"]
    admin_client.post(reverse(LIST), {"action": "resume_selected", **selected})
    assert schedules.list(enabled=False) == []
    admin_client.post(reverse(LIST), {"action": "run_selected", "_selected_action": ["three"]})
    runs = ScheduleChange.objects.filter(action="run_now")
    assert [(r.schedule_id, r.actor) for r in runs] == [("three", "admin boss")]


@pytest.mark.django_db
def test_a_view_only_user_gets_no_actions(viewer_client):
    schedules.create("quiet", activity=ACTIVITY, every=600)
    viewer_client.post(reverse(LIST), {"action": "pause_selected", "_selected_action": ["quiet"]})
    assert schedules.get("quiet").enabled is True
