"""The admin's operator actions, through the Django test client: each one checks the row, the
stored event and the runnerq_commands ledger row; bulk selections confirm first; the permission
is enforced on the server."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User
from django.urls import reverse

from tests.admin.factories import QUEUE, events, make_activity, row

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/runnerq_django/activity/"


def _user(name: str, *codenames: str, superuser: bool = False) -> User:
    user = User.objects.create_user(name, password="pw", is_staff=True, is_superuser=superuser)
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(codename=codename, content_type__app_label="runnerq_django")
        )
    return user


@pytest.fixture
def operator(client):
    user = _user("operator", "view_activity", "view_event", "operate_activity")
    client.force_login(user)
    return user


@pytest.fixture
def viewer(client):
    user = _user("viewer", "view_activity", "view_event")
    client.force_login(user)
    return user


def ledger_rows(kind: str) -> list[tuple[str, str, dict]]:
    import json

    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT queue_name, command_id, result FROM runnerq_commands WHERE kind = %s ORDER BY created_at",
            [kind],
        )
        return [(q, c, json.loads(r) if isinstance(r, str) else r) for q, c, r in cur.fetchall()]


def post_action(client, action: str, ids, *, confirm: bool = True, follow: bool = True, **extra):
    data = {"action": action, "_selected_action": [str(i) for i in ids], **extra}
    if confirm:
        data["runnerq_confirm"] = "1"
    return client.post(CHANGELIST, data, follow=follow)


def messages_of(response) -> list[str]:
    return [str(m) for m in response.context["messages"]] if response.context else []


def test_retry_keep_attempts_single(client, operator):
    a = make_activity("failed", retry_count=2)
    response = post_action(client, "retry_keep_attempts", [a], confirm=False)
    assert response.status_code == 200
    assert any("Retry: applied to 1 activity" in m for m in messages_of(response))
    r = row(a)
    assert r["status"] == "pending" and r["retry_count"] == 2
    [(etype, detail, _)] = events(a)
    assert etype == "Retried" and detail["reset_attempts"] is False and detail["reason"] == "admin operator"
    [(queue, command_id, result)] = ledger_rows("retry")
    assert queue == QUEUE and command_id.startswith("admin:") and detail["command_id"] == command_id
    assert result["applied"] == 1


def test_retry_reset_attempts(client, operator):
    a = make_activity("cancelled", retry_count=1)
    post_action(client, "retry_reset_attempts", [a], confirm=False)
    assert row(a)["retry_count"] == 0 and row(a)["status"] == "pending"
    assert events(a)[0][1]["reset_attempts"] is True
    assert ledger_rows("retry")[0][2]["items"][0]["outcome"] == "applied"


def test_redrive_bulk_confirms_then_reports_skips(client, operator):
    dead = [make_activity("dead_letter") for _ in range(2)]
    failed = make_activity("failed")
    page = post_action(client, "redrive", [*dead, failed], confirm=False, follow=False)
    # The intermediate page: nothing happened yet; it shows a dry run.
    assert page.status_code == 200 and b"What would happen" in page.content
    assert page.context["preview"]["would_apply"] == 2 and page.context["preview"]["skipped"] == 1
    assert all(row(d)["status"] == "dead_letter" for d in dead) and ledger_rows("retry") == []
    command_id = page.context["command_id"]
    response = post_action(
        client,
        "redrive",
        [*dead, failed],
        command_id=command_id,
        reset_attempts="on",
        reason="fixed upstream",
    )
    texts = messages_of(response)
    assert any("Redrive: applied to 2 activities" in m for m in texts)
    assert any("skipped 1" in m and "only acts on dead_letter" in m for m in texts)
    for d in dead:
        assert row(d)["status"] == "pending" and row(d)["retry_count"] == 0
        [(etype, detail, _)] = events(d)
        assert (
            etype == "Redriven"
            and detail["reason"] == "admin operator: fixed upstream"
            and detail["command_id"] == command_id
        )
    assert row(failed)["status"] == "failed" and events(failed) == []
    [(_, stored_id, result)] = ledger_rows("retry")
    assert stored_id == command_id and result["applied"] == 2
    # The same confirmation submitted twice replays instead of acting twice.
    again = post_action(
        client,
        "redrive",
        [*dead, failed],
        command_id=command_id,
        reset_attempts="on",
        reason="fixed upstream",
    )
    assert any("already run" in m for m in messages_of(again))
    assert all(len(events(d)) == 1 for d in dead)


def test_cancel_always_confirms_and_cascades(client, operator):
    parent = make_activity("processing")
    child = make_activity("pending", parent=parent)
    page = post_action(client, "cancel", [parent], confirm=False, follow=False)
    assert page.status_code == 200 and page.context["preview"]["cascaded"] == 1
    assert row(parent)["status"] == "processing"
    response = post_action(client, "cancel", [parent], command_id=page.context["command_id"])
    assert any("applied to 1 activity and 1 descendant" in m for m in messages_of(response))
    assert row(parent)["status"] == "cancelled" and row(parent)["current_worker_id"] is None
    assert row(child)["status"] == "cancelled"
    assert events(parent)[0][0] == "Cancelled" and events(parent)[0][1]["from"] == "processing"
    assert ledger_rows("cancel")[0][2]["cascaded"] == 1


def test_run_now(client, operator):
    a = make_activity("scheduled")
    post_action(client, "run_now", [a], confirm=False)
    assert events(a)[0][0] == "RunNow"
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT scheduled_at <= now() FROM runnerq_activities WHERE id = %s", [a])
        assert cur.fetchone()[0] is True
    assert ledger_rows("run_now")[0][2]["applied"] == 1


def test_reschedule_needs_a_time(client, operator):
    a = make_activity("scheduled")
    page = post_action(client, "reschedule", [a], confirm=False, follow=False)
    assert page.status_code == 200 and "at" in page.context["form"].fields
    bad = post_action(client, "reschedule", [a], at="not a time", follow=False)
    assert bad.status_code == 200 and bad.context["form"].errors["at"]
    assert events(a) == []
    post_action(client, "reschedule", [a], at="2031-05-06T07:08")
    assert row(a)["scheduled_at"].startswith("2031-05-06T07:08")  # the test project runs in UTC
    [(etype, detail, _)] = events(a)
    assert etype == "Rescheduled" and detail["at"] == "2031-05-06T07:08:00.000000Z"
    assert ledger_rows("reschedule")[0][2]["applied"] == 1


def test_set_priority(client, operator):
    a = make_activity("pending")
    post_action(client, "set_priority", [a], priority="4")
    assert row(a)["priority"] == 4
    assert events(a)[0][0] == "PriorityChanged" and events(a)[0][1]["priority"] == 4
    assert ledger_rows("set_priority")[0][2]["applied"] == 1


def test_delete_tree(client, operator):
    root = make_activity("completed")
    child = make_activity("completed", parent=root)
    busy = make_activity("pending")
    page = post_action(client, "delete_tree", [root, busy], confirm=False, follow=False)
    assert page.context["preview"]["would_apply"] == 1 and row(root)
    response = post_action(client, "delete_tree", [root, busy], command_id=page.context["command_id"])
    texts = messages_of(response)
    assert any("Delete: applied to 1 activity" in m for m in texts)
    assert any("still pending: cancel it first" in m for m in texts)
    assert row(root) == {} and row(child) == {} and row(busy)
    assert ledger_rows("delete")[0][2]["applied"] == 1


def test_detail_page_action_returns_to_the_detail_page(client, operator):
    a = make_activity("dead_letter")
    detail_url = reverse("admin:runnerq_django_activity_change", args=[a])
    page = client.get(detail_url)
    assert b'data-action="redrive"' in page.content
    response = client.post(
        CHANGELIST,
        {
            "action": "redrive",
            "_selected_action": [str(a)],
            "runnerq_confirm": "1",
            "command_id": "admin:detail-1",
            "reset_attempts": "on",
            "next": detail_url,
        },
    )
    assert response.status_code == 302 and response["Location"] == detail_url
    assert row(a)["status"] == "pending" and events(a)[0][1]["command_id"] == "admin:detail-1"
    # An outside "next" is not followed.
    b = make_activity("dead_letter")
    response = client.post(
        CHANGELIST,
        {
            "action": "redrive",
            "_selected_action": [str(b)],
            "runnerq_confirm": "1",
            "next": "https://evil.example/",
        },
    )
    assert response.status_code == 302 and "evil" not in response["Location"]


def test_select_across_acts_on_the_filtered_list(client, operator):
    dead = [make_activity("dead_letter") for _ in range(3)]
    other = make_activity("dead_letter", queue="otherq")
    make_activity("failed")
    response = client.post(
        f"{CHANGELIST}?queue={QUEUE}&status=dead_letter",
        {
            "action": "redrive",
            "_selected_action": [str(dead[0])],
            "select_across": "1",
            "runnerq_confirm": "1",
            "reset_attempts": "on",
        },
        follow=True,
    )
    assert any("applied to 3 activities" in m for m in messages_of(response))
    assert all(row(d)["status"] == "pending" for d in dead) and row(other)["status"] == "dead_letter"


def test_without_the_permission_nothing_can_be_done(client, viewer):
    a = make_activity("dead_letter")
    changelist = client.get(CHANGELIST)
    assert changelist.status_code == 200
    assert b'value="redrive"' not in changelist.content  # no actions offered
    detail = client.get(reverse("admin:runnerq_django_activity_change", args=[a]))
    assert detail.status_code == 200 and b"rq-actions" not in detail.content
    post_action(client, "redrive", [a], reset_attempts="on")
    post_action(client, "cancel", [a])
    assert row(a)["status"] == "dead_letter" and events(a) == [] and ledger_rows("retry") == []


def test_perform_refuses_without_permission_even_when_called_directly(rf, viewer):
    from django.contrib import admin as django_admin
    from django.core.exceptions import PermissionDenied

    from runnerq_django.admin import ActivityAdmin
    from runnerq_django.admin_views.actions import ACTIONS, perform
    from runnerq_django.models import Activity

    request = rf.post(CHANGELIST, {"runnerq_confirm": "1"})
    request.user = viewer
    model_admin = ActivityAdmin(Activity, django_admin.site)
    with pytest.raises(PermissionDenied):
        perform(model_admin, request, Activity.objects.none(), ACTIONS["cancel"])


def test_storage_errors_are_reported_not_raised(client, operator):
    a = make_activity("pending")
    b = make_activity("pending")
    post_action(client, "set_priority", [a], priority="3", command_id="admin:reused")
    response = post_action(client, "set_priority", [b], priority="1", command_id="admin:reused")
    assert any("nothing was done" in m and "different input" in m for m in messages_of(response))
    assert row(b)["priority"] == 2
