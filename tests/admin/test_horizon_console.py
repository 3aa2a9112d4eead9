"""The admin's overview and live console warn while a real transaction, held open in another
connection, holds back the xmin horizon (``storage.horizon``), and stop once it ends."""

from __future__ import annotations

import uuid

import pytest
from django.contrib.auth.models import User
from django.test import override_settings

from runnerq_django.storage import horizon as horizons
from tests.helpers import wait_until
from tests.storage.test_horizon import _mine, held  # noqa: F401  (the fixture)

pytestmark = [
    pytest.mark.django_db(transaction=True),
    pytest.mark.direct_postgres(
        "it finds its held session by backend pid; behind transaction pooling the session that holds "
        "the snapshot is a server connection PgBouncer chose, with another pid"
    ),
]

OVERVIEW = "/admin/runnerq_django/activity/overview/"
LIVE = "/admin/runnerq_django/activity/overview/live.json"


@override_settings(RUNNERQ={"HORIZON_HELD_SECONDS": 1})
def test_the_overview_and_the_live_console_warn(held, client):  # noqa: F811
    client.force_login(User.objects.create_superuser(f"root-{uuid.uuid4().hex[:6]}", "r@example.com", "pw"))
    wait_until(lambda: _mine(horizons.horizon("default", limit=1000), held).seconds >= 1.5, timeout=30)
    page = client.get(OVERVIEW).content.decode()
    assert 'id="rq-horizon"' in page and "The xmin horizon is held back" in page
    assert held.info.parameter_status("application_name") in page
    live = client.get(LIVE).json()["horizon"]
    assert live["held"] is True
    assert held.info.backend_pid in [h["pid"] for h in live["holders"]]
    held.rollback()
    page = client.get(OVERVIEW).content.decode()
    assert "The xmin horizon is held back" not in page
