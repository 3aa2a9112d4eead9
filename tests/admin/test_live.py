"""The live console's data endpoint (``activity/overview/live.json``) through the Django test
client: who may read it, what it answers from the rollups, and that a refresh reads only the
rollups and the worker tables (never a scan of the activities); the overview includes the
console with no inline script."""

from __future__ import annotations

import re
import uuid
from datetime import timedelta

import pytest
from django.contrib.auth.models import Permission, User
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.utils import timezone

from runnerq_django.admin_views.live import percentile
from runnerq_django.storage import console
from runnerq_django.storage.sql.console import LATENCY_BOUNDS_MS
from tests.admin.factories import QUEUE, make_activity

pytestmark = pytest.mark.django_db

LIVE = "/admin/runnerq_django/activity/overview/live.json"
OVERVIEW = "/admin/runnerq_django/activity/overview/"


@pytest.fixture
def admin_client_(client):
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    return client


def test_the_endpoint_has_the_consoles_permission_rules(client):
    response = client.get(LIVE)
    assert response.status_code == 302 and response["Location"].startswith("/admin/login/")
    plain = User.objects.create_user("plain", password="pw", is_staff=True)
    client.force_login(plain)
    assert client.get(LIVE).status_code == 403
    plain.user_permissions.add(Permission.objects.get(codename="view_activity"))
    client.force_login(User.objects.get(pk=plain.pk))
    assert client.get(LIVE).status_code == 200


def test_a_window_it_does_not_offer_is_a_clear_400(admin_client_):
    response = admin_client_.get(LIVE, {"window": "7d"})
    assert response.status_code == 400
    assert response.json() == {"error": "window: must be one of 1h, 24h, got '7d'"}


def test_series_types_pools_and_claims_from_the_rollups(admin_client_):
    now = timezone.now()
    for _ in range(3):
        make_activity(
            "completed", activity_type="Fast", created_at=now, started_at=now + timedelta(milliseconds=20)
        )
    make_activity("failed", activity_type="Flaky", created_at=now, started_at=now + timedelta(seconds=2))
    make_activity("dead_letter", activity_type="Slow", created_at=now, started_at=now + timedelta(seconds=40))
    make_activity("pending", activity_type="Fast")
    make_activity("processing", activity_type="Fast", current_worker_id=f"w-1:{uuid.uuid4().hex}")
    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO runnerq_worker_pools (pool_id, queue_name, max_workers) VALUES (%s, %s, 8)",
            [uuid.uuid4(), QUEUE],
        )
    console.roll_up(QUEUE)

    data = admin_client_.get(LIVE).json()
    series = data["series"]
    assert len(series["t"]) in (60, 61) and data["step_seconds"] == 60
    assert (sum(series["completed"]), sum(series["failed"]), sum(series["dead_lettered"])) == (3, 1, 1)
    assert max(p for p in series["p99"] if p is not None) <= 40_000
    assert [d for d in data["depth"]["due"] if d is not None] == [1]
    assert [d for d in data["depth"]["processing"] if d is not None] == [1]
    # Failing types first, then the slowest.
    assert [t["type"] for t in data["types"]] == ["Slow", "Flaky", "Fast"]
    fast = data["types"][2]
    assert fast["completed"] == 3 and 10 <= fast["p50_ms"] <= 25
    (queue,) = [q for q in data["queues"] if q["queue"] == QUEUE]
    assert (queue["completed"], queue["in_use"], queue["capacity"]) == (3, 1, 8)
    assert [(c["worker"], c["claims"]) for c in data["claims"]] == [("w-1", 1)]
    assert [p["slots"] for p in data["pools"]] == [8]

    day = admin_client_.get(LIVE, {"window": "24h", "queue": QUEUE}).json()
    assert day["step_seconds"] == 600 and sum(day["series"]["completed"]) == 3
    assert admin_client_.get(LIVE, {"queue": "elsewhere"}).json()["types"] == []


def test_a_refresh_reads_no_activity_but_the_running_ones(admin_client_):
    with CaptureQueriesContext(connection) as queries:
        assert admin_client_.get(LIVE).status_code == 200
    touching = [q["sql"] for q in queries.captured_queries if "runnerq_activities" in q["sql"]]
    assert len(touching) == 1 and "status = 'processing'" in touching[0]


