"""The conformance driver itself: the wire format, malformed requests, error kinds and defaults.

The in-process tests call ``Driver.handle_line`` (the same dispatch ``manage.py runnerq_driver``
runs); the process tests start the command and talk to it over pipes like a runner does.
"""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid

import pytest

from runnerq_django.conformance.driver import Driver
from tests.helpers import REPO, free_port, manage_env, scratch_database, with_dbname


def ask(driver: Driver, request) -> dict:
    line = request if isinstance(request, str) else json.dumps(request)
    reply_line = driver.handle_line(line)
    assert "\n" not in reply_line
    reply = json.loads(reply_line)
    assert isinstance(reply, dict) and len(reply) == 1 and set(reply) <= {"ok", "error"}, reply
    if "ok" in reply:
        assert isinstance(reply["ok"], dict), "ok is always an object, never null"
    else:
        assert set(reply["error"]) == {"kind", "message"} and isinstance(reply["error"]["message"], str)
    return reply


def error_kind(reply: dict) -> str | None:
    return reply.get("error", {}).get("kind")


# --- no database needed ---------------------------------------------------------------------------


@pytest.mark.parametrize(
    "line",
    [
        "not json",
        "",
        "[1, 2]",
        '"open"',
        "{}",
        '{"op": 3}',
        '{"op": ""}',
        '{"op": "claim", "args": [1]}',
        '{"op": "claim", "args": {}, "extra": 1}',
        '{"op": "submit", "args": {"payload": NaN}}',
        '{"op": "claim"',
    ],
)
def test_malformed_lines_get_invalid_argument_and_the_driver_goes_on(line):
    driver = Driver()
    assert error_kind(ask(driver, line)) == "invalid_argument"
    # still answering
    assert error_kind(ask(driver, {"op": "nope"})) == "unsupported"


@pytest.mark.parametrize("depth", [100, 3000])
def test_a_request_nested_too_deep_is_invalid_argument_naming_the_limit(depth):
    """3000 deep raised RecursionError in the parser (an internal error before); 100 deep parses
    and is refused by the storage layer's limit before any SQL."""
    driver = Driver()
    deep = "[" * depth + "]" * depth
    reply = ask(driver, '{"op": "nope", "args": {"payload": ' + deep + "}}")
    if depth == 3000:
        assert error_kind(reply) == "invalid_argument"
        assert (
            "nested at most 64 arrays/objects deep (RUNNERQ['MAX_JSON_DEPTH'])" in reply["error"]["message"]
        )
    else:
        assert error_kind(reply) == "unsupported"  # parsed: the limit is the storage layer's
    assert error_kind(ask(driver, {"op": "nope"})) == "unsupported"


def test_a_request_too_deep_is_refused_even_where_the_recursion_limit_was_raised():
    """A library (hypothesis, mypy, mkdocstrings) may raise sys.getrecursionlimit(); the parser then
    reads 3000 deep, and the driver still refuses it before reading the op."""
    limit = sys.getrecursionlimit()
    sys.setrecursionlimit(20_000)
    try:
        deep = "[" * 3000 + "]" * 3000
        reply = ask(Driver(), '{"op": "nope", "args": {"payload": ' + deep + "}}")
    finally:
        sys.setrecursionlimit(limit)
    assert error_kind(reply) == "invalid_argument"
    assert "nested at most 64 arrays/objects deep" in reply["error"]["message"]


def test_unknown_op_is_unsupported_and_names_the_known_ones():
    reply = ask(Driver(), {"op": "ExtendLease", "args": {}})
    assert error_kind(reply) == "unsupported"
    assert "ExtendLease" in reply["error"]["message"] and "claim" in reply["error"]["message"]


def test_ops_before_open_are_a_configuration_error():
    for op in ("submit", "claim", "reap", "lookup_key"):
        reply = ask(Driver(), {"op": op, "args": {}})
        assert error_kind(reply) == "configuration", reply
        assert "open" in reply["error"]["message"]


def test_open_needs_dsn_and_queue():
    assert error_kind(ask(Driver(), {"op": "open", "args": {"queue": "q"}})) == "invalid_argument"
    assert error_kind(ask(Driver(), {"op": "open", "args": {"dsn": "postgres://x/y"}})) == "invalid_argument"
    assert (
        error_kind(ask(Driver(), {"op": "open", "args": {"dsn": "postgres://x/y", "queue": "q", "x": 1}}))
        == "invalid_argument"
    )


# --- in process, on the test database ------------------------------------------------------------


