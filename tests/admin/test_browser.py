"""The admin console in a real headless Chromium (Debian's ``chromium``, driven by Playwright):
an operator logs in, opens the overview, filters dead letters, redrives one and sees it complete
once a real ``runworker`` process has run it; a staff user without the permission cannot act; an
anonymous user is sent to the login page. Screenshots go to ``test-artifacts/``."""

from __future__ import annotations

import shutil
import time
from pathlib import Path

import pytest

from tests.helpers import REPO, spawn_manage, stop_process

CHROMIUM = shutil.which("chromium") or "/usr/bin/chromium"
ARTIFACTS = REPO / "test-artifacts"
QUEUE = "admin_browser"
ARGS = [
    "--headless",
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]

# transactional_db comes first in each test so the database outlives the (session-scoped) live
# server: its thread holds a connection until it stops.
pytestmark = [pytest.mark.browser, pytest.mark.slow]


def _browser_or_skip():
    if not Path(CHROMIUM).exists():
        pytest.skip(
            f"Debian's chromium is not installed at {CHROMIUM} (apt-get install chromium); the browser tests need it"
        )
    try:
        from playwright.sync_api import sync_playwright  # noqa: F401
    except ImportError:
        pytest.skip("playwright (the Python package) is not installed")


@pytest.fixture
def browser(monkeypatch):
    _browser_or_skip()
    # Playwright's sync API keeps an event loop in this thread; the test's own ORM calls are
    # plain blocking calls between its steps.
    monkeypatch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
    from playwright.sync_api import sync_playwright

    ARTIFACTS.mkdir(exist_ok=True)
    with sync_playwright() as pw:
        instance = pw.chromium.launch(executable_path=CHROMIUM, headless=True, args=ARGS)
        try:
            yield instance
        finally:
            instance.close()
            # While Playwright's loop runs, Django keeps this thread's connections per asyncio
            # context (asgiref.Local), out of reach of the test database teardown: close them here.
            from django.db import connections

            connections.close_all()


def _user(username: str, *, operate: bool):
    from django.contrib.auth.models import Permission, User

    user = User.objects.create_user(username, password="secret-pw", is_staff=True)
    codenames = ["view_activity", "view_event", "view_workerpool"] + (["operate_activity"] if operate else [])
    user.user_permissions.add(
        *Permission.objects.filter(content_type__app_label="runnerq_django", codename__in=codenames)
    )
    return user


def _login(page, base: str, username: str) -> None:
    page.goto(f"{base}/admin/login/?next=/admin/")
    page.fill("#id_username", username)
    page.fill("#id_password", "secret-pw")
    page.click("input[type=submit]")
    page.wait_for_url(f"{base}/admin/")


def _status(activity_id) -> str:
    from django.db import connection

    with connection.cursor() as cur:
        cur.execute("SELECT status FROM runnerq_activities WHERE id = %s", [activity_id])
        return cur.fetchone()[0]


def _seed():
    """A queue with some history around one dead letter of a type the worker handles."""
    from tests.admin.factories import add_event, add_result, make_activity

    dead = make_activity(
        "dead_letter",
        queue=QUEUE,
        activity_type="AdminBrowserCharge",
        payload={"amount_cents": 1999},
        retry_count=2,
        max_retries=3,
        last_error="ConnectionError: card network timed out",
    )
    add_result(
        dead,
        queue=QUEUE,
        state="Err",
        data={"error": "ConnectionError: card network timed out", "type": "dead_letter"},
    )
    for n in (1, 2):
        add_event(
            dead,
            "Retrying",
            {
                "started_at": "2026-01-01T00:00:00.000000Z",
                "error": "ConnectionError: card network timed out",
                "retry_count": n,
                "scheduled_at": "2026-01-01T00:00:02.000000Z",
            },
            queue=QUEUE,
            worker_id="w:1",
        )
    add_event(
        dead,
        "DeadLetter",
        {
            "started_at": "2026-01-01T00:00:05.000000Z",
            "error": "ConnectionError: card network timed out",
            "reason": "attempts_exhausted",
        },
        queue=QUEUE,
        worker_id="w:1",
    )
    # Other work a console shows: a backlog of a type no worker here handles, history, failures.
    for _ in range(3):
        make_activity("pending", queue=QUEUE, activity_type="ReportsRender")
    root = make_activity("completed", queue=QUEUE, activity_type="Checkout")
    make_activity("completed", queue=QUEUE, activity_type="ReserveStock", parent=root)
    make_activity(
        "failed", queue=QUEUE, activity_type="SendInvoice", last_error="ValueError: no billing address"
    )
    return dead


