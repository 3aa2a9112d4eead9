"""runnerq_retry, runnerq_cancel, runnerq_enqueue, runnerq_cleanup, runnerq_reap: what they do to
the rows, their --json and --dry-run, and their errors for bad input."""

from __future__ import annotations

import io
import json
import uuid
from datetime import timedelta

import pytest
from django.core.management import CommandError, call_command
from django.db import connection
from django.utils import timezone

from tests.admin.factories import QUEUE, add_result, events, ledger, make_activity, row

pytestmark = pytest.mark.django_db


def run(*args) -> str:
    out = io.StringIO()
    call_command(*args, stdout=out, stderr=io.StringIO())
    return out.getvalue()


def run_json(*args) -> dict:
    return json.loads(run(*args, "--json"))


def fails(*args) -> tuple[str, dict | None]:
    out = io.StringIO()
    with pytest.raises(CommandError) as err:
        call_command(*args, stdout=out, stderr=io.StringIO())
    text = out.getvalue().strip()
    return str(err.value), (json.loads(text) if text else None)


# -- runnerq_retry -------------------------------------------------------------------------------


def test_retry_by_id_writes_row_event_and_ledger():
    a = make_activity("failed")
    doc = run_json("runnerq_retry", str(a), "--queue", QUEUE, "--command-id", "cli-r1", "--reason", "fixed")
    assert doc["applied"] == 1 and doc["results"][0] == {
        "id": str(a),
        "outcome": "applied",
        "status": "pending",
    }
    assert row(a)["status"] == "pending"
    assert events(a)[0][:2] == (
        "Retried",
        {"command_id": "cli-r1", "from": "failed", "reset_attempts": False, "reason": "fixed"},
    )
    assert ledger("cli-r1")["kind"] == "retry"
    # The same command id again replays.
    again = run_json("runnerq_retry", str(a), "--queue", QUEUE, "--command-id", "cli-r1", "--reason", "fixed")
    assert again["replayed"] is True and len(events(a)) == 1


def test_retry_by_status_redrives_dead_letters_oldest_first_with_limit():
    now = timezone.now()
    old = make_activity("dead_letter", created_at=now - timedelta(hours=2))
    newer = make_activity("dead_letter", created_at=now - timedelta(hours=1))
    failed = make_activity("failed")
    text = run(
        "runnerq_retry", "--queue", QUEUE, "--status", "dead_letter", "--limit", "1", "--reset-attempts"
    )
    assert "applied 1" in text
    assert row(old)["status"] == "pending" and row(old)["retry_count"] == 0
    assert events(old)[0][0] == "Redriven"
    assert row(newer)["status"] == "dead_letter" and row(failed)["status"] == "failed"


def test_retry_dry_run_changes_nothing():
    a = make_activity("dead_letter")
    doc = run_json("runnerq_retry", "--queue", QUEUE, "--status", "dead_letter", "--dry-run")
    assert doc["dry_run"] is True and doc["results"][0]["outcome"] == "would_apply"
    assert row(a)["status"] == "dead_letter" and events(a) == []
    assert ledger(doc["command_id"]) is None


def test_retry_reports_skips():
    running = make_activity("processing")
    text = run("runnerq_retry", str(running), "--queue", QUEUE)
    assert "applied 0, skipped 1" in text and "only failed, dead-lettered or cancelled" in text


def test_retry_bad_input():
    message, _ = fails("runnerq_retry", "--queue", QUEUE)
    assert "nothing to retry" in message
    message, doc = fails("runnerq_retry", "nope", "--queue", QUEUE, "--json")
    assert "not an activity id" in message and doc["error"]["field"] == "ids"
    message, doc = fails("runnerq_retry", str(uuid.uuid4()), "--queue", "bad queue", "--json")
    assert doc["error"]["field"] == "queue" and "letters, digits and underscores" in message
    message, _ = fails("runnerq_retry", "--queue", QUEUE, "--status", "failed", "--limit", "5000")
    assert "--limit must be 1..1000" in message
    message, _ = fails("runnerq_retry", str(uuid.uuid4()), "--queue", QUEUE, "--status", "failed")
    assert "not both" in message


