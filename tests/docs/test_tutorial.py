"""The tutorial (docs/tutorial.md) end to end, as a reader follows it: its code is the files of
``testproject/shop`` that the page includes, run here by real processes on the test database.

Terminal one runs ``runworker --scheduler``; terminal two pipes the tutorial's shell session into
``manage.py shell``. What the page promises is checked: the workflow's result, one charge step,
one child, a durable sleep that parked the workflow, the periodic job's occurrence, and the admin's
detail page showing the workflow's steps and child.
"""

from __future__ import annotations

import ast
import subprocess
import sys
import uuid

import psycopg
import pytest

from tests.helpers import REPO, manage_env, spawn_manage, stop_process, wait_until

pytestmark = pytest.mark.slow

SHOP = REPO / "testproject" / "shop"
TUTORIAL = REPO / "docs" / "tutorial.md"


NAMESPACE = f"tutorial-{uuid.uuid4().hex[:12]}"


def _env(db_url: str) -> dict[str, str]:
    return manage_env(
        db_url,
        DJANGO_SETTINGS_MODULE="testproject.tutorial_settings",
        RUNNERQ_EXAMPLES="0",
        RUNNERQ_TUTORIAL_NAMESPACE=NAMESPACE,
    )


def test_the_page_includes_every_part_of_the_tutorial_app():
    page = TUTORIAL.read_text(encoding="utf-8")
    for name, sections in {
        "activities.py": ("activities", "workflow"),
        "periodic.py": ("periodic",),
        "session.py": ("enqueue", "signal"),
    }.items():
        source = (SHOP / name).read_text(encoding="utf-8")
        for section in sections:
            assert f"# --8<-- [start:{section}]" in source, (name, section)
            assert f'--8<-- "testproject/shop/{name}:{section}"' in page, (name, section)


def test_the_tutorial_runs_end_to_end(live_db_url, tmp_path, admin_client):
    log_path = tmp_path / "worker.log"
    with open(log_path, "w") as log:
        worker = spawn_manage(
            "runworker", "--scheduler", env=_env(live_db_url), stdout=log, stderr=subprocess.STDOUT
        )
    try:
        session = subprocess.run(
            [sys.executable, "manage.py", "shell"],
            cwd=REPO,
            env=_env(live_db_url),
            stdin=(SHOP / "session.py").open(),
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert session.returncode == 0, session.stdout + session.stderr + log_path.read_text()
        workflow_id, result = session.stdout.strip().splitlines()[-2:]
        assert ast.literal_eval(result) == {
            "charge": {"charge_id": "ch_42", "amount": 1999},
            "approved_by": "ada",
            "tracking": "TRACK-42",
        }

        def report_done():
            with psycopg.connect(live_db_url) as conn:
                return conn.execute(
                    "SELECT count(*) FROM runnerq_activities WHERE activity_type = 'shop.hourly_report'"
                    " AND status = 'completed'"
                ).fetchone()[0]

        # The periodic job: the latest hourly occurrence is inside its grace, so it runs at start.
        assert wait_until(report_done, timeout=60, interval=0.2, message="the hourly report") == 1
    finally:
        worker_output = stop_process(worker) + log_path.read_text()
    assert worker.returncode == 0, worker_output

    with psycopg.connect(live_db_url) as conn:
        children = conn.execute(
            "SELECT activity_type, status FROM runnerq_activities WHERE parent_activity_id = %s",
            (workflow_id,),
        ).fetchall()
        parked = conn.execute(
            "SELECT count(*) FROM runnerq_events WHERE activity_id = %s AND event_type = 'Yielded'",
            (workflow_id,),
        ).fetchone()[0]
    assert children == [("shop.ship_order", "completed")]
    assert parked >= 1, "the cooling-off sleep (3 s, past INLINE_WAIT_SECONDS) parks the workflow"

    # The admin (tutorial step 6): the workflow's detail page shows its steps and its child.
    page = admin_client.get(f"/admin/runnerq_django/activity/{workflow_id}/change/")
    assert page.status_code == 200
    html = page.content.decode()
    for text in ("shop.fulfil_order", "charge", "cooling-off", "approved", "shop.ship_order"):
        assert text in html, text
