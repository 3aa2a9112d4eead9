"""Canvas forms (chain, group, chord, map, starmap, nesting, ctx.group) run by real workers:
an in-process worker for the semantics, runworker processes for crashes and fan-out across
processes. Every assertion reads the database or the canvas's result."""

from __future__ import annotations

import os
import signal
import uuid

import pytest

from runnerq_django import client
from runnerq_django.canvas import builder as canvas
from runnerq_django.canvas.builder import chain, chord, group, starmap
from runnerq_django.exceptions import ActivityFailed
from runnerq_django.storage.errors import InvalidArgument
from tests.helpers import wait_until
from tests.worker import canvas_handlers as h
from tests.worker.support import fetch, runs, status_of, wait_for_status

pytestmark = pytest.mark.django_db(transaction=True)


def tree_of(root_id: uuid.UUID) -> list[tuple[str, str]]:
    """(type, status) of every activity of the canvas's tree but the root, in creation order."""
    return [
        (row[0], row[1])
        for row in fetch(
            "SELECT activity_type, status FROM runnerq_activities WHERE root_activity_id = %s AND id <> %s "
            "ORDER BY created_at, activity_type",
            [root_id, root_id],
        )
    ]


def test_a_chain_passes_each_result_to_the_next(worker):
    worker()
    handle = chain(h.double.s(3), h.inc.s(), h.double.s()).enqueue()
    assert handle.result(timeout=30) == 14
    assert [t for t, _ in tree_of(handle.id)] == ["cv.double", "cv.inc", "cv.double"]
    assert {s for _, s in tree_of(handle.id)} == {"completed"}


def test_a_group_runs_its_members_and_lists_their_results_in_order(worker):
    worker()
    handle = group([h.double.s(5), h.inc.s(1), h.double.s(0)]).enqueue()
    assert handle.result(timeout=30) == [10, 2, 0]


def test_a_chord_gives_the_callback_the_list_of_results(worker):
    worker()
    handle = chord(group([h.double.s(i) for i in range(1, 4)]), h.total.s()).enqueue()
    assert handle.result(timeout=30) == 12
    # One tree: the group's members and the callback are children of the one orchestrator.
    assert sorted(t for t, _ in tree_of(handle.id)) == ["cv.double"] * 3 + ["cv.total"]


def test_map_and_starmap(worker):
    worker()
    assert canvas.map(h.double, [1, 2, 3]).enqueue().result(timeout=30) == [2, 4, 6]
    handle = starmap(h.mul.s({"a": 2}), [{"b": 3}, {"b": 4}, {"a": 5, "b": 5}]).enqueue()
    assert handle.result(timeout=30) == [6, 8, 25]


def test_canvases_nest(worker):
    worker()
    inner = group([chain(h.double.s(1), h.inc.s()), chord(canvas.map(h.double, [1, 2]), h.total.s())])
    handle = chain(inner, h.total.s(), h.double.s()).enqueue()
    assert handle.result(timeout=40) == 18  # [3, 6] -> 9 -> 18
    types = [t for t, _ in tree_of(handle.id)]
    assert types.count(canvas.CANVAS_TYPE) == 3  # the group and its two nested canvases
    assert types.count("cv.double") == 4


def test_a_group_in_a_chain_gets_the_previous_result_as_every_members_input(worker):
    worker()
    handle = chain(h.inc.s(4), group([h.double.s(), h.inc.s()]), h.total.s()).enqueue()
    assert handle.result(timeout=30) == 16  # 5 -> [10, 6] -> 16


def test_the_pipe_builds_a_chain():
    piped = h.double.s(3) | h.inc.s() | chain(h.double.s(), h.inc.s())
    assert piped == chain(h.double.s(3), h.inc.s(), h.double.s(), h.inc.s())
    with pytest.raises(InvalidArgument, match=r"members\[1\]"):
        h.double.s(3) | h.inc.s(1)


def test_si_drops_the_input(worker):
    worker()
    assert chain(h.double.s(3), h.inc.si(100)).enqueue().result(timeout=30) == 101


def test_a_failed_member_fails_the_chain_with_its_error(worker):
    worker()
    handle = chain(h.double.s(1), h.boom.s(), h.inc.s()).enqueue()
    with pytest.raises(ActivityFailed) as failed:
        handle.result(timeout=30)
    assert "chain member 1 (cv.boom)" in failed.value.error and "boom 2" in failed.value.error
    assert failed.value.kind == "non_retryable"
    assert [t for t, _ in tree_of(handle.id)] == ["cv.double", "cv.boom"]  # inc never enqueued
    assert status_of(handle.id) == "failed"


