"""Debounce and throttle windows in the admin: the list of the latest windows (key, window, how
many enqueues collapsed) and the activity page naming its window."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.contrib.auth.models import User

from runnerq_django import Debounce, Throttle, enqueue

pytestmark = pytest.mark.django_db

WINDOWS = "/admin/runnerq_django/activity/windows/"
Q = "admin_windows"


@pytest.fixture
def admin_client_(client):
    user = User.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(user)
    return client


def burst():
    debounce = Debounce(key="reindex:42", wait=timedelta(seconds=30), max_wait=timedelta(minutes=5))
    handles = [enqueue("shop.reindex", {"n": n}, queue=Q, debounce=debounce) for n in range(4)]
    throttle = Throttle(key="digest:7", window=timedelta(minutes=10))
    throttled = [enqueue("shop.digest", {"n": n}, queue=Q, throttle=throttle) for n in range(3)]
    return handles[0], throttled[0]


def test_the_windows_page_lists_key_window_and_collapsed_count(admin_client_):
    debounced, throttled = burst()
    page = admin_client_.get(WINDOWS)
    assert page.status_code == 200
    text = page.content.decode()
    assert "<strong>2</strong> windows (1 debounce, 1 throttle)" in text
    assert "reindex:42" in text and "wait 30 s, max 300 s" in text and "digest:7" in text
    rows = page.context["windows"]
    by_key = {w.key: w for w in rows}
    assert by_key["reindex:42"].collapsed == 3 and by_key["reindex:42"].activity_id == debounced.id
    assert by_key["digest:7"].collapsed == 2 and by_key["digest:7"].activity_id == throttled.id
    assert f"/admin/runnerq_django/activity/{debounced.id}/change/" in text
    only = admin_client_.get(WINDOWS + "?kind=throttle").context["windows"]
    assert [w.key for w in only] == ["digest:7"]
    assert admin_client_.get(WINDOWS + "?kind=nonsense").status_code == 400
    assert (
        'id="rq-windows-link"'
        in admin_client_.get("/admin/runnerq_django/activity/overview/").content.decode()
    )


def test_an_activity_page_names_its_window(admin_client_):
    debounced, _ = burst()
    page = admin_client_.get(f"/admin/runnerq_django/activity/{debounced.id}/change/").content.decode()
    assert 'id="rq-window"' in page and "debounce key" in page and "reindex:42" in page
    assert '<span id="rq-window-collapsed">3</span> enqueues collapsed' in page


def test_view_permission_is_needed(client):
    user = User.objects.create_user("plain", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(WINDOWS).status_code == 403