@pytest.fixture
def opened(live_db_url):
    """A driver opened on the test database (the DSN the connection already uses: nothing repointed)."""
    driver = Driver()
    queue = "cf_" + uuid.uuid4().hex[:16]
    assert ask(driver, {"op": "open", "args": {"dsn": live_db_url, "queue": queue}}) == {"ok": {}}
    driver.test_queue = queue
    return driver


def row(activity_id: str) -> dict:
    from django.db import connection

    with connection.cursor() as cursor:
        cursor.execute("SELECT to_jsonb(a) FROM runnerq_activities a WHERE id = %s", [activity_id])
        found = cursor.fetchone()
    return found and (json.loads(found[0]) if isinstance(found[0], str) else found[0])


def test_submit_defaults(opened):
    from django.db import connection

    activity = str(uuid.uuid4())
    assert ask(opened, {"op": "submit", "args": {"id": activity, "type": "t"}}) == {"ok": {}}
    got = row(activity)
    assert got["queue_name"] == opened.test_queue
    assert got["status"] == "pending" and got["scheduled_at"] is None
    assert (got["priority"], got["max_retries"], got["timeout_seconds"]) == (2, 3, 30)
    assert (got["retry_delay_seconds"], got["max_retry_delay_seconds"]) == (1, 0)
    assert (got["depth"], got["parent_activity_id"], got["idempotency_key"]) == (0, None, None)
    with connection.cursor() as cursor:
        cursor.execute("SELECT payload, serialization FROM runnerq_inputs WHERE activity_id = %s", [activity])
        payload, serialization = cursor.fetchone()
    assert json.loads(payload) is None if isinstance(payload, str) else payload is None
    assert serialization == "json-v1"


def test_submit_arguments_reach_the_row(opened):
    activity = str(uuid.uuid4())
    reply = ask(
        opened,
        {
            "op": "submit",
            "args": {
                "id": activity,
                "type": "t",
                "payload": {"n": 1},
                "priority": 4,
                "max_attempts": 0,
                "timeout_s": 7,
                "delay_s": 60,
                "metadata": {"tenant": "a"},
            },
        },
    )
    assert reply == {"ok": {}}
    got = row(activity)
    assert (got["priority"], got["max_retries"], got["timeout_seconds"], got["status"]) == (
        4,
        0,
        7,
        "scheduled",
    )
    assert got["metadata"] == {"tenant": "a"}


def test_claim_defaults_one_claim_with_a_30s_lease(opened):
    for _ in range(2):
        ask(opened, {"op": "submit", "args": {"id": str(uuid.uuid4()), "type": "t"}})
    before_ms = time.time() * 1000
    reply = ask(opened, {"op": "claim", "args": {"types": ["t"]}})
    claims = reply["ok"]["claims"]
    assert len(claims) == 1 and set(claims[0]) == {"id", "token"}
    lease = row(claims[0]["id"])["lease_deadline_ms"]
    assert before_ms + 25000 <= lease <= time.time() * 1000 + 30000 + 5000
    # renew defaults to 30 s as well, and never shortens
    assert ask(opened, {"op": "renew", "args": {"claim": claims[0]}}) == {"ok": {"renewed": True}}
    assert row(claims[0]["id"])["lease_deadline_ms"] >= lease


def test_empty_claim_is_an_empty_list(opened):
    assert ask(opened, {"op": "claim", "args": {"types": ["nothing-here"]}}) == {"ok": {"claims": []}}


def test_error_kinds_on_the_wire(opened):
    a = str(uuid.uuid4())
    ask(opened, {"op": "submit", "args": {"id": a, "type": "t"}})
    claim = ask(opened, {"op": "claim", "args": {"types": ["t"]}})["ok"]["claims"][0]
    stale = {"id": a, "token": claim["token"] + "-not-mine"}
    assert error_kind(ask(opened, {"op": "complete", "args": {"claim": stale, "value": 1}})) == "claim_lost"
    assert (
        error_kind(ask(opened, {"op": "signal", "args": {"target": str(uuid.uuid4()), "name": "x"}}))
        == "not_found"
    )
    assert error_kind(ask(opened, {"op": "lookup_key", "args": {"key": "rq:key:v2:bm9ib2R5"}})) == "not_found"
    assert (
        error_kind(
            ask(
                opened, {"op": "register_dependency", "args": {"claim": claim, "producer": str(uuid.uuid4())}}
            )
        )
        == "not_found"
    )
    assert ask(opened, {"op": "complete", "args": {"claim": claim, "value": {"n": 1}}}) == {"ok": {}}
    assert (
        error_kind(ask(opened, {"op": "complete", "args": {"claim": claim, "value": {"n": 2}}}))
        == "checkpoint_conflict"
    )
    key = {"key": "k", "on_duplicate": "no_reuse"}
    assert ask(opened, {"op": "submit", "args": {"id": str(uuid.uuid4()), "type": "t", "key": key}}) == {
        "ok": {}
    }
    assert (
        error_kind(ask(opened, {"op": "submit", "args": {"id": str(uuid.uuid4()), "type": "t", "key": key}}))
        == "duplicate_activity"
    )