def test_retry_reused_command_id_with_other_input_is_a_conflict():
    a, b = make_activity("failed"), make_activity("failed")
    run("runnerq_retry", str(a), "--queue", QUEUE, "--command-id", "cli-dup")
    message, doc = fails("runnerq_retry", str(b), "--queue", QUEUE, "--command-id", "cli-dup", "--json")
    assert doc["error"]["code"] == "conflict" and "different input" in message
    assert row(b)["status"] == "failed"


# -- runnerq_cancel ------------------------------------------------------------------------------


def test_cancel_cascades_unless_told_not_to():
    parent = make_activity("pending")
    child = make_activity("pending", parent=parent)
    doc = run_json(
        "runnerq_cancel", str(parent), "--queue", QUEUE, "--reason", "stop", "--command-id", "cli-c1"
    )
    assert doc["applied"] == 1 and doc["cascaded"] == 1
    assert row(parent)["status"] == "cancelled" and row(child)["status"] == "cancelled"
    assert events(child)[0][1] == {"command_id": "cli-c1", "from": "pending", "reason": "stop"}
    assert ledger("cli-c1")["result"]["cascaded"] == 1
    p2 = make_activity("pending")
    c2 = make_activity("pending", parent=p2)
    text = run("runnerq_cancel", str(p2), "--queue", QUEUE, "--no-cascade")
    assert "applied 1" in text and row(c2)["status"] == "pending"


def test_cancel_dry_run_and_errors():
    a = make_activity("processing")
    text = run("runnerq_cancel", str(a), "--queue", QUEUE, "--dry-run")
    assert "1 would be applied" in text and row(a)["status"] == "processing"
    message, _ = fails("runnerq_cancel", "xyz", "--queue", QUEUE)
    assert "not an activity id" in message
    with pytest.raises(CommandError):  # argparse: ids are required
        call_command("runnerq_cancel", "--queue", QUEUE, stdout=io.StringIO(), stderr=io.StringIO())


# -- runnerq_enqueue -----------------------------------------------------------------------------


def test_enqueue_with_options():
    doc = run_json(
        "runnerq_enqueue",
        "SendEmail",
        '{"to": "a@example.com"}',
        "--queue",
        QUEUE,
        "--priority",
        "high",
        "--delay",
        "60",
        "--max-attempts",
        "5",
        "--key",
        "welcome-1",
        "--metadata",
        "tenant=acme",
    )
    assert doc["created"] is True and doc["priority"] == 3
    r = row(uuid.UUID(doc["id"]))
    assert r["activity_type"] == "SendEmail" and r["status"] == "scheduled" and r["max_retries"] == 5
    assert r["metadata"] == {"tenant": "acme"} and r["idempotency_key"].startswith("rq:key:v2:")
    with connection.cursor() as cur:
        cur.execute("SELECT payload FROM runnerq_inputs WHERE activity_id = %s", [doc["id"]])
        payload = cur.fetchone()[0]
    assert (json.loads(payload) if isinstance(payload, str) else payload) == {"to": "a@example.com"}
    # The same key returns the existing activity.
    again = run_json(
        "runnerq_enqueue", "SendEmail", '{"to": "a@example.com"}', "--queue", QUEUE, "--key", "welcome-1"
    )
    assert again["created"] is False and again["id"] == doc["id"]


def test_enqueue_dry_run_writes_nothing():
    doc = run_json("runnerq_enqueue", "Noop", "--queue", QUEUE, "--dry-run")
    assert doc["dry_run"] is True and doc["created"] is False and row(uuid.UUID(doc["id"])) == {}


