"""The live console in a real headless Chromium (Debian's ``chromium``, driven by Playwright),
with a real ``runworker`` whose maintenance loop writes the rollups: the charts render with data,
the page updates by itself when activities complete while it is open, and pausing stops the
updates (resuming brings them back). The screenshots go to a temporary folder; with
``RUNNERQ_SCREENSHOTS=docs`` they replace the how-to's (docs/images/)."""

from __future__ import annotations

import os
import time
from datetime import timedelta

import pytest

from tests.admin.test_browser import _login, _user, browser  # noqa: F401 (the fixture)
from tests.helpers import REPO, spawn_manage, stop_process

pytestmark = [pytest.mark.browser, pytest.mark.slow]

QUEUE = "admin_live"
OVERVIEW = "/admin/runnerq_django/activity/overview/"


@pytest.fixture
def images(tmp_path):
    """Where the screenshots go: a test run leaves the committed images alone unless asked."""
    if os.environ.get("RUNNERQ_SCREENSHOTS") == "docs":
        return REPO / "docs" / "images"
    return tmp_path


def _seed_history() -> None:
    """An hour of finished work of three types, rolled up as a worker would have."""
    from django.utils import timezone

    from runnerq_django.storage import console
    from tests.admin.factories import make_activity

    now = timezone.now()
    for minutes_ago, n in ((50, 4), (35, 7), (20, 5), (8, 9), (2, 6)):
        at = now - timedelta(minutes=minutes_ago)
        for i in range(n):
            make_activity(
                "completed",
                queue=QUEUE,
                activity_type="AdminBrowserCharge",
                created_at=at,
                started_at=at + timedelta(milliseconds=30 + 40 * i),
                completed_at=at + timedelta(seconds=1),
            )
        make_activity(
            "failed" if minutes_ago % 2 else "dead_letter",
            queue=QUEUE,
            activity_type="SendInvoice",
            created_at=at,
            started_at=at + timedelta(seconds=3),
            completed_at=at + timedelta(seconds=4),
            last_error="ValueError: no billing address",
        )
    for _ in range(4):
        make_activity("pending", queue=QUEUE, activity_type="ReportsRender")
    # The depth samples the workers took over that hour (one a minute): a backlog drained.
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "INSERT INTO runnerq_console_depth (minute, queue_name, due, scheduled, processing, sampled_at)"
            " SELECT date_trunc('minute', now()) - m * interval '1 minute', %s, (m * 7) %% 40,"
            " 5 + m %% 4, m %% 3, now() FROM generate_series(3, 59) m",
            [QUEUE],
        )
    # A worker's rollup recomputes only the last minutes: this one covers the seeded hour.
    with _recompute_all():
        console.roll_up(QUEUE)


class _recompute_all:
    """Widen storage.console's recompute window for one call (the seeded history is an hour old)."""

    def __enter__(self) -> None:
        from runnerq_django.storage import console

        self.saved = console.RECOMPUTE_SECONDS
        console.RECOMPUTE_SECONDS = 3600

    def __exit__(self, *exc: object) -> None:
        from runnerq_django.storage import console

        console.RECOMPUTE_SECONDS = self.saved


def _enqueue(n: int) -> None:
    from runnerq_django import storage
    from runnerq_django.storage.types import NewActivity

    for i in range(n):
        storage.submit(QUEUE, NewActivity("AdminBrowserCharge", payload={"amount_cents": 100 + i}))


def _rolled_up_completed() -> int:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute(
            "SELECT COALESCE(sum(completed), 0) FROM runnerq_console_minutes WHERE queue_name = %s AND span_minutes = 1",
            [QUEUE],
        )
        return int(cur.fetchone()[0])


def _shown_completed(page) -> int:
    for row in page.query_selector_all("#rq-live-queues tbody tr"):
        cells = [c.inner_text().strip() for c in row.query_selector_all("td")]
        if cells and cells[0] == QUEUE:
            return int(cells[1])
    return -1


def _refreshes(page) -> int:
    return int(page.get_attribute("#rq-live", "data-refreshes") or 0)


def _wait(predicate, seconds: float, what: str, worker) -> None:
    deadline = time.monotonic() + seconds
    while not predicate():
        assert worker.poll() is None, stop_process(worker)
        assert time.monotonic() < deadline, what
        time.sleep(0.3)