def test_collect_returns_every_outcome(worker):
    worker()
    handle = chord(group([h.double.s(1), h.boom.s(7)], on_failure="collect"), h.inc.si(0)).enqueue()
    assert handle.result(timeout=30) == 1
    outcomes = group([h.double.s(1), h.boom.s(7)], on_failure=canvas.COLLECT).enqueue().result(timeout=30)
    assert outcomes[0] == {"ok": True, "value": 2}
    assert outcomes[1]["ok"] is False and "boom 7" in outcomes[1]["error"]


def test_fail_fast_fails_the_group_and_cancels_the_members_left(worker):
    worker(concurrency=4)
    handle = group([h.boom.s(1), h.nap.s({"seconds": 60, "value": 1})]).enqueue()
    with pytest.raises(ActivityFailed) as failed:
        handle.result(timeout=30)
    assert "group member 0 (cv.boom) failed" in failed.value.error
    # Seen by the orchestrator's inline wait, well before the 60 s nap ends: the nap is cancelled.
    assert dict(tree_of(handle.id))["cv.nap"] == "cancelled"
    assert not runs("nap-end")


def test_cancelling_the_canvas_cancels_its_members(worker):
    worker(concurrency=4)
    nap = {"seconds": 60, "value": 1}
    handle = chord(group([h.nap.s(nap), h.nap.s(nap)]), h.total.s()).enqueue()
    wait_until(lambda: len(runs("nap-start")) == 2, timeout=20, message="both members to start")
    handle.cancel(reason="test")
    wait_for_status(handle.id, "cancelled")
    wait_until(
        lambda: {s for _, s in tree_of(handle.id)} == {"cancelled"},
        timeout=20,
        message=f"the members to be cancelled: {tree_of(handle.id)}",
    )
    assert "cv.total" not in dict(tree_of(handle.id))


def test_ctx_group_fans_out_inside_a_handler(worker):
    worker()
    handle = h.fanout.enqueue(20)
    assert handle.result(timeout=30) == sum(2 * i for i in range(20)) + 1000
    assert (
        fetch("SELECT count(*) FROM runnerq_activities WHERE root_activity_id = %s", [handle.id])[0][0] == 22
    )


def test_bad_canvases_are_refused_naming_the_field(transactional_db):
    with pytest.raises(InvalidArgument, match=r"members\[1\].*\.si\(payload\)"):
        chain(h.double.s(1), h.double.s(2))
    with pytest.raises(InvalidArgument, match="callback"):
        chord(group([h.double.s(1)]), h.total.s([1]))
    with pytest.raises(InvalidArgument, match="members"):
        group([])
    with pytest.raises(InvalidArgument, match="queue"):
        h.double.s(1, queue="other")
    with pytest.raises(InvalidArgument, match="on_failure"):
        group([h.double.s(1)], on_failure="sometimes")
    with pytest.raises(InvalidArgument, match=r"items\[1\]"):
        starmap(h.mul.s({"a": 1}), [{"b": 1}, 2])
    with pytest.raises(InvalidArgument, match="priority"):
        h.double.s(1, priority=99)


def test_members_the_enqueue_would_refuse_are_refused_when_the_canvas_is_built(transactional_db):
    too_large = "x" * (1024 * 1024)
    with pytest.raises(InvalidArgument) as refused:
        canvas.map(h.double, [1, too_large])
    assert refused.value.message == "items[1]: payload: JSON text must be at most 1048576 bytes, got 1048578"
    with pytest.raises(InvalidArgument, match=r"^items\[0\]: payload: JSON text must be at most 1048576"):
        starmap(h.mul.s({"a": "x" * 600_000}), [{"b": "y" * 600_000}])  # each half fits, merged not
    # A Signature built by hand is checked as handler.s() checks one (it was spawned as given,
    # refused by the orchestrator's enqueue and retried ten times).
    with pytest.raises(InvalidArgument, match=r"^priority: must be 1..4, got 99"):
        chain(h.double.s(1), canvas.Signature("cv.inc", options={"priority": 99}))
    with pytest.raises(InvalidArgument, match=r"^queue: is not a member option"):
        canvas.Signature("cv.inc", options={"queue": "elsewhere"})
    with pytest.raises(InvalidArgument, match=r"^payload: JSON text must be at most 1048576"):
        canvas.Signature("cv.inc", too_large)