def test_enqueue_bad_input():
    message, doc = fails("runnerq_enqueue", "T", "{not json", "--queue", QUEUE, "--json")
    assert "payload is not valid JSON" in message and doc["error"]["field"] == "payload"
    message, _ = fails("runnerq_enqueue", "T", "--queue", QUEUE, "--priority", "urgent")
    assert "--priority must be 1..4" in message
    message, doc = fails("runnerq_enqueue", "T", "--queue", QUEUE, "--priority", "9", "--json")
    assert doc["error"]["field"] == "priority" and "1..4" in message
    message, _ = fails("runnerq_enqueue", "T", "--queue", QUEUE, "--metadata", "novalue")
    assert "KEY=VALUE" in message
    message, doc = fails("runnerq_enqueue", "T", "--queue", "9bad", "--json")
    assert doc["error"]["field"] == "queue"
    message, doc = fails("runnerq_enqueue", "", "--queue", QUEUE, "--json")
    assert doc["error"]["code"] == "invalid_argument"
    message, doc = fails("runnerq_enqueue", "T", "--queue", QUEUE, "--max-attempts", "-1", "--json")
    assert doc["error"]["field"] == "max_attempts"
    # Valid JSON that decodes to a lone surrogate: a clean error, not a UnicodeEncodeError traceback.
    message, doc = fails("runnerq_enqueue", "T", '{"x": "\\ud83d"}', "--queue", QUEUE, "--json")
    assert doc["error"] == {"code": "invalid_argument", "field": "payload", "message": message}
    assert "lone surrogate U+D83D" in message


@pytest.mark.parametrize("depth", [65, 3000])  # 3000: RecursionError in the parser before
def test_enqueue_refuses_a_payload_nested_too_deep(depth):
    message, doc = fails("runnerq_enqueue", "T", "[" * depth + "]" * depth, "--queue", QUEUE, "--json")
    assert doc["error"] == {"code": "invalid_argument", "field": "payload", "message": message}
    assert "payload: must be nested at most 64 arrays/objects deep (RUNNERQ['MAX_JSON_DEPTH'])" in message
    assert connection.cursor().execute("SELECT count(*) FROM runnerq_activities").fetchone()[0] == 0


@pytest.mark.parametrize("command", [["runnerq_cancel"], ["runnerq_retry"]])
@pytest.mark.parametrize(
    "option, value, words",
    [
        ("--reason", "a\x00b", "reason: must not contain NUL"),
        ("--reason", "a\ud83d", "--reason contains the lone surrogate U+D83D"),
        ("--command-id", "c\x00", "command_id: must not contain NUL"),
        ("--command-id", "c\udcff", "--command-id is not valid UTF-8 (byte 0xFF"),
    ],
)
def test_operator_commands_refuse_text_postgres_cannot_store(command, option, value, words):
    activity = make_activity(status="failed")
    before = row(activity)
    message, doc = fails(*command, str(activity), "--queue", QUEUE, option, value, "--json")
    assert words in message and doc["error"]["code"] == "invalid_argument"
    assert row(activity) == before and events(activity) == []


@pytest.mark.parametrize(
    "args, message",
    [
        (["-c", "100000000"], "argument -c/--concurrency: must be a whole number 1..1000, got 100000000"),
        (["-c", "0"], "argument -c/--concurrency: must be a whole number 1..1000, got 0"),
        (["-p", "100000"], "argument -p/--processes: must be a whole number 1..64, got 100000"),
        (["--poll-interval", "nan"], "argument --poll-interval: must be a number 0.01..86400, got nan"),
        (["--shutdown-grace", "-1"], "argument --shutdown-grace: must be a number 0..86400, got -1"),
    ],
)
def test_runworker_numeric_options_are_bounded(args, message):
    with pytest.raises(CommandError) as err:
        call_command("runworker", *args, stdout=io.StringIO(), stderr=io.StringIO())
    assert message in str(err.value)


@pytest.mark.parametrize(
    "args, message",
    [
        (
            ["runnerq_status", "--alive", "1e400"],
            "argument --alive: must be a number 0.001..31536000, got 1e400",
        ),
        (
            ["runscheduler", "--once", "--lease", "1e12"],
            "argument --lease: must be a number 0..86400, got 1e12",
        ),
        (
            ["runscheduler", "--once", "--release", "99999999999"],
            "argument --release: must be a whole number 0..2147483647",
        ),
        (
            ["runnerq_schema", "migrate", "--lock-timeout", "inf"],
            "argument --lock-timeout: must be a number 0..86400, got inf",
        ),
    ],
)
def test_other_numeric_options_are_bounded(args, message):
    with pytest.raises(CommandError) as err:
        call_command(*args, stdout=io.StringIO(), stderr=io.StringIO())
    assert message in str(err.value)


