"""The console's cost is bounded by what it shows: operator POSTs a browser would
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


def _pauses(n: int, queue: str = QUEUE) -> None:
    """``n`` paused types of ``queue``, each with a reason of 4 KB (the API's limit)."""
    sql(
        "INSERT INTO runnerq_flow_pauses (queue_name, activity_type, paused_by, reason)"
        " SELECT %s, 'type' || lpad(g::text, 6, '0'), 'admin ops', repeat('r', 4096) FROM generate_series(1, %s) g",
        [queue, n],
    )


def test_thousands_of_pauses_leave_the_overview_small_and_the_full_list_paged(root):
    from runnerq_django.admin_views.flow import PAUSES_PER_PAGE, PAUSES_PER_QUEUE, PAUSES_SHOWN

    make_activity("pending")  # the queue has a card on the overview
    _pauses(2_000)
    page = root.get("/admin/runnerq_django/activity/overview/")
    html = page.content.decode()
    assert page.status_code == 200 and len(page.content) < 400_000  # not 2,000 × 4 KB (twice)
    assert html.count('class="rq-pause"') == PAUSES_SHOWN
    assert f"The first {PAUSES_SHOWN} of <strong>2,000</strong> pauses" in html
    assert f"and {2_000 - PAUSES_PER_QUEUE:,} more" in html  # the queue's card
    flow = "/admin/runnerq_django/activity/flow/"
    assert f'href="{flow}"' in html

    seen: list[str] = []
    url = flow
    while url:
        listing = root.get(url)
        assert listing.status_code == 200 and listing.context["pause_total"] == 2_000
        rows = listing.context["pauses"]
        assert 0 < len(rows) <= PAUSES_PER_PAGE
        seen += [p.activity_type for p in rows]
        after = listing.context["next_after"]
        url = f"{flow}?after={after}" if after else ""
    assert seen == [f"type{n:06d}" for n in range(1, 2_001)]
    assert root.get(f"{flow}?after=x%00").status_code == 400


def test_runnerq_status_lists_the_first_pauses_and_says_how_many_there_are(root):
    import json
    from io import StringIO

    from django.core.management import call_command

    from runnerq_django.management.commands.runnerq_status import PAUSES_LISTED

    _pauses(300)
    _pauses(2, queue="other_q")
    out = StringIO()
    call_command("runnerq_status", "--json", stdout=out)
    document = json.loads(out.getvalue())
    assert document["pauses_total"] == 302 and document["pauses_listed"] == PAUSES_LISTED
    assert len(document["queues"][QUEUE]["paused"]) == PAUSES_LISTED
    assert document["queues"][QUEUE]["paused_count"] == 300
    out = StringIO()
    call_command("runnerq_status", "--json", "--queue", "other_q", stdout=out)
    document = json.loads(out.getvalue())
    assert document["pauses_total"] == 2 and document["queues"]["other_q"]["paused_count"] == 2
    text = StringIO()
    call_command("runnerq_status", stdout=text)
    assert f"(the first {PAUSES_LISTED} of 302 pauses" in text.getvalue() and len(text.getvalue()) < 300_000


def test_ids_event_types_worker_ids_and_pool_types_are_cut_like_payloads(root):
    import uuid

    from django.urls import reverse

    from runnerq_django.admin_views.safe import CUT_MARK, ID_CHARS
    from tests.admin.factories import add_event

    huge = "w" * 100_000
    running = make_activity("processing", current_worker_id=huge, last_worker_id="v" * 100_000)
    plain = make_activity("processing")
    for _ in range(20):
        add_event(running, "Retrying", {"error": "x"}, worker_id=huge)
    sql("UPDATE runnerq_events SET event_type = repeat('E', 100000) WHERE activity_id = %s", [running])
    pending = make_activity("pending", activity_type="Wanted")
    types = [f"t{n:07d}" + "x" * 92 for n in range(50_000)]  # 5 MB
    sql(
        "INSERT INTO runnerq_worker_pools (pool_id, queue_name, max_workers, activity_types) VALUES (%s, %s, 4, %s)",
        [uuid.uuid4(), QUEUE, [*types, "Wanted"]],
    )

    def size(url: str) -> int:
        response = root.get(url)
        assert response.status_code == 200, url
        return len(response.content)

    detail = root.get(reverse("admin:runnerq_django_activity_change", args=[running]))
    assert detail.status_code == 200
    activity = detail.context["activity"]
    assert activity.current_worker_id == "w" * ID_CHARS + CUT_MARK
    assert all(len(e["event_type"]) == ID_CHARS + 1 for e in detail.context["events"])
    baseline = size(reverse("admin:runnerq_django_activity_change", args=[plain]))
    assert len(detail.content) < baseline + 200_000  # not 878 KiB and more
    assert size(CHANGELIST) < 200_000
    assert size("/admin/runnerq_django/event/") < 200_000
    assert size("/admin/runnerq_django/workerpool/") < 100_000
    assert size("/admin/runnerq_django/activity/overview/") < 300_000
    live = root.get("/admin/runnerq_django/activity/overview/live.json")
    assert live.status_code == 200 and len(live.content) < 50_000
    (pool,) = live.json()["pools"]
    assert pool["type_count"] == 50_001 and len(pool["types"]) == 20
    assert {c["worker"] for c in live.json()["claims"]} >= {"w" * ID_CHARS}
    # A pool serves a type past the ones shown: the pending activity is not "unserved".
    blocked = root.get(reverse("admin:runnerq_django_activity_change", args=[pending])).context["blocked"]
    assert blocked["kind"] == "runnable" and not blocked["no_worker"]