def test_a_canvas_nested_too_deep_is_refused_naming_the_member(transactional_db):
    built = h.double.s(1)
    with pytest.raises(InvalidArgument) as refused:
        for _ in range(3000):  # raised RecursionError when enqueued (node(), leaves())
            built = chain(built, h.inc.s())
    assert refused.value.field == "members[0]"
    assert f"nests canvases more than {canvas.MAX_NESTING} deep" in refused.value.message
    assert built.nesting == canvas.MAX_NESTING  # the deepest allowed was built, and enqueues
    nested = group([h.double.s()])
    for _ in range(canvas.MAX_NESTING - 1):
        nested = group([nested])
    with pytest.raises(InvalidArgument, match=r"^callback: nests canvases"):
        chord(group([h.double.s(1)]), nested)
    # Built by hand, bypassing chain(): refused the same way.
    with pytest.raises(InvalidArgument, match=r"^members\[0\]: nests canvases"):
        canvas.Chain((nested,))
    assert fetch("SELECT count(*) FROM runnerq_activities")[0][0] == 0


def test_the_members_of_a_canvas_are_capped_naming_the_setting(transactional_db, settings):
    with pytest.raises(InvalidArgument) as refused:
        canvas.map(h.double, [0] * 200_000)  # was 200,000 children in one 34 s transaction
    assert refused.value.message == (
        "items: a canvas may have at most 10000 members in all (RUNNERQ['MAX_CANVAS_MEMBERS']; its "
        "orchestrator spawns a group in one transaction), this one would have 200000"
    )
    settings.RUNNERQ = {**settings.RUNNERQ, "MAX_CANVAS_MEMBERS": 5}
    three = canvas.map(h.double, [1, 2, 3])
    with pytest.raises(InvalidArgument, match=r"^members: a canvas may have at most 5 members in all"):
        group([three, three])  # nested canvases' members count: 6
    with pytest.raises(InvalidArgument, match=r"^members: .* at most 5 members"):
        chord(three, group([h.total.s(), h.total.s(), h.total.s()]))
    assert group([three, h.inc.s(1), h.inc.s(2)]).size == 5


def test_a_member_its_enqueue_refuses_when_spawned_fails_the_canvas_once(worker, settings):
    worker()
    # Each result fits; the chord's callback gets both as its payload, which does not.
    handle = chord(group([h.sized.s(600_000), h.sized.s(600_000)]), h.total.s()).enqueue()
    with pytest.raises(ActivityFailed) as failed:
        handle.result(timeout=30)
    assert failed.value.kind == "non_retryable"
    assert failed.value.error == (
        "CanvasFailed: chord callback (cv.total) can't be enqueued: payload: JSON text must be at most "
        "1048576 bytes, got 1200007"
    )
    # A canvas written by hand (another language, say): refused once, not retried ten times.
    hand_made = client.enqueue(
        canvas.CANVAS_TYPE, {"canvas": {"type": "cv.double", "payload": 1, "options": {"priority": 99}}}
    )
    with pytest.raises(ActivityFailed) as failed:
        hand_made.result(timeout=30)
    assert (
        failed.value.error
        == "CanvasFailed: task (cv.double) can't be enqueued: priority: must be 1..4, got 99"
    )
    wrong_option = client.enqueue(
        canvas.CANVAS_TYPE, {"canvas": {"group": [{"type": "cv.double", "payload": 1, "options": {"id": 1}}]}}
    )
    with pytest.raises(ActivityFailed, match=r"group member 0 \(cv.double\) can't be enqueued: its options"):
        wrong_option.result(timeout=30)
    settings.RUNNERQ = {**settings.RUNNERQ, "MAX_CANVAS_MEMBERS": 2}
    too_many = client.enqueue(
        canvas.CANVAS_TYPE, {"canvas": {"map": {"type": "cv.double"}, "items": [1, 2, 3]}}
    )
    with pytest.raises(ActivityFailed) as failed:
        too_many.result(timeout=30)
    assert failed.value.error == (
        "NonRetryableError: the group at c has 3 members, more than RUNNERQ['MAX_CANVAS_MEMBERS'] (2) "
        "spawned in one transaction"
    )
    for activity_id in (handle.id, hand_made.id, wrong_option.id, too_many.id):
        assert fetch("SELECT status, retry_count FROM runnerq_activities WHERE id = %s", [activity_id]) == [
            ("failed", 0)
        ]


def test_the_canvas_is_plain_json():
    node = chord(canvas.map(h.double, [1, 2]), h.total.s(max_attempts=2)).node()
    assert node == {
        "chord": {"map": {"type": "cv.double"}, "items": [1, 2], "star": False, "on_failure": "fail_fast"},
        "callback": {"type": "cv.total", "options": {"max_attempts": 2}},
    }


# --- real worker processes -------------------------------------------------------------------------

FAST = ("--poll-interval", "0.2", "--import", "tests.worker.canvas_handlers")