@pytest.mark.parametrize(
    "args, option",
    [
        (["runnerq_cancel", str(uuid.UUID(int=1)), "--reason", "r\udcff"], "--reason"),
        (["runnerq_enqueue", "T\udcfe"], "type"),
        (["runworker", "--queue", "q\udcff"], "--queue"),
        (["runscheduler", "--once", "--namespace", "n\udcff"], "--namespace"),
        (["runnerq_status", "--queue", "\udcc3"], "--queue"),
        (["runnerq_driver", "--database", "d\udcff"], "--database"),
    ],
)
def test_a_command_line_that_is_not_utf8_is_one_clear_error(live_db_url, args, option):
    """Python decodes such argv with surrogateescape (byte 0xFF is U+DCFF); subprocess encodes
    the same way, so these strings reach the command as the raw bytes."""
    from tests.helpers import manage

    result = manage(*args, db_url=live_db_url, check=False)
    assert result.returncode == 1, result.stderr
    assert f"CommandError: {option} is not valid UTF-8 (byte 0x" in result.stderr
    assert "Traceback" not in result.stderr


# -- runnerq_cleanup -----------------------------------------------------------------------------


def test_cleanup_deletes_old_trees_and_prunes_the_ledger():
    old = make_activity("completed", completed_at=timezone.now() - timedelta(days=2))
    add_result(old)
    young = make_activity("completed")
    failed_old = make_activity("failed", completed_at=timezone.now() - timedelta(days=2))
    dry = run_json(
        "runnerq_cleanup",
        "--queue",
        QUEUE,
        "--completed-seconds",
        "86400",
        "--failed-seconds",
        "0",
        "--dry-run",
    )
    assert dry["queues"][QUEUE]["eligible_roots"] == 1 and row(old)
    # A ledger row older than the window goes; a fresh one stays.
    from runnerq_django.storage import commands

    commands.cancel(QUEUE, [make_activity("pending")], command_id="old-cmd")
    commands.cancel(QUEUE, [make_activity("pending")], command_id="new-cmd")
    with connection.cursor() as cur:
        cur.execute(
            "UPDATE runnerq_commands SET created_at = now() - interval '9 days' WHERE command_id = 'old-cmd'"
        )
    doc = run_json(
        "runnerq_cleanup", "--queue", QUEUE, "--completed-seconds", "86400", "--failed-seconds", "0"
    )
    assert doc["queues"][QUEUE]["deleted_roots"] == 1 and doc["ledger_pruned"] == 1
    assert row(old) == {} and row(young) and row(failed_old)
    assert ledger("old-cmd") is None and ledger("new-cmd") is not None


def test_cleanup_bad_input():
    message, _ = fails("runnerq_cleanup", "--queue", QUEUE, "--batch", "0")
    assert "--batch must be 1..1000" in message
    message, _ = fails("runnerq_cleanup", "--queue", QUEUE, "--completed-seconds", "-5")
    assert ">= 0" in message
    message, _ = fails("runnerq_cleanup", "--queue", QUEUE, "--ledger-days", "0")
    assert "--ledger-days" in message
    message, _ = fails(
        "runnerq_cleanup", "--queue", QUEUE, "--ledger-days", "10000000000"
    )  # interval overflow before
    assert "--ledger-days must be 1..3650" in message


# -- runnerq_reap --------------------------------------------------------------------------------


def test_reap_requeues_expired_leases():
    now_ms = int(timezone.now().timestamp() * 1000)
    expired = make_activity("processing", lease_deadline_ms=now_ms - 10_000, max_retries=3)
    live = make_activity("processing")
    dry = run_json("runnerq_reap", "--queue", QUEUE, "--dry-run")
    assert dry["queues"][QUEUE]["expired"] == 1 and row(expired)["status"] == "processing"
    doc = run_json("runnerq_reap", "--queue", QUEUE)
    assert doc["queues"][QUEUE]["reaped"] == 1
    assert row(expired)["status"] == "pending" and row(expired)["retry_count"] == 1
    assert events(expired)[0][0] == "Requeued"
    assert row(live)["status"] == "processing"