def test_return_existing_replies_with_the_existing_id(opened):
    first, second = str(uuid.uuid4()), str(uuid.uuid4())
    key = {"key": "order-1", "on_duplicate": "return_existing"}
    assert ask(opened, {"op": "submit", "args": {"id": first, "type": "t", "key": key}}) == {"ok": {}}
    assert ask(opened, {"op": "submit", "args": {"id": second, "type": "t", "key": key}}) == {
        "ok": {"existing": first}
    }
    # the runner's lookup sends the encoded BusinessKey("order-1", "t")
    assert ask(opened, {"op": "lookup_key", "args": {"key": "rq:key:v2:NzpvcmRlci0xdA"}}) == {
        "ok": {"id": first}
    }


@pytest.mark.parametrize(
    "args, field",
    [
        ({"type": "t"}, "id"),
        ({"id": "not-a-uuid", "type": "t"}, "id"),
        ({"id": "00000000-0000-4000-8000-000000000001"}, "type"),
        ({"id": "00000000-0000-4000-8000-000000000001", "type": "t", "priority": "high"}, "priority"),
        ({"id": "00000000-0000-4000-8000-000000000001", "type": "t", "max_attempts": 1.5}, "max_attempts"),
        (
            {
                "id": "00000000-0000-4000-8000-000000000001",
                "type": "t",
                "key": {"key": "k", "on_duplicate": "sometimes"},
            },
            "on_duplicate",
        ),
        ({"id": "00000000-0000-4000-8000-000000000001", "type": "t", "fence": {"id": "x"}}, "fence"),
        ({"id": "00000000-0000-4000-8000-000000000001", "type": "t", "colour": "red"}, "colour"),
        (
            {
                "id": "00000000-0000-4000-8000-000000000001",
                "type": "t",
                "payload": json.loads("[" * 100 + "]" * 100),
            },
            "payload: must be nested at most 64",
        ),
    ],
)
def test_bad_arguments_are_invalid_argument_naming_the_field(opened, args, field):
    reply = ask(opened, {"op": "submit", "args": args})
    assert error_kind(reply) == "invalid_argument", reply
    assert field in reply["error"]["message"]


def test_fail_defaults_to_retryable_and_replies_the_outcome(opened):
    a = str(uuid.uuid4())
    ask(opened, {"op": "submit", "args": {"id": a, "type": "t"}})
    claim = ask(opened, {"op": "claim", "args": {"types": ["t"]}})["ok"]["claims"][0]
    assert ask(opened, {"op": "fail", "args": {"claim": claim, "reason": "boom"}}) == {
        "ok": {"outcome": "retrying"}
    }
    got = row(a)
    assert (got["status"], got["retry_count"], got["last_error"]) == ("retrying", 1, "boom")


def test_get_result(opened):
    a = str(uuid.uuid4())
    assert ask(opened, {"op": "get_result", "args": {"id": a}}) == {"ok": {"result": None}}
    ask(opened, {"op": "submit", "args": {"id": a, "type": "t"}})
    claim = ask(opened, {"op": "claim", "args": {"types": ["t"]}})["ok"]["claims"][0]
    ask(opened, {"op": "complete", "args": {"claim": claim, "value": [1, "two"]}})
    assert ask(opened, {"op": "get_result", "args": {"id": a}}) == {
        "ok": {"result": {"state": "Ok", "data": [1, "two"], "serialization": "json-v1"}}
    }


