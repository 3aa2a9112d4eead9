"""Pause and resume: the storage operations and their ledger, every claim shape skipping a paused
queue or type, the Python API, the management commands, runnerq_status and the admin (permission
enforced on the server, recorded under the operator's name)."""

from __future__ import annotations

import io
import json
import uuid

import pytest
from django.contrib.auth.models import Permission, User
from django.core.management import CommandError, call_command

from runnerq_django import flow, storage
from runnerq_django.storage import attempts
from runnerq_django.storage import flow as flow_storage
from runnerq_django.storage.errors import InvalidArgument
from runnerq_django.storage.types import NewActivity

pytestmark = pytest.mark.django_db(transaction=True)

Q = "flow_pause_q"
OTHER_Q = "flow_pause_other"


def put(activity_type: str, queue: str = Q, count: int = 1) -> list[uuid.UUID]:
    made = storage.submit_many(
        queue, [NewActivity(activity_type=activity_type, payload={"n": i}) for i in range(count)]
    )
    return [m.id for m in made]


def claimed_types(types=None, limit: int = 50, queue: str = Q) -> list[str]:
    return sorted(c.activity_type for c in storage.claim(queue, types=types, limit=limit, lease_ms=60000))


def test_pause_and_resume_record_who_and_why_in_the_ledger():
    assert flow_storage.pause(Q, actor="alice", reason="deploy") is True
    assert flow_storage.pause(Q, actor="bob", reason="still deploying") is False  # updated, not new
    assert flow_storage.pause(Q, "t.a", actor="carol") is True
    [whole, typed] = flow_storage.pauses()
    assert (whole.queue_name, whole.activity_type, whole.paused_by, whole.reason) == (
        Q,
        "",
        "bob",
        "still deploying",
    )
    assert whole.whole_queue and not typed.whole_queue and typed.activity_type == "t.a"
    assert flow_storage.resume(Q, actor="dave", reason="done") is True
    assert flow_storage.resume(Q, actor="dave") is False  # not paused: nothing recorded
    assert [p.activity_type for p in flow_storage.pauses()] == ["t.a"]  # the type stays paused
    changes = flow_storage.ledger(10)
    assert [(c.action, c.activity_type, c.actor) for c in changes] == [
        ("resume", "", "dave"),
        ("pause", "t.a", "carol"),
        ("pause", "", "bob"),
        ("pause", "", "alice"),
    ]
    assert changes[0].reason == "done" and changes[0].detail["paused_by"] == "bob"
    assert changes[3].detail == {"created": True} and changes[2].detail == {"created": False}


@pytest.mark.parametrize(
    ("call", "field"),
    [
        (lambda: flow_storage.pause("bad queue", actor="a"), "queue"),
        (lambda: flow_storage.pause(Q, "", actor="a"), "activity_type"),
        (lambda: flow_storage.pause(Q, "x" * 513, actor="a"), "activity_type"),
        (lambda: flow_storage.pause(Q, actor=""), "actor"),
        (lambda: flow_storage.pause(Q, actor="a", reason="r" * 4097), "reason"),
        (lambda: flow_storage.resume(Q, "t\x00", actor="a"), "activity_type"),
        (lambda: flow_storage.ledger(0), "limit"),
    ],
)
def test_bad_input_is_refused_naming_the_field(call, field):
    with pytest.raises(InvalidArgument) as caught:
        call()
    assert caught.value.field == field


