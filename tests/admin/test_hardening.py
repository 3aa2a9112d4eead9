"""The admin against hostile rows and hostile requests: values Python cannot decode, huge values,
lookups it does not offer, values Postgres cannot take, slow queries, invisible characters, and a
select-all larger than one run."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test import override_settings
from django.urls import reverse

from tests.admin.factories import QUEUE, add_event, add_result, make_activity, row

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/runnerq_django/activity/"
OVERVIEW = "/admin/runnerq_django/activity/overview/"
EVENTS = "/admin/runnerq_django/event/"
DEEP = "[" * 2000 + "]" * 2000


@pytest.fixture
def root(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


@pytest.fixture
def viewer(client):
    user = User.objects.create_user("viewer", password="pw", is_staff=True)
    for codename in ("view_activity", "view_event", "view_workerpool"):
        user.user_permissions.add(
            Permission.objects.get(codename=codename, content_type__app_label="runnerq_django")
        )
    client.force_login(user)
    return client


def sql(statement: str, params=None) -> None:
    with connection.cursor() as cur:
        cur.execute(statement, params)


def detail_url(activity_id) -> str:
    return reverse("admin:runnerq_django_activity_change", args=[activity_id])


def test_rows_python_cannot_decode_render_everywhere(root):
    poison = make_activity("pending", activity_type="Poison")
    neighbour = make_activity("pending", activity_type="Fine", payload={"ok": 1})
    sql("UPDATE runnerq_inputs SET payload = '{\"n\": 1e5000}'::jsonb WHERE activity_id = %s", [poison])
    sql(
        "UPDATE runnerq_activities SET metadata = %s::jsonb, scheduled_at = '-infinity', started_at = 'infinity',"
        " last_error_at = 'infinity' WHERE id = %s",
        [DEEP, poison],
    )
    sql(
        "INSERT INTO runnerq_results (activity_id, queue_name, state, data, owner_activity_id)"
        " VALUES (%s, %s, 'Ok', %s::jsonb, %s)",
        [poison, QUEUE, DEEP, poison],
    )
    add_event(poison, "Retrying", {"error": "x"})
    sql(
        "UPDATE runnerq_events SET detail = '{\"n\": 1e5000}'::jsonb, created_at = '-infinity' WHERE activity_id = %s",
        [poison],
    )
    sql(
        "INSERT INTO runnerq_worker_pools (pool_id, queue_name, max_workers, started_at, last_seen_at)"
        " VALUES (%s, %s, 2, '-infinity', 'infinity')",
        [uuid.uuid4(), QUEUE],
    )

    listing = root.get(CHANGELIST)
    assert listing.status_code == 200
    assert str(poison)[:8] in listing.content.decode() and str(neighbour)[:8] in listing.content.decode()
    assert "-infinity" in listing.content.decode()
    overview = root.get(OVERVIEW)
    assert overview.status_code == 200
    assert "since -infinity" in overview.content.decode()  # the poison row is the oldest runnable
    assert (
        root.get(EVENTS).status_code == 200
        and root.get("/admin/runnerq_django/workerpool/").status_code == 200
    )

    page = root.get(detail_url(poison))
    assert page.status_code == 200
    ctx = page.context
    assert "1" + "0" * 5000 in ctx["input"]["json"] and "cannot decode" in ctx["input"]["json"].note
    for deep in (ctx["result"]["json"], ctx["metadata_json"]):  # 2,000 levels pretty-print to 16 MB: cut
        assert deep.startswith("[\n") and len(deep) == 64 * 1024 and "cut: the first 65,536" in deep.note
    assert ctx["events"][0]["detail"] is None and len(ctx["events"][0]["detail_json"]) <= 2048
    html = page.content.decode()
    assert "-infinity (as stored" in html and "Python cannot decode" in html
    assert root.get(detail_url(neighbour)).status_code == 200


def test_large_values_are_cut_in_sql_before_rendering(root):
    from runnerq_django.admin_views.safe import LIST_TEXT_CHARS, MAX_JSON_CHARS, MAX_TEXT_CHARS

    huge = "E" * (4 * 1024 * 1024)
    for _ in range(20):
        make_activity("failed", last_error=huge)
    listing = root.get(CHANGELIST)
    assert listing.status_code == 200
    assert len(listing.content) < 20 * 2 * LIST_TEXT_CHARS + 200_000  # not 20 × 4 MiB
    failed = make_activity("failed", last_error=huge)
    big = {"blob": "R" * (4 * 1024 * 1024)}
    add_result(failed, state="Err", data=big)
    sql(
        "UPDATE runnerq_inputs SET payload = %s::jsonb WHERE activity_id = %s",
        ['{"blob": "%s"}' % ("I" * 4_000_000), failed],
    )
    add_event(failed, "Failed", {"error": huge})
    page = root.get(detail_url(failed))
    assert page.status_code == 200
    ctx = page.context
    assert len(ctx["result"]["json"]) == MAX_JSON_CHARS and "of 4,194,3" in ctx["result"]["json"].note
    assert len(ctx["input"]["json"]) == MAX_JSON_CHARS and len(ctx["activity"].last_error) == MAX_TEXT_CHARS
    assert len(page.content) < 600_000
    events = root.get(EVENTS)
    assert events.status_code == 200 and len(events.content) < 200_000


@pytest.mark.parametrize(
    "query",
    [
        "activity_type__regex=(.*){1,200}(.*){1,200}x",
        "last_error__icontains=",
        "scheduled_at__year=99999",
        "metadata__has_key=x",
    ],
)
def test_lookups_the_filters_do_not_use_are_refused(viewer, query):
    make_activity("failed")
    response = viewer.get(f"{CHANGELIST}?{query}")
    assert response.status_code == 400 and "does not offer that filter" in response.content.decode()


def test_every_runnerq_admin_refuses_foreign_lookups(viewer):
    assert viewer.get(f"{EVENTS}?detail__icontains=x").status_code == 400
    assert viewer.get("/admin/runnerq_django/workerpool/?pool_id__regex=.").status_code == 400
    assert viewer.get("/admin/runnerq_django/workerpool/?queue_name__exact=adminq").status_code == 200
    assert viewer.get(f"{CHANGELIST}?queue={QUEUE}&status=failed&type=Charge").status_code == 200


@pytest.mark.parametrize(
    "url",
    [
        f"{CHANGELIST}?queue=a%00b",
        f"{CHANGELIST}?type=a%00b",
        f"{EVENTS}?event_type=a%00b",
        f"{EVENTS}?queue=a%00",
        f"{CHANGELIST}?q=x%00y",
        f"{CHANGELIST}?type=" + "t" * 600,
    ],
)
def test_bad_filter_values_answer_400_with_a_message(viewer, url):
    response = viewer.get(url)
    assert response.status_code == 400
    text = response.content.decode()
    assert "NUL" in text or "at most 512 bytes" in text


def test_a_query_over_the_statement_timeout_shows_a_message_and_leaves_no_backend(root, monkeypatch):
    from runnerq_django.admin_views import queries

    make_activity("pending")
    real = queries.status_counts

    def slow_counts(*args, **kwargs):
        with connection.cursor() as cur:  # the admin's database
            cur.execute("SELECT pg_sleep(5)")
        return real(*args, **kwargs)

    monkeypatch.setattr(queries, "status_counts", slow_counts)
    with override_settings(RUNNERQ={"ADMIN_STATEMENT_TIMEOUT": 0.2}):
        response = root.get(OVERVIEW)
    assert response.status_code == 503
    assert "ADMIN_STATEMENT_TIMEOUT" in response.content.decode() and "0.2 s" in response.content.decode()
    with connection.cursor() as cur:
        cur.execute(
            # This database's sessions only: another test run on the server may sleep too.
            "SELECT count(*) FROM pg_stat_activity WHERE datname = current_database() "
            "AND query LIKE 'SELECT pg_sleep(5)%%' AND state = 'active'"
        )
        assert cur.fetchone()[0] == 0
        cur.execute("SHOW statement_timeout")
        assert cur.fetchone()[0] == "0"  # the page did not leave its timeout on the connection
    monkeypatch.setattr(queries, "status_counts", real)
    assert root.get(OVERVIEW).status_code == 200


def test_the_statement_timeout_setting_is_validated():
    from runnerq_django import conf

    for bad in (0, -1, "5", float("nan"), 7200):
        with override_settings(RUNNERQ={"ADMIN_STATEMENT_TIMEOUT": bad}):
            assert any("ADMIN_STATEMENT_TIMEOUT" in p for p in conf.validate()), bad
    with override_settings(RUNNERQ={"ADMIN_STATEMENT_TIMEOUT": 2.5}):
        assert conf.validate() == []


def test_invisible_characters_are_spelled_out(root):
    sneaky = make_activity("failed", activity_type="Pay\u202emoc.live", queue="q\u200bx")
    html = root.get(CHANGELIST).content.decode()
    assert "Pay&lt;U+202E&gt;moc.live" in html and "q&lt;U+200B&gt;x" in html
    assert "\u202e" not in html and "\u200b" not in html
    detail = root.get(detail_url(sneaky)).content.decode()
    assert "\u202e" not in detail and "Pay&lt;U+202E&gt;moc.live" in detail


def test_confirmation_next_is_only_a_same_host_path(client):
    from django.test import RequestFactory

    from runnerq_django.admin_views.actions import _same_host_path

    request = RequestFactory().post("/", HTTP_HOST="testserver")
    assert _same_host_path(request, "/admin/x/?a=1") == "/admin/x/?a=1"
    for outside in (
        "https://evil.example/",
        "//evil.example/x",
        "http://testserver/admin/",
        "javascript:alert(1)",
        "x/y",
    ):
        assert _same_host_path(request, outside) == "", outside


def test_confirmation_page_drops_an_outside_next(client):
    client.force_login(User.objects.create_superuser("op", "op@example.com", "pw"))
    ids = [make_activity("pending") for _ in range(2)]
    page = client.post(
        CHANGELIST, {"action": "cancel", "_selected_action": [str(i) for i in ids], "next": "//evil.example/"}
    )
    assert page.status_code == 200 and "evil.example" not in page.content.decode()


def _bulk(status: str, n: int, *, queue: str = QUEUE, newer: bool = False) -> None:
    """``n`` activities in ``status`` by one INSERT (newer ones sort first in the list)."""
    sql(
        """INSERT INTO runnerq_activities (id, queue_name, activity_type, status, created_at, completed_at, root_activity_id)
            SELECT u, %s, 'Bulk', %s, now() - make_interval(secs => g) + make_interval(days => %s),
                   CASE WHEN %s IN ('failed', 'dead_letter', 'cancelled') THEN now() END, u
              FROM (SELECT g, md5(random()::text || g)::uuid AS u FROM generate_series(1, %s) g) x""",
        [queue, status, 1 if newer else 0, status, n],
    )


def test_select_all_past_the_cap_reaches_the_rest(client):
    client.force_login(User.objects.create_superuser("op", "op@example.com", "pw"))
    _bulk("pending", 1_100, newer=True)  # the newest 1,100 rows: retry would skip every one
    _bulk("dead_letter", 1_050)
    first = make_activity("dead_letter")
    post = {
        "action": "retry_keep_attempts",
        "_selected_action": [str(first)],
        "select_across": "1",
        "runnerq_confirm": "1",
    }
    response = client.post(f"{CHANGELIST}?queue={QUEUE}", post)
    # 1,000 dead letters were retried and the page offers the next ones, not the same rows again.
    assert response.status_code == 200 and "rq-confirm" in response.content.decode()
    with connection.cursor() as cur:
        cur.execute("SELECT status, count(*) FROM runnerq_activities GROUP BY 1")
        counts = dict(cur.fetchall())
    assert counts == {"pending": 2_100, "dead_letter": 51}
    ctx = response.context
    assert ctx["count"] == 51 and ctx["after"] and ctx["command_id"] != "admin:x"
    again = client.post(
        f"{CHANGELIST}?queue={QUEUE}",
        {**post, "runnerq_after": ctx["after"], "command_id": ctx["command_id"]},
        follow=True,
    )
    assert any("applied to 51 activities" in str(m) for m in again.context["messages"])
    assert row(first)["status"] == "pending"
    with connection.cursor() as cur:
        cur.execute("SELECT count(*) FROM runnerq_activities WHERE status = 'dead_letter'")
        assert cur.fetchone()[0] == 0