def test_operator_redrives_a_dead_letter_and_sees_it_complete(live_db_url, browser, live_server):
    from tests.admin.factories import events, ledger

    dead = _seed()
    _user("operator", operate=True)
    worker = spawn_manage(
        "runworker",
        "--queue",
        QUEUE,
        "--import",
        "tests.admin.browser_activities",
        "--concurrency",
        "2",
        "--no-maintenance",
        db_url=live_db_url,
    )
    base = live_server.url
    page = browser.new_page(viewport={"width": 1400, "height": 1000})
    try:
        # Anonymous: sent to the login page.
        page.goto(f"{base}/admin/runnerq_django/activity/overview/")
        assert "/admin/login/" in page.url

        _login(page, base, "operator")
        page.click("text=Queues overview")
        page.wait_for_selector(f"#queue-{QUEUE}")
        # The worker registers its pool within a heartbeat: reload until the overview shows it.
        deadline = time.monotonic() + 30
        while "live pool" not in page.inner_text(f"#queue-{QUEUE}"):
            assert worker.poll() is None, stop_process(worker)
            assert time.monotonic() < deadline, "the worker pool never appeared on the overview"
            time.sleep(0.5)
            page.reload()
        card = page.inner_text(f"#queue-{QUEUE}")
        assert "1 dead letter →" in card
        page.screenshot(path=str(ARTIFACTS / "admin-overview.png"), full_page=True)

        # Filter dead letters from the queue's card.
        page.click(f"#queue-{QUEUE} a.rq-dead-letters")
        page.wait_for_url("**/activity/?**status=dead_letter**")
        assert str(dead) in page.content()
        page.screenshot(path=str(ARTIFACTS / "admin-list.png"), full_page=True)

        # Redrive it: select it, choose the action. One activity needs no confirmation page (a
        # bulk selection does; tests/admin/test_actions.py covers that page).
        page.check("input.action-select")
        page.select_option("select[name=action]", "redrive")
        page.click("button[name=index]")
        page.wait_for_selector("ul.messagelist")
        assert "Redrive: applied to 1 activity" in page.inner_text("ul.messagelist")

        # The worker runs it; the detail page shows it completed with its result.
        page.goto(f"{base}/admin/runnerq_django/activity/{dead}/change/")
        deadline = time.monotonic() + 30
        while page.inner_text("#rq-status").strip() != "completed":
            assert worker.poll() is None, stop_process(worker)
            assert time.monotonic() < deadline, f"still {_status(dead)} after 30 s"
            time.sleep(0.5)
            page.reload()
        assert '"by": "runworker"' in page.inner_text("#rq-result")
        assert "Redriven" in page.inner_text("#rq-timeline")
        page.screenshot(path=str(ARTIFACTS / "admin-detail.png"), full_page=True)
    finally:
        page.close()
        output = stop_process(worker)
    assert _status(dead) == "completed", output
    redriven = [e for e in events(dead) if e[0] == "Redriven"]
    assert len(redriven) == 1 and redriven[0][1]["reset_attempts"] is True
    assert ledger(redriven[0][1]["command_id"], queue=QUEUE)["result"]["applied"] == 1
    for name in ("admin-overview.png", "admin-list.png", "admin-detail.png"):
        assert (ARTIFACTS / name).stat().st_size > 10_000


def test_staff_without_the_permission_cannot_act(transactional_db, browser, live_server):
    from tests.admin.factories import events

    dead = _seed()
    _user("viewer", operate=False)
    base = live_server.url
    page = browser.new_page()
    try:
        _login(page, base, "viewer")
        page.goto(f"{base}/admin/runnerq_django/activity/?status=dead_letter")
        assert str(dead) in page.content()
        # No actions are offered: no action bar, no checkboxes.
        assert page.query_selector("select[name=action]") is None
        page.goto(f"{base}/admin/runnerq_django/activity/{dead}/change/")
        assert page.query_selector("#rq-actions") is None
        # Forging the POST from the page (with a valid CSRF token) changes nothing either.
        status = page.evaluate(
            """async (id) => {
            const token = document.cookie.split('; ').find(c => c.startsWith('csrftoken=')).split('=')[1];
            const body = new URLSearchParams({action: 'redrive', _selected_action: id, runnerq_confirm: '1',
                                              reset_attempts: 'on', csrfmiddlewaretoken: token});
            const r = await fetch('/admin/runnerq_django/activity/', {method: 'POST', body, credentials: 'same-origin'});
            return r.status;
        }""",
            str(dead),
        )
        assert status in (200, 302, 403)
    finally:
        page.close()
    assert _status(dead) == "dead_letter" and [e[0] for e in events(dead)] == [
        "Retrying",
        "Retrying",
        "DeadLetter",
    ]


def test_anonymous_users_are_sent_to_login(transactional_db, browser, live_server):
    page = browser.new_page()
    try:
        for path in (
            "/admin/runnerq_django/activity/",
            "/admin/runnerq_django/activity/scheduler/",
            "/admin/runnerq_django/event/",
        ):
            page.goto(live_server.url + path)
            assert "/admin/login/" in page.url and page.query_selector("#id_username") is not None
    finally:
        page.close()