# Every claim statement (storage.attempts.claim_statement), as (types, limit): one type, a
# locking walk per type, the merged walks of a few types, the head then each type of many, those
# two with the types as a parameter (sorted, then merged), and any type.
MANY = ["t.a", "t.b"] + [f"t.x{i}" for i in range(attempts.MAX_MERGED_TYPES)]
MORE_THAN_WRITTEN_IN = ["t.a", "t.b"] + [f"t.y{i}" for i in range(attempts.MAX_LITERAL_TYPES - 1)]
SHAPES = {
    "one type": (["t.a"], 50),
    "each type": (["t.a", "t.b"], 50),
    "two types merged": (["t.a", "t.b"], attempts.MAX_TYPE_WALK_ROWS // 2 + 1),
    "many types": (MANY, attempts.MAX_TYPE_WALK_ROWS // len(MANY) + 1),
    "by a parameter, sorted": (MORE_THAN_WRITTEN_IN, 20),
    "by a parameter, merged": (
        MORE_THAN_WRITTEN_IN,
        attempts.MAX_TYPE_WALK_ROWS // len(MORE_THAN_WRITTEN_IN) + 1,
    ),
    "any type": (None, 50),
}


def test_the_shapes_are_every_claim_statement():
    def statement(shape: str) -> str:
        types, limit = SHAPES[shape]
        return storage.claim_statement(Q, types=types, limit=limit)[0]

    assert "a.activity_type = %(type)s" in statement("one type")
    assert ") w1" in statement("each type") and "candidates AS" not in statement("each type")
    assert "candidates AS" in statement("two types merged") and "head AS" not in statement("two types merged")
    assert "h.activity_type IN (E't.a'" in statement("many types")
    assert "unnest(" in statement("by a parameter, sorted")
    assert "(SELECT %(type_0)s)" in statement("by a parameter, merged")
    assert "head AS" not in statement("any type") and ") w1" not in statement("any type")


@pytest.mark.parametrize("shape", SHAPES)
def test_every_claim_shape_skips_a_paused_queue(shape):
    put("t.a", count=3)
    put("t.b", count=3)
    put("t.a", queue=OTHER_Q)
    flow_storage.pause(Q, actor="test")
    assert claimed_types(*SHAPES[shape]) == []
    assert claimed_types(*SHAPES[shape], queue=OTHER_Q) == ["t.a"]  # other queues unaffected
    flow_storage.resume(Q, actor="test")
    expected = ["t.a"] * 3 if shape == "one type" else ["t.a"] * 3 + ["t.b"] * 3
    assert claimed_types(*SHAPES[shape]) == expected


@pytest.mark.parametrize("shape", SHAPES)
def test_every_claim_shape_skips_a_paused_type_and_claims_the_others(shape):
    put("t.a", count=3)
    put("t.b", count=3)
    put("t.b", queue=OTHER_Q)
    flow_storage.pause(Q, "t.b", actor="test")
    flow_storage.pause(OTHER_Q, "t.a", actor="test")  # pausing t.a elsewhere changes nothing here
    expected = ["t.a"] * 3
    assert claimed_types(*SHAPES[shape]) == expected
    assert claimed_types(*SHAPES[shape]) == []  # the paused ones are still not claimed
    assert claimed_types(*SHAPES[shape], queue=OTHER_Q) == ([] if shape == "one type" else ["t.b"])
    flow_storage.resume(Q, "t.b", actor="test")
    assert claimed_types(*SHAPES[shape]) == ([] if shape == "one type" else ["t.b"] * 3)


def test_a_paused_type_behind_a_long_head_does_not_block_the_others():
    """The many-types claim reads the head of the queue first: paused rows filling it must not
    make the claim come back empty while other types' rows are free behind them."""
    put("t.b", count=120)
    put("t.a", count=2)
    flow_storage.pause(Q, "t.b", actor="test")
    assert claimed_types(*SHAPES["many types"]) == ["t.a", "t.a"]


def test_paused_activities_stay_pending_and_in_flight_claims_finish():
    [first, second] = put("t.a", count=2)
    [running] = storage.claim(Q, types=["t.a"], limit=1, lease_ms=60000)
    flow_storage.pause(Q, actor="test")
    storage.complete(Q, running.claim, {"ok": True})  # a claim taken before the pause completes
    from runnerq_django.models import Activity

    left = [a for a in (first, second) if a != running.id]
    assert Activity.objects.get(id=left[0]).status == "pending"
    assert Activity.objects.get(id=running.id).status == "completed"


def test_the_python_api_defaults_to_the_type_s_queue_and_records_the_process():
    from tests.flow import handlers

    assert flow.pause(activity_type=handlers.work, reason="flaky upstream") is True
    [pause] = flow.paused()
    assert pause.activity_type == "flow.work" and pause.reason == "flaky upstream"
    assert pause.queue_name == "default"  # no queue on the @activity: RUNNERQ['DEFAULT_QUEUE']
    assert pause.paused_by.startswith("python ")
    assert flow.resume(activity_type="flow.work", by="ops") is True
    assert flow.history(1)[0].actor == "ops"
    with pytest.raises(InvalidArgument, match="queue"):
        flow.pause("no such queue!")


def run(*args: str) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def test_the_commands_pause_list_and_resume():
    assert "paused queue flow_pause_q" in run(
        "runnerq_pause", "--queue", Q, "--reason", "deploy", "--by", "ci"
    )
    assert "already paused" in run("runnerq_pause", "--queue", Q, "--by", "ci", "--reason", "deploy 2")
    out = json.loads(run("runnerq_pause", "--queue", Q, "--type", "t.a", "--json"))
    assert out == {"action": "pause", "queue": Q, "activity_type": "t.a", "changed": True}
    listed = json.loads(run("runnerq_pause", "--list", "--json"))["paused"]
    assert [(p["activity_type"], p["paused_by"]) for p in listed] == [
        (None, "ci"),
        ("t.a", listed[1]["paused_by"]),
    ]
    assert listed[1]["paused_by"].startswith("command ")
    text = run("runnerq_pause", "--list")
    assert "flow_pause_q (whole queue): paused by ci" in text and ": deploy 2" in text
    assert "resumed type t.a" in run("runnerq_resume", "--queue", Q, "--type", "t.a")
    assert "was not paused" in run("runnerq_resume", "--queue", Q, "--type", "t.a")
    assert "resumed queue" in run("runnerq_resume", "--queue", Q)
    assert run("runnerq_pause", "--list") == "nothing is paused\n"


def test_the_commands_refuse_bad_input_naming_the_option():
    out = io.StringIO()
    with pytest.raises(CommandError, match="queue"):
        call_command("runnerq_pause", "--queue", "bad q", "--json", stdout=out, stderr=io.StringIO())
    assert json.loads(out.getvalue())["error"]["field"] == "queue"
    with pytest.raises(CommandError, match="512 bytes"):
        call_command("runnerq_resume", "--type", "x" * 600, stdout=io.StringIO(), stderr=io.StringIO())


def test_runnerq_status_shows_what_is_paused_by_whom_and_why():
    flow_storage.pause(Q, "t.a", actor="alice", reason="upstream down")
    flow_storage.pause(OTHER_Q, actor="bob")
    report = json.loads(run("runnerq_status", "--json"))["queues"]
    assert report[Q]["paused"] == [
        {
            "activity_type": "t.a",
            "paused_by": "alice",
            "reason": "upstream down",
            "paused_at": report[Q]["paused"][0]["paused_at"],
        }
    ]
    assert report[OTHER_Q]["paused"][0]["activity_type"] is None
    only = json.loads(run("runnerq_status", "--json", "--queue", OTHER_Q))["queues"]
    assert list(only) == [OTHER_Q]
    text = run("runnerq_status")
    assert (
        f"{Q}/t.a by alice" in text and "upstream down" in text and f"{OTHER_Q} (whole queue) by bob" in text
    )


# -- the admin ------------------------------------------------------------------------------------

OVERVIEW = "/admin/runnerq_django/activity/overview/"
FLOW = "/admin/runnerq_django/activity/flow/"


def _user(name: str, *codenames: str) -> User:
    user = User.objects.create_user(name, password="pw", is_staff=True)
    for codename in codenames:
        user.user_permissions.add(
            Permission.objects.get(codename=codename, content_type__app_label="runnerq_django")
        )
    return user


def test_the_admin_overview_shows_pauses_and_an_operator_pauses_and_resumes(client):
    put("t.a")
    client.force_login(_user("operator", "view_activity", "operate_activity"))
    response = client.post(
        FLOW, {"action": "pause", "queue": Q, "activity_type": "t.a", "reason": "hot fix"}, follow=True
    )
    assert "Paused type t.a in queue flow_pause_q." in response.content.decode()
    [pause] = flow_storage.pauses()
    assert (pause.activity_type, pause.paused_by, pause.reason) == ("t.a", "admin operator", "hot fix")
    page = client.get(OVERVIEW).content.decode()
    assert 'id="rq-paused"' in page and "admin operator" in page and "hot fix" in page
    assert 'id="rq-pause-form"' in page and ">Resume</button>" in page
    assert 'class="rq-paused-row"' in page  # on the queue's own card too
    client.post(FLOW, {"action": "resume", "queue": Q, "activity_type": "t.a", "reason": "fixed"})
    assert flow_storage.pauses() == []
    [resumed, paused] = flow_storage.ledger(2)
    assert (resumed.action, resumed.actor, resumed.reason) == ("resume", "admin operator", "fixed")
    assert paused.action == "pause"
    assert "Recent pauses and resumes" in client.get(OVERVIEW).content.decode()


def test_the_admin_refuses_pause_without_the_operate_permission(client):
    client.force_login(_user("viewer", "view_activity"))
    assert client.post(FLOW, {"action": "pause", "queue": Q}).status_code == 403
    assert flow_storage.pauses() == []
    page = client.get(OVERVIEW).content.decode()
    assert 'id="rq-pause-form"' not in page and "Nothing is paused." in page
    assert client.get(FLOW).status_code == 200 and flow_storage.pauses() == []  # the list: no change by GET


def test_the_admin_reports_bad_input_and_changes_nothing(client):
    client.force_login(_user("operator", "view_activity", "operate_activity"))
    response = client.post(FLOW, {"action": "pause", "queue": "bad queue"}, follow=True)
    assert "Nothing changed: queue:" in response.content.decode()
    response = client.post(FLOW, {"action": "explode", "queue": Q}, follow=True)
    assert "Nothing changed: action: must be pause or resume" in response.content.decode()
    assert flow_storage.pauses() == [] and flow_storage.ledger(5) == []


@pytest.mark.parametrize("shape", SHAPES)
def test_a_claim_with_pauses_is_still_one_round_trip(shape):
    from django.db import connection
    from django.test.utils import CaptureQueriesContext

    put("t.a", count=2)
    flow_storage.pause(Q, "t.b", actor="test")
    with CaptureQueriesContext(connection) as queries:
        claimed = storage.claim(Q, types=SHAPES[shape][0], limit=SHAPES[shape][1], lease_ms=60000)
    assert len(claimed) == 2
    assert len(queries.captured_queries) == 1


def test_until_idle_does_not_wait_for_paused_work():
    from runnerq_django.conf import database_alias
    from runnerq_django.worker.idle import queues_idle

    put("t.a")
    alias = database_alias()
    assert not queues_idle([Q], ["t.a"], alias)
    flow_storage.pause(Q, "t.a", actor="test")
    assert queues_idle([Q], ["t.a"], alias)
    flow_storage.resume(Q, "t.a", actor="test")
    flow_storage.pause(Q, actor="test")
    assert queues_idle([Q], ["t.a"], alias)
    [running] = storage.claim(Q, types=None, limit=1, lease_ms=60000) or [None]
    assert running is None  # paused: nothing claimable
    flow_storage.resume(Q, actor="test")
    storage.claim(Q, types=["t.a"], limit=1, lease_ms=60000)
    flow_storage.pause(Q, actor="test")
    assert not queues_idle([Q], ["t.a"], alias)  # a running attempt still counts