def test_charts_render_update_live_and_pause(live_db_url, browser, live_server, images):  # noqa: F811
    _seed_history()
    _user("operator", operate=True)
    worker = spawn_manage(
        "runworker",
        "--queue",
        QUEUE,
        "--import",
        "tests.admin.browser_activities",
        "--concurrency",
        "2",
        db_url=live_db_url,
    )
    base = live_server.url
    page = browser.new_page(viewport={"width": 1400, "height": 1300})
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    try:
        _login(page, base, "operator")
        page.goto(f"{base}{OVERVIEW}")
        page.wait_for_selector("#rq-live[data-refreshes]")
        # The charts render with data: a uPlot canvas each, an hour of points, the history's totals.
        for chart in ("outcomes", "depth", "latency"):
            assert page.query_selector(f"#rq-chart-{chart} canvas"), chart
            assert int(page.get_attribute(f"#rq-chart-{chart}", "data-points")) >= 60
        assert _shown_completed(page) == 31
        types = [r.inner_text() for r in page.query_selector_all("#rq-live-types tbody tr")]
        assert types[0].split("\t")[1] == "SendInvoice"  # the failing type first
        _wait(lambda: page.query_selector_all("#rq-live-pools tbody tr td.rq-mono"), 30, "no pool", worker)
        # One queue, the last day: the charts redraw from that queue's ten-minute sums.
        before = _refreshes(page)
        page.select_option("#rq-live-queue", QUEUE)
        page.select_option("#rq-live-window", "24h")
        _wait(lambda: _refreshes(page) >= before + 2, 30, "no refresh after choosing", worker)
        assert int(page.get_attribute("#rq-chart-outcomes", "data-points")) >= 144
        assert _shown_completed(page) == 31
        page.select_option("#rq-live-window", "1h")

        # Activities complete while the page is open: the worker runs them, its maintenance
        # loop rolls them up, and the page shows them without a reload.
        _enqueue(5)
        _wait(lambda: _shown_completed(page) == 36, 60, "the page never showed the 5 completions", worker)
        page.wait_for_timeout(3500)  # one more refresh, so the depth chart has its new sample
        page.screenshot(path=str(images / "live-console.png"), full_page=False)
        page.locator("#rq-live").screenshot(path=str(images / "live-console-charts.png"))

        # Paused: new completions are rolled up, the page does not change.
        page.click("#rq-live-toggle")
        assert page.inner_text("#rq-live-toggle") == "Resume"
        paused_at = _refreshes(page)
        _enqueue(4)
        _wait(lambda: _rolled_up_completed() >= 40, 60, "the worker never rolled the 4 up", worker)
        page.wait_for_timeout(7000)  # two refresh periods
        assert _refreshes(page) == paused_at
        assert _shown_completed(page) == 36
        assert page.inner_text("#rq-live-state") == "paused"
        page.locator("#rq-live").screenshot(path=str(images / "live-console-paused.png"))

        # Resumed: updates again.
        page.click("#rq-live-toggle")
        _wait(lambda: _shown_completed(page) == 40, 30, "resuming did not bring the updates back", worker)
        assert _refreshes(page) > paused_at
    finally:
        page.close()
        output = stop_process(worker)
    assert errors == [], errors
    for name in ("live-console.png", "live-console-charts.png", "live-console-paused.png"):
        assert (images / name).stat().st_size > 10_000, output


def test_the_activity_pages_refresh_themselves_and_pause(live_db_url, browser, live_server, images):  # noqa: F811
    from runnerq_django import storage
    from runnerq_django.storage.types import NewActivity

    _user("operator", operate=True)
    first = storage.submit(QUEUE, NewActivity("AdminBrowserCharge", payload={"amount_cents": 1})).id
    base = live_server.url
    context = browser.new_context(viewport={"width": 1400, "height": 1000})
    page = context.new_page()
    errors: list[str] = []
    page.on("pageerror", lambda exc: errors.append(str(exc)))
    worker = None
    try:
        _login(page, base, "operator")
        page.goto(f"{base}/admin/runnerq_django/activity/{first}/change/")
        assert page.inner_text("#rq-status").strip() == "pending"
        page.evaluate("window.__rqSamePage = true")  # gone if the page were reloaded
        list_page = context.new_page()  # the same session
        list_page.on("pageerror", lambda exc: errors.append(str(exc)))
        list_page.goto(f"{base}/admin/runnerq_django/activity/?queue={QUEUE}")
        list_page.evaluate("window.__rqSamePage = true")
        list_page.click("#rq-live-page-toggle")  # the list paused, the detail live
        assert list_page.inner_text("#rq-live-page-toggle") == "Resume"
        worker = spawn_manage(
            "runworker", "--queue", QUEUE, "--import", "tests.admin.browser_activities", db_url=live_db_url
        )
        _wait(
            lambda: page.inner_text("#rq-status").strip() == "completed",
            60,
            "the detail page never showed the completion",
            worker,
        )
        assert page.evaluate("window.__rqSamePage") is True
        assert '"by": "runworker"' in page.inner_text("#rq-result")
        page.screenshot(path=str(images / "live-detail.png"), full_page=False)
        # The paused list still shows the activity as pending; resumed, it shows it completed.
        list_page.wait_for_timeout(6000)
        assert "completed" not in list_page.inner_text("#result_list tbody")
        list_page.click("#rq-live-page-toggle")
        deadline = time.monotonic() + 30
        while "completed" not in list_page.inner_text("#result_list tbody"):
            assert time.monotonic() < deadline, "the resumed list never refreshed"
            list_page.wait_for_timeout(300)
        assert list_page.evaluate("window.__rqSamePage") is True
    finally:
        context.close()
        output = stop_process(worker) if worker else ""
    assert errors == [], (errors, output)


def test_the_types_past_the_shown_ones_show_as_one_other_row(live_db_url, browser, live_server, monkeypatch):  # noqa: F811
    from runnerq_django.admin_views import live

    monkeypatch.setattr(live, "TYPES_SHOWN", 1)  # the live server serves from this process
    _seed_history()
    _user("viewer", operate=False)
    page = browser.new_page(viewport={"width": 1400, "height": 1300})
    try:
        _login(page, live_server.url, "viewer")
        page.goto(f"{live_server.url}{OVERVIEW}")
        page.wait_for_selector("#rq-live[data-refreshes]")
        rows = [r.inner_text().split("\t") for r in page.query_selector_all("#rq-live-types tbody tr")]
        assert [r[1] for r in rows] == ["SendInvoice", "other (1 type)"]
        assert int(rows[0][2]) + int(rows[1][2]) == _shown_completed(page) == 31
    finally:
        page.close()
