"""The console's cost is bounded by what it shows (issue 27): operator POSTs a browser would
never send answer 400, and a select-all's confirmation page posts back on Django's default
DATA_UPLOAD_MAX_NUMBER_FIELDS."""

from __future__ import annotations

from html.parser import HTMLParser

import pytest
from django.contrib.auth.models import User
from django.db import connection

from tests.admin.factories import QUEUE, make_activity, row

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/runnerq_django/activity/"


@pytest.fixture
def root(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def sql(statement: str, params=None) -> None:
    with connection.cursor() as cur:
        cur.execute(statement, params)


def _dead_letters(n: int) -> None:
    sql(
        """INSERT INTO runnerq_activities (id, queue_name, activity_type, status, created_at, completed_at, root_activity_id)
            SELECT u, %s, 'Bulk', 'dead_letter', now() - make_interval(secs => g), now(), u
              FROM (SELECT g, md5(random()::text || g)::uuid AS u FROM generate_series(1, %s) g) x""",
        [QUEUE, n],
    )


class _Form(HTMLParser):
    """The fields the confirmation page's form would submit (hidden and text inputs, checked boxes)."""

    def __init__(self) -> None:
        super().__init__()
        self.fields: list[tuple[str, str]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        a = dict(attrs)
        if tag != "input" or not a.get("name") or a.get("type") == "submit":
            return
        if a.get("type") == "checkbox" and "checked" not in a:
            return
        self.fields.append((a["name"] or "", a.get("value") or ("on" if a.get("type") == "checkbox" else "")))


def _submit(client, url: str, page) -> object:
    form = _Form()
    form.feed(page.content.decode())
    data: dict[str, list[str]] = {}
    for name, value in form.fields:
        data.setdefault(name, []).append(value)
    return client.post(url, data, follow=True)


def test_select_all_then_redrive_over_a_thousand_dead_letters_on_default_settings(root, settings):
    assert settings.DATA_UPLOAD_MAX_NUMBER_FIELDS == 1000  # Django's default
    _dead_letters(1_200)
    url = f"{CHANGELIST}?queue={QUEUE}&status=dead_letter"
    first = make_activity("dead_letter")
    page = root.post(url, {"action": "redrive", "_selected_action": [str(first)], "select_across": "1"})
    assert page.status_code == 200 and page.context["count"] == 1_000 and page.context["more"]
    done = _submit(root, url, page)  # what the browser sends when the operator confirms
    assert done.status_code == 200
    messages = [str(m) for m in done.context["messages"]]
    assert any("applied to 1,000 activities" in m or "applied to 1000 activities" in m for m in messages), (
        messages
    )
    rest = _submit(root, url, done)  # the next run: the rest
    assert any("applied to 201 activities" in str(m) for m in rest.context["messages"])
    assert row(first)["status"] == "pending"
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM runnerq_activities WHERE status = 'dead_letter'")
        assert cur.fetchone()[0] == 0


@pytest.mark.parametrize(
    "extra",
    [
        {"select_across": "1", "runnerq_after": "not a time|00000000-0000-0000-0000-000000000001"},
        {"select_across": "1", "runnerq_after": "garbage"},
        {
            "select_across": "1",
            "runnerq_after": "2024-01-01T00:00:00+00:00\x00|00000000-0000-0000-0000-000000000001",
        },
        {"_selected_action": ["not-a-uuid"]},
        {"_selected_action": ["0000\x00"]},
        {"command_id": "admin:\x00"},
        {"reason": "why\x00"},
        {"next": "/admin/\x00"},
    ],
)
def test_malformed_operator_posts_answer_400(root, extra):
    dead = make_activity("dead_letter")
    data = {"action": "redrive", "_selected_action": [str(dead)], "runnerq_confirm": "1", **extra}
    response = root.post(f"{CHANGELIST}?queue={QUEUE}", data)
    assert response.status_code == 400, (response.status_code, extra)
    text = response.content.decode()
    assert "Nothing was done" in text and any(f"{name}:" in text for name in extra)
    assert row(dead)["status"] == "dead_letter"