@pytest.mark.slow
def test_a_worker_killed_mid_chord(worker_process):
    members = [h.nap.s({"seconds": 1.5, "value": i}) for i in range(4)]
    handle = chord(group(members), h.total.s()).enqueue()
    first = worker_process("--lease", "2", "--concurrency", "4", *FAST)
    wait_until(lambda: len(runs("nap-start")) >= 2, timeout=30, message="members to start")
    os.killpg(first.pid, signal.SIGKILL)  # no drain, no release: the leases must run out
    first.wait(10)
    assert not runs("nap-end")  # killed mid-chord: no member had finished
    second = worker_process("--lease", "2", "--concurrency", "4", *FAST)
    assert handle.result(timeout=60) == 0 + 1 + 2 + 3
    ends = runs("nap-end")
    assert len(ends) == 4 and {r[3] for r in ends} == {second.pid}
    assert len(fetch("SELECT 1 FROM runnerq_activities WHERE root_activity_id = %s", [handle.id])) == 6


@pytest.mark.slow
def test_a_chords_members_run_in_two_worker_processes(worker_process):
    members = [h.nap.s({"seconds": 0.5, "value": i}) for i in range(8)]
    handle = chord(group(members), h.total.s()).enqueue()
    procs = [worker_process("--concurrency", "2", *FAST) for _ in range(2)]
    assert handle.result(timeout=60) == sum(range(8))
    pids = {r[3] for r in runs("nap-end")}
    assert pids == {p.pid for p in procs}  # both processes ran members of the one chord


def test_a_replay_that_lost_its_spawn_checkpoint_finds_its_members_again(worker):
    """An attempt that submitted the members and died before its checkpoint: the replay's
    submit meets the same derived ids and carries on with them, submitting nothing twice."""
    from runnerq_django.spec.keys import checkpoint_id

    worker(concurrency=4)
    nap = {"seconds": 1.0, "value": 3}
    handle = group([h.nap.s(nap), h.nap.s(nap)]).enqueue()
    wait_until(lambda: len(runs("nap-start")) == 2, timeout=20, message="both members to start")
    marker = checkpoint_id(handle.id, "run", "canvas:c")
    deleted = fetch("DELETE FROM runnerq_results WHERE activity_id = %s RETURNING 1", [marker])
    assert deleted == [(1,)]
    assert handle.result(timeout=30) == [3, 3]
    assert len(tree_of(handle.id)) == 2 and len(runs("nap-start")) == 2


def test_aresult_is_the_final_value(worker):
    import asyncio

    worker()

    async def run() -> object:
        handle = await chain(h.double.s(2), h.double.s()).aenqueue()
        return await handle.aresult(timeout=30)

    assert asyncio.run(run()) == 8


@pytest.mark.slow
def test_ctx_wait_all_awaits_more_children_than_one_results_page(worker):
    """ctx.wait_all reads its children's results in pages (the storage reads 1,000 ids a call)."""
    worker(concurrency=8)
    handle = h.many_children.enqueue(1001)
    assert handle.result(timeout=240) == sum(2 * i for i in range(1001))


def test_the_admin_shows_a_nested_canvas_as_one_tree(worker, client):
    from django.contrib.auth.models import User
    from django.urls import reverse

    worker()
    handle = chain(group([h.double.s(1), chain(h.double.s(2), h.inc.s())]), h.total.s()).enqueue()
    assert handle.result(timeout=30) == 7  # [2, 5] -> 7
    client.force_login(User.objects.create_superuser("root", "root@example.com", "pw"))
    response = client.get(reverse("admin:runnerq_django_activity_change", args=[handle.id]))
    assert response.status_code == 200
    tree = [(n.activity_type, n.level) for n in response.context["tree"]]
    # the root orchestrator; its chain's members: the group (an orchestrator) and total; the
    # group's members: double and the inner chain (an orchestrator) with its double and inc.
    assert tree[0] == (canvas.CANVAS_TYPE, 0)
    assert sorted(tree[1:]) == sorted(
        [
            (canvas.CANVAS_TYPE, 1),
            ("cv.total", 1),
            ("cv.double", 2),
            (canvas.CANVAS_TYPE, 2),
            ("cv.double", 3),
            ("cv.inc", 3),
        ]
    )


def test_a_member_of_a_type_no_python_handler_has_is_a_plain_row_any_worker_can_take(worker):
    """As a Go or TypeScript worker would: claim the member's row through the shared tables,
    read its JSON payload, store its result; the chord goes on."""
    from runnerq_django import storage
    from runnerq_django.canvas.builder import signature

    worker()
    handle = chord(group([h.double.s(1), signature("go.square", 3)]), h.total.s()).enqueue()

    def claimed():
        return storage.claim(handle.queue, types=["go.square"])

    [member] = wait_until(claimed, timeout=20, message="the go.square member to be claimable")
    assert member.payload == 3 and member.parent_activity_id == handle.id
    storage.complete(handle.queue, member.claim, 9)
    assert handle.result(timeout=30) == 11
