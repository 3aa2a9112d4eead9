"""The admin console's pages through the Django test client: what they show, that they stay on
the indexes (statuses as literals, no whole-table count), and who may see them."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import reverse
from django.utils import timezone

from runnerq_django.spec.keys import business_key, checkpoint_id
from tests.admin.factories import QUEUE, add_dependency, add_event, add_result, make_activity

pytestmark = pytest.mark.django_db

CHANGELIST = "/admin/runnerq_django/activity/"
OVERVIEW = "/admin/runnerq_django/activity/overview/"


@pytest.fixture
def admin_client_(client):
    user = User.objects.create_superuser("root", "root@example.com", "pw")
    client.force_login(user)
    return client


def ids_on_page(response) -> set[str]:
    return set(re.findall(r'title="([0-9a-f-]{36})" class="rq-mono"', response.content.decode()))


def test_anonymous_users_go_to_the_login_page(client):
    for url in (
        OVERVIEW,
        CHANGELIST,
        "/admin/runnerq_django/activity/scheduler/",
        "/admin/runnerq_django/event/",
    ):
        response = client.get(url)
        assert response.status_code == 302 and response["Location"].startswith("/admin/login/")


def test_staff_without_view_permission_is_refused(client):
    user = User.objects.create_user("plain", password="pw", is_staff=True)
    client.force_login(user)
    assert client.get(OVERVIEW).status_code == 403
    assert client.get(CHANGELIST).status_code == 403


def test_index_links_to_the_console(admin_client_):
    page = admin_client_.get("/admin/").content.decode()
    assert OVERVIEW in page and "Dead letters" in page


def test_overview_counts_ages_rates_and_pools(admin_client_):
    from django.db import connection

    now = timezone.now()
    make_activity("pending", created_at=now - timedelta(minutes=7))
    make_activity("pending")
    make_activity("dead_letter")
    make_activity("dead_letter", completed_at=now - timedelta(hours=3))
    make_activity("completed", completed_at=now - timedelta(minutes=2))
    make_activity("completed", completed_at=now - timedelta(minutes=30))
    make_activity("failed", queue="reports")
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO runnerq_worker_pools (pool_id, queue_name, max_workers) VALUES (%s, %s, 8), (%s, %s, 4)",
            [uuid.uuid4(), QUEUE, uuid.uuid4(), QUEUE],
        )
        cur.execute(
            "INSERT INTO runnerq_worker_pools (pool_id, queue_name, max_workers, last_seen_at)"
            " VALUES (%s, 'reports', 2, now() - interval '10 minutes')",
            [uuid.uuid4()],
        )
    response = admin_client_.get(OVERVIEW)
    assert response.status_code == 200
    queues = {q.name: q for q in response.context["queues"]}
    q = queues[QUEUE]
    assert q.counts["pending"] == 2 and q.counts["dead_letter"] == 2
    assert q.completed_5m == 1 and q.completed_60m == 2
    assert q.failed_5m == 1 and q.failed_60m == 1  # the 3-hour-old dead letter is outside both windows
    assert timedelta(minutes=6) < now - q.oldest_runnable < timedelta(minutes=8)
    assert q.capacity == 12 and len(q.live_pools) == 2
    assert queues["reports"].counts["failed"] == 1 and queues["reports"].live_pools == []
    html = response.content.decode()
    assert f"?queue={QUEUE}&amp;status=dead_letter" in html or f"?queue={QUEUE}&status=dead_letter" in html
    assert "no live worker" in html  # the reports queue's pool is stale


def test_changelist_filters_and_columns(admin_client_):
    dead = make_activity("dead_letter", activity_type="Charge", last_error="card declined")
    pending = make_activity("pending", activity_type="Email")
    other = make_activity("dead_letter", queue="otherq")
    response = admin_client_.get(CHANGELIST)
    assert response.status_code == 200
    assert {str(dead), str(pending), str(other)} <= ids_on_page(response)
    assert "card declined" in response.content.decode() and "3 / 3" in response.content.decode()
    assert ids_on_page(admin_client_.get(f"{CHANGELIST}?status=dead_letter")) == {str(dead), str(other)}
    assert ids_on_page(admin_client_.get(f"{CHANGELIST}?status=dead_letter&queue={QUEUE}")) == {str(dead)}
    assert ids_on_page(admin_client_.get(f"{CHANGELIST}?type=Email")) == {str(pending)}


def test_changelist_search_by_id_key_and_type(admin_client_):
    keyed = make_activity(
        "completed", activity_type="Charge", idempotency_key=business_key("order-42", "Charge")
    )
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO runnerq_idempotency (queue_name, idempotency_key, activity_id) VALUES (%s, %s, %s)",
            [QUEUE, business_key("order-42", "Charge"), keyed],
        )
    other = make_activity("pending", activity_type="Charge")  # makes "Charge" a known type
    email = make_activity("completed", activity_type="Email")
    assert ids_on_page(admin_client_.get(f"{CHANGELIST}?q={other}")) == {str(other)}
    page = admin_client_.get(f"{CHANGELIST}?q=order-42")
    assert ids_on_page(page) == {str(keyed)}
    assert f'title="{business_key("order-42", "Charge")}">order-42</span>' in page.content.decode()  # decoded
    assert ids_on_page(admin_client_.get(f"{CHANGELIST}?q={business_key('order-42', 'Charge')}")) == {
        str(keyed)
    }
    assert ids_on_page(admin_client_.get(f"{CHANGELIST}?q=Charge")) == {str(keyed), str(other)}
    assert ids_on_page(admin_client_.get(f"{CHANGELIST}?q=Email")) == {str(email)}
    assert ids_on_page(admin_client_.get(f"{CHANGELIST}?q=no-such-thing")) == set()


def test_changelist_spells_statuses_as_literals_and_never_counts_the_table(admin_client_):
    for _ in range(3):
        make_activity("dead_letter")
    with CaptureQueriesContext(connection) as captured:
        response = admin_client_.get(f"{CHANGELIST}?status=dead_letter")
    assert response.status_code == 200
    sqls = [q["sql"] for q in captured.captured_queries if "runnerq_activities" in q["sql"]]
    page_sql = next(s for s in sqls if "ORDER BY" in s and '"runnerq_activities"."last_error"' in s)
    assert "runnerq_activities.status = 'dead_letter'" in page_sql
    assert re.search(
        r'ORDER BY "runnerq_activities"."created_at" DESC, "runnerq_activities"."id" DESC', page_sql
    )
    for sql in sqls:
        if re.search(r"count\(\*\)", sql, re.I):
            assert "LIMIT" in sql.upper(), f"an unbounded count: {sql}"
    # The planner can use the partial status index for that query (the predicate is provable).
    with connection.cursor() as cur:
        cur.execute("SET LOCAL enable_seqscan = off") if connection.in_atomic_block else None
        cur.execute("EXPLAIN " + page_sql)
        plan = "\n".join(r[0] for r in cur.fetchall())
    assert "idx_runnerq_query_status" in plan, plan


def test_changelist_pagination_estimates_past_the_cap(admin_client_, monkeypatch):
    from runnerq_django.admin_views import changelist

    monkeypatch.setattr(changelist.CappedCountPaginator, "cap", 5)
    for _ in range(8):
        make_activity("pending")
    response = admin_client_.get(CHANGELIST)
    assert response.context["cl"].paginator.estimated is True
    assert "about" in response.content.decode()
    monkeypatch.setattr(changelist.CappedCountPaginator, "cap", 50)
    response = admin_client_.get(CHANGELIST)
    assert response.context["cl"].paginator.estimated is False and response.context["cl"].result_count == 8


def test_detail_shows_everything_an_operator_asks(admin_client_):
    parent = make_activity(
        "waiting",
        activity_type="Checkout",
        payload={"order": 42},
        idempotency_key=business_key("order-42", "Checkout"),
        scheduled_at=timezone.now() + timedelta(minutes=5),
    )
    child = make_activity("processing", parent=parent, activity_type="Charge")
    grandchild = make_activity("pending", parent=child, root=parent, activity_type="Audit")
    with connection.cursor() as cur:
        cur.execute("UPDATE runnerq_activities SET waiting_result_id = %s WHERE id = %s", [child, parent])
    add_dependency(parent, child, producer=child)
    step_id = checkpoint_id(parent, "run", "reserve")
    add_result(step_id, data={"reserved": True}, owner=parent, step="run:reserve")
    signal_id = checkpoint_id(parent, "signal", "approved")
    add_result(signal_id, data={"by": "alice"}, owner=parent, step="signal:approved")
    add_event(
        parent,
        "Yielded",
        {
            "kind": "await",
            "step": "child:charge",
            "wake_at": "2030-01-01T00:00:00.000000Z",
            "result_id": str(child),
            "ready": False,
        },
    )
    add_event(
        parent,
        "Retrying",
        {
            "started_at": "2026-01-01T00:00:00.000000Z",
            "error": "flaky",
            "retry_count": 1,
            "scheduled_at": "2026-01-01T00:00:02.000000Z",
        },
        worker_id="host:1:abc",
    )
    response = admin_client_.get(reverse("admin:runnerq_django_activity_change", args=[parent]))
    assert response.status_code == 200
    html = response.content.decode()
    ctx = response.context
    assert '"order": 42' in ctx["input"]["json"] and "&quot;order&quot;: 42" in html  # the input payload
    assert ctx["key"]["application"] == "order-42" and "order-42" in html
    assert [e["event_type"] for e in ctx["events"]] == ["Yielded", "Retrying"]
    assert (
        ctx["steps"][0]["kind"] == "run"
        and ctx["steps"][0]["name"] == "reserve"
        and "reserved" in ctx["steps"][0]["json"]
    )
    assert ctx["signals"][0]["name"] == "approved"
    assert [n.id for n in ctx["tree"]] == [parent, child, grandchild] and [n.level for n in ctx["tree"]] == [
        0,
        1,
        2,
    ]
    assert [c.id for c in ctx["children"]] == [child]
    assert ctx["waits_for"][0]["producer"].id == child
    assert ctx["blocked"]["kind"] == "await" and ctx["blocked"]["target"].id == child
    assert "Awaiting child Charge" in html
    assert any(w["token"] == "host:1:abc" for w in ctx["workers"])
    # The child: who waits for it, and its running claim.
    child_page = admin_client_.get(reverse("admin:runnerq_django_activity_change", args=[child]))
    assert child_page.context["waited_by"][0]["waiter"].id == parent
    assert child_page.context["blocked"]["kind"] == "running"
    assert child_page.context["parent"].id == parent


def test_detail_blocked_reasons(admin_client_):
    later = timezone.now() + timedelta(hours=1)
    sleeping = make_activity("waiting", scheduled_at=later)
    on_signal = make_activity("waiting", scheduled_at=later)
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE runnerq_activities SET waiting_result_id = %s WHERE id = %s",
            [checkpoint_id(on_signal, "signal", "approve"), on_signal],
        )
    add_event(
        on_signal,
        "Yielded",
        {
            "kind": "signal",
            "step": "signal:approve",
            "wake_at": "2030-01-01T00:00:00.000000Z",
            "result_id": str(checkpoint_id(on_signal, "signal", "approve")),
            "ready": False,
        },
    )
    backoff = make_activity("retrying", retry_count=1)
    runnable = make_activity("pending")

    def blocked(a):
        return admin_client_.get(reverse("admin:runnerq_django_activity_change", args=[a])).context["blocked"]

    assert blocked(sleeping)["kind"] == "sleep" and blocked(sleeping)["until"] is not None
    assert blocked(on_signal)["kind"] == "signal" and blocked(on_signal)["name"] == "approve"
    assert blocked(backoff)["kind"] == "backoff"
    reason = blocked(runnable)
    assert reason["kind"] == "runnable" and reason["no_worker"] is True and "no live worker" in reason["text"]
    assert blocked(make_activity("completed")) is None


def test_detail_of_an_unknown_activity_redirects(admin_client_):
    response = admin_client_.get(reverse("admin:runnerq_django_activity_change", args=[uuid.uuid4()]))
    assert response.status_code == 302
    response = admin_client_.get("/admin/runnerq_django/activity/not-a-uuid/change/")
    assert response.status_code == 302


def test_events_list_filters(admin_client_):
    a = make_activity("failed")
    b = make_activity("dead_letter", queue="otherq")
    add_event(a, "Failed", {"started_at": "2026-01-01T00:00:00.000000Z", "error": "x"}, worker_id="w")
    add_event(
        b,
        "DeadLetter",
        {"started_at": "2026-01-01T00:00:00.000000Z", "error": "y", "reason": "attempts_exhausted"},
        queue="otherq",
        worker_id="w",
    )
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE runnerq_events SET created_at = now() - interval '2 hours' WHERE activity_id = %s", [a]
        )
    url = "/admin/runnerq_django/event/"

    def types(query: str) -> list[str]:
        return [e.event_type for e in admin_client_.get(url + query).context["cl"].result_list]

    assert sorted(types("")) == ["DeadLetter", "Failed"]
    assert types("?event_type=Failed") == ["Failed"]
    assert types("?queue=otherq") == ["DeadLetter"]
    assert types("?since=1h") == ["DeadLetter"]
    assert sorted(types("?since=24h")) == ["DeadLetter", "Failed"]
    assert types(f"?q={a}") == ["Failed"]
    page = admin_client_.get(url).content.decode()
    assert reverse("admin:runnerq_django_activity_change", args=[a]) in page


def test_scheduler_page_lists_declared_jobs_and_writes_nothing(admin_client_, private_redis):
    import redis
    from django.conf import settings
    from django.test import override_settings

    from runnerq_django.scheduler import declarations

    declared = [job.id for job in declarations.jobs()]
    assert declared, "the test project declares periodic jobs (testproject/examples/periodic.py)"
    # The scheduler's alias on a Redis of this test's own: nothing to clear, nobody else's keys.
    caches = {
        **settings.CACHES,
        "runnerq_scheduler": {
            "BACKEND": "django_redis.cache.RedisCache",
            "LOCATION": private_redis["url"],
            "OPTIONS": {"CLIENT_CLASS": "django_redis.client.DefaultClient"},
        },
    }
    server = redis.Redis.from_url(private_redis["url"])
    with override_settings(CACHES=caches):
        keys_before = sorted(server.scan_iter(match="*", count=1000))
        response = admin_client_.get("/admin/runnerq_django/activity/scheduler/")
        keys_after = sorted(server.scan_iter(match="*", count=1000))
    assert response.status_code == 200 and response.context["unavailable"] is None
    jobs = {j["id"]: j for j in response.context["jobs"]}
    assert set(jobs) == set(declared)
    # Nothing in the cache yet: every record is missing, shown as rebuilt from the declaration.
    assert {j["state"] for j in jobs.values()} == {"missing"}
    assert all(j["next"] is not None for j in jobs.values())
    html = response.content.decode()
    assert "Read-only" in html and all(f'data-job="{job_id}"' in html for job_id in declared)
    assert keys_after == keys_before == []  # the page wrote no record, no counter, nothing


def test_worker_pools_list(admin_client_):
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO runnerq_worker_pools (pool_id, queue_name, max_workers) VALUES (%s, %s, 3)",
            [uuid.uuid4(), QUEUE],
        )
    response = admin_client_.get("/admin/runnerq_django/workerpool/")
    assert response.status_code == 200 and QUEUE in response.content.decode()


def test_detail_shows_superjson_values_through_the_plain_json_view_marked_as_such(admin_client_):
    """Rows as the TypeScript SDK writes them (the spec's plain_json vectors' Date case)."""
    envelope = {"json": {"at": "2026-10-02T00:00:00.000Z"}, "meta": {"values": {"at": ["Date"]}}}
    activity = make_activity("completed", payload={"plain": True})
    signal_id = checkpoint_id(activity, "signal", "go")
    add_result(activity, data=envelope)
    add_result(signal_id, data=envelope, owner=activity, step="signal:go")
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE runnerq_inputs SET payload = %s::jsonb, serialization = 'superjson-v1' WHERE activity_id = %s",
            ['{"json": [1, 2], "meta": {"values": ["set"]}}', activity],
        )
        cur.execute(
            "UPDATE runnerq_results SET serialization = 'superjson-v1' WHERE activity_id IN (%s, %s)",
            [activity, signal_id],
        )
    page = admin_client_.get(
        reverse("admin:runnerq_django_activity_change", args=[activity])
    ).content.decode()
    assert page.count("superjson-v1, plain JSON view") == 3  # input, result, signal
    assert "&quot;meta&quot;" not in page and "&quot;at&quot;: &quot;2026-10-02T00:00:00.000Z&quot;" in page
    plain = make_activity("completed", payload={"x": 1})
    add_result(plain, data={"y": 2})
    page = admin_client_.get(reverse("admin:runnerq_django_activity_change", args=[plain])).content.decode()
    assert "plain JSON view" not in page