def test_reap_bad_input():
    message, doc = fails("runnerq_reap", "--queue", QUEUE, "--limit", "0", "--json")
    assert "--limit must be 1..1000" in message and doc["error"]["field"] == "limit"
    message, _ = fails("runnerq_reap", "--queue", "no-dashes")
    assert "letters, digits and underscores" in message


def test_exit_code_and_stderr_from_a_real_process(live_db_url):
    from tests.helpers import manage

    result = manage(
        "runnerq_cancel", "not-a-uuid", "--queue", QUEUE, "--json", db_url=live_db_url, check=False
    )
    assert result.returncode == 1
    assert json.loads(result.stdout)["error"]["field"] == "ids"
    assert "not an activity id" in result.stderr
    ok = manage("runnerq_reap", "--queue", QUEUE, "--json", db_url=live_db_url)
    assert json.loads(ok.stdout)["queues"][QUEUE]["reaped"] == 0


# -- --json errors and exit statuses, from real processes -----------------------------------------


@pytest.mark.parametrize(
    "args, field, message",
    [
        (["runnerq_retry", "--queue", QUEUE, "--status", "bogus"], "status", "invalid choice: 'bogus'"),
        (
            ["runnerq_retry", "--queue", QUEUE, "--status", "failed", "--limit", "ten"],
            "limit",
            "invalid int value: 'ten'",
        ),
        (["runnerq_cancel", "--queue", QUEUE], "ids", "the following arguments are required: ID"),
        (["runnerq_enqueue", "T", "--delay", "soon"], "delay", "invalid float value: 'soon'"),
        (["runnerq_reap", "--max-batches", "x"], "max_batches", "invalid int value: 'x'"),
        (["runnerq_cleanup", "--bogus-option"], None, "unrecognized arguments: --bogus-option"),
    ],
)
def test_json_mode_reports_command_line_errors_as_json(live_db_url, args, field, message):
    from tests.helpers import manage

    result = manage(*args, "--json", db_url=live_db_url, check=False)
    assert result.returncode == 2  # argparse's status for a command line it can't parse
    error = json.loads(result.stdout)["error"]
    assert error["code"] == "invalid_argument" and message in error["message"] and error.get("field") == field
    assert message in result.stderr and "usage:" not in result.stdout
    plain = manage(*args, db_url=live_db_url, check=False)  # without --json: argparse's usual usage text
    assert plain.returncode == 2 and plain.stdout == "" and "usage:" in plain.stderr


def test_ids_that_match_nothing_fail_the_command(live_db_url):
    from tests.helpers import manage

    known, unknown = make_activity("pending"), uuid.uuid4()
    result = manage(
        "runnerq_cancel",
        str(known),
        str(unknown),
        "--queue",
        QUEUE,
        "--json",
        db_url=live_db_url,
        check=False,
    )
    assert result.returncode == 1
    doc = json.loads(result.stdout)  # one document: what was done, and the error
    assert doc["applied"] == 1 and row(known)["status"] == "cancelled"
    assert doc["error"] == {
        "code": "not_found",
        "field": "ids",
        "message": f"1 of 2 id(s) matched no activity in queue {QUEUE}: {unknown}",
    }
    assert f"matched no activity in queue {QUEUE}" in result.stderr
    retry = manage("runnerq_retry", str(uuid.uuid4()), "--queue", QUEUE, db_url=live_db_url, check=False)
    assert retry.returncode == 1 and "skipped" in retry.stdout and "matched no activity" in retry.stderr
    # Skipped for its state is no error: cancelling a cancelled activity again is fine.
    again = manage("runnerq_cancel", str(known), "--queue", QUEUE, "--json", db_url=live_db_url, check=False)
    assert again.returncode == 0 and "error" not in json.loads(again.stdout)
    # A --status selection that finds nothing is an answer, not a failure.
    empty = manage("runnerq_retry", "--queue", QUEUE, "--status", "dead_letter", "--json", db_url=live_db_url)
    assert json.loads(empty.stdout)["matched"] == 0
