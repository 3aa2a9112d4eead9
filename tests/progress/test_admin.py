"""The admin shows progress (a column of the list, a bar on the detail page) and the published
events; runnerq_status --json and the metrics leave them out."""

from __future__ import annotations

import json

import pytest
from django.contrib.auth.models import User

from tests.progress import handlers

CHANGELIST = "/admin/runnerq_django/activity/"


@pytest.fixture
def admin_client_(client, transactional_db):
    user = User.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(user)
    return client


def test_the_list_shows_progress_and_the_detail_page_a_bar_and_the_events(admin_client_, runnerq_worker):
    reporting = handlers.quick.enqueue({"events": 2, "done": 1, "total": 4, "message": "a quarter"})
    counting = handlers.quick.enqueue({"events": 0, "done": 9, "total": None})
    silent = handlers.silent.enqueue({})
    runnerq_worker.run_until_idle()

    page = admin_client_.get(CHANGELIST).content.decode()
    assert '<progress class="rq-progress" max="100" value="25" title="a quarter"></progress> 25%' in page
    assert '<span class="rq-progress-count" title="">9</span>' in page
    assert page.count('class="rq-progress"') == 1  # the silent one has no bar

    detail = admin_client_.get(f"{CHANGELIST}{reporting.id}/change/").content.decode()
    assert 'id="rq-progress-bar" max="100" value="25"' in detail
    assert '<span id="rq-progress-message">a quarter</span>' in detail
    assert 'id="rq-published"' in detail and detail.count("<strong>tick</strong>") == 2
    assert "&quot;i&quot;: 2" in detail or '"i": 2' in detail
    assert 'id="rq-progress"' not in admin_client_.get(f"{CHANGELIST}{silent.id}/change/").content.decode()
    counted = admin_client_.get(f"{CHANGELIST}{counting.id}/change/").content.decode()
    assert '<strong id="rq-progress-bar">9</strong> done (no total)' in counted


def test_runnerq_status_json_and_the_metrics_leave_progress_out(runnerq_worker, capsys):
    from django.core.management import call_command

    from runnerq_django import metrics

    handlers.quick.enqueue({"events": 2, "done": 1, "total": 4, "message": "a quarter"})
    runnerq_worker.run_until_idle()
    call_command("runnerq_status", "--json")
    out = capsys.readouterr().out
    json.loads(out)
    assert "a quarter" not in out and "progress" not in out and "tick" not in out
    names = " ".join(str(key) for key in metrics.totals())
    assert "progress" not in names and "tick" not in names and "a quarter" not in names