def test_park_on_a_signal_or_a_child_without_wake_at_waits_with_no_timeout(opened):
    """wake_at is optional for signal and await parks (a timeout); without it the activity waits
    until its result is stored (scheduled_at NULL: never due). A sleep still needs it."""
    waiter, child = str(uuid.uuid4()), str(uuid.uuid4())
    ask(opened, {"op": "submit", "args": {"id": waiter, "type": "w"}})
    claim = ask(opened, {"op": "claim", "args": {"types": ["w"]}})["ok"]["claims"][0]
    signal_id = str(uuid.uuid5(uuid.UUID(waiter), "signal:go"))
    assert ask(
        opened,
        {
            "op": "park",
            "args": {"claim": claim, "kind": "signal", "step": "signal:go", "result_id": signal_id},
        },
    ) == {"ok": {}}
    got = row(waiter)
    assert (got["status"], got["scheduled_at"], got["waiting_result_id"]) == ("waiting", None, signal_id)
    assert ask(opened, {"op": "signal", "args": {"target": waiter, "name": "go", "payload": 1}}) == {"ok": {}}
    claim = ask(opened, {"op": "claim", "args": {"types": ["w"]}})["ok"]["claims"][0]
    ask(
        opened,
        {
            "op": "submit",
            "args": {"id": child, "type": "c", "parent": waiter, "root": waiter, "depth": 1, "fence": claim},
        },
    )
    assert ask(
        opened,
        {
            "op": "park",
            "args": {
                "claim": claim,
                "kind": "await",
                "step": "child:c",
                "result_id": child,
                "producer": child,
            },
        },
    ) == {"ok": {}}
    assert (row(waiter)["status"], row(waiter)["scheduled_at"]) == ("waiting", None)
    child_claim = ask(opened, {"op": "claim", "args": {"types": ["c"]}})["ok"]["claims"][0]
    assert ask(opened, {"op": "complete", "args": {"claim": child_claim, "value": 2}}) == {"ok": {}}
    assert row(waiter)["status"] == "pending"
    sleeper = ask(opened, {"op": "claim", "args": {"types": ["w"]}})["ok"]["claims"][0]
    assert (
        error_kind(ask(opened, {"op": "park", "args": {"claim": sleeper, "kind": "sleep", "step": "s"}}))
        == "invalid_argument"
    )


# --- the management command, over pipes ----------------------------------------------------------


def run_driver(lines: list, *, db_url: str, timeout: float = 120) -> tuple[list[dict], str, int]:
    proc = subprocess.run(
        [sys.executable, "manage.py", "runnerq_driver", "-v", "2"],
        cwd=REPO,
        env=manage_env(db_url),
        input="".join((line if isinstance(line, str) else json.dumps(line)) + "\n" for line in lines),
        capture_output=True,
        text=True,
        timeout=timeout,
    )
    replies = [json.loads(line) for line in proc.stdout.splitlines()]
    return replies, proc.stderr, proc.returncode


@pytest.mark.slow
def test_command_opens_a_fresh_database_migrates_it_and_keeps_stdout_for_replies(pg_servers):
    import psycopg

    label, server = pg_servers[0]
    with scratch_database(server, prefix="rq_driver") as url:
        a = str(uuid.uuid4())
        replies, stderr, code = run_driver(
            [
                {"op": "open", "args": {"dsn": url, "queue": "cf_cmd"}},
                {"op": "submit", "args": {"id": a, "type": "t"}},
                "garbage",
                {"op": "claim", "args": {"types": ["t"]}},
                # an unreachable database: unavailable, and no queue stays open
                {
                    "op": "open",
                    "args": {
                        "dsn": f"postgres://postgres@127.0.0.1:{free_port()}/nowhere?connect_timeout=5",
                        "queue": "q",
                    },
                },
                {"op": "claim", "args": {"types": ["t"]}},
                # The process starts pointed at a database that doesn't exist: if open failed to repoint
                # the connection, the ops would fail instead of writing somewhere else.
            ],
            db_url=with_dbname(server, "rq_driver_not_this_one"),
        )
        assert code == 0, stderr
        assert len(replies) == 6, (replies, stderr)  # exactly one line per request, nothing else on stdout
        assert replies[0] == {"ok": {}} and replies[1] == {"ok": {}}, stderr
        assert error_kind(replies[2]) == "invalid_argument"
        assert [c["id"] for c in replies[3]["ok"]["claims"]] == [a]
        assert error_kind(replies[4]) == "unavailable", replies[4]
        assert error_kind(replies[5]) == "configuration"
        assert "The conformance driver serves queue 'cf_cmd'" in stderr  # logs went to stderr
        with psycopg.connect(url) as conn:
            status = conn.execute("SELECT status FROM runnerq_activities WHERE id = %s", [a]).fetchone()
        assert status == ("processing",), label


def test_a_bare_carriage_return_is_whitespace_inside_a_request(live_db_url):
    """Requests end at "\n" only: universal newlines split '{"op":\r"nope"}' in two, and every
    later reply was one line off."""
    replies, stderr, code = run_driver(
        ['{"op":\r"nope"}', '{"op": "claim",\r"args": {}}', '{"op":"nope"}\r'], db_url=live_db_url, timeout=60
    )
    assert code == 0, stderr
    assert [error_kind(reply) for reply in replies] == ["unsupported", "configuration", "unsupported"], (
        replies
    )


@pytest.mark.slow
def test_command_exits_cleanly_on_eof_without_any_request(live_db_url):
    replies, stderr, code = run_driver([], db_url=live_db_url, timeout=60)
    assert (replies, code) == ([], 0), stderr