def test_the_overview_includes_the_console_without_inline_script(admin_client_):
    page = admin_client_.get(OVERVIEW).content.decode()
    assert 'id="rq-live"' in page and f'data-url="{LIVE}"' in page
    scripts = re.findall(r"<script([^>]*)>(.*?)</script>", page, re.S)
    assert scripts and all("src=" in attrs and not body.strip() for attrs, body in scripts)
    assert not re.search(r"\son[a-z]+=", page)  # no inline event handlers either


def test_percentiles_from_a_histogram():
    assert percentile({}, 0.5, 0) is None
    index = LATENCY_BOUNDS_MS.index(100)  # latencies from 50 to 100 ms
    assert percentile({index: 10}, 0.5, 90.0) == 75.0
    assert percentile({index: 10}, 1.0, 90.0) == 90.0  # never above the largest seen
    assert percentile({0: 99, len(LATENCY_BOUNDS_MS): 1}, 0.99, 5_000_000.0) <= 5.0


def test_the_types_past_the_shown_ones_are_folded_into_other_with_the_totals_kept(admin_client_):
    from runnerq_django.admin_views.live import TYPES_SHOWN

    kinds = TYPES_SHOWN + 25
    with connection.cursor() as cur:  # kinds types, type i with i completions and i % 3 failures
        cur.execute(
            """INSERT INTO runnerq_activities (id, queue_name, activity_type, status, created_at,
                       started_at, completed_at, root_activity_id)
               SELECT u, %s, 'T' || t, CASE WHEN n <= t %% 3 THEN 'failed' ELSE 'completed' END,
                      now() - interval '1 second', now() - make_interval(secs => 0.5 - t / 1000.0), now(), u
                 FROM generate_series(1, %s) t, generate_series(1, t + t %% 3) n,
                      LATERAL (SELECT md5(random()::text || t || '/' || n)::uuid AS u) x""",
            [QUEUE, kinds],
        )
    console.roll_up(QUEUE)
    for window in ("1h", "24h"):
        data = admin_client_.get(LIVE, {"window": window}).json()
        assert len(data["types"]) == TYPES_SHOWN and data["hidden_types"] == 25
        other = data["other"]
        assert other["types"] == 25 and other["queue"] is None
        for key in ("completed", "failed"):
            total = sum(data["series"][key])
            assert total == sum(t[key] for t in data["types"]) + other[key]
            assert (
                total == sum(range(1, kinds + 1))
                if key == "completed"
                else sum(t % 3 for t in range(1, kinds + 1))
            )
            assert total == sum(q[key] for q in data["queues"])
        # The shown ones are the failing ones first: every type with 2 failures is shown.
        assert {t["type"] for t in data["types"] if t["failed"] == 2} == {
            f"T{t}" for t in range(1, kinds + 1) if t % 3 == 2
        }
        assert (
            other["p50_ms"] is not None and other["max_ms"] <= max(t["max_ms"] for t in data["types"]) + 1_000
        )


def test_the_types_of_a_day_of_rollups_add_up_to_its_series_in_both_windows(admin_client_):
    """Types are read in the coarsest rows that fit the window (hours, ten minutes) and its first
    bins in finer ones: what they add up to is the series' totals, to the minute."""
    from runnerq_django.storage.sql import console as sql_console

    with connection.cursor() as cur:  # 3 types, every minute of the last 25 hours
        cur.execute(
            """INSERT INTO runnerq_console_minutes (minute, queue_name, activity_type, completed, failed,
                       latency_count, latency_sum_ms, latency_max_ms, latency_b4, latency_b6)
               SELECT date_trunc('minute', now()) - m * interval '1 minute', %s, t, 1 + m %% 5, (m %% 7 = 0)::int,
                      2, 150, 400, 1, 1
                 FROM generate_series(0, 1500) m, unnest(ARRAY['a', 'b', 'c']) t""",
            [QUEUE],
        )
        cur.execute(sql_console.ROLLUP_TENS, {"queue": QUEUE, "since": timezone.now() - timedelta(hours=26)})
    console.roll_up(QUEUE)  # derives the totals and the hours of the older rows
    for window in ("1h", "24h"):
        data = admin_client_.get(LIVE, {"window": window}).json()
        assert len(data["types"]) == 3 and data["other"] is None
        for key in ("completed", "failed"):
            assert sum(data["series"][key]) == sum(t[key] for t in data["types"]) > 0
        per_type = {t["type"]: t["completed"] for t in data["types"]}
        assert len(set(per_type.values())) == 1  # the same rows for each type
        bins = sum(1 for n in data["series"]["completed"] if n)  # the rollup cleared its last minutes
        assert bins >= (56 if window == "1h" else 143)
