"""The admin's "Re-run from step…": the detail page lists a root's steps and its re-runs, the
form makes a fork ledgered with the operator's name and reason, and links it both ways."""

from __future__ import annotations

import pytest
from django.contrib.auth.models import Permission, User

from tests.fork import handlers
from tests.worker.support import fetch, runs

CHANGELIST = "/admin/runnerq_django/activity/"


@pytest.fixture
def operator_client(client, transactional_db):
    user = User.objects.create_superuser("ops", "ops@example.com", "pw")
    client.force_login(user)
    return client


def test_the_detail_page_forks_from_a_chosen_step(operator_client, runnerq_worker, runs_table):
    original = handlers.nine.enqueue({"base": 0})
    runnerq_worker.run_until_idle()
    page = operator_client.get(f"{CHANGELIST}{original.id}/change/").content.decode()
    assert 'id="rq-fork-steps"' in page and 'id="rq-fork-form"' in page
    assert page.index("run:s1") < page.index("run:s7") < page.index("run:s9")

    response = operator_client.post(
        f"{CHANGELIST}{original.id}/fork/", {"from_step": "run:s7", "reason": "bad tax rate"}, follow=False
    )
    assert response.status_code == 302
    fork_id = response["Location"].rstrip("/").split("/")[-2]
    assert fetch(
        "SELECT origin_id::text, actor, reason FROM runnerq_forks WHERE fork_id = %s", [fork_id]
    ) == [(str(original.id), "admin:ops", "bad tax rate")]
    runnerq_worker.run_until_idle()
    assert [r[1] for r in runs(activity_id=fork_id)] == ["s7", "s8", "s9"]
    fork_page = operator_client.get(f"{CHANGELIST}{fork_id}/change/").content.decode()
    assert 'id="rq-forked-from"' in fork_page and str(original.id) in fork_page
    assert fork_id in operator_client.get(f"{CHANGELIST}{original.id}/change/").content.decode()

    refused = operator_client.post(f"{CHANGELIST}{original.id}/fork/", {"from_step": "nope"}, follow=True)
    assert "Not forked: from_step: the run recorded no step" in refused.content.decode()


def test_a_viewer_without_the_operate_permission_can_not_fork(client, runnerq_worker, runs_table):
    viewer = User.objects.create_user("viewer", "v@example.com", "pw", is_staff=True)
    viewer.user_permissions.add(Permission.objects.get(codename="view_activity"))
    client.force_login(viewer)
    original = handlers.nine.enqueue({})
    runnerq_worker.run_until_idle()
    page = client.get(f"{CHANGELIST}{original.id}/change/").content.decode()
    assert 'id="rq-fork-steps"' in page and 'id="rq-fork-form"' not in page
    assert client.post(f"{CHANGELIST}{original.id}/fork/", {"from_step": "run:s7"}).status_code == 403
    assert fetch("SELECT count(*) FROM runnerq_forks") == [(0,)]
